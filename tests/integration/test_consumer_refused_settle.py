"""A settle the broker keeps refusing (issue 43, item 3): the poison topic's max.message.bytes
lowered below its record after the consumer started. Real broker, real local Spark."""

from __future__ import annotations

import logging
import threading
import uuid

import pytest
from antidote_api.wire import ExitCode
from antidote_consumer.driver.consumer import Consumer
from antidote_consumer.driver.metrics import Metrics

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all
from .test_consumer_edges import _ledger, _set_topic_config

THRESHOLD = 3  # queueDisable.consecutiveBatchFailures


def unique_name() -> str:
    """A consumer name of this test's own: the transactional id (antidote/tests/<name>) is
    the broker's, and a test beside this one on the same broker with the same name would
    fence it."""
    return f"c-{uuid.uuid4().hex[:8]}"


def run_continuously(spark, s, recovered, stop_after: float):
    """`antidote consumer` without --until-idle, in this process: (exit code, its Metrics);
    stopped as by SIGTERM after `stop_after` seconds if it has not stopped by itself."""
    metrics = Metrics(s.namespace, s.consumer)
    consumer = Consumer(s, spark, metrics, trigger_interval=0.2)
    consumer.runtime.retry_sleep = 0.1
    timer = threading.Timer(stop_after, consumer.request_stop)
    timer.daemon = True
    timer.start()
    try:
        return consumer.run(recovered=lambda: recovered(consumer)), metrics
    finally:
        timer.cancel()


# How the poison topic refuses, and the broker's (or client's) words for it.
# (deleted: "Broker: Unknown topic or partition" first, then the client's own "Local: Unknown
# topic" once its metadata knows the topic is gone)
REFUSALS = {"too-small": "Message size too large", "deleted": "Unknown topic"}


@pytest.mark.parametrize(("mode", "refusal"), [("continuous", "too-small"), ("until-idle", "too-small"),
                                               ("continuous", "deleted")])
def test_a_poison_topic_that_refuses_writes_disables_the_queue_within_the_attempt_bound(
        mode, refusal, spark, kafka_bootstrap, kafka_admin, topic_factory, tmp_path, calls_dir, caplog) -> None:
    source = topic_factory()
    s = cu.settings(kafka_bootstrap, source, tmp_path, name=unique_name(), policy={
        "retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s"},
        "queueDisable": {"consecutiveBatchFailures": THRESHOLD}})
    produce(kafka_bootstrap, source, [(b"k0", b"m0", None), (b"k1", b"poison", None),
                                      (b"k2", b"m2", None)])

    def refuse(consumer) -> None:
        # After the start, when the consumer has made its topics and read their limits
        # (outcomes.fitted); the retry topic still takes the first failure, and the retry
        # pump's settle of the second is refused.
        if refusal == "too-small":  # the poison record (its headers alone ~1 kB) no longer fits
            _set_topic_config(kafka_admin, s.topics.poison, "max.message.bytes", "200")
        else:  # the dev broker does not create topics on a write (auto.create.topics.enable=false)
            for fut in kafka_admin.delete_topics([s.topics.poison]).values():
                fut.result(timeout=30)

    caplog.set_level(logging.INFO, logger="antidote.consumer")
    if mode == "continuous":
        # As a Deployment runs it: until the queue is disabled (before: stopped after a minute
        # of running the retry batch again every ~2 s).
        code, m = run_continuously(spark, s, refuse, stop_after=60)
    else:
        # Before: the refusal ended the process, whose restart ran the retry batch again.
        code, m = cu.run(spark, s, retry_sleep=0.1, deadline=90, recovered=refuse)
    calls = cu.calls(calls_dir, source)

    # (immediate + 1) x (cycles + 1) = 2 calls, the refused settles included.
    assert calls[f"{source}/0/1"] == 2, f"the poison message was called {calls[f'{source}/0/1']} times"
    assert code == ExitCode.CONSECUTIVE_BATCH_FAILURES
    state = _ledger(kafka_bootstrap, s)
    assert state.disabled == "ConsecutiveBatchFailures" and state.consecutive_failures == THRESHOLD
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("queue disabled")]
    assert f"{s.topics.poison}: " in line and REFUSALS[refusal] in line, line
    if refusal == "too-small":
        assert read_all(kafka_bootstrap, s.topics.poison) == []
    assert cu.metric(m, "antidote_batch_failures_total") == THRESHOLD
    assert (state.counts["processed"], state.counts["retried"], state.counts["moved"]) == (2, 1, 0)

    # The topic fixed, a resume writes the outcome once; the retry batch, never committed,
    # runs its handler once more (the one call a resume costs).
    if refusal == "too-small":
        _set_topic_config(kafka_admin, s.topics.poison, "max.message.bytes", "1048588")
    # (deleted: the consumer's start creates it again, as any missing derived topic)
    code, m = cu.run(spark, cu.resumed(s))

    assert code == ExitCode.OK
    assert list(cu.quarantined(kafka_bootstrap, s.topics.poison)) == [(0, 1)]
    assert cu.calls(calls_dir, source)[f"{source}/0/1"] == 3
    state = _ledger(kafka_bootstrap, s)
    assert (state.disabled, state.consecutive_failures, state.counts["moved"]) == (None, 0, 1)
