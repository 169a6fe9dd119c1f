"""A PoisonPolicy's routes by error class and its age limits on the real stack: Kafka, Spark's
Python workers, the driver's local worker, the ledger, and the poison-queue reader over a
route's topic."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from confluent_kafka import Producer

from antidote_api.wire import ExitCode
from antidote_consumer.kafka import headers as h
from antidote_consumer.reader.run import run_reader
from antidote_consumer.reader.rules import ReaderError, ReaderOptions

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all

from .test_consumer_edges import _ledger

pytestmark = pytest.mark.integration

HANDLER = "tests.integration.handlers_governance:pays"
PAYMENT = "tests.integration.handlers_governance.PaymentError"
DECLINED = "tests.integration.handlers_governance.CardDeclined"


def _settings(bootstrap, source, tmp_path, policy, sink=None):
    # A name of this file's own: consumers of one name fence each other's transactions.
    s = cu.settings(bootstrap, source, tmp_path, policy=policy, sink=sink,
                    name=f"govern-{uuid.uuid4().hex[:8]}")
    return s.model_copy(update={"handler": HANDLER})


def _produce_at(bootstrap: str, topic: str, records: list[tuple[bytes, bytes, int]]) -> None:
    """Write (key, value, CreateTime in epoch ms) records: a producer's own timestamps."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    errors: list = []
    for key, value, ts in records:
        producer.produce(topic, key=key, value=value, timestamp=ts,
                         on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(60) == 0 and not errors, errors


def test_routes_send_each_error_class_to_its_topic_and_a_reader_redrives_from_it(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    declined = f"{source}-declined"
    values = ([b"declined-%d" % i for i in range(3)] + [b"x" * 64] + [b"missing-1", b"bad-1"]
              + [b"fine-%d" % i for i in range(6)])
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, [("trace", b"t%d" % i)]) for i, v in enumerate(values)])
    s = _settings(kafka_bootstrap, source, tmp_path, sink=sink, policy={
        # A declined card fails its first pass in the executors (a source batch), then its
        # retry cycle in the driver's local worker: routed there, by its base class.
        "retries": {"immediate": 1, "cycles": 1, "cycleDelay": "1s", "nonRetryable": ["KeyError"]},
        "validation": {"maxBytes": 32},
        "disposition": "Move",
        "routes": [{"errors": [PAYMENT, "validation"], "disposition": "Reject", "topic": declined},
                   {"errors": ["KeyError"], "disposition": "Drop"}],
        "reader": {"action": "Redrive"}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == sorted(v.upper() for v in values[6:])
    src = {r.value: (r.partition, r.offset) for r in read_all(kafka_bootstrap, source)}
    routed = cu.quarantined(kafka_bootstrap, declined)
    assert set(routed) == {src[v] for v in values[:4]}
    per = cu.calls(calls_dir, source)
    for (p, o), (rec, hdrs) in routed.items():
        assert (hdrs[h.ROUTE], hdrs[h.DISPOSITION]) == ("0", "Reject")
        assert dict(rec.headers)["trace"] == rec.key.replace(b"k", b"t")  # the user's headers kept
        if rec.value.startswith(b"declined"):  # every attempt of every pass, then the route
            assert (hdrs[h.REASON], hdrs[h.ERROR_CLASS], hdrs[h.ATTEMPTS]) == ("max-attempts", DECLINED, "4")
            assert hdrs[h.CYCLE] == "1" and per[f"{source}/{p}/{o}"] == 4
        else:  # refused by validation: no call
            assert (hdrs[h.REASON], hdrs[h.ERROR_CLASS]) == ("validation", "antidote.ValidationError")
            assert per[f"{source}/{p}/{o}"] == 0
    # No route for ValueError: the policy's own disposition, without antidote.route.
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == {src[b"bad-1"]}
    (_, bad), = poison.values()
    assert h.ROUTE not in bad and bad[h.DISPOSITION] == "Move" and bad[h.ERROR_CLASS] == "ValueError"
    assert read_all(kafka_bootstrap, s.topics.dlq, missing_ok=True) == []
    assert per[f"{source}/{src[b'missing-1'][0]}/{src[b'missing-1'][1]}"] == 1  # nonRetryable, dropped
    # Every offset has its one outcome: 6 processed, 4 rejected (routed), 1 dropped, 1 moved.
    counts = {o: cu.metric(m, "antidote_messages_total", outcome=o) for o in ("processed", "rejected",
                                                                            "dropped", "moved")}
    assert counts == {"processed": 6, "rejected": 4, "dropped": 1, "moved": 1}
    assert cu.metric(m, "antidote_poison_messages_total", reason="validation", disposition="Reject") == 1
    assert cu.metric(m, "antidote_poison_messages_total", reason="non-retryable", disposition="Drop") == 1

    # The reader works on a route's topic like on the poison topic: Redrive back to the source.
    with pytest.raises(ReaderError, match="not poison, dlq or a route's topic"):
        run_reader(s, ReaderOptions(source=s.topics.retry[0]))
    report = run_reader(s, ReaderOptions(source=declined))
    assert (report.messages, report.redriven, report.faultAt) == (4, 4, None)
    back = read_all(kafka_bootstrap, source)[len(values):]
    assert sorted(r.value for r in back) == sorted(values[:4])
    assert all(dict(r.headers)[h.REDRIVE_COUNT] == b"1" and h.ROUTE not in dict(r.headers) for r in back)
    assert run_reader(s, ReaderOptions(source=declined)).messages == 0  # nothing twice


def test_retries_max_age_expires_a_message_before_its_cycles_are_used_and_a_skewed_clock_does_not(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    source = topic_factory()
    # Both always fail. One stamped 12 s ago (it is 30 s old some cycles in, however long the
    # consumer takes to start); one 10 minutes ahead (a producer's clock ahead of ours): its age
    # is 0, so it gets every cycle the policy has.
    now = int(time.time() * 1000) - 12_000
    _produce_at(kafka_bootstrap, source, [(b"a", b"down-now", now), (b"b", b"down-ahead", now + 600_000)])
    cycles = 8
    s = _settings(kafka_bootstrap, source, tmp_path, policy={
        "retries": {"immediate": 0, "cycles": cycles, "cycleDelay": "3s", "maxAge": "30s"},
        "queueDisable": {"enabled": False}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == {(0, 0), (0, 1)}
    _, old = poison[(0, 0)]
    assert old[h.REASON] == "expired" and old[h.ERROR_CLASS] == "ConnectionError"
    assert "retries.maxAge 30s" in old[h.ERROR_MESSAGE]
    assert old[h.ERROR_MESSAGE].startswith("downstream service unavailable (expired: ")
    # Expired after fewer passes than the policy's (cycles + 1): each pass one attempt.
    per = cu.calls(calls_dir, source)
    assert int(old[h.ATTEMPTS]) == per[f"{source}/0/0"] < cycles + 1
    assert int(old[h.CYCLE]) < cycles
    # Expired at the first pass whose next cycle would start past 30s of age, not before (1 s
    # of slack: a call is logged when it starts, the pass judges when it ends).
    *before, last = sorted(t * 1000 for where, t in cu.call_log(calls_dir, source) if where == f"{source}/0/0")
    assert last + 3000 + 1000 > now + 30_000
    assert all(t + 3000 <= now + 30_000 + 1000 for t in before)
    _, ahead = poison[(0, 1)]
    assert ahead[h.REASON] == "max-attempts" and per[f"{source}/0/1"] == cycles + 1
    assert cu.metric(m, "antidote_poison_messages_total", reason="expired", disposition="Move") == 1


def test_validation_max_age_refuses_stale_records_without_calling_the_handler(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    now = int(time.time() * 1000)
    hour = 3600 * 1000
    _produce_at(kafka_bootstrap, source, [(b"a", b"stale", now - 2 * hour), (b"b", b"fresh", now),
                                          (b"c", b"ahead", now + 600_000), (b"d", b"old-too", now - 90 * 60_000)])
    s = _settings(kafka_bootstrap, source, tmp_path, sink=sink, policy={
        "retries": {"immediate": 2, "cycles": 1, "cycleDelay": "1s"},
        "validation": {"maxAge": "1h"}, "disposition": "Reject",
        "queueDisable": {"failureRatio": {"threshold": 0.4, "minMessages": 2}}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK  # refused records are no systemic failure (2 of 4 would trip it)
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == [b"AHEAD", b"FRESH"]
    dlq = cu.quarantined(kafka_bootstrap, s.topics.dlq)
    assert set(dlq) == {(0, 0), (0, 3)}
    for _, hdrs in dlq.values():
        assert (hdrs[h.REASON], hdrs[h.ERROR_CLASS], hdrs[h.ATTEMPTS]) == ("validation", "antidote.ValidationError", "0")
        assert "above validation.maxAge 1h" in hdrs[h.ERROR_MESSAGE]
    assert dlq[(0, 0)][1][h.ERROR_MESSAGE].startswith("record is 2h")
    per = cu.calls(calls_dir, source)
    assert per[f"{source}/0/0"] == 0 and per[f"{source}/0/3"] == 0  # never called
    assert per[f"{source}/0/1"] == 1 and per[f"{source}/0/2"] == 1
    assert cu.metric(m, "antidote_messages_total", outcome="rejected") == 2


def test_a_routes_topic_that_refuses_writes_is_a_refused_settle_like_the_poison_topics(
        spark, kafka_bootstrap, kafka_admin, topic_factory, tmp_path, calls_dir, caplog) -> None:
    source = topic_factory()
    declined = f"{source}-declined"
    produce(kafka_bootstrap, source, [(b"k0", b"m0", None), (b"k1", b"declined", None), (b"k2", b"m2", None)])
    s = _settings(kafka_bootstrap, source, tmp_path, policy={
        "retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s"},
        "queueDisable": {"consecutiveBatchFailures": 3},
        "routes": [{"errors": [PAYMENT], "disposition": "Reject", "topic": declined}]})

    def delete_route_topic(consumer) -> None:
        # After the start created it; the dev broker creates no topic on a write.
        for fut in kafka_admin.delete_topics([declined]).values():
            fut.result(timeout=30)

    caplog.set_level(logging.INFO, logger="antidote.consumer")
    code, _ = cu.run(spark, s, retry_sleep=0.1, deadline=90, recovered=delete_route_topic)

    # The retry batch's settle is refused 3 times without its handler running again: (0 + 1)
    # x (1 + 1) = 2 calls, then the queue is disabled, naming the route's topic.
    assert code == ExitCode.CONSECUTIVE_BATCH_FAILURES
    assert cu.calls(calls_dir, source)[f"{source}/0/1"] == 2
    state = _ledger(kafka_bootstrap, s)
    assert state.disabled == "ConsecutiveBatchFailures" and state.counts["rejected"] == 0
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("queue disabled")]
    assert f"{declined}: " in line and "Unknown topic" in line, line

    # A resume's start creates the topic again, and the outcome is written once.
    code, _ = cu.run(spark, cu.resumed(s))
    assert code == ExitCode.OK
    assert list(cu.quarantined(kafka_bootstrap, declined)) == [(0, 1)]
    assert _ledger(kafka_bootstrap, s).counts["rejected"] == 1
