"""Limits of the real stack: records near a topic's size limit, retry topics whose records
expire or that cannot hold the policy, malformed retry records, an unreachable broker and
`antidote skip` without Kafka. Real broker, real local Spark, the real CLI."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from antidote_api.consumer import QueueConsumerSpec
from antidote_api.policy import PoisonPolicySpec
from antidote_api.semantics import resolve
from antidote_api.wire import ExitCode
from antidote_consumer.driver.frames import now_ms
from antidote_consumer.kafka import headers as h
from antidote_devstack.procs import free_port

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all
from .test_consumer_edges import _ledger, _set_topic_config

REPO = Path(__file__).resolve().parents[2]
LIMIT = 20_000  # the source's max.message.bytes; derived topics inherit it


def cli(*argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "antidote_cli.main", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1", **env})


def manifests(tmp_path: Path, bootstrap: str, source: str, policy: dict) -> list[str]:
    return cu.write_manifests(tmp_path, name="lim", namespace="tests", bootstrap=bootstrap, source=source,
                              handler="tests.integration.handlers:upper", policy=policy)


def test_records_near_the_size_limit_fit_or_stop_the_consumer_explained_and_nothing_lost(
        spark, kafka_bootstrap, kafka_admin, topic_factory, tmp_path, caplog) -> None:
    source = topic_factory(config={"max.message.bytes": str(LIMIT)})
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy={"retries": {"immediate": 0, "cycles": 0}})
    # Room for the original and Antidote's headers with the error message, and 100 bytes
    # more: not for the stack (a traceback of upper() is longer).
    headers = [("trace", b"t1")] + h.failure_headers(
        origin=h.Origin(source, 0, 1, int(time.time() * 1000)), attempts=1, cycle=0,
        first_failure=now_ms(), last_failure=now_ms(), reason="max-attempts", error_class="ValueError",
        error_message="cannot process offset 1", stack=None, consumer="tests/c", policy="p",
        disposition="Move")
    rnd = random.Random(14)  # incompressible values: compression cannot make room
    near = b"poison" + rnd.randbytes(LIMIT - h.record_size(b"k1", b"poison", headers) - 100)
    produce(kafka_bootstrap, source, [(b"k0", b"m0", None)])
    produce(kafka_bootstrap, source, [(b"k1", near, [("trace", b"t1")])])
    produce(kafka_bootstrap, source, [(b"k2", b"m2", None)])

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    ((r, hdrs),) = cu.quarantined(kafka_bootstrap, s.topics.poison).values()
    assert (r.key, r.value, dict(r.headers)["trace"]) == (b"k1", near, b"t1")  # whole
    assert h.record_size(r.key, r.value, r.headers) <= LIMIT
    assert hdrs["antidote.reason"] == "max-attempts" and hdrs["antidote.error.class"] == "ValueError"
    # The texts gave way, the stack first: a traceback of upper() is longer than this.
    assert "antidote.error.stack" not in hdrs or hdrs["antidote.error.stack"].startswith("[truncated]")
    assert hdrs["antidote.error.message"] == "cannot process offset 1"
    assert cu.metric(m, "antidote_messages_total", outcome="processed") == 2

    # Too large even without Antidote's texts: not dropped, not a crash loop; the consumer
    # stops at it, says why and where, and leaves it (and what follows) unconsumed.
    too_large = b"poison" + rnd.randbytes(LIMIT - 61 - 40 - 10)
    produce(kafka_bootstrap, source, [(b"k3", too_large, None)])
    produce(kafka_bootstrap, source, [(b"k4", b"m4", None)])
    caplog.set_level(logging.INFO, logger="antidote.consumer")

    code, m = cu.run(spark, s)

    assert code == ExitCode.FAULT
    state = _ledger(kafka_bootstrap, s)
    assert state.disabled == "Fault" and (state.fault["reason"], state.fault["offset"]) == ("too-large", 3)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("queue disabled")]
    assert f"the message at {source}/0/3 cannot be written to {s.topics.poison} (reason too-large)" in line
    assert f"max.message.bytes is {LIMIT}" in line
    assert len(read_all(kafka_bootstrap, s.topics.poison)) == 1  # nothing written
    assert state.counts["processed"] == 2  # m4's batch was not committed either

    # The operator raises the poison topic's limit and resumes: nothing was lost.
    _set_topic_config(kafka_admin, s.topics.poison, "max.message.bytes", str(2 * LIMIT))
    code, m = cu.run(spark, cu.resumed(s))

    assert code == ExitCode.OK
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert poison[(0, 3)][0].value == too_large and "antidote.error.stack" in poison[(0, 3)][1]
    assert _ledger(kafka_bootstrap, s).counts["processed"] == 3


def test_records_that_fit_one_by_one_are_not_refused_as_a_batch(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    """Three poison records of one partition, each well within the poison topic's 20,000
    bytes, all together above it: one librdkafka batch of them was refused
    (MSG_SIZE_TOO_LARGE), and the ledger commit failed on every restart."""
    source = topic_factory(config={"max.message.bytes": str(LIMIT)})
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy={"retries": {"immediate": 0, "cycles": 0}})
    rnd = random.Random(15)  # incompressible
    values = [b"poison" + rnd.randbytes(7_000) for _ in range(3)]
    for i, v in enumerate(values):  # one at a time: as one batch the source refuses them too
        produce(kafka_bootstrap, source, [(b"k%d" % i, v, None)])

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert sorted(r.value for r, _ in poison.values()) == sorted(values)
    assert cu.metric(m, "antidote_messages_total", outcome="moved") == 3


def test_expired_retry_records_are_reported_and_a_malformed_one_gets_an_outcome(
        spark, kafka_bootstrap, kafka_admin, topic_factory, tmp_path, caplog) -> None:
    source = topic_factory()
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy={
        "retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s"}})
    retry = s.topics.retry[0]
    for fut in kafka_admin.create_topics([NewTopic(retry, 1, 1)]).values():
        fut.result(timeout=30)

    def parked(value: bytes, offset: int, **bad) -> tuple:
        hdrs = h.failure_headers(origin=h.Origin(source, 0, offset, 0), attempts=1, cycle=1,
                                 first_failure=0, last_failure=0, reason=None, error_class="E",
                                 error_message="x", stack=None, consumer="tests/c", policy="p",
                                 due=int(time.time() * 1000) - 1000)
        return (b"k", value, [(k, bad.get(k, v)) for k, v in hdrs])

    # Two parked records expire unread (retention, here by deleting them up to offset 2).
    produce(kafka_bootstrap, retry, [parked(b"lost-0", 0), parked(b"lost-1", 1)])
    for fut in kafka_admin.delete_records([TopicPartition(retry, 0, 2)]).values():
        fut.result(timeout=30)
    # Then one well-formed and one that no Antidote wrote (cycle 9 of a 1-cycle policy).
    produce(kafka_bootstrap, retry, [parked(b"m2", 2), parked(b"m3", 3, **{h.CYCLE: b"9"})])
    caplog.set_level(logging.INFO, logger="antidote.consumer")

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    assert cu.metric(m, "antidote_retry_expired_offsets_total", topic=retry) == 2
    (lost,) = [r for r in caplog.records if "retry records LOST" in r.getMessage()]
    assert lost.levelname == "ERROR" and f"{retry} partition 0" in lost.getMessage()
    assert "offsets 0..1 expired unread" in lost.getMessage()
    # The reader went on after the gap: the due record was processed, the malformed one
    # quarantined as invalid, naming what is wrong with it; nothing raised.
    assert cu.metric(m, "antidote_messages_total", outcome="processed") == 1
    ((r, hdrs),) = cu.quarantined(kafka_bootstrap, s.topics.poison).values()
    assert r.value == b"m3" and hdrs["antidote.reason"] == "validation"
    assert "antidote.cycle 9" in hdrs["antidote.error.message"]
    assert _ledger(kafka_bootstrap, s).positions[f"{retry}:0"] == 4


def test_a_retry_topic_that_cannot_hold_the_policy_is_refused_at_start(
        stack, kafka_bootstrap, kafka_admin, topic_factory, tmp_path) -> None:
    source = topic_factory(partitions=2)
    retry, poison = f"{source}.retry-1", f"{source}.poison"
    new = [NewTopic(retry, 2, 1, config={"retention.ms": "60000"}), NewTopic(poison, 1, 1)]
    for fut in kafka_admin.create_topics(new).values():
        fut.result(timeout=30)
    try:
        out = cli("consumer", "--until-idle", *manifests(
            tmp_path, kafka_bootstrap, source, {"retries": {"cycles": 1, "cycleDelay": "1h"}}), **stack.env())
    finally:
        kafka_admin.delete_topics([retry, poison])
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("antidote consumer:")]
    assert f"topic {retry}: retention.ms is 60000, below the longest cycle delay plus a day (90000000)" in line
    assert f"topic {poison}: it has 1 partition(s), fewer than the source's 2" in line


def test_derived_topics_are_created_to_outlive_the_longest_delay(
        spark, kafka_bootstrap, kafka_admin, topic_factory, tmp_path) -> None:
    from antidote_consumer.driver.metrics import Metrics
    from antidote_consumer.driver.consumer import Consumer
    from antidote_consumer.kafka.topics import PAUSE_MARGIN_MS, topic_config

    source = topic_factory(config={"retention.ms": "3600000"})
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy={
        "retries": {"cycles": 2, "cycleDelay": "1h", "backoff": 3}})
    c = Consumer(s, spark, Metrics(s.namespace, s.consumer))
    c._close_clients()
    try:
        for t in [*s.topics.retry, s.topics.poison, s.topics.dlq]:
            assert topic_config(kafka_admin, t, ("retention.ms",)) == {
                "retention.ms": str(3 * 3_600_000 + PAUSE_MARGIN_MS)}, t
    finally:
        kafka_admin.delete_topics([*s.topics.retry, s.topics.poison, s.topics.dlq])


def test_an_unreachable_broker_is_one_line_and_exit_1(stack, tmp_path) -> None:
    closed = f"127.0.0.1:{free_port()}"
    out = cli("consumer", *manifests(tmp_path, closed, "orders", {}), **stack.env())
    assert out.returncode == 1
    (line,) = out.stderr.strip().splitlines()  # before Spark starts: nothing else is printed
    assert line.startswith(f"antidote consumer: cannot reach Kafka at {closed} (no answer in 20s): ")
    assert "Connection refused" in line


def test_skip_reports_kafka_and_credential_errors_in_one_line(stack, tmp_path) -> None:
    closed = f"127.0.0.1:{free_port()}"

    def settings_file(name: str, secret: str | None) -> str:
        qc = QueueConsumerSpec.model_validate({
            "policyRef": {"name": "p"}, "handler": "tests.integration.handlers:upper",
            "source": {"kafka": {"bootstrapServers": closed, "topic": "orders",
                                 **({"secretRef": {"name": secret}} if secret else {})}},
            "checkpoint": {"location": str(tmp_path / "ckpt")}})
        s = resolve(qc, PoisonPolicySpec.model_validate({"disposition": "Fault"}), name="c", namespace="t")
        path = tmp_path / name
        path.write_text(json.dumps(s.model_dump(mode="json", by_alias=True)))
        return str(path)

    out = cli("skip", "c", "--settings", settings_file("plain.json", None), **stack.env())
    assert (out.returncode, out.stdout) == (1, "")
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"antidote skip: cannot reach Kafka at {closed} (no answer in 15s): ")
    assert "Connection refused" in line and line.endswith("; nothing was changed")

    out = cli("skip", "c", "--settings", settings_file("secret.json", "orders-kafka"),
              **stack.env(), ANTIDOTE_SECRETS_DIR=str(tmp_path / "nowhere"))
    assert (out.returncode, out.stdout) == (1, "")
    (line,) = out.stderr.splitlines()
    assert line.startswith("antidote skip: Kafka secret 'orders-kafka': ") and "nowhere/orders-kafka does not exist" in line


def test_the_handler_never_sees_antidote_headers_of_a_source_record(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    # A copy of a quarantined record, produced back to the source by hand.
    hdrs = [("trace", b"t"), ("antidote.reason", b"max-attempts"), ("antidote.consumer", b"x/y"),
            ("antidote.redrive.count", b"1")]
    produce(kafka_bootstrap, source, [(b"k", b"v", hdrs)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, sink=sink, handler="header_names")

    code, _m = cu.run(spark, s)

    assert code == ExitCode.OK
    (out,) = read_all(kafka_bootstrap, sink)
    assert json.loads(out.value) == ["trace", "antidote.redrive.count"]
    # Dropped before anything reads them: the sink gets the headers the handler was shown.
    assert list(out.headers) == [("trace", b"t"), ("antidote.redrive.count", b"1")]
