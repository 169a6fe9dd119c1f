"""How long poison messages wait, on a live Prometheus (issue 46, item 5): a real consumer
quarantines a message into its poison topic, which no reader has read; the stack's
Prometheus scrapes the consumer's /metrics (a file_sd target, labelled as the chart's
PodMonitor labels a pod), AntidotePoisonAging fires once the message is older than the
threshold, and a real reader run (action Drop, the reader Jobs' code and consumer group)
resolves it: the waiting count and the age drop to 0 and the alert resolves.

The rule is the chart's, with a test-only threshold of THRESHOLD_S seconds and `for: 2s`
(the chart's default is a day), in a group of its own, labelled so it is told apart."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from antidote_consumer.driver.consumer import Consumer
from antidote_consumer.driver.metrics import Metrics
from antidote_consumer.reader.rules import ReaderOptions
from antidote_consumer.reader.run import run_reader
from antidote_devrunner.targets import TargetFiles

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce
from antidote_testkit.operators import wait_for

from .test_prometheus import RULES, alerts, query, with_test_rule

pytestmark = pytest.mark.integration

GROUP = "antidote-test-poison-aging"
THRESHOLD_S = 5


def fast_aging_rule() -> dict:
    """The chart's AntidotePoisonAging with a threshold of THRESHOLD_S seconds and `for: 2s`."""
    (rule,) = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
               if r["alert"] == "AntidotePoisonAging"]
    assert rule["for"] == "5m" and rule["expr"].count("> 86400") == 1
    fast = {**rule, "expr": rule["expr"].replace("> 86400", f"> {THRESHOLD_S}"), "for": "2s",
            "labels": {**rule["labels"], "test_threshold": f"{THRESHOLD_S}s"}}
    return {"groups": [{"name": GROUP, "rules": [fast]}]}


@pytest.fixture(scope="module")
def prom(stack) -> Any:
    yield from with_test_rule(stack, "test-poison-aging.yaml", fast_aging_rule(), GROUP)


def test_a_poison_message_ages_past_the_threshold_and_a_reader_resolves_it(
        prom, spark, kafka_bootstrap: str, topic_factory, tmp_path: Path, calls_dir: Path) -> None:
    url = prom.prometheus_url
    source = topic_factory()
    name = f"pa-{uuid.uuid4().hex[:8]}"  # its own transactional ids and reader group
    s = cu.settings(kafka_bootstrap, source, tmp_path, name=name,
                    policy={"retries": {"immediate": 0, "cycles": 0}})
    produce(kafka_bootstrap, source, [(b"k0", b"m0", None), (b"k1", b"poison", None), (b"k2", b"m2", None)])

    metrics = Metrics(s.namespace, s.consumer)
    consumer = Consumer(s, spark, metrics, trigger_interval=0.2)
    consumer.poison_age.interval = 1.0  # the test waits on it; a driver measures every 30 s
    targets = TargetFiles(prom.prometheus_targets)
    servers = []

    def serve() -> None:  # as `antidote consumer` does once the ledger is loaded
        httpd = metrics.start(0)
        servers.append(httpd)
        targets.consumer(s.namespace, s.consumer, httpd.server_address[1])

    result: list = []
    runner = threading.Thread(target=lambda: result.append(consumer.run(recovered=serve)), daemon=True)
    runner.start()
    sel = f'namespace="{s.namespace}",consumer="{name}",topic="{s.topics.poison}",kind="poison"'

    def value(metric: str) -> float | None:
        assert runner.is_alive(), f"the consumer stopped: {result}"
        found = query(url, f"max({metric}{{{sel}}})")
        return float(found[0]["value"][1]) if found else None

    try:
        # Nobody has read the poison topic: its record waits (the count is in offsets, the
        # transaction's marker included), and Prometheus sees it age past the threshold.
        wait_for(lambda: (value("antidote_poison_waiting_records") or 0) >= 1,
                 "the quarantined message waiting, in Prometheus", timeout=240)
        (firing,) = wait_for(lambda: [a for a in alerts(url, "AntidotePoisonAging", s.namespace,
                                                        consumer=name, test_threshold=f"{THRESHOLD_S}s")
                                      if a["state"] == "firing"],
                             "AntidotePoisonAging firing", timeout=60)
        assert firing["labels"]["topic"] == s.topics.poison and firing["labels"]["kind"] == "poison"
        assert firing["labels"]["severity"] == "warning"
        assert "has waited" in firing["annotations"]["summary"]
        assert (value("antidote_poison_oldest_age_seconds") or 0) > THRESHOLD_S
        # Nothing waits in the dead-letter topic: its series says 0, and it does not fire.
        dlq = f'namespace="{s.namespace}",consumer="{name}",kind="dlq"'
        assert [float(r["value"][1]) for r in query(url, f"antidote_poison_waiting_records{{{dlq}}}")] == [0.0]
        assert cu.calls(calls_dir, source)[f"{source}/0/1"] == 1

        # A reader (the reader Jobs' code, their consumer group) resolves it: nothing waits.
        report = run_reader(s, ReaderOptions(action="Drop"))
        assert report.dropped == 1
        wait_for(lambda: value("antidote_poison_waiting_records") == 0, "the waiting count at 0", timeout=60)
        assert value("antidote_poison_oldest_age_seconds") == 0
        wait_for(lambda: not [a for a in alerts(url, "AntidotePoisonAging", s.namespace, consumer=name)],
                 "AntidotePoisonAging resolved", timeout=60)
    finally:
        consumer.request_stop()
        runner.join(timeout=150)
        targets.remove_consumer(s.namespace, s.consumer)
        for httpd in servers:
            httpd.shutdown()
            httpd.server_close()
    assert result and result[0] == 0
