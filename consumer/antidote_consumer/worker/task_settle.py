"""Failed messages settled by the task that failed them (docs/consumer.md, "Failures settled
by the task"): with an exactly-once Kafka sink, a failed message's retry record, or a final
one's disposition record (poison, dead-letter, a route's topic; none for Drop), is written in
its partition's chunk transaction, beside the outputs and the entry that says it is settled,
instead of crossing to the driver as a result row. The driver then sees counts ("settled"
rows), not a row per failure.

A chunk's records are written only when the driver's live breaker says yes for them
(driver.live_breaker: the rule does not trip over the window and the batch so far, with at
least minMessages judged behind the judgement); any other answer, or none, leaves them to the
driver as before: their rows go back, their offsets stay pending. So does every failure this
module does not take: those of ordering Key, a record that cannot fit its topic, a final
failure whose disposition is Fault or whose quarantine the driver must shape (redaction,
native headers), a chunk stopped in at a Fault, and every run whose outputs come back to the driver (the
local worker, a bisection's segments). Pure but for the ask."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from antidote_consumer.kafka import headers as h

from .chosen import signal_of
from .outcome_records import parked, quarantine_topic, quarantined

# What the breaker answers a task that asks to settle a chunk's failures (attempt_reports.ask).
YES, NO, STOP = "yes", "no", "stop"
# The result row of a task's settled failures: one per retry cycle (cycle; n in n_ok; the
# earliest due time in last_failure; the Retry(after=...) capped to the bound in
# retry_after), and one per (reason, disposition) of final ones (n in n_ok; the last one's
# error class and origin, for the last-poison gauge).
SETTLED = "settled"
RETRIED = "retried"  # the entry's key for the offsets settled as retries


@dataclass(frozen=True)
class TaskSettle:
    """What a task needs to write its failures' records (WorkerConfig.settle; built by
    driver.worker_config.task_settle from the settings the driver's settle uses)."""

    retry_topics: tuple[str, ...]
    delays_ms: tuple[int, ...]  # each cycle's delay
    bound_ms: int | None  # the longest Retry(after=...) (semantics.retry_after_bound)
    partitions: int  # of the source topic, and so of every derived topic
    max_bytes: tuple[tuple[str, int], ...]  # max.message.bytes of the derived topics known
    consumer: str  # namespace/name: antidote.consumer
    policy: str
    ask: bool  # the breaker is on: a chunk's records are written only once it says yes
    # Final failures too (False: the driver shapes their records: redaction, native headers):
    # the policy's disposition and topics, and each route's (disposition, topic or None).
    finals: bool = False
    disposition: str = "Move"
    poison_topic: str = ""
    dlq_topic: str = ""
    routes: tuple[tuple[str, str | None], ...] = ()

    def cycle_of(self, topic: str) -> int:
        """The retry cycle a failure of a record read from `topic` is parked for."""
        return self.retry_topics.index(topic) + 2 if topic in self.retry_topics else 1

    def limit(self, topic: str) -> int | None:
        return dict(self.max_bytes).get(topic)


class Final(NamedTuple):
    """What the driver reports of a settled final failure (metrics, the last-poison gauge)."""

    reason: str
    disposition: str
    error_class: str | None
    origin: h.Origin | None  # None: passed over by a replay (not known there)
    signal: bool  # counts toward queueDisable.failureRatio (worker.chosen.systemic_signal)


class Candidate(NamedTuple):
    """A failed message's record, waiting for its chunk's answer; `row` is the result row the
    driver gets instead when the answer is not yes."""

    offset: int
    row: tuple
    record: tuple | None  # (topic, partition, key, value, headers, timestamp ms); None: Drop
    cycle: int  # a retry's cycle (0: a final failure)
    due: int
    capped: bool
    final: Final | None = None


def candidate(c: TaskSettle, offset: int, row: tuple, *, key, value, user: list, origin: h.Origin,
              attempts: int, cycle: int, first_failure: int, now: int, error_class, error_message,
              stack, retry_after: int | None) -> Candidate | None:
    """The retry record of a message that failed cycle `cycle` with attempts left, as the
    driver's settle would write it (outcome_records.parked), timestamped `now` (the retry
    pump plans from timestamps); None when it cannot fit its topic (the driver decides: a
    stop at it)."""
    common = _common(c, origin, attempts, first_failure, now, error_class, error_message, stack)
    rec = parked(c.retry_topics[cycle], c.delays_ms[cycle], c.bound_ms, cycle=cycle, retry_after=retry_after,
                 now=now, user=user, common=common)
    fitted = _fitted(c, rec.topic, key, value, rec.headers)
    if fitted is None:
        return None
    return Candidate(offset, row, (rec.topic, origin.partition % c.partitions, key, value, fitted, now),
                     rec.cycle, rec.due, rec.capped)


