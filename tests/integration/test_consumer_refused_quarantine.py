"""A poison or dead-letter topic that refuses the settle of a *source* batch (issue 46,
item 6): the dead-letter topic deleted, the poison topic's max.message.bytes lowered below
its record, both after the consumer started. tests/integration/test_consumer_refused_settle.py
covers the same refusals of a retry batch's settle (the poison topic, deleted or too small).

Each case: the handler is called a bounded number of times (the calls file), the queue ends
disabled (ConsecutiveBatchFailures) with a line naming the topic and the broker's words,
nothing of the batch is committed (the ledger's source position stays where the batch
began), and after the topic is fixed a resume writes each outcome once.

The third refusal, a write an ACL denies, needs a broker with an authorizer, which the
stack's is not: the module starts one of its own (the stack's Kafka jars, KRaft,
StandardAuthorizer, `allow.everyone.if.no.acl.found`, so only the ACLs the test adds deny).
Before, that refusal was no RecordRefused but a failed commit: the batch was rolled back and
its handlers ran again at each failure, then bisected."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator

import pytest
from antidote_api.wire import ExitCode
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, NewTopic, ResourcePatternType, ResourceType)

from antidote_devstack import build, kafka
from antidote_devstack.procs import free_port
from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all
from antidote_testkit.operators import wait_for
from .test_consumer_edges import _ledger, _set_topic_config
from .test_consumer_refused_settle import REFUSALS, run_continuously, unique_name

THRESHOLD = 3  # queueDisable.consecutiveBatchFailures


@pytest.mark.parametrize(("disposition", "refusal"), [("Reject", "deleted"), ("Move", "too-small")])
def test_a_quarantine_topic_refusing_a_source_batch_disables_the_queue_and_loses_nothing(
        disposition, refusal, spark, kafka_bootstrap, kafka_admin, topic_factory, tmp_path, calls_dir,
        caplog) -> None:
    source = topic_factory()
    s = cu.settings(kafka_bootstrap, source, tmp_path, name=unique_name(), policy={
        "disposition": disposition, "retries": {"immediate": 1, "cycles": 0},
        "queueDisable": {"consecutiveBatchFailures": THRESHOLD}})
    target = s.topics.dlq if disposition == "Reject" else s.topics.poison
    produce(kafka_bootstrap, source, [(b"k0", b"m0", None), (b"k1", b"poison", None),
                                      (b"k2", b"m2", None)])

    def refuse(_consumer) -> None:
        # After the start, when the consumer has made its topics and read their limits.
        if refusal == "too-small":  # the record (its headers alone ~1 kB) no longer fits
            _set_topic_config(kafka_admin, target, "max.message.bytes", "200")
        else:  # the dev broker does not create topics on a write (auto.create.topics.enable=false)
            for fut in kafka_admin.delete_topics([target]).values():
                fut.result(timeout=30)

    caplog.set_level(logging.INFO, logger="antidote.consumer")
    code, m = run_continuously(spark, s, refuse, stop_after=90)
    calls = cu.calls(calls_dir, source)

    # The refused settles ran no handler again: (immediate + 1) x (cycles + 1) = 2 calls of
    # the poison message, one of each other message.
    assert calls == {f"{source}/0/0": 1, f"{source}/0/1": 2, f"{source}/0/2": 1}, calls
    assert code == ExitCode.CONSECUTIVE_BATCH_FAILURES
    state = _ledger(kafka_bootstrap, s)
    assert state.disabled == "ConsecutiveBatchFailures" and state.consecutive_failures == THRESHOLD
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("queue disabled")]
    assert f"{target}: " in line and REFUSALS[refusal] in line, line
    assert cu.metric(m, "antidote_batch_failures_total") == THRESHOLD
    # Nothing of the batch committed: no outcome counted, the source not consumed past it.
    assert sum(state.counts.values()) == 0, state.counts
    assert state.positions.get(f"{source}:0", 0) == 0, state.positions
    if refusal == "too-small":
        assert read_all(kafka_bootstrap, target) == []

    # Fixed and resumed: the batch runs once more (the one pass a resume costs) and each
    # outcome is written once.
    if refusal == "too-small":
        _set_topic_config(kafka_admin, target, "max.message.bytes", "1048588")
    # (deleted: the consumer's start creates it again, as any missing derived topic)
    code, m = cu.run(spark, cu.resumed(s))

    assert code == ExitCode.OK
    assert list(cu.quarantined(kafka_bootstrap, target)) == [(0, 1)]
    assert cu.calls(calls_dir, source) == {f"{source}/0/0": 2, f"{source}/0/1": 4, f"{source}/0/2": 2}
    state = _ledger(kafka_bootstrap, s)
    outcome = "rejected" if disposition == "Reject" else "moved"
    assert (state.disabled, state.consecutive_failures) == (None, 0)
    assert (state.counts["processed"], state.counts[outcome]) == (2, 1), state.counts
    assert state.positions[f"{source}:0"] == 3


# The broker's authorizer: every principal may do anything on a resource without ACLs.
AUTHORIZER = ("authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
              "allow.everyone.if.no.acl.found=true\n")
CLIENT = "User:ANONYMOUS"  # the consumer's principal on a PLAINTEXT listener


@pytest.fixture(scope="module")
def acl_broker(stack, tmp_path_factory) -> Iterator[str]:
    """A broker of this module's own with an authorizer (the stack's jars); its bootstrap."""
    folder = tmp_path_factory.mktemp("acl-broker")
    port, controller = free_port(), free_port()
    props, base = kafka.prepare(folder, build.jar_dir_path("kafka"), port, controller)
    props.write_text(props.read_text() + AUTHORIZER)
    assert kafka.format_storage(base, props, folder / "format.log").wait(timeout=120) == 0
    with open(folder / "kafka.log", "ab") as out:
        broker = subprocess.Popen([*base, "kafka.Kafka", str(props)], stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
    bootstrap = f"127.0.0.1:{port}"
    try:
        wait_for(lambda: broker.poll() is None and kafka.ready(bootstrap), "the ACL broker up",
                 timeout=180, errors=(Exception,))
        yield bootstrap
    finally:
        broker.terminate()
        try:
            broker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait()


def _deny_writes(topic: str) -> list[AclBinding]:
    """ACLs on `topic` that let the consumer do anything but write it (a DENY wins)."""
    return [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, CLIENT, "*",
                       AclOperation.ALL, AclPermissionType.ALLOW),
            AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, CLIENT, "*",
                       AclOperation.WRITE, AclPermissionType.DENY)]


def test_a_dead_letter_topic_an_acl_denies_disables_the_queue_and_loses_nothing(
        acl_broker, spark, tmp_path, calls_dir, caplog) -> None:
    admin = AdminClient({"bootstrap.servers": acl_broker})
    source = f"acl-{unique_name()}"
    for fut in admin.create_topics([NewTopic(source, 1, 1)]).values():
        fut.result(timeout=30)
    s = cu.settings(acl_broker, source, tmp_path, name=unique_name(), policy={
        "disposition": "Reject", "retries": {"immediate": 1, "cycles": 0},
        "queueDisable": {"consecutiveBatchFailures": THRESHOLD}})
    produce(acl_broker, source, [(b"k0", b"m0", None), (b"k1", b"poison", None), (b"k2", b"m2", None)])
    acls = _deny_writes(s.topics.dlq)

    def deny(_consumer) -> None:  # after the start, which made the topic
        for fut in admin.create_acls(acls).values():
            fut.result(timeout=30)

    caplog.set_level(logging.INFO, logger="antidote.consumer")
    code, m = run_continuously(spark, s, deny, stop_after=90)
    calls = cu.calls(calls_dir, source)

    assert calls == {f"{source}/0/0": 1, f"{source}/0/1": 2, f"{source}/0/2": 1}, calls
    assert code == ExitCode.CONSECUTIVE_BATCH_FAILURES
    state = _ledger(acl_broker, s)
    assert state.disabled == "ConsecutiveBatchFailures" and state.consecutive_failures == THRESHOLD
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("queue disabled")]
    assert f"refused: {s.topics.dlq}: " in line and "Topic authorization failed" in line, line
    assert cu.metric(m, "antidote_batch_failures_total") == THRESHOLD
    assert cu.metric(m, "antidote_isolation_executions_total") == 0  # not bisected: nothing re-ran
    assert sum(state.counts.values()) == 0 and state.positions.get(f"{source}:0", 0) == 0, state

    # The write granted again and resumed: each outcome written once.
    for fut in admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, s.topics.dlq, ResourcePatternType.LITERAL,
                                                    CLIENT, "*", AclOperation.ANY,
                                                    AclPermissionType.ANY)]).values():
        fut.result(timeout=30)
    code, m = cu.run(spark, cu.resumed(s))
    assert code == ExitCode.OK
    assert list(cu.quarantined(acl_broker, s.topics.dlq)) == [(0, 1)]
    assert cu.calls(calls_dir, source) == {f"{source}/0/0": 2, f"{source}/0/1": 4, f"{source}/0/2": 2}
    state = _ledger(acl_broker, s)
    assert (state.disabled, state.counts["processed"], state.counts["rejected"]) == (None, 2, 1), state
