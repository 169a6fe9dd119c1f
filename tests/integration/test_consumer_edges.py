"""Edges of the consumer: a sink that refuses writes, path sinks end to end, and a handler
that crashes the local worker on a retry batch. Real broker, real local Spark."""

from __future__ import annotations

from collections import Counter

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
import random

import pytest

from antidote_api.names import ledger_topic
from antidote_api.wire import ExitCode
from antidote_consumer.driver.batches import Runtime
from antidote_consumer.driver.frames import running_tasks
from antidote_consumer.driver.ledger import load_state

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all


def _set_topic_config(admin, topic: str, name: str, value: str) -> None:
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", topic, incremental_configs=[entry])
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout=30)


def _ledger(bootstrap: str, s):
    return load_state(bootstrap, ledger_topic(s.source.topic, s.namespace, s.consumer))


@pytest.mark.parametrize("delivery", ["AtLeastOnce", "ExactlyOnce"])
def test_a_sink_that_refuses_writes_disables_the_queue_and_loses_nothing(
        spark, kafka_bootstrap, kafka_admin, topic_factory, tmp_path, caplog, delivery) -> None:
    # The sink is "down" deterministically and at once: its broker refuses every record
    # (max.message.bytes below any of its record batches, not below a transaction's marker,
    # which must still be written), so each delivery fails in milliseconds.
    source = topic_factory()
    sink = topic_factory("-out", config={"max.message.bytes": "300"})
    values = [b"m%d " % i + random.Random(i).randbytes(600) for i in range(6)]  # past compression
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, None) for i, v in enumerate(values)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, sink=sink, max_batch=2, delivery=delivery, policy={
        "retries": {"immediate": 0, "cycles": 0}, "queueDisable": {"consecutiveBatchFailures": 2}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.CONSECUTIVE_BATCH_FAILURES
    assert cu.metric(m, "antidote_queue_disabled", reason="ConsecutiveBatchFailures") == 1
    (disabled,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("queue disabled")]
    if delivery == "AtLeastOnce":
        # Two rollbacks of the first batch (2 messages), then bisection: each message fails on
        # its own too (2 re-executions), so the environment is broken, not a message.
        assert cu.metric(m, "antidote_batch_failures_total") == 2
        assert cu.metric(m, "antidote_consecutive_batch_failures") == 2
        assert cu.metric(m, "antidote_isolation_executions_total") == 2
        # The log names the sink's error, not a line of the worker's source code.
        assert (f"last error: RuntimeError: sink topic {sink}: 2 outputs refused, 0 unsent after 60s; "
                "errors: ['KafkaError{code=MSG_SIZE_TOO_LARGE") in disabled
    else:
        # Two rollbacks (each task's transaction refused), then bisection, whose segments'
        # outputs come back to the driver: its settle is refused the same way, a third
        # failure in a row. The log names the sink and the broker's refusal.
        assert cu.metric(m, "antidote_batch_failures_total") == 3
        assert f"refused: {sink}: Broker: Message size too large" in disabled, disabled
    for outcome in ("processed", "retried", "moved", "rejected", "dropped"):
        assert cu.metric(m, "antidote_messages_total", outcome=outcome) == 0, outcome
    # Persisted: the rollbacks and the reason are in the ledger; no batch was committed.
    state = _ledger(kafka_bootstrap, s)
    assert (state.disabled, state.consecutive_failures, state.committed_batch) == (
        "ConsecutiveBatchFailures", 2 if delivery == "AtLeastOnce" else 3, -1)
    assert set(state.counts.values()) == {0}
    # Nothing quarantined, nothing written.
    for topic in (s.topics.poison, s.topics.dlq, sink):
        assert read_all(kafka_bootstrap, topic) == [], topic

    # The sink is repaired; the operator's resume restarts the consumer on the same checkpoint.
    _set_topic_config(kafka_admin, sink, "max.message.bytes", "1048588")
    code, m = cu.run(spark, cu.resumed(s))

    assert code == ExitCode.OK
    # Nothing is lost, and each output is written once: at-least-once here too, since the
    # broker refused every earlier write and the repaired run commits each batch once.
    out = read_all(kafka_bootstrap, sink)
    assert Counter((r.key, r.value) for r in out) == Counter(
        (b"k%d" % i, v.upper()) for i, v in enumerate(values))
    state = _ledger(kafka_bootstrap, s)
    assert state.counts == {"processed": 6, "retried": 0, "moved": 0, "rejected": 0, "dropped": 0}
    assert (state.disabled, state.consecutive_failures, state.committed_batch) == (None, 0, 2)
    assert cu.metric(m, "antidote_messages_total", outcome="processed") == 6
    assert cu.metric(m, "antidote_batch_failures_total") == 0
    assert read_all(kafka_bootstrap, s.topics.poison) == []


def _produce_to(bootstrap: str, topic: str, partition: int, records: list[tuple[bytes, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    errors: list = []
    for key, value in records:
        producer.produce(topic, value, key, partition=partition,
                         on_delivery=lambda err, _msg: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors, errors


def _path_rows(spark, fmt: str, path) -> list:
    # JSON keeps binary columns as base64: the schema reads them back as bytes.
    schema = "key binary, value binary, topic string, partition int, offset long, timestamp long"
    reader = spark.read.format(fmt)
    if fmt == "json":
        reader = reader.schema(schema)
    return reader.load(str(path)).select("key", "value", "topic", "partition", "offset").collect()


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_a_path_sink_holds_each_output_once_across_retries_and_a_replayed_batch(
        fmt, spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    from antidote_api.semantics import EffectiveSink
    from antidote_consumer.driver.ledger import Ledger

    source = topic_factory(partitions=2)
    # Partition 0: offset 0 fails its first delivery only (retried once, then processed);
    # offsets 3, 13 and 23 always fail (moved after their retry cycle).
    first = {(0, i): b"flaky-1 m%d" % i if i == 0 else b"poison-%d" % i if i % 10 == 3 else b"m%d" % i
             for i in range(30)}
    _produce_to(kafka_bootstrap, source, 0, [(b"k%d" % o, v) for (_, o), v in first.items()])
    out = tmp_path / "out"
    s = cu.settings(kafka_bootstrap, source, tmp_path, handler="flaky_upper", policy={
        "retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s"}})
    s = s.model_copy(update={"sink": EffectiveSink(path=str(out), format=fmt)})

    def expect(values: dict) -> Counter:
        return Counter((source, p, o, b"k%d" % o, v.upper()) for (p, o), v in values.items()
                       if b"poison" not in v)

    def written() -> Counter:
        return Counter((r.topic, r.partition, r.offset, bytes(r.key), bytes(r.value))
                       for r in _path_rows(spark, fmt, out))

    code, _ = cu.run(spark, s)

    assert code == ExitCode.OK
    # The retried message's output (written by the retry batch, a Spark job: the local
    # worker is not used for path sinks) is there beside the source batch's, each once.
    assert written() == expect(first)
    assert set(cu.quarantined(kafka_bootstrap, s.topics.poison)) == {(0, 3), (0, 13), (0, 23)}
    state = _ledger(kafka_bootstrap, s)
    assert state.counts == {"processed": 27, "retried": 4, "moved": 3, "rejected": 0, "dropped": 0}

    # More messages, in the other partition (offsets from 0 again), on the same checkpoint.
    before = state
    second = {(1, i): b"n%d" % i for i in range(10)}
    _produce_to(kafka_bootstrap, source, 1, [(b"k%d" % o, v) for (_, o), v in second.items()])
    code, _ = cu.run(spark, s)
    assert code == ExitCode.OK
    assert written() == expect(first) + expect(second)
    assert _ledger(kafka_bootstrap, s).committed_batch == 1

    # A driver killed after writing batch 1's folder, before committing it: the ledger as it
    # was (batch 1 started, not committed) and Spark's commit of batch 1 gone. Spark replays
    # batch 1 (same offsets); its folder is overwritten, not duplicated.
    commits = tmp_path / "ckpt-c" / "commits"
    (commits / "1").unlink()
    (commits / ".1.crc").unlink(missing_ok=True)
    before.started_batch, before.in_batch = 1, True
    ledger = Ledger(kafka_bootstrap, ledger_topic(source, s.namespace, s.consumer), "antidote-test-replay")
    ledger.commit(before)
    ledger.close()
    code, _ = cu.run(spark, s)
    assert code == ExitCode.OK
    assert written() == expect(first) + expect(second)
    state = _ledger(kafka_bootstrap, s)
    assert (state.committed_batch, state.counts["processed"], state.counts["moved"]) == (1, 37, 3)
    # One folder per batch, named after the first record it read.
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [
        f"batch={source}-0-0", f"batch={source}-1-0", f"batch={source}.retry-1-0-0"]


def test_a_crash_in_the_local_worker_on_a_retry_batch_is_isolated_by_spark(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir, caplog) -> None:
    import os

    source, sink = topic_factory(), topic_factory("-out")
    # Offset 4 fails its first delivery, then kills its process when re-delivered; 7 and 11
    # fail their first delivery, 15 its first two; the rest succeed at once.
    values = {i: b"m%d" % i for i in range(20)}
    values.update({4: b"crash", 7: b"flaky-1 m7", 11: b"flaky-1 m11", 15: b"flaky-2 m15"})
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, [("trace", b"t%d" % i)]) for i, v in values.items()])
    s = cu.settings(kafka_bootstrap, source, tmp_path, handler="crash_on_redelivery", sink=sink, policy={
        "retries": {"immediate": 0, "cycles": 2, "cycleDelay": "1s"},
        "queueDisable": {"consecutiveBatchFailures": 2}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    # Retry-1 holds 4, 7, 11, 15 (in that order). The local worker dies on 4, the batch falls
    # back to a Spark job, which dies too: a rollback, twice; then bisection runs [4, 7]
    # (fails), [4] (fails alone, but nothing succeeded since [4, 7] failed: not yet a
    # culprit), the halves it set aside, [7] and [11, 15], together once (they succeed), and
    # [4] alone again (fails after a success: the culprit). 15 fails once more (to retry-2).
    state = _ledger(kafka_bootstrap, s)
    assert state.counts == {"processed": 19, "retried": 5, "moved": 1, "rejected": 0, "dropped": 0}
    assert (state.consecutive_failures, state.disabled) == (0, None)
    assert cu.metric(m, "antidote_batch_failures_total") == 2
    assert cu.metric(m, "antidote_isolation_executions_total") == 4
    assert cu.metric(m, "antidote_poison_messages_total", reason="batch-isolation", disposition="Move") == 1
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == {(0, 4)}
    rec, hdrs = poison[(0, 4)]
    assert (rec.key, rec.value, dict(rec.headers)["trace"]) == (b"k4", b"crash", b"t4")
    assert hdrs["antidote.reason"] == "batch-isolation"
    assert hdrs["antidote.error.class"] == "antidote.BatchFailure"
    assert "Python worker exited unexpectedly (crashed)" in hdrs["antidote.error.message"]
    assert (hdrs["antidote.original.topic"], hdrs["antidote.original.offset"]) == (source, "4")
    assert hdrs["antidote.cycle"] == "1"
    # Attempts across cycles: its first delivery, the 2 rollbacks and the 3 failed bisection
    # runs that held it (the local worker's deaths are not counted: the Spark job they fall
    # back to is).
    assert hdrs["antidote.attempts"] == "6"
    assert read_all(kafka_bootstrap, s.topics.dlq) == []
    # Every other message reached the sink, exactly once (read_committed): a Spark job that
    # died on 4 committed nothing of its task, and the bisection's outputs came back to the
    # driver and were written with its settle.
    assert Counter(r.value for r in read_all(kafka_bootstrap, sink)) == Counter(
        v.upper() for i, v in values.items() if i != 4)
    calls = cu.calls(calls_dir, source)
    assert all(calls[f"{source}/0/{i}"] == 1 for i in values if i not in (4, 7, 11, 15))

    # Which process ran each call of 4 and 15: the local worker is a child of this process,
    # Spark's Python workers are not.
    procs = [line.split() for line in (calls_dir / f"{source}.procs").read_text().splitlines()]
    def local(ppid: str) -> bool:
        return int(ppid) == os.getpid()

    crash = [(int(a), int(pid), local(ppid)) for o, a, pid, ppid in procs if o == "4"]
    seen = [(a, is_local) for a, _, is_local in crash]
    # First delivery in Spark; per rollback the local worker, then the Spark job; then the
    # bisection's Spark runs that held 4: three, or two when a bisection job died of Spark's
    # CancelledKeyException (a stale Python worker socket after the crashes) before it ran
    # 4, as seen once in CI under load.
    assert seen[:5] == [(1, False), (2, True), (2, False), (2, True), (2, False)]
    assert seen[5:] in ([(2, False)] * 3, [(2, False)] * 2), seen
    died = {pid for a, pid, is_local in crash if is_local}
    assert len(died) == 2  # a fresh local worker after each death
    # The local worker is usable again: the later retry-2 batch (15's third attempt) ran
    # there, in a third process, and succeeded.
    (last,) = [(int(pid), local(ppid)) for o, a, pid, ppid in procs if o == "15" and a == "3"]
    assert last[1] and last[0] not in died
    fell_back = [r for r in caplog.records if "retry batch in the local worker failed" in r.getMessage()]
    assert len(fell_back) == 2


def test_after_a_failed_job_the_next_one_starts_only_when_its_tasks_have_ended(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    from antidote_consumer.driver.metrics import Metrics
    from antidote_consumer.worker.executor import INPUT_SCHEMA

    # Spark returns a job's failure before it has killed the job's other tasks. A job started
    # then can be handed the Python worker being killed and die (CancelledKeyException)
    # without running its messages: bisection would blame an innocent one, as CI saw.
    source = topic_factory(partitions=2)
    s = cu.settings(kafka_bootstrap, source, tmp_path, handler="crash_or_linger")
    rows = [(b"k0", b"crash", source, 0, 0, 0, []), (b"k1", b"linger", source, 1, 0, 0, [])]
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 2), INPUT_SCHEMA)
    runtime = Runtime(s, spark, Metrics(s.namespace, s.consumer), partitions=2)
    try:
        with pytest.raises(Exception, match="Python worker exited unexpectedly"):
            runtime.execute(df)
        # The lingering task (5 s) has ended before execute() gives the failure back.
        assert running_tasks(spark) == 0
    finally:
        if runtime.local is not None:
            runtime.local.close()
