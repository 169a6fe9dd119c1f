"""Retries a task settles itself (worker.task_settle): the record it writes is the driver's,
the breaker's answer decides, and what the driver counts from the task's rows and from a
replay's entry. The pure parts; the stack's tests kill the processes around it."""

from __future__ import annotations

import json
import types

import pytest

from antidote_consumer.driver.frames import BatchResult, batch_result
from antidote_consumer.driver.ledger import LedgerState
from antidote_consumer.driver.live_breaker import LiveBreaker
from antidote_consumer.worker.outcome_records import retry_bound_ms, retry_record
from antidote_consumer.driver.outcomes import Targets, disposition, settlement
from antidote_consumer.driver.worker_config import task_settle
from antidote_consumer.kafka import headers as h
from antidote_consumer.kafka.sink_entries import SinkEntry
from antidote_consumer.worker.executor import RESULT_FIELDS, ResultRow
from antidote_consumer.worker.result_rows import columns, summary
from antidote_consumer.worker.sink_txn import ExactlyOnce, PartitionSink
from antidote_consumer.worker.task_settle import (NO, STOP, YES, Candidate, Final, Held, Tally, candidate,
                                                  final_candidate)
from antidote_consumer.worker.task_sinks import TaskSinks

from antidote_api import PoisonPolicySpec, QueueConsumerSpec, resolve

from ..api_cases import valid_consumer
from .test_consumer_outcomes_rules import NOW, rule, targets

ORIGIN = h.Origin("orders", 1, 7, NOW - 5)


def settings(**policy):
    """A consumer with an exactly-once Kafka sink (the default delivery) and two retry cycles."""
    spec = QueueConsumerSpec.model_validate({**valid_consumer()["spec"], "sink": {"kafka": {"topic": "out"}}})
    pol = PoisonPolicySpec.model_validate({"retries": {"immediate": 0, "cycles": 2, "cycleDelay": "10s",
                                                       "maxCycleDelay": "30s"}, **policy})
    return resolve(spec, pol, name="c", namespace="shop")


def _live(enabled: bool = True, url: str | None = "http://driver:1/attempts"):
    return types.SimpleNamespace(rule=types.SimpleNamespace(enabled=enabled), url=url)


def _candidate(c, offset=7, retry_after=None, value=b"v", cycle=0, stack="trace") -> Candidate | None:
    return candidate(c, offset, ("row", offset), key=b"k", value=value, user=[("user", b"1")], origin=ORIGIN,
                     attempts=2, cycle=cycle, first_failure=NOW - 2, now=NOW, error_class="ValueError",
                     error_message="bad", stack=stack, retry_after=retry_after)


def test_the_tasks_retry_record_is_the_one_the_drivers_settle_writes() -> None:
    s = settings()
    c = task_settle(s, 3, {}, _live())
    assert c is not None and c.ask
    got = _candidate(c, retry_after=60_000)
    common = dict(origin=ORIGIN, attempts=2, first_failure=NOW - 2, last_failure=NOW, error_class="ValueError",
                  error_message="bad", stack="trace", consumer="shop/c", policy=s.policy)
    want = retry_record(s, cycle=0, retry_after=60_000, now=NOW, bound=retry_bound_ms(s),
                        user=[("user", b"1")], common=common)
    assert got is not None
    assert got.record == (want.topic, 1, b"k", b"v", want.headers, NOW)
    assert (got.cycle, got.due, got.capped) == (want.cycle, want.due, want.capped)


def test_a_record_too_large_for_its_retry_topic_is_left_to_the_driver() -> None:
    c = task_settle(settings(), 3, {"orders.retry-1": 2000, "orders.poison": 10, "other": 5}, _live())
    assert c is not None and dict(c.max_bytes) == {"orders.retry-1": 2000, "orders.poison": 10}  # the derived
    assert _candidate(c, value=b"x" * 5000) is None
    fitted = _candidate(c, value=b"x" * 1000, stack="frame\n" * 500)  # its stack is shortened
    assert fitted is not None and h.record_size(b"k", fitted.record[3], fitted.record[4]) <= 2000


def test_no_task_settles_without_an_exactly_once_sink_with_ordering_key_or_with_a_breaker_it_cannot_ask() -> None:
    s = settings()
    assert task_settle(s, 3, {}, _live(url=None)) is None  # the breaker's endpoint did not start
    off = task_settle(s, 3, {}, _live(enabled=False, url=None))
    assert off is not None and not off.ask  # no breaker: nothing to ask
    assert task_settle(s.model_copy(update={"ordering": "Key"}), 3, {}, _live()) is None
    assert task_settle(s.model_copy(update={"sink": None}), 3, {}, _live()) is None


def test_a_retry_from_a_retry_topic_is_parked_for_the_next_cycle() -> None:
    c = task_settle(settings(), 3, {}, _live())
    assert c is not None
    assert (c.cycle_of("orders"), c.cycle_of("orders.retry-1")) == (1, 2)
    later = _candidate(c, cycle=1)
    assert later is not None and later.record[0] == "orders.retry-2" and later.cycle == 2


