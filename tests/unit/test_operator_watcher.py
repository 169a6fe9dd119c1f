"""Reading consumer metrics: the consumer's own exposition (its Metrics class), PromQL
answers, the dev runner's command translation and child comparison — all pure."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from prometheus_client import generate_latest

from antidote_consumer.driver.metrics import Metrics
from antidote_devrunner.annotations import dev_runner_termination
from antidote_devrunner.local import translate
from antidote_operator.kube import is_subset, owned_part
from antidote_operator.reconcile import pod_termination
from antidote_operator.watcher import parse_metrics, parse_promql, promql_disabled, promql_selector

AT = datetime(2025, 3, 1, 12, tzinfo=timezone.utc)


def consumer_metrics(namespace: str = "shop", name: str = "orders") -> Metrics:
    m = Metrics(namespace, name)
    m.restore({"processed": 90, "moved": 3, "rejected": 1, "dropped": 0, "retried": 7}, attempts=120)
    m.consecutive.labels(**m.ids).set(2)
    m.poison.labels(**m.ids, reason="max-attempts", disposition="Move").inc(3)
    m.set_last_poison("max-attempts", "ValueError", "orders", 1, 77, 1740830400.5)
    m.depth.labels(**m.ids, topic="orders.poison", kind="poison").set(3)
    m.depth.labels(**m.ids, topic="orders.dlq", kind="dlq").set(1)
    return m


def test_the_consumers_own_metrics_parse_into_a_sample() -> None:
    text = generate_latest(consumer_metrics().registry).decode()
    s = parse_metrics(text, "shop", "orders", AT)
    assert s.counts == {"processed": 90, "moved": 3, "rejected": 1, "dropped": 0, "retried": 7}
    assert s.consecutive == 2 and s.disabled is None and s.at == AT
    lp = s.last_poison
    assert lp is not None and (lp.topic, lp.partition, lp.offset, lp.reason) == ("orders", 1, 77, "max-attempts")
    assert lp.error_class == "ValueError" and lp.disposition == "Move"
    assert lp.time == datetime.fromtimestamp(1740830400.5, timezone.utc)
    assert s.depths == {"poison": 3, "dlq": 1}


def test_queue_disabled_reason_and_other_consumers_ignored() -> None:
    m = consumer_metrics()
    m.set_disabled("ConsecutiveBatchFailures")
    other = consumer_metrics(name="other")
    other.set_disabled("Fault")
    text = generate_latest(m.registry).decode() + generate_latest(other.registry).decode()
    assert parse_metrics(text, "shop", "orders", AT).disabled == "ConsecutiveBatchFailures"
    assert parse_metrics(text, "shop", "other", AT).disabled == "Fault"
    assert parse_metrics(text, "shop", "nobody", AT).counts == {}


def test_same_values_ignores_the_time() -> None:
    text = generate_latest(consumer_metrics().registry).decode()
    a = parse_metrics(text, "shop", "orders", AT)
    b = parse_metrics(text, "shop", "orders", datetime.now(timezone.utc))
    assert a.same_values(b) and not a.same_values(None)


def test_promql_answers() -> None:
    def series(name: str, value: float, **labels: str) -> dict:
        return {"metric": {"__name__": name, "namespace": "shop", "consumer": "orders", **labels},
                "value": [1740830500.0, str(value)]}

    result = [series("antidote_messages_total", 5, outcome="processed"),
              series("antidote_messages_total", 2, outcome="moved"),
              series("antidote_queue_disabled", 1, reason="SystemicFailure"),
              series("antidote_queue_disabled", 0, reason="Fault"),
              {"metric": {"__name__": "antidote_messages_total", "exported_namespace": "x",
                          "exported_consumer": "y", "namespace": "monitoring", "outcome": "processed"},
               "value": [1740830500.0, "1"]}]
    disabled = [{"metric": {"namespace": "shop", "consumer": "orders", "reason": "SystemicFailure"},
                 "value": [1740830500.0, "1740830490.25"]}]
    samples = parse_promql(result, disabled, AT)
    s = samples[("shop", "orders")]
    assert s.counts == {"processed": 5, "moved": 2} and s.disabled == "SystemicFailure"
    assert s.at == datetime.fromtimestamp(1740830490.25, timezone.utc)  # when it was scraped
    # A target in namespace "monitoring" whose page names x/y speaks for no one (issue 43, 13).
    assert ("x", "y") not in samples and len(samples) == 1
    assert promql_selector(["b", "a"]).endswith(',namespace=~"a|b"}')
    assert promql_disabled() == "timestamp(antidote_queue_disabled == 1)"


def test_dev_runner_translates_the_container_command() -> None:
    container = {"command": ["antidote"],
                 "args": ["consumer", "--settings", "/etc/antidote/settings.yaml", "--metrics-port", "9090",
                          "--master", "k8s://https://kubernetes.default.svc"],
                 "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                         {"name": "SPARK_CONF_DIR", "value": "/etc/antidote"},
                         {"name": "PYTHONUNBUFFERED", "value": "1"}]}
    argv, env = translate(container, settings_path="/tmp/x/settings.yaml", metrics_port=40001, master="local[1]")
    assert argv[0].endswith("antidote") or argv[1:3] == ["-m", "antidote_cli.main"]
    assert argv[-7:] == ["consumer", "--settings", "/tmp/x/settings.yaml", "--metrics-port", "40001",
                         "--master", "local[1]"]
    assert env == {"PYTHONUNBUFFERED": "1"}  # no cluster spark-defaults, no fieldRefs


def test_terminations_from_the_dev_runner_and_from_pods() -> None:
    t = dev_runner_termination({"antidote.dev/dev-runner-exit": json.dumps(
        {"exitCode": 4, "finishedAt": "2025-03-01T12:00:05Z", "generation": 2})})
    assert t is not None and (t.exit_code, t.reason, t.source) == (4, "SystemicFailure", "dev-runner")
    assert dev_runner_termination({}) is None and dev_runner_termination({"antidote.dev/dev-runner-exit": "{"}) is None
    pod = {"status": {"containerStatuses": [
        {"name": "driver", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 3, "finishedAt": "2025-03-01T12:01:00Z"}}},
        {"name": "sidecar", "state": {"terminated": {"exitCode": 5, "finishedAt": "2025-03-01T12:02:00Z"}}}]}}
    t = pod_termination(pod)
    assert t is not None and (t.exit_code, t.reason) == (3, "ConsecutiveBatchFailures")
    assert pod_termination({"status": {}}) is None


def test_children_compare_on_owned_fields_only() -> None:
    want = {"kind": "Service", "metadata": {"name": "s", "labels": {"a": "1"}},
            "spec": {"clusterIP": "None", "ports": [{"name": "m", "port": 9090, "targetPort": 9090}]}}
    have = {"kind": "Service", "metadata": {"name": "s", "labels": {"a": "1", "extra": "x"}, "uid": "u",
                                            "annotations": {"antidote.dev/dev-runner": "yes"}},
            "spec": {"clusterIP": "None", "clusterIPs": ["None"], "type": "ClusterIP",
                     "ports": [{"name": "m", "port": 9090, "targetPort": 9090, "protocol": "TCP"}]},
            "status": {}}
    assert is_subset(owned_part(want), have)
    changed = {**want, "spec": {**want["spec"], "ports": [{"name": "m", "port": 9091, "targetPort": 9091}]}}
    assert not is_subset(owned_part(changed), have)
    assert not is_subset({"spec": {"ports": [{"a": 1}, {"b": 2}]}}, {"spec": {"ports": [{"a": 1}]}})
    assert is_subset({"cpu": 1}, {"cpu": "1"})  # intOrString


def test_label_values_with_escapes_and_a_fast_path() -> None:
    m = consumer_metrics()
    m.set_last_poison("max-attempts", 'we"ird\\class', "orders", 0, 5, 1740830400)
    text = generate_latest(m.registry).decode()
    lp = parse_metrics(text, "shop", "orders", AT).last_poison
    assert lp is not None and lp.error_class == 'we"ird\\class'
    import time
    started = time.perf_counter()
    for _ in range(200):
        parse_metrics(text, "shop", "orders", AT)
    assert (time.perf_counter() - started) / 200 < 0.002  # well under the general parser's cost


def test_peering_rule_is_kopfs() -> None:
    from datetime import timedelta

    from antidote_operator.peering import may_act

    now = datetime(2025, 3, 1, 12, tzinfo=timezone.utc)
    fresh, stale = now.isoformat(), (now - timedelta(minutes=5)).isoformat()
    status = {"me": {"priority": 10, "lastseen": fresh, "lifetime": 60},
              "low": {"priority": 5, "lastseen": fresh, "lifetime": 60},
              "dead-high": {"priority": 99, "lastseen": stale, "lifetime": 60}}
    assert may_act(status, "me", 10, now)
    assert not may_act({**status, "high": {"priority": 20, "lastseen": fresh, "lifetime": 60}}, "me", 10, now)
    assert not may_act({**status, "twin": {"priority": 10, "lastseen": fresh, "lifetime": 60}}, "me", 10, now)


def _disabled(**labels: str) -> dict:
    return {"metric": {"__name__": "antidote_queue_disabled", "reason": "SystemicFailure", **labels},
            "value": [1740830500.0, "1"]}


def test_a_pod_in_one_namespace_cannot_disable_a_consumer_of_another() -> None:
    """Identity is the target's (the PodMonitor's relabelings from the pod's namespace and
    its antidote.dev/consumer label); what the page wrote about itself arrives as exported_*
    and is only believed when it agrees."""
    from antidote_operator.watcher import series_identity

    honest = dict(namespace="shop", consumer="orders", exported_namespace="shop", exported_consumer="orders")
    forged_ns = dict(namespace="tenant-a", consumer="web", exported_namespace="shop", exported_consumer="orders")
    forged_name = dict(namespace="shop", consumer="web", exported_namespace="shop", exported_consumer="orders")
    unlabelled_pod = dict(exported_namespace="shop", exported_consumer="orders")  # no target labels
    assert series_identity(honest) == ("shop", "orders")
    assert series_identity({"namespace": "shop", "consumer": "orders"}) == ("shop", "orders")
    for forged in (forged_ns, forged_name, unlabelled_pod, {"namespace": "shop"}):
        assert series_identity(forged) is None, forged

    foreign: set = set()
    samples = parse_promql([_disabled(**forged_ns), _disabled(**unlabelled_pod)],
                           [_disabled(**forged_ns)], AT, foreign)
    assert samples == {}  # shop/orders is not disabled
    assert foreign == {("tenant-a", "web", "shop", "orders")}
    # The honest series of the same consumer still count, forged ones beside them do not.
    samples = parse_promql([_disabled(reason="Fault", **honest), _disabled(**forged_name)], [], AT)
    assert samples[("shop", "orders")].disabled == "Fault"
