"""A ledger commit whose result is unknown (issue 43, item 2): it timed out, and may still land
when the next producer's init_transactions finishes it. Real broker: the commit is made to time
out for real by a commit timeout shorter than the broker's answer (COMMIT_TIMEOUT_S, set in
this process), not by a stand-in; the shared broker is never paused."""

from __future__ import annotations

import copy

from confluent_kafka import KafkaException

from antidote_consumer.driver.ledger import Ledger, LedgerState, load_state
from antidote_consumer.kafka import transactions

RETRY = "t.retry-1:0"
SOURCE = "t:0"
# Commit timeouts tried, shortest first: long enough for the records to leave, too short for
# the coordinator's answer, is where a commit times out and lands. Which one does depends on
# the machine's load, so each is tried a few times.
TIMEOUTS = [0.002, 0.005, 0.01, 0.02, 0.04, 0.08] * 4


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