@pytest.mark.parametrize("answer", [YES, NO, "", STOP])
def test_the_chunks_candidates_are_written_only_on_yes_else_their_rows_go_to_the_driver(answer) -> None:
    c = task_settle(settings(), 3, {}, _live())
    rows: list = []
    held = Held(lambda: answer, rows, Tally())
    held.waiting = [_candidate(c, 7), _candidate(c, 9)]
    if answer == STOP:
        with pytest.raises(RuntimeError, match="breaker tripped"):
            held.decide(False)
        return
    settled = held.decide(False)
    assert not held.waiting
    if answer == YES:
        assert [x.offset for x in settled] == [7, 9] and rows == [] and held.tally.by_cycle == {1: 2}
    else:
        assert settled == [] and rows == [("row", 7), ("row", 9)] and held.tally.by_cycle == {}


def test_a_chunk_stopped_at_a_fault_settles_none_of_its_failures() -> None:
    c = task_settle(settings(), 3, {}, _live())
    rows: list = []
    held = Held(None, rows, Tally())  # no breaker: yes
    held.waiting = [_candidate(c, 7)]
    assert held.decide(True) == [] and rows == [("row", 7)]


def test_the_entry_says_what_the_task_settled_and_keeps_what_a_crashed_run_did() -> None:
    e = SinkEntry(20, frozenset({3}), frozenset({4, 5, 6, 9}))
    assert e.to_json() == {"next": 20, "pending": [[3, 3]], "retried": [[4, 6], [9, 9]]}
    assert SinkEntry.from_json(json.loads(json.dumps(e.to_json()))) == e
    assert SinkEntry(5).to_json() == {"next": 5, "pending": []}  # the old form, when nothing was settled
    assert e.covers(4) and not e.covers(3)
    eos = ExactlyOnce("ledger", "w", entries=(("src:0", 2, json.dumps(e.to_json())),), fresh=frozenset({"src:0"}))
    part = PartitionSink.open(eos, {}, "src", 0, False)
    assert part.carried == e and part.retried == {4, 5, 6, 9}
    part.retried.add(12)  # settled by this replay
    part.final["max-attempts/Move"] = {14}
    assert part.entry(15) == SinkEntry(20, frozenset({3}), frozenset({4, 5, 6, 9, 12}),
                                       (("max-attempts/Move", frozenset({14})),))
    again = SinkEntry.from_json(json.loads(json.dumps(part.entry(15).to_json())))
    assert again.settled_as(12) == "retried" and again.settled_as(14) == "max-attempts/Move"
    assert again.settled_as(15) is None and again.covers(14)


def test_the_driver_counts_the_settled_retries_it_is_told_of() -> None:
    tally = Tally()
    for cycle, due in ((1, NOW + 50), (1, NOW + 10), (2, NOW + 99)):
        tally.add(cycle, due, capped=cycle == 2)
    cols = summary(RESULT_FIELDS, n_ok=5, n_attempts=9, largest=0, ends={("orders", 1): 20}, chains=[],
                   waiting={}, settled=tally)
    rows = [ResultRow(**dict(zip(RESULT_FIELDS, r))) for r in zip(*(cols[f] for f in RESULT_FIELDS))]
    result = batch_result(rows)
    assert result.settled == {1: 2, 2: 1} and result.settled_due == NOW + 10 and result.settled_capped == 1
    assert result.n_ok == 5 and result.ends == {("orders", 1): 20}
    merged = BatchResult().merge(result).merge(result)
    assert merged.settled == {1: 4, 2: 2} and merged.settled_due == NOW + 10 and merged.settled_capped == 2
    done = settlement(targets(settings()), LedgerState(), result, [], batch_id=3, positions=None, now=NOW)
    assert done.records == [] and done.retried == 3 and done.scheduled == {1: 2, 2: 1}
    assert done.dues == [NOW + 10] and done.capped == 1
    assert (done.state.counts["retried"], done.state.counts["processed"]) == (3, 5)
    assert done.state.positions == {"orders:1": 21}


def test_the_result_columns_keep_their_rows_whole() -> None:
    out = [tuple(range(len(RESULT_FIELDS)))]
    assert columns(out, RESULT_FIELDS)["kind"] == [0] and out == []


