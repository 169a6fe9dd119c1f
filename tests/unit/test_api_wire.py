"""The contracts' one home: the consumer's metrics and exit codes are what the operator reads."""

from antidote_api.conditions import DisableReason
from antidote_api.wire import DISABLE_EXIT, EXIT_REASONS, METRIC_PREFIX, ExitCode, Metric
from antidote_consumer.driver.metrics import Metrics


def test_every_disable_reason_has_its_own_exit_code() -> None:
    assert set(DISABLE_EXIT) == set(DisableReason)
    assert len(set(DISABLE_EXIT.values())) == len(DISABLE_EXIT)
    assert EXIT_REASONS[ExitCode.FAULT] == "Fault"
    assert ExitCode.OK not in EXIT_REASONS and ExitCode.BAD_SETTINGS not in EXIT_REASONS


def test_the_consumer_exposes_every_metric_the_operator_reads() -> None:
    m = Metrics("ns", "orders")
    m.count("processed")
    m.set_last_poison("validation", "E", "t", 0, 1, 1.0)
    m.depth.labels(namespace="ns", consumer="orders", topic="t.poison", kind="poison").set(0)
    m.poison.labels(namespace="ns", consumer="orders", reason="validation", disposition="Move").inc()
    m.consecutive.labels(namespace="ns", consumer="orders").set(0)
    m.partition_lag.labels(namespace="ns", consumer="orders", topic="t", partition="0").set(0)
    m.partition_offset.labels(namespace="ns", consumer="orders", topic="t", partition="0").set(0)
    m.poison_waiting.labels(namespace="ns", consumer="orders", topic="t.poison", kind="poison").set(0)
    m.poison_oldest_age.labels(namespace="ns", consumer="orders", topic="t.poison", kind="poison").set(0)
    m.set_disabled(None)
    exposed = {s.name for fam in m.registry.collect() for s in fam.samples}
    missing = {name.value for name in Metric} - exposed
    assert not missing
    assert all(name.startswith(METRIC_PREFIX) for name in Metric)
