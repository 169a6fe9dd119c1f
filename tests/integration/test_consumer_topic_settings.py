"""Topic settings that would lose records (issue 43, item 6), refused at start on the real
broker: a pre-existing compacted poison or dead-letter topic (records sharing a key would be
compacted away, a null value is a tombstone), a retry topic bounded by retention.bytes.
The consumer exits 2 with one line naming the topic and the setting, before any Spark work,
and the operator shows that line in Ready (SettingsRejected)."""

from __future__ import annotations

import os
import sys

import pytest
from confluent_kafka.admin import NewTopic
from kubernetes import client

from antidote_consumer.driver.metrics import Metrics
from antidote_consumer.kafka.topics import TopicMisfit

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all
from antidote_testkit.operators import Cluster, consumer, install_crds, operator, policy

pytestmark = pytest.mark.integration

# The subprocesses run this checkout's code (antidote_testkit.consumers.start names only the repository).
CODE_PATH = cu.CODE_PATH
CYCLES = {"retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s"}}


@pytest.fixture
def precreate(kafka_admin):
    """create(name, partitions, config): a topic under a name Antidote derives; deleted after."""
    made: list[str] = []

    def create(name: str, partitions: int, config: dict[str, str]) -> str:
        for fut in kafka_admin.create_topics([NewTopic(name, partitions, 1, config=config)]).values():
            fut.result(timeout=30)
        made.append(name)
        return name

    yield create
    for fut in kafka_admin.delete_topics(made).values() if made else ():
        fut.result(timeout=30)


def own_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith("antidote consumer: ")]
    assert lines, text[-3000:]
    return lines[-1]


def test_a_compacted_poison_topic_stops_the_consumer_with_exit_2_naming_it(
        stack, kafka_bootstrap, topic_factory, precreate, tmp_path, calls_dir) -> None:
    source = topic_factory(partitions=2)
    produce(kafka_bootstrap, source, [(b"k1", b"poison-1", None), (b"k1", b"poison-2", None)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=CYCLES)
    precreate(s.topics.poison, 2, {"cleanup.policy": "compact"})
    args = cu.write_manifests(tmp_path, name="proc", namespace="tests", bootstrap=kafka_bootstrap,
                              source=source, handler="tests.integration.handlers:upper", policy=CYCLES)
    log = tmp_path / "consumer.log"
    proc = cu.start(stack, calls_dir, log, [*args, "--until-idle"], PYTHONPATH=CODE_PATH)
    try:
        code = proc.wait(300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    assert code == 2, log.read_text()[-3000:]
    line = own_line(log.read_text())
    assert (f"topic {s.topics.poison}: cleanup.policy is 'compact': compaction would delete quarantined "
            "records that share a key") in line, line
    # Refused before anything was read: no handler call, nothing quarantined, no retry topic.
    assert cu.calls(calls_dir, source) == {}
    assert read_all(kafka_bootstrap, s.topics.poison) == []
    assert read_all(kafka_bootstrap, s.topics.retry[0], missing_ok=True) == []


def test_a_compacted_dead_letter_topic_is_refused_for_reject(kafka_bootstrap, topic_factory, precreate,
                                                              tmp_path) -> None:
    source = topic_factory()
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy={
        "retries": {"immediate": 0, "cycles": 0}, "disposition": "Reject"})
    precreate(s.topics.dlq, 1, {"cleanup.policy": "compact,delete"})
    # The check runs before any Spark work: the Consumer refuses without a session.
    with pytest.raises(TopicMisfit) as err:
        cu_consumer(s)
    assert f"topic {s.topics.dlq}: cleanup.policy is 'compact,delete'" in str(err.value)


def test_a_retry_topic_with_retention_bytes_is_refused(kafka_bootstrap, topic_factory, precreate,
                                                       tmp_path) -> None:
    source = topic_factory()
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=CYCLES)
    precreate(s.topics.retry[0], 1, {"retention.bytes": "104857600"})
    with pytest.raises(TopicMisfit) as err:
        cu_consumer(s)
    assert f"topic {s.topics.retry[0]}: retention.bytes is 104857600" in str(err.value)
    # A retry topic with a size bound of -1 (the default) is fine, and so is the consumer.
    assert "poison" not in str(err.value) and "dlq" not in str(err.value)


