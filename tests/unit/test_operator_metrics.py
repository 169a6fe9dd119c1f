"""The operator's scrape-time gauges come from what it last wrote."""

from __future__ import annotations

from antidote_operator.metrics import OperatorMetrics
from antidote_operator.state import Registry


def test_queue_disabled_gauge_per_consumer_while_disabled() -> None:
    consumers = Registry()
    consumers.get("shop", "orders").disabled_reason = "SystemicFailure"
    consumers.get("shop", "fine")
    m = OperatorMetrics(consumers)
    labels = {"namespace": "shop", "consumer": "orders", "reason": "SystemicFailure"}
    assert m.registry.get_sample_value("antidote_operator_queue_disabled", labels) == 1
    assert m.registry.get_sample_value("antidote_operator_queue_disabled",
                                       {**labels, "consumer": "fine"}) is None
    consumers.get("shop", "orders").disabled_reason = None  # resumed
    assert m.registry.get_sample_value("antidote_operator_queue_disabled", labels) is None
