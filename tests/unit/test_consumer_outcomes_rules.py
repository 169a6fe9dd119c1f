"""The two pure rules a batch meets before it is written (driver.systemic, driver.outcomes):
the systemic-failure window, Fault, and the records and ledger state of a settled batch."""

from __future__ import annotations

import pytest

from antidote_api import PoisonPolicySpec, QueueConsumerSpec, resolve
from antidote_api.conditions import DisableReason
from antidote_api.policy import QueueDisable
from antidote_consumer.driver.disabled import QueueDisabled
from antidote_consumer.driver.frames import BatchResult
from antidote_consumer.driver.ledger import LedgerState
from antidote_consumer.driver.outcomes import TOO_LARGE, Targets, fault_stop, settlement
from antidote_consumer.driver.systemic import SystemicRule
from antidote_consumer.kafka import headers as h
from antidote_consumer.worker.executor import RESULT_FIELDS, ResultRow
from antidote_consumer.worker.verdict import Verdict

from ..api_cases import valid_consumer

NOW = 1_750_000_000_000


def rule(**failure_ratio) -> SystemicRule:
    return SystemicRule.of(QueueDisable.model_validate({"failureRatio": failure_ratio}))


def test_the_window_trips_only_with_enough_messages_and_a_share_at_the_threshold() -> None:
    r = rule(threshold=0.5, minMessages=10, window="1m")
    assert not r.tripped(failed=5, total=5, now=0.0)  # 5 messages: too few to judge
    assert r.tripped(failed=0, total=5, now=1.0)  # 5 of 10 failed: at the threshold
    assert not r.tripped(failed=0, total=20, now=2.0)  # 5 of 30


def test_batches_older_than_the_window_leave_it() -> None:
    r = rule(threshold=0.5, minMessages=10, window="1m")
    assert not r.tripped(failed=9, total=9, now=0.0)
    assert not r.tripped(failed=9, total=9, now=61.0)  # the first 9 are out: 9 < minMessages
    assert r.tripped(failed=1, total=1, now=62.0)  # 10 of 10 within the minute


def test_a_disabled_queue_disable_never_trips_and_the_stop_names_the_figures() -> None:
    off = SystemicRule.of(QueueDisable.model_validate({"enabled": False}))
    assert not off.tripped(failed=1000, total=1000, now=0.0) and not off.window
    err = rule(threshold=0.5).disabled(failed=7, total=9)
    assert err.reason is DisableReason.SYSTEMIC_FAILURE and "7 of 9 messages failed" in err.message


def settings(**policy):
    spec = QueueConsumerSpec.model_validate(valid_consumer()["spec"])
    pol = PoisonPolicySpec.model_validate({"retries": {"immediate": 0, "cycles": 2, "cycleDelay": "10s"},
                                           **policy})
    return resolve(spec, pol, name="c", namespace="shop")


def row(kind: Verdict, offset: int, **fields) -> ResultRow:
    base = dict.fromkeys(RESULT_FIELDS)
    base.update(kind=kind.value, key=b"k", value=b"v", headers=[("user", b"1")], otopic="orders",
                opartition=1, ooffset=offset, ots=NOW - 5, topic="orders", partition=1, offset=offset,
                attempts=1, cycle=0, reason="max-attempts", error_class="ValueError",
                error_message="bad", stack=None, first_failure=NOW - 2, last_failure=NOW - 1)
    base.update(fields)
    return ResultRow(**base)


def targets(s, max_bytes=None) -> Targets:
    return Targets(s, partitions=3, max_bytes=max_bytes or {}, consumer_id="shop/c")


def test_a_retry_is_parked_in_its_cycles_topic_due_after_the_cycles_delay() -> None:
    s = settings()
    result = BatchResult(failures=[row(Verdict.RETRY, 7)], n_ok=4, n_attempts=5,
                         ends={("orders", 1): 9})
    done = settlement(targets(s), LedgerState(), result, [], batch_id=3, positions=None, now=NOW)
    [(topic, partition, key, value, hdrs, ts)] = done.records
    assert (topic, partition, key, value, ts) == ("orders.retry-1", 1, b"k", b"v", NOW)
    assert dict(hdrs)[h.DUE] == str(NOW + 10_000).encode() and ("user", b"1") in hdrs
    assert done.dues == [NOW + 10_000] and done.scheduled == {1: 1} and done.retried == 1
    st = done.state
    assert (st.counts["processed"], st.counts["retried"], st.attempts) == (4, 1, 5)
    assert st.positions == {"orders:1": 10} and st.committed_batch == 3 and not st.in_batch


def test_a_final_failure_gets_the_disposition_and_counts_under_it() -> None:
    s = settings(disposition="Reject")
    result = BatchResult(failures=[row(Verdict.FINAL, 7, cycle=2)], n_attempts=1)
    done = settlement(targets(s), LedgerState(), result, [], batch_id=None, positions=None, now=NOW)
    [(topic, _p, _k, _v, hdrs)] = done.records
    assert topic == "orders.dlq" and dict(hdrs)[h.REASON] == b"max-attempts"
    assert done.state.counts["rejected"] == 1 and done.poisoned[0][:2] == ("max-attempts", "ValueError")
    dropped = settlement(targets(settings(disposition="Drop")), LedgerState(), result, [], None, None, NOW)
    assert dropped.records == [] and dropped.state.counts["dropped"] == 1


def test_held_rows_are_parked_behind_their_key_and_overflow_is_moved_whatever_the_disposition() -> None:
    s = settings(disposition="Drop")
    result = BatchResult(failures=[row(Verdict.HELD, 8, cycle=1, last_failure=NOW + 99),
                                   row(Verdict.OVERFLOW, 9, reason="held-overflow")])
    done = settlement(targets(s), LedgerState(), result, [], None, None, NOW)
    held, overflow = done.records
    assert held[0] == "orders.retry-1" and (h.HELD, b"1") in held[4] and held[5] == NOW
    assert overflow[0] == "orders.poison" and done.overflowed[0].offset == 9
    assert done.dues == [NOW + 99] and done.state.counts["moved"] == 1 and not done.poisoned


def test_fault_stops_at_the_first_final_message_and_nothing_stops_another_disposition() -> None:
    result = BatchResult(failures=[row(Verdict.RETRY, 3), row(Verdict.FINAL, 5), row(Verdict.FINAL, 6)])
    err, origin = fault_stop(settings(disposition="Fault"), result, [])
    assert err.reason is DisableReason.FAULT and "orders/1/5" in err.message and origin.offset == 5
    assert fault_stop(settings(disposition="Move"), result, []) is None
    assert fault_stop(settings(disposition="Fault"), BatchResult(failures=[row(Verdict.RETRY, 3)]), []) is None


def test_a_record_that_cannot_fit_its_topic_stops_the_consumer_at_it() -> None:
    s = settings()
    big = row(Verdict.FINAL, 4, value=b"x" * 5000)
    with pytest.raises(QueueDisabled) as err:
        settlement(targets(s, {"orders.poison": 1000}), LedgerState(), BatchResult(failures=[big]),
                   [], None, None, NOW)
    assert err.value.reason is DisableReason.FAULT and err.value.at["reason"] == TOO_LARGE
    assert "orders/1/4" in err.value.message and "orders.poison" in err.value.message