def test_the_breaker_says_yes_only_with_min_messages_behind_it_and_stop_once_it_tripped() -> None:
    breaker = LiveBreaker(rule(threshold=0.5, minMessages=10, window="1m"), clock=lambda: 100.0)
    breaker.url = "http://x/attempts"  # begin needs an endpoint; its server is not the point here
    run = breaker.begin(lambda: None)
    body = dict(secret=breaker.secret, run=run, task=[0, 0], done=False)
    assert breaker.ask({**body, "seq": 1, "failed": 1, "judged": 5}) == NO  # 5 judged: too few
    assert breaker.ask({**body, "seq": 2, "failed": 1, "judged": 12}) == YES
    assert breaker.ask({**body, "secret": "other", "seq": 3, "failed": 1, "judged": 12}) is None
    assert breaker.ask({**body, "run": "ended", "seq": 3, "failed": 1, "judged": 12}) == NO
    assert breaker.ask({**body, "seq": 4, "failed": 9, "judged": 14}) == STOP  # this report trips it
    assert breaker.tripped is not None
    assert breaker.ask({**body, "seq": 5, "failed": 9, "judged": 14}) == STOP


def _final(c, route=None, reason="max-attempts", value=b"v"):
    return final_candidate(c, 7, ("row", 7), key=b"k", value=value, user=[("user", b"1")], origin=ORIGIN,
                           attempts=3, cycle=2, first_failure=NOW - 2, now=NOW, reason=reason,
                           error_class="ValueError", error_message="bad", stack="trace", route=route,
                           signal=reason != "validation")


@pytest.mark.parametrize("policy", [{"disposition": "Move"}, {"disposition": "Reject"}, {
    "routes": [{"errors": ["builtins.ValueError"], "disposition": "Reject", "topic": "orders.bad"}]}])
def test_the_tasks_disposition_record_is_the_one_the_drivers_settle_writes(policy) -> None:
    s = settings(**policy)
    c = task_settle(s, 3, {}, _live())
    route = 0 if s.routes else None
    got = _final(c, route=route)
    common = dict(origin=ORIGIN, attempts=3, first_failure=NOW - 2, last_failure=NOW, error_class="ValueError",
                  error_message="bad", stack="trace", consumer="shop/c", policy=s.policy)
    [want] = disposition(Targets(s, 3, {}, "shop/c"), b"k", b"v", [("user", b"1")], 2, "max-attempts", common,
                         {}, route)
    assert got is not None and got.record == (*want, NOW)
    assert got.final.disposition == (s.routes[0].disposition if s.routes else s.disposition)


def test_finals_the_driver_reshapes_or_stops_at_are_left_to_it_and_drop_writes_nothing() -> None:
    assert _final(task_settle(settings(disposition="Fault"), 3, {}, _live())) is None
    redacting = settings(quarantine={"payload": "Drop"})
    assert _final(task_settle(redacting, 3, {}, _live())) is None  # its redaction is the driver's
    dropped = _final(task_settle(settings(disposition="Drop"), 3, {}, _live()))
    assert dropped is not None and dropped.record is None and dropped.final.disposition == "Drop"
    assert _final(task_settle(settings(), 3, {"orders.poison": 600}, _live()), value=b"x" * 5000) is None


def test_the_driver_counts_and_reports_the_settled_finals_and_a_replay_counts_them_again() -> None:
    tally = Tally()
    tally.add_final(Final("max-attempts", "Move", "ValueError", ORIGIN, True))
    tally.add_final(Final("validation", "Move", "antidote.ValidationError", ORIGIN, False))
    tally.add_final(Final("max-attempts", "Move", "KeyError", ORIGIN._replace(offset=9), True))
    cols = summary(RESULT_FIELDS, n_ok=5, n_attempts=9, largest=0, ends={}, chains=[], waiting={}, settled=tally)
    rows = [ResultRow(**dict(zip(RESULT_FIELDS, r))) for r in zip(*(cols[f] for f in RESULT_FIELDS))]
    result = batch_result(rows)
    assert result.settled_finals == {("max-attempts", "Move"): [2, 2], ("validation", "Move"): [1, 0]}
    assert result.settled_last == ("max-attempts", "KeyError", ORIGIN._replace(offset=9), "Move")
    assert result.n_failed == 3 and result.n_ok == 5
    done = settlement(targets(settings()), LedgerState(), result, [], batch_id=3, positions=None, now=NOW)
    assert done.records == [] and done.state.counts["moved"] == 3 and done.poisoned == []
    sinks = TaskSinks(ExactlyOnce("ledger", "w"), {}, False, task_settle(settings(), 3, {}, _live()))
    sinks.passed("orders", "max-attempts/Reject", NOW)
    sinks.passed("orders.retry-1", "retried", NOW)
    assert sinks.tally.finals == {("max-attempts", "Reject"): [1, 1]} and sinks.tally.by_cycle == {2: 1}
    assert sinks.tally.last is None  # a replay knows no origin for the gauge


def test_a_run_whose_outputs_come_back_settles_nothing_but_counts_a_replayed_retry_under_its_cycle() -> None:
    c = task_settle(settings(), 3, {}, _live())
    sinks = TaskSinks(ExactlyOnce("ledger", "w"), {}, False, c)
    part = sinks.moved_to(None, None, "orders.retry-1", 0)  # done_below None: its outputs come back
    assert part.held is None
    sinks.passed("orders.retry-1", "retried", NOW)
    assert sinks.tally.by_cycle == {2: 1}
