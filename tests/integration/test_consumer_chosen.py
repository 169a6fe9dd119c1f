"""Handler-chosen outcomes (antidote.Retry, antidote.NonRetryable) and the Kafka-native error
headers (spec.nativeHeaders), on the real stack: Kafka, Spark's Python workers, the local
worker, the ledger."""

from __future__ import annotations

import pytest

from antidote_api.wire import ExitCode
from antidote_consumer.kafka import headers as h

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all

HANDLERS = "tests.integration.handlers_chosen"


def _settings(bootstrap, source, tmp_path, policy, sink=None, spark_conf=None):
    s = cu.settings(bootstrap, source, tmp_path, policy=policy, sink=sink, spark_conf=spark_conf)
    return s.model_copy(update={"handler": f"{HANDLERS}:chooses"})


def _by_value(records) -> dict[bytes, list]:
    out: dict[bytes, list] = {}
    for r in records:
        out.setdefault(r.value, []).append(r)
    return out


def _hdr(record, name: str) -> str:
    return dict(record.headers)[name].decode()


@pytest.mark.parametrize("path", cu.RETRY_PATHS)
def test_retry_after_schedules_the_next_cycle_at_that_delay_within_the_policy(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir, path) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    values = [b"later-2", b"later-60", b"always-later", b"bad-after", b"fine"]
    produce(kafka_bootstrap, source, [(None, v, None) for v in values])
    # Through the executors, later-2 and later-60 (due after the cycle's 1s) lie inside the
    # range planned by timestamps: the executors stop at them, never attempting one early.
    s = _settings(kafka_bootstrap, source, tmp_path, sink=sink, spark_conf=cu.RETRY_PATHS[path], policy={
        "retries": {"immediate": 3, "cycles": 2, "cycleDelay": "1s", "maxCycleDelay": "4s"}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == [b"fine", b"later-2", b"later-60"]
    calls = cu.call_log(calls_dir, source)
    per = cu.calls(calls_dir, source)
    at = {v: f"{source}/0/{i}" for i, v in enumerate(values)}
    # Retry skips the attempts left in its pass: one call, then one in the next cycle.
    assert per[at[b"later-2"]] == 2 and per[at[b"later-60"]] == 2 and per[at[b"fine"]] == 1
    retry1 = _by_value(read_all(kafka_bootstrap, s.topics.retry[0]))
    retry2 = _by_value(read_all(kafka_bootstrap, s.topics.retry[1]))

    def waited(value: bytes, topic_records) -> tuple[int, int]:
        """(due - the first attempt, the second attempt - due), in ms."""
        (rec,) = topic_records[value]
        due, failed = h.due_of(rec.headers), int(_hdr(rec, h.LAST_FAILURE))
        first, second = sorted(t * 1000 for where, t in calls if where == at[value])
        assert failed <= first + 1  # failure.last is the time the worker's batch began
        return due - first, second - due

    # The due time is set when the batch commits, a little after the failure: at least the
    # delay asked for, never the policy's 1s, and the next attempt never before it (1 ms of
    # slack: the handler logs its times rounded to the millisecond).
    delay, late = waited(b"later-2", retry1)
    assert 2000 <= delay < 2000 + 20_000 and late >= -1
    assert _hdr(retry1[b"later-2"][0], h.ERROR_CLASS) == "antidote.Retry"
    assert _hdr(retry1[b"later-2"][0], h.ERROR_MESSAGE) == "rate limited"
    assert _hdr(retry1[b"later-2"][0], h.ATTEMPTS) == "1"
    # 60s asked, maxCycleDelay 4s: scheduled at 4s.
    delay, late = waited(b"later-60", retry1)
    assert 4000 <= delay < 4000 + 20_000 and late >= -1
    # Asking again in the last cycle: no cycle left, the disposition with one attempt per pass.
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    _, again = poison[(0, 2)]
    assert again["antidote.reason"] == "max-attempts" and again["antidote.attempts"] == "3"
    assert again["antidote.error.class"] == "antidote.Retry"
    assert again["antidote.error.message"] == ("retry requested after 1s (no retry cycle left: "
                                               "the policy has 2, all used)")
    assert len(retry2[b"always-later"]) == 1 and per[at[b"always-later"]] == 3
    # A bad `after` is an ordinary failure: every attempt of every cycle, then the disposition,
    # with a message naming the message and the value.
    _, bad = poison[(0, 3)]
    assert per[at[b"bad-after"]] == (3 + 1) * (2 + 1) and bad["antidote.attempts"] == "12"
    assert bad["antidote.error.message"].startswith(
        f"Retry(after='soon') on {source}/0/3: 'soon' is not a duration")
    assert set(poison) == {(0, 2), (0, 3)}
    assert cu.metric(m, "antidote_messages_total", outcome="processed") == 3
    assert cu.metric(m, "antidote_messages_total", outcome="moved") == 2


def test_non_retryable_gets_the_disposition_in_one_attempt_and_is_no_systemic_failure(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    # 8 of 10 fail: a failure ratio far above the threshold, were they counted.
    values = [b"never"] * 8 + [b"fine-1", b"fine-2"]
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, None) for i, v in enumerate(values)])
    s = _settings(kafka_bootstrap, source, tmp_path, sink=sink, policy={
        "retries": {"immediate": 5, "cycles": 2, "cycleDelay": "1s"}, "disposition": "Reject",
        "queueDisable": {"failureRatio": {"threshold": 0.5, "minMessages": 4}},
        "nativeHeaders": ["Connect"]})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK  # not SystemicFailure
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == [b"fine-1", b"fine-2"]
    src = {(r.partition, r.offset): r for r in read_all(kafka_bootstrap, source)}
    dlq = cu.quarantined(kafka_bootstrap, s.topics.dlq)
    assert set(dlq) == {k for k, r in src.items() if r.value == b"never"}
    per = cu.calls(calls_dir, source)
    for (p, o), (rec, hdrs) in dlq.items():
        assert per[f"{source}/{p}/{o}"] == 1
        assert hdrs["antidote.reason"] == "non-retryable" and hdrs["antidote.attempts"] == "1"
        assert hdrs["antidote.disposition"] == "Reject"
        assert hdrs["antidote.error.class"] == "antidote.NonRetryable"
        assert hdrs["antidote.error.message"] == "unknown customer"
        assert "KeyError: 'customer'" in hdrs["antidote.error.stack"]  # the chained cause
        native = dict(rec.headers)
        assert native["__connect.errors.topic"] == source.encode()
        assert (native["__connect.errors.partition"], native["__connect.errors.offset"]) == (
            str(p).encode(), str(o).encode())
        assert native["__connect.errors.exception.class.name"] == b"antidote.NonRetryable"
        assert native["__connect.errors.exception.message"] == b"unknown customer"
    assert read_all(kafka_bootstrap, s.topics.retry[0]) == []
    assert cu.metric(m, "antidote_messages_total", outcome="rejected") == 8
    assert cu.metric(m, "antidote_poison_messages_total", reason="non-retryable", disposition="Reject") == 8


