"""The driver's liveness: what its heartbeat and `/healthz` count as progress, and how long
each piece of work may go without it (derived from the settings).

Progress is progress of the thing that may be stuck. A batch's run (a Spark job, or a retry
batch in the local worker) is registered while it runs, with a bound: the longest it can
legitimately take. While a run is within its bound the driver is live; once one is past it,
the driver is stalled, whatever else still moves: the retry pump's idle rounds (every 2 s)
no longer refresh the heartbeat then. (They did, so a batch hung in C code that holds the
GIL of its Python worker, which no attempt time limit can end, kept the driver "healthy"
for ever.) Between runs the heartbeat's age counts, as before: the pump's rounds, a ledger
commit, the pump's wait for the batch lock.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from antidote_api.semantics import EffectiveSettings
from antidote_consumer.worker.deadline import hard_deadline

STALL_AFTER_MIN_S = 600.0
# What a run costs beyond its handler calls: scheduling the job, starting Python workers,
# reading the batch from Kafka and collecting its results, on a loaded node.
RUN_MARGIN_S = 60.0
SPARK_TASK_MAX_FAILURES = 4  # Spark's default spark.task.maxFailures off local mode


def stall_after(attempt_timeout_s: float) -> float:
    """How long the runtime may show no beat while no run is in flight (a ledger commit, a
    Kafka call of the retry pump, the pump's wait for the lock a settle holds): ten
    attempt time limits, at least 10 minutes."""
    return max(STALL_AFTER_MIN_S, 10 * attempt_timeout_s)


def attempt_bound(attempt_timeout_s: float) -> float:
    """The longest one handler call runs before its worker ends itself: the limit, the grace
    to unwind, and faulthandler's margin for one holding the GIL (worker/deadline.py)."""
    return hard_deadline(attempt_timeout_s)


def task_tries(master: str, conf: dict[str, str]) -> int:
    """How many times Spark runs a failing task (a worker that ended itself is one failure):
    spark.task.maxFailures, which local mode replaces by its `local[N,F]` F (default 1)."""
    if master.startswith("local"):
        m = re.fullmatch(r"local\[[^,\]]+,\s*(\d+)\]", master.strip())
        return int(m.group(1)) if m else 1
    try:
        return max(1, int(conf.get("spark.task.maxFailures", SPARK_TASK_MAX_FAILURES)))
    except ValueError:
        return SPARK_TASK_MAX_FAILURES


def run_bound(rows: int, immediate: int, attempt_timeout_s: float, tries: int = 1) -> float:
    """The longest a run of `rows` messages takes when nothing is stuck: each message
    attempted `immediate + 1` times, each attempt ending within `attempt_bound`, in one task
    at worst (a partition's records run in order), that task run `tries` times, plus
    RUN_MARGIN_S. A run past it makes no progress: an attempt that no limit ends (C code
    holding the GIL), a worker that never answers, a job that never gets executors."""
    return max(1, rows) * (immediate + 1) * attempt_bound(attempt_timeout_s) * max(1, tries) + RUN_MARGIN_S


@dataclass(frozen=True)
class RunBounds:
    """The bounds of one consumer's runs, from its settings and its Spark master."""

    max_rows: int  # source.maxMessagesPerBatch: no batch (source, retry, a bisection part) holds more
    immediate: int
    attempt_timeout_s: float
    tries: int  # Spark's tries of a task (task_tries)

    @classmethod
    def of(cls, s: EffectiveSettings, master: str) -> RunBounds:
        return cls(s.source.max_messages_per_batch, s.retries.immediate, s.retries.attempt_timeout.seconds,
                   task_tries(master, dict(s.spark.conf or {})))

    def job(self) -> float:
        """A Spark job of a batch: as many rows as a batch may hold (a source batch's count is
        not known before its job reads it)."""
        return run_bound(self.max_rows, self.immediate, self.attempt_timeout_s, self.tries)

    def local(self, rows: int) -> float:
        """A retry batch of `rows` in the local worker (one process, no task retries)."""
        return run_bound(rows, self.immediate, self.attempt_timeout_s)


@dataclass
class Run:
    what: str
    started: float
    bound: float

    @property
    def deadline(self) -> float:
        return self.started + self.bound


class Liveness:
    """The heartbeat and the runs in flight. Healthy until the first beat (the driver is
    starting), while every run in flight is within its bound, and, with none in flight, while
    the last beat is recent. A beat while a run is past its bound is refused: the heartbeat
    goes stale with the run, not kept fresh by the pump."""

    def __init__(self, stall_after_s: float = STALL_AFTER_MIN_S,
                 clock: Callable[[], float] = time.monotonic,
                 on_beat: Callable[[], None] | None = None) -> None:
        self.stall_after = stall_after_s
        self.clock = clock
        self.on_beat = on_beat
        self.at: float | None = None
        self.runs: dict[int, Run] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()  # runs start and end in the query's and the pump's threads

    def overdue(self, now: float) -> Run | None:
        """The run in flight longest past its bound, if any is."""
        with self._lock:
            late = [r for r in self.runs.values() if now > r.deadline]
        return min(late, key=lambda r: r.deadline, default=None)

    def beat(self) -> bool:
        """Progress; False (not recorded) while a run is past its bound."""
        now = self.clock()
        if self.overdue(now) is not None:
            return False
        self.at = now
        if self.on_beat is not None:
            self.on_beat()
        return True

    @contextmanager
    def running(self, what: str, bound: float) -> Iterator[None]:
        """`what` (a batch's Spark job, a local run) in flight for at most `bound` seconds;
        its start and end are beats."""
        key = next(self._ids)
        with self._lock:
            self.runs[key] = Run(what, self.clock(), bound)
        self.beat()
        try:
            yield
        finally:
            with self._lock:
                del self.runs[key]
            self.beat()

    def check(self) -> tuple[bool, str]:
        now = self.clock()
        late = self.overdue(now)
        if late is not None:
            return False, (f"stalled: {late.what} has run {now - late.started:.0f}s, past its bound of "
                           f"{late.bound:.0f}s (maxMessagesPerBatch x (immediate + 1) x attempt limit "
                           "and grace x Spark task tries, plus margin): it makes no progress")
        with self._lock:
            oldest = min(self.runs.values(), key=lambda r: r.started, default=None)
        if oldest is not None:
            return True, f"ok: {oldest.what} running {now - oldest.started:.0f}s of its {oldest.bound:.0f}s"
        if self.at is None:
            return True, "starting"
        age = now - self.at
        if age < self.stall_after:
            return True, f"ok: last progress {age:.0f}s ago"
        return False, (f"stalled: no progress for {age:.0f}s (limit {self.stall_after:.0f}s: a ledger "
                       "commit or the retry pump is hung)")
