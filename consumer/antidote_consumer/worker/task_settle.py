"""Retried messages settled by the task that failed them (docs/consumer.md, "Failures settled
by the task"): with an exactly-once Kafka sink, a failed message's retry record is written in
its partition's chunk transaction, beside the outputs and the entry that says it is settled,
instead of crossing to the driver as a result row. The driver then sees a count per retry
cycle ("settled" rows), not a row per failure.

A chunk's retry records are written only when the driver's live breaker says yes for them
(driver.live_breaker: the rule does not trip over the window and the batch so far, with at
least minMessages judged behind the judgement); any other answer, or none, leaves them to the
driver as today: their rows go back, their offsets stay pending. So does every failure this
module does not take: final ones (their disposition), those of ordering Key, a record that
cannot fit its retry topic, a chunk stopped by a Fault, and every run whose outputs come back
to the driver (the local worker, a bisection's segments). Pure but for the ask."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from antidote_consumer.kafka import headers as h

from .chosen import retry_delay_ms

# What the breaker answers a task that asks to settle a chunk's failures (attempt_reports.ask).
YES, NO, STOP = "yes", "no", "stop"
# The result row of a task's settled retries: one per retry cycle, n in n_ok, the earliest due
# time in last_failure, the Retry(after=...) capped to the bound in retry_after.
SETTLED = "settled"


@dataclass(frozen=True)
class RetrySettle:
    """What a task needs to write its failures' retry records (WorkerConfig.settle; built by
    driver.worker_config.retry_settle from the same settings as the driver's settle)."""

    retry_topics: tuple[str, ...]
    delays_ms: tuple[int, ...]  # each cycle's delay
    bound_ms: int | None  # the longest Retry(after=...) (semantics.retry_after_bound)
    partitions: int  # of the source topic, and so of every retry topic
    max_bytes: tuple[tuple[str, int], ...]  # max.message.bytes of the retry topics known
    consumer: str  # namespace/name: antidote.consumer
    policy: str
    ask: bool  # the breaker is on: a chunk's records are written only once it says yes

    def cycle_of(self, topic: str) -> int:
        """The retry cycle a failure of a record read from `topic` is parked for."""
        return self.retry_topics.index(topic) + 2 if topic in self.retry_topics else 1


class Candidate(NamedTuple):
    """A failed message's retry record, waiting for its chunk's answer; `row` is the result
    row the driver gets instead when the answer is not yes."""

    offset: int
    row: tuple
    record: tuple  # (topic, partition, key, value, headers, timestamp ms)
    cycle: int
    due: int
    capped: bool


def candidate(c: RetrySettle, offset: int, row: tuple, *, key, value, user: list, origin: h.Origin,
              attempts: int, cycle: int, first_failure: int, now: int, error_class, error_message,
              stack, retry_after: int | None) -> Candidate | None:
    """The retry record of a message that failed cycle `cycle` with attempts left, as the
    driver's settle would write it (driver.outcome_records.retry_record), timestamped `now`
    (the retry pump plans from timestamps); None when it cannot fit its topic (the driver
    decides: a stop at it)."""
    delay = retry_delay_ms(retry_after, c.delays_ms[cycle], c.bound_ms)
    due = now + delay
    topic = c.retry_topics[cycle]
    hdrs = user + h.failure_headers(origin=origin, attempts=attempts, cycle=cycle + 1,
                                    first_failure=first_failure, last_failure=now, reason=None,
                                    error_class=error_class, error_message=error_message, stack=stack,
                                    consumer=c.consumer, policy=c.policy, due=due)
    limit = dict(c.max_bytes).get(topic)
    if limit is not None:
        fitted = h.fit_record(key, value, hdrs, limit)
        if fitted is None:
            return None
        hdrs = fitted
    capped = retry_after is not None and c.bound_ms is not None and retry_after > c.bound_ms
    return Candidate(offset, row, (topic, origin.partition % c.partitions, key, value, hdrs, now),
                     cycle + 1, due, capped)


@dataclass
class Tally:
    """A task's settled retries, told to the driver in SETTLED rows."""

    by_cycle: dict[int, int] = field(default_factory=dict)
    due: int | None = None
    capped: int = 0

    def add(self, cycle: int, due: int, capped: bool = False) -> None:
        self.by_cycle[cycle] = self.by_cycle.get(cycle, 0) + 1
        self.due = due if self.due is None else min(self.due, due)
        self.capped += capped

    def rows(self) -> list[tuple[int, int, int | None, int]]:
        """(cycle, n, earliest due, capped) per cycle (capped on the first only)."""
        return [(cycle, n, self.due, self.capped if i == 0 else 0)
                for i, (cycle, n) in enumerate(sorted(self.by_cycle.items()))]


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
        the partition stopped at a Fault in it, or the breaker did not say yes (their rows go
        to the driver); raises when the breaker tripped (the job is being cancelled)."""
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
            self.tally.add(c.cycle, c.due, c.capped)
        return held