def test_a_ledger_topic_that_deletes_is_refused(kafka_bootstrap, topic_factory, precreate, tmp_path) -> None:
    from antidote_api.names import ledger_names

    source = topic_factory()
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=CYCLES)
    ledger = precreate(ledger_names(s).topic, 1, {"cleanup.policy": "delete"})
    with pytest.raises(TopicMisfit) as err:
        cu_consumer(s)
    assert f"topic {ledger}: cleanup.policy is 'delete', not 'compact'" in str(err.value)


def cu_consumer(s):
    from antidote_consumer.driver.consumer import Consumer

    return Consumer(s, None, Metrics(s.namespace, s.consumer))


def test_the_operator_shows_a_refused_topic_in_ready(
        api_client: client.ApiClient, namespace: str, stack, kubeconfig: str, kafka_bootstrap: str,
        topic_factory, precreate, tmp_path, calls_dir) -> None:
    """The refusal reaches status as a refused setting does: Ready False, SettingsRejected,
    the driver's line (exit 2), and the queue is not disabled."""
    install_crds(api_client)
    k = Cluster(api_client, namespace)
    source = topic_factory()
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=CYCLES)
    precreate(s.topics.poison, 1, {"cleanup.policy": "compact"})
    k.create(policy("cyc", CYCLES))
    k.create(consumer("compacted", "cyc", kafka_bootstrap, source,
                      checkpoint={"location": str(tmp_path / "checkpoint")}))
    env = {**stack.env(), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "ANTIDOTE_TEST_CALLS_DIR": str(calls_dir), "PYTHONPATH": CODE_PATH}
    args = ("--dev-runner", "--dev-runner-dir", str(tmp_path / "dev-runner"),
            "--dev-runner-master", "local[1]")
    with operator(kubeconfig, k.ns, tmp_path, *args, env=env):
        c = k.wait_condition("compacted", "Ready", "False", "SettingsRejected", timeout=180)
        assert c["message"].startswith("The driver refused its settings and exited with code 2: "
                                       f"topic {s.topics.poison}: cleanup.policy is 'compact'"), c
        assert k.condition("compacted", "QueueDisabled") == ("False", "QueueEnabled")


def test_topics_antidote_creates_set_their_policy_themselves_not_by_broker_default(
        kafka_bootstrap, kafka_admin, topic_factory, tmp_path) -> None:
    """Created with cleanup.policy delete (and retry topics with retention.bytes -1) set on
    the topic itself: inherited from a broker whose default compacts or bounds by size, the
    topic one start creates would be one the next start refuses."""
    from confluent_kafka.admin import ConfigResource, ConfigSource

    from antidote_api.names import ledger_names
    from antidote_api.semantics import longest_retry_delay
    from antidote_consumer.kafka.topics import ensure_topics

    source = topic_factory(partitions=2)
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=CYCLES)
    t = s.topics
    derived = [*t.retry, t.poison, t.dlq]
    ledger = ledger_names(s).topic
    kw = dict(retry=list(t.retry), longest_delay_ms=longest_retry_delay(s.retries).ms)

    def own(topic: str) -> dict[str, str]:
        """The settings set on `topic` itself (not the broker's defaults)."""
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        entries = kafka_admin.describe_configs([res])[res].result(timeout=30)
        return {n: e.value for n, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}

    try:
        assert ensure_topics(kafka_admin, source, derived, ledger, **kw) == 2
        for name in (t.poison, t.dlq):
            assert own(name).get("cleanup.policy") == "delete", (name, own(name))
        assert {k: own(t.retry[0]).get(k) for k in ("cleanup.policy", "retention.bytes")} == {
            "cleanup.policy": "delete", "retention.bytes": "-1"}
        assert ensure_topics(kafka_admin, source, derived, ledger, **kw) == 2  # not refused
    finally:
        for fut in kafka_admin.delete_topics([*derived, ledger]).values():
            fut.result(timeout=30)