def test_native_headers_on_the_poison_topic_carry_the_original_coordinates(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    source = topic_factory(partitions=2)
    produce(kafka_bootstrap, source, [(b"k%d" % i, b"poison-%d" % i if i % 3 == 0 else b"ok", None)
                                      for i in range(12)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy={
        "retries": {"immediate": 1, "cycles": 1, "cycleDelay": "1s"},
        "nativeHeaders": ["Connect", "ShareGroup"]})

    code, _ = cu.run(spark, s)

    assert code == ExitCode.OK
    src = {(r.partition, r.offset): r for r in read_all(kafka_bootstrap, source)}
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == {k for k, r in src.items() if r.value.startswith(b"poison")}
    for (p, o), (rec, hdrs) in poison.items():
        assert (rec.key, rec.value) == (src[(p, o)].key, src[(p, o)].value)
        native = {k: v.decode() for k, v in rec.headers if k.startswith("__")}
        assert native == {
            "__connect.errors.topic": source, "__connect.errors.partition": str(p),
            "__connect.errors.offset": str(o), "__connect.errors.connector.name": "tests/c",
            "__connect.errors.task.id": "0", "__connect.errors.stage": "TASK_PUT",
            "__connect.errors.class.name": "tests.integration.handlers:upper",
            "__connect.errors.exception.class.name": "ValueError",
            "__connect.errors.exception.message": f"cannot process offset {o}",
            "__connect.errors.exception.stacktrace": hdrs["antidote.error.stack"],
            "__dlq.errors.topic": source, "__dlq.errors.partition": str(p),
            "__dlq.errors.offset": str(o), "__dlq.errors.group": "tests/c",
            "__dlq.errors.delivery.count": "4",
            "__dlq.errors.message": f"max-attempts: ValueError: cannot process offset {o}",
        }
    # Retry records are not quarantined: no native headers there.
    assert all(not k.startswith("__") for r in read_all(kafka_bootstrap, s.topics.retry[0])
               for k, _ in r.headers)
