"""AntidoteConsumerNotRunning on a live Prometheus (`antidote dev up --prometheus`) scraping a
real operator, whose dev runner runs a real driver that refuses its settings (exit 2): the
operator's `antidote_operator_consumer_ready` carries SettingsRejected, the chart's rule
holds it pending, and a test-only copy of it with `for: 10s` (the chart's 10 m would make
this a 10-minute test) fires with the reason in its labels. Paused, it resolves (a paused
consumer is not alerted); deleted, its series is gone from Prometheus.

The same rule for a driver pod whose image cannot be pulled (ImagePullBackOff, read from
the pod's status on a real kubelet): tests/integration/test_node_not_running.py; the rule's
timing (not before 10 minutes, resolved when Ready): the promtool tests in tests/alerts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from antidote_devstack import prometheus as devprom
from antidote_devstack import stack as devstack

from antidote_testkit.kafka_io import produce
from antidote_testkit.operators import Cluster, consumer, install_crds, operator, policy, wait_for
from .test_prometheus import RULES, alerts, api, query

pytestmark = pytest.mark.integration

ALERT = "AntidoteConsumerNotRunning"
FAST_GROUP = "antidote-test-fast-not-running"


def fast_not_running_rule() -> dict:
    """The chart's AntidoteConsumerNotRunning with `for: 10s` (test only), in a group of its
    own, labelled so it is told apart from the chart's."""
    (rule,) = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
               if r["alert"] == ALERT]
    assert rule["for"] == "10m"
    fast = {**rule, "for": "10s", "labels": {**rule["labels"], "test_for": "10s"}}
    return {"groups": [{"name": FAST_GROUP, "rules": [fast]}]}


@pytest.fixture(scope="module")
def prom(stack) -> Any:
    """The session's stack with Prometheus added (as `antidote dev up --prometheus` does)."""
    return devstack.add_prometheus(Path(stack.dir))


@pytest.fixture
def fast_rule(prom) -> Any:
    rule_file = devprom.rules_dir(Path(prom.dir)) / "test-fast-not-running.yaml"
    rule_file.write_text(yaml.safe_dump(fast_not_running_rule(), sort_keys=False))
    devprom.reload(prom.prometheus_url)
    wait_for(lambda: FAST_GROUP in {g["name"] for g in query_rules(prom.prometheus_url)},
             "the test rule group loaded")
    try:
        yield
    finally:
        rule_file.unlink(missing_ok=True)
        devprom.reload(prom.prometheus_url)


def query_rules(url: str) -> list[dict]:
    return api(url, "/api/v1/rules")["groups"]


def test_a_consumer_that_never_runs_raises_antidote_consumer_not_running(
        prom, fast_rule, api_client: client.ApiClient, namespace: str, kubeconfig: str,
        kafka_bootstrap: str, topic_factory, tmp_path: Path, calls_dir: Path) -> None:
    url = prom.prometheus_url
    install_crds(api_client)
    k = Cluster(api_client, namespace)
    source = topic_factory()
    produce(kafka_bootstrap, source, [(b"k0", b"order-0", None)])
    k.create(policy("plain", {"retries": {"immediate": 0, "cycles": 0}}))
    k.create(consumer("refused", "plain", kafka_bootstrap, source,
                      handler="tests.integration.handlerz:upper",
                      checkpoint={"location": str(tmp_path / "checkpoint")}))
    env = {**prom.env(), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "ANTIDOTE_TEST_CALLS_DIR": str(calls_dir)}
    args = ("--dev-runner", "--dev-runner-dir", str(tmp_path / "dev-runner"), "--dev-runner-master",
            "local[1]")
    sel = f'namespace="{namespace}",consumer="refused"'
    with operator(kubeconfig, namespace, tmp_path, *args, env=env):
        k.wait_condition("refused", "Ready", "False", "SettingsRejected", timeout=120)
        wait_for(lambda: query(url, f'antidote_operator_consumer_ready{{{sel},reason="SettingsRejected"}} == 0'),
                 "the gauge in Prometheus", timeout=60)
        (fired,) = wait_for(lambda: [a for a in alerts(url, ALERT, namespace, consumer="refused", test_for="10s")
                                     if a["state"] == "firing"], f"{ALERT} (for: 10s) firing", timeout=90)
        assert fired["labels"]["reason"] == "SettingsRejected"
        assert fired["labels"]["severity"] == "critical"
        assert fired["annotations"]["summary"] == (
            f"{namespace}/refused has not been running for 10 minutes (SettingsRejected)")
        # The chart's own rule selects the same series, and waits out its 10 minutes.
        chart = [a for a in alerts(url, ALERT, namespace, consumer="refused") if "test_for" not in a["labels"]]
        assert [(a["state"], a["labels"]["reason"]) for a in chart] == [("pending", "SettingsRejected")]

        # Paused by its owner: Ready is Paused, which the alert leaves alone.
        k.patch("queueconsumers", "refused", {"spec": {"paused": True}})
        k.wait_condition("refused", "Ready", "False", "Paused")
        wait_for(lambda: not alerts(url, ALERT, namespace), f"{ALERT} resolved once paused", timeout=60)

        # Deleted: the operator's series goes with it.
        k.delete("queueconsumers", "refused")
        wait_for(lambda: not query(url, f"antidote_operator_consumer_ready{{{sel}}}"), "the series gone",
                 timeout=60)
