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


def test_executors_gauge_for_autoscaled_consumers_only() -> None:
    consumers = Registry()
    consumers.get("shop", "orders").executors = (2, 3)  # a scale-up held by its cool-down
    consumers.get("shop", "fixed")
    m = OperatorMetrics(consumers)
    at = {"namespace": "shop", "consumer": "orders"}
    assert m.registry.get_sample_value("antidote_operator_executors", {**at, "kind": "current"}) == 2
    assert m.registry.get_sample_value("antidote_operator_executors", {**at, "kind": "desired"}) == 3
    assert m.registry.get_sample_value("antidote_operator_executors",
                                       {**at, "consumer": "fixed", "kind": "current"}) is None