def final_candidate(c: TaskSettle, offset: int, row: tuple, *, key, value, user: list, origin: h.Origin,
                    attempts: int, cycle: int, first_failure: int, now: int, reason: str, error_class,
                    error_message, stack, route: int | None, signal: bool) -> Candidate | None:
    """The disposition record of a final failure, as the driver's settle would write it
    (outcome_records.quarantine_topic and quarantined, fitted): its route's disposition and
    topic, else the policy's; no record for Drop. None: the driver settles it (no finals
    here, a Fault, a record that cannot fit)."""
    if not c.finals:
        return None
    disposition, route_topic = c.routes[route] if route is not None and c.routes else (c.disposition, None)
    if disposition == "Fault":
        return None
    final = Final(reason, disposition, error_class, origin, signal)
    if disposition == "Drop":
        return Candidate(offset, row, None, 0, now, False, final)
    topic = quarantine_topic(disposition, c.poison_topic, c.dlq_topic, route_topic)
    hdrs = quarantined(disposition, cycle=cycle, reason=reason, user=user, route=route,
                       common=_common(c, origin, attempts, first_failure, now, error_class, error_message, stack))
    fitted = _fitted(c, topic, key, value, hdrs)
    if fitted is None:
        return None
    return Candidate(offset, row, (topic, origin.partition % c.partitions, key, value, fitted, now),
                     0, now, False, final)


def of_failure(c: TaskSettle, retry: bool, offset: int, row: tuple, *, reason: str | None, chosen: str | None,
               retry_after: int | None, route: int | None, **failure) -> Candidate | None:
    """A failed message's Candidate: its retry record (`retry`), else its disposition's."""
    if retry:
        return candidate(c, offset, row, retry_after=retry_after, **failure)
    assert reason is not None  # a final failure always has one
    return final_candidate(c, offset, row, reason=reason, route=route, signal=signal_of(reason, chosen), **failure)


def _common(c: TaskSettle, origin: h.Origin, attempts: int, first_failure: int, now: int, error_class,
            error_message, stack) -> dict:
    """The keyword arguments of h.failure_headers but cycle, reason and due (the driver's
    settle's `common`)."""
    return dict(origin=origin, attempts=attempts, first_failure=first_failure, last_failure=now,
                error_class=error_class, error_message=error_message, stack=stack, consumer=c.consumer,
                policy=c.policy)


def _fitted(c: TaskSettle, topic: str, key, value, hdrs: list) -> list | None:
    limit = c.limit(topic)
    return hdrs if limit is None else h.fit_record(key, value, hdrs, limit)


def label(final: Final) -> str:
    """The entry's key for the offsets settled with `final`'s reason and disposition."""
    return f"{final.reason}/{final.disposition}"


@dataclass
class Tally:
    """A task's settled failures, told to the driver in SETTLED rows."""

    by_cycle: dict[int, int] = field(default_factory=dict)
    due: int | None = None
    capped: int = 0
    # (reason, disposition) -> [messages, of them systemic signals]; the last one's Final
    finals: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    last: Final | None = None

    def add(self, cycle: int, due: int, capped: bool = False) -> None:
        self.by_cycle[cycle] = self.by_cycle.get(cycle, 0) + 1
        self.due = due if self.due is None else min(self.due, due)
        self.capped += capped

    def add_final(self, final: Final, last: bool = True) -> None:
        n = self.finals.setdefault((final.reason, final.disposition), [0, 0])
        n[0] += 1
        n[1] += final.signal
        if last:
            self.last = final

    def add_candidate(self, c: Candidate) -> None:
        if c.final is not None:
            self.add_final(c.final)
        else:
            self.add(c.cycle, c.due, c.capped)

    def rows(self) -> list[tuple[int, int, int | None, int]]:
        """(cycle, n, earliest due, capped) per cycle (capped on the first only)."""
        return [(cycle, n, self.due, self.capped if i == 0 else 0)
                for i, (cycle, n) in enumerate(sorted(self.by_cycle.items()))]

    def final_rows(self) -> list[tuple[str, str, int, int, Final | None]]:
        """(reason, disposition, n, of them systemic signals, the last one's Final if of
        this group) per group of settled final failures."""
        last = self.last
        return [(reason, disp, n, signals,
                 last if last is not None and (last.reason, last.disposition) == (reason, disp) else None)
                for (reason, disp), (n, signals) in sorted(self.finals.items())]


@dataclass
class Held:
    """One partition's candidates of the chunk being filled, and what the task does with them
    at the chunk's commit (sink_txn.PartitionSink)."""

    ask: Callable[[], str] | None  # None: no breaker, the answer is yes
    rows: list  # the task's result rows: where a candidate's row goes when not settled
    tally: Tally
    waiting: list[Candidate] = field(default_factory=list)

    def decide(self, stopped: bool) -> list[Candidate]:
        """The chunk's candidates to write in its transaction (emptied either way): none when
        the partition stopped in it at a Fault (`stopped`), or the breaker did not say yes
        (their rows go to the driver); raises when the breaker tripped (the job is being
        cancelled)."""
        held, self.waiting = self.waiting, []
        if not held:
            return []
        answer = YES if self.ask is None else self.ask()
        if answer == STOP:
            raise RuntimeError("the systemic-failure breaker tripped: this task's chunk is not committed")
        if answer != YES or stopped:
            self.rows.extend(c.row for c in held)
            return []
        for c in held:
            self.tally.add_candidate(c)
        return held
