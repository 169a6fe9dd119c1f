"""A ledger commit whose result is unknown (issue 43, item 2): it timed out, and may still land
when the next producer's init_transactions finishes it. Real broker: the commit is made to time
out for real, by a commit timeout (COMMIT_TIMEOUT_S, set in this process) shorter than the
coordinator's answer; its records are delivered before it (DELIVERY_TIMEOUT_S is not
shortened), so the commit request has left and lands. The shared broker is never paused."""

from __future__ import annotations

import copy
import time
import uuid

from confluent_kafka import KafkaException

from antidote_consumer.driver.consumer import Consumer
from antidote_consumer.driver.ledger import Ledger, LedgerState, load_state
from antidote_consumer.driver.metrics import Metrics
from antidote_consumer.kafka import headers as h
from antidote_consumer.kafka import transactions

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce

RETRY = "t.retry-1:0"
SOURCE = "t:0"
# Commit timeouts tried: far below the coordinator's answer (~1 ms on the dev stack), so nearly
# every try times out with its commit in flight; the tries that commit in time are passed over.
TIMEOUTS = [0.0001, 0.0002] * 6


def unique_name() -> str:
    """A consumer name of this test's own: the transactional id (antidote/tests/<name>) is
    the broker's, and a test beside this one on the same broker with the same name would
    fence it."""
    return f"c-{uuid.uuid4().hex[:8]}"


def test_a_ledger_commit_that_timed_out_and_landed_is_read_again_and_no_position_goes_back(
        kafka_bootstrap, topic_factory, monkeypatch) -> None:
    topic = topic_factory("-ledger", config={"cleanup.policy": "compact"})
    led = Ledger(kafka_bootstrap, topic, transactional_id=f"{topic}-tid")
    led.load()
    led.commit(LedgerState(positions={RETRY: 0, SOURCE: 0}))
    landed = aborted = 0
    try:
        for i, timeout in enumerate(TIMEOUTS):
            # The next retry batch settled: its records' positions advanced, one more retried.
            settled = copy.deepcopy(led.state)
            settled.positions[RETRY] += 10
            settled.counts["retried"] += 1
            monkeypatch.setattr(transactions, "COMMIT_TIMEOUT_S", timeout)
            try:
                led.commit(settled)
                continue  # committed in time: not the case under test
            except KafkaException:
                pass  # in doubt
            finally:
                monkeypatch.setattr(transactions, "COMMIT_TIMEOUT_S", 60.0)

            # What the consumer decides from next (the retry pump's plan reads the positions)
            # is what Kafka holds once the commit ended, whichever way it ended.
            seen = led.state
            kafka = load_state(kafka_bootstrap, topic)
            assert seen.entries() == kafka.entries(), f"round {i}: the ledger in memory is not Kafka's"
            if kafka.positions[RETRY] == settled.positions[RETRY]:
                landed += 1  # the settled retry records are not read again
            else:
                aborted += 1
            # A later settle (a source batch's) keeps the retry position where Kafka has it.
            later = copy.deepcopy(led.state)
            later.positions[SOURCE] = i + 1
            led.commit(later)
            after = load_state(kafka_bootstrap, topic)
            assert after.positions[RETRY] == kafka.positions[RETRY], f"round {i}: a position went back"
            if landed >= 2:
                break
    finally:
        led.close()
    # The case under test happened at least once (and aborted ones, if any, were handled too).
    assert landed >= 1, f"no commit timed out and landed in {len(TIMEOUTS)} tries ({aborted} aborted)"


def test_a_retry_batch_whose_commit_timed_out_and_landed_is_not_settled_again(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir, monkeypatch) -> None:
    """The retry pump's own rounds (Consumer.pump_once, as its loop calls them): a round's
    settle times out for real; the next round must plan from what Kafka holds. Before, it
    planned from the copy in memory and ran the records of a settle that had landed again:
    their handler a second time, their poison record twice."""
    source = topic_factory()
    s = cu.settings(kafka_bootstrap, source, tmp_path, name=unique_name(), policy={
        "retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s"}})
    consumer = Consumer(s, spark, Metrics(s.namespace, s.consumer))
    consumer.runtime.recover()
    retry = s.topics.retry[0]
    landed = aborted = 0
    try:
        for i, timeout in enumerate(TIMEOUTS):
            # A message parked in the last cycle, due now: it fails (b"poison") and is moved.
            hdrs = h.failure_headers(origin=h.Origin(source, 0, i, 0), attempts=1, cycle=1,
                                     first_failure=0, last_failure=0, reason=None, error_class="E",
                                     error_message="x", stack=None, consumer=consumer.runtime.consumer_id,
                                     policy="p", due=0)
            produce(kafka_bootstrap, retry, [(b"k%d" % i, b"poison-%d" % i, hdrs)])
            give_up = time.monotonic() + 60
            while cu.calls(calls_dir, source)[f"{source}/0/{i}"] == 0:
                assert time.monotonic() < give_up, f"round {i}: the parked record was never run"
                monkeypatch.setattr(transactions, "COMMIT_TIMEOUT_S", timeout)
                try:
                    n, _due = consumer.pump_once()
                    doubt = False
                except KafkaException:
                    doubt = True
                finally:
                    monkeypatch.setattr(transactions, "COMMIT_TIMEOUT_S", 60.0)
            if not doubt:
                continue  # committed in time (or not yet read): not the case under test
            # The next round, as the pump loop runs it after a failed one.
            n, _due = consumer.pump_once()
            calls = cu.calls(calls_dir, source)[f"{source}/0/{i}"]
            if n == 0:
                landed += 1
                assert calls == 1, f"round {i}: a settle that landed ran its handler again"
            else:
                aborted += 1
                assert calls == 2  # the commit was aborted: the pass runs again, once
            cu.quarantined(kafka_bootstrap, s.topics.poison)  # fails on a record quarantined twice
            if landed >= 2:
                break
    finally:
        consumer._close_clients()
    assert landed >= 1, f"no commit timed out and landed in {len(TIMEOUTS)} tries ({aborted} aborted)"
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert load_state(kafka_bootstrap, consumer.runtime.ledger.topic).counts["moved"] == len(poison)
