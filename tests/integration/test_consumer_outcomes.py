"""Every input offset reaches exactly one outcome, checked against Kafka itself."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from antidote_consumer.kafka import headers as h
from antidote_api.wire import ExitCode

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all


def test_move_retries_through_cycles_then_quarantines_with_exact_attempts(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    values = [b"poison-%d" % i if i % 10 == 3 else b"msg-%d" % i for i in range(100)]
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, [("trace", b"t%d" % i)])
                                      for i, v in enumerate(values)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, sink=sink, policy={
        "retries": {"immediate": 2, "cycles": 2, "cycleDelay": "1s"}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    src = {(r.partition, r.offset): r for r in read_all(kafka_bootstrap, source)}
    out = read_all(kafka_bootstrap, sink)
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    bad = {k for k, r in src.items() if b"poison" in r.value}
    assert len(bad) == 10
    # The ledger invariant: each offset once, in the sink or in the poison topic.
    assert sorted(r.value for r in out) == sorted(r.value.upper() for k, r in src.items() if k not in bad)
    assert set(poison) == bad
    assert read_all(kafka_bootstrap, s.topics.dlq) == []
    # Exactly (immediate + 1) x (cycles + 1) = 9 attempts of each poison message.
    per_offset = cu.calls(calls_dir, source)
    for (p, o) in bad:
        assert per_offset[f"{source}/{p}/{o}"] == 9
    for (p, o) in set(src) - bad:
        assert per_offset[f"{source}/{p}/{o}"] == 1
    # Drained: nothing left after the committed offsets, and the poison topic's depth is known.
    assert m.registry.get_sample_value("antidote_source_lag_records", {**m.ids, "topic": source}) == 0
    assert m.registry.get_sample_value("antidote_topic_depth",
                                       {**m.ids, "topic": s.topics.poison, "kind": "poison"}) >= 10
    for (p, o), (rec, hdrs) in poison.items():
        orig = src[(p, o)]
        assert rec.key == orig.key and rec.value == orig.value  # byte-identical
        assert ("trace", orig.headers[0][1]) in rec.headers
        assert hdrs["antidote.reason"] == "max-attempts"
        assert hdrs["antidote.attempts"] == "9"
        assert hdrs["antidote.cycle"] == "2"
        assert hdrs["antidote.error.class"] == "ValueError"
        assert hdrs["antidote.error.message"] == f"cannot process offset {o}"
        assert "Traceback" in hdrs["antidote.error.stack"]
        assert hdrs["antidote.original.topic"] == source
        assert hdrs["antidote.original.timestamp"] == str(orig.timestamp)
        assert hdrs["antidote.disposition"] == "Move"
        assert hdrs["antidote.consumer"] == "tests/c" and hdrs["antidote.policy"] == "p"
        assert int(hdrs["antidote.failure.first"]) < int(hdrs["antidote.failure.last"])
    assert cu.metric(m, "antidote_messages_total", outcome="processed") == 90
    assert cu.metric(m, "antidote_messages_total", outcome="moved") == 10
    assert cu.metric(m, "antidote_messages_total", outcome="retried") == 20
    assert cu.metric(m, "antidote_attempts_total") == 90 + 10 * 9


def test_retry_cycles_wait_for_their_due_time(spark, kafka_bootstrap, topic_factory, tmp_path,
                                              calls_dir) -> None:
    source = topic_factory()
    produce(kafka_bootstrap, source, [(None, b"poison", None), (None, b"fine", None)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy={
        "retries": {"immediate": 0, "cycles": 2, "cycleDelay": "2s", "backoff": 1.5}})
    code, _ = cu.run(spark, s)
    assert code == ExitCode.OK
    times = [t * 1000 for where, t in cu.call_log(calls_dir, source) if where == f"{source}/0/0"]
    assert len(times) == 3
    # The due times the retry records carry (set when their batch commits, so after the
    # failure): 2 s after the first failure, then 2 x 1.5 s after the second.
    (r1,), (r2,) = (read_all(kafka_bootstrap, t) for t in s.topics.retry)
    due1, due2 = h.due_of(r1.headers), h.due_of(r2.headers)
    assert due1 >= times[0] + 2000 and due2 >= times[1] + 3000
    # Never attempted before its due time; soon after it. The pump sleeps until the due time
    # and the retry batch runs in the local worker, so this does not include the latency of
    # a Spark job (that of the batch before the commit can reach seconds on a loaded machine).
    # (The handler logs its times rounded to the millisecond: 1 ms of slack below.)
    assert due1 - 1 <= times[1] < due1 + 5000
    assert due2 - 1 <= times[2] < due2 + 5000


def test_reject_validation_and_non_retryable(spark, kafka_bootstrap, topic_factory, tmp_path,
                                             calls_dir) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [
        (b"a", b'{"id": 1}', None),          # fine
        (b"b", b'{"id": ', None),            # invalid JSON: validation, never handled
        (b"c", b'{"name": "x"}', None),      # KeyError: non-retryable
        (b"d", b"\xff\xfe", None),           # not UTF-8: validation
        (None, b'{"id": 2}', None),          # null key is fine
    ])
    s = cu.settings(kafka_bootstrap, source, tmp_path, handler="strict_json", sink=sink, policy={
        "retries": {"immediate": 3, "cycles": 1, "cycleDelay": "1s", "nonRetryable": ["KeyError"]},
        "validation": {"format": "json"}, "disposition": "Reject"})
    code, m = cu.run(spark, s)
    assert code == ExitCode.OK
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == [
        b'{"id":1,"ok":true}', b'{"id":2,"ok":true}']
    dlq = cu.quarantined(kafka_bootstrap, s.topics.dlq)
    assert read_all(kafka_bootstrap, s.topics.poison) == []
    assert set(dlq) == {(0, 1), (0, 2), (0, 3)}
    assert dlq[(0, 1)][1]["antidote.reason"] == "validation"
    assert dlq[(0, 1)][1]["antidote.attempts"] == "0"
    assert dlq[(0, 1)][1]["antidote.error.message"].startswith("value is not JSON")
    assert dlq[(0, 3)][1]["antidote.error.message"].startswith("value is not UTF-8")
    assert dlq[(0, 2)][1]["antidote.reason"] == "non-retryable"
    assert dlq[(0, 2)][1]["antidote.error.class"] == "KeyError"
    assert dlq[(0, 2)][1]["antidote.attempts"] == "1"
    assert dlq[(0, 3)][0].value == b"\xff\xfe"
    per = cu.calls(calls_dir, source)
    assert per[f"{source}/0/1"] == 0 and per[f"{source}/0/3"] == 0 and per[f"{source}/0/2"] == 1
    assert cu.metric(m, "antidote_messages_total", outcome="rejected") == 3


def test_drop_counts_and_writes_nothing(spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    source = topic_factory()
    produce(kafka_bootstrap, source, [(None, b"poison-%d" % i if i < 4 else b"ok", None)
                                      for i in range(10)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy={
        "retries": {"immediate": 1, "cycles": 0}, "disposition": "Drop"})
    code, m = cu.run(spark, s)
    assert code == ExitCode.OK
    assert cu.metric(m, "antidote_messages_total", outcome="dropped") == 4
    assert cu.metric(m, "antidote_messages_total", outcome="processed") == 6
    assert read_all(kafka_bootstrap, s.topics.poison) == []
    assert read_all(kafka_bootstrap, s.topics.dlq) == []


@pytest.mark.parametrize("path", cu.RETRY_PATHS)
def test_two_consumers_of_one_source_share_its_retry_topics_and_read_only_their_own(
        spark, kafka_bootstrap, topic_factory, tmp_path, path) -> None:
    import time

    from antidote_consumer.kafka import headers as h

    source = topic_factory()
    produce(kafka_bootstrap, source, [(b"k%d" % i, b"poison-%d" % i if i % 5 == 0 else b"m%d" % i, None)
                                      for i in range(40)])
    policy = {"retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s"}}
    conf = cu.RETRY_PATHS[path]  # the executors pass over the others' records too
    a = cu.settings(kafka_bootstrap, source, tmp_path, sink=topic_factory("-a"), name="a", policy=policy,
                    spark_conf=conf)
    b = cu.settings(kafka_bootstrap, source, tmp_path, sink=topic_factory("-b"), name="b", policy=policy,
                    spark_conf=conf)
    assert a.topics.retry == b.topics.retry and a.topics.poison == b.topics.poison
    code, m = cu.run(spark, a)
    assert code == ExitCode.OK
    # A third consumer's retry record, due in an hour, ahead of every record b will write:
    # passed over, neither attempted nor waited for.
    hdrs = h.failure_headers(origin=h.Origin(source, 0, 999, 0), attempts=1, cycle=1,
                             first_failure=0, last_failure=0, reason=None, error_class="E",
                             error_message="x", stack=None, consumer="elsewhere/c", policy="p",
                             due=int(time.time() * 1000) + 3_600_000)
    produce(kafka_bootstrap, a.topics.retry[0], [(b"other", b"poison-other", hdrs)])
    # Reads retry-1 past a's records and the third one's; waiting for the third one's due
    # time instead would run into the deadline and fail.
    code, mb = cu.run(spark, b, deadline=120)
    assert code == ExitCode.OK
    for m in (m, mb):
        assert cu.metric(m, "antidote_messages_total", outcome="processed") == 32
        assert cu.metric(m, "antidote_messages_total", outcome="moved") == 8
        assert cu.metric(m, "antidote_retry_scheduled_total", cycle="1") == 8
    poison = read_all(kafka_bootstrap, a.topics.poison)
    by_consumer = {}
    for r in poison:
        who = dict(r.headers)["antidote.consumer"].decode()
        by_consumer.setdefault(who, set()).add(dict(r.headers)["antidote.original.offset"])
    assert {k: len(v) for k, v in by_consumer.items()} == {"tests/a": 8, "tests/b": 8}
    assert len(read_all(kafka_bootstrap, a.topics.retry[0])) == 17  # 8 + 8 + the other's


def test_bad_input_never_crashes_the_consumer(spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    # A source that accepts 6 MB records; Antidote's derived topics must inherit that.
    source = topic_factory("-big", config={"max.message.bytes": str(6 * 1024 * 1024)})
    big = b"poison" + b"x" * (5 * 1024 * 1024)
    p = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 8 * 1024 * 1024})
    for key, value in [(None, b""), (None, None), (b"\x00\xff", b"\xc3\x28"), (b"k", big),
                       (None, b"fine")]:
        p.produce(source, key=key, value=value)
    assert p.flush(60) == 0
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy={
        "retries": {"immediate": 0, "cycles": 0}, "validation": {"format": "utf8", "maxBytes": 1048576}})
    code, m = cu.run(spark, s)
    assert code == ExitCode.OK
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == {(0, 1), (0, 2), (0, 3)}  # null value, not UTF-8, too big
    assert poison[(0, 3)][0].value == big and poison[(0, 3)][0].key == b"k"
    assert "above maxBytes" in poison[(0, 3)][1]["antidote.error.message"]
    assert poison[(0, 2)][0].key == b"\x00\xff"
    assert cu.metric(m, "antidote_messages_total", outcome="processed") == 2
