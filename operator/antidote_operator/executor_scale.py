"""How many executors a consumer should have: one pure function of its source partitions'
lag, which of them are blocked, the current count and when it last changed.

Why only lag that executors can work off counts (docs/operator.md, "Executors scaled by lag"):
- A micro-batch reads each Kafka partition in one task, and the next batch starts only when
  every task of this one has ended. So a partition stuck on a message (a batch that keeps
  failing, a Fault, a handler that hangs) holds every partition up, and its lag, or all the
  lag, grows: an autoscaler counting it scales to its maximum for nothing (keda#3904).
  Blocked partitions are left out, and lag that sits only behind them changes nothing.
- One partition is one task: more executors than the partitions with lag can keep busy
  (`cores` tasks each) add nothing, however deep one partition is.
- Records parked in retry topics (retry cycles, held messages) are not source lag at all:
  they wait for a due time, which no executor shortens.

Hysteresis: the count goes up when the lag needs more executors than it has, but down only
when the lag fits in fewer at `DOWN_FILL` of their target, and each direction waits for its
cool-down after the last change (every change restarts the driver).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from antidote_api import autoscale as reasons
from antidote_api.autoscale import Autoscale

# Scale down only to a count that the lag would fill to at most 80 % of its target: lag that
# hovers around a boundary does not flip the count (and restart the driver) back and forth.
DOWN_FILL = 0.8

# Why a partition is blocked (Partition.blocked), for the status message.
BATCH_FAILING = "batch failing"  # whole batches are being rolled back: nothing moves
FAULT = "Fault"  # its position sits at (or before) the message that stopped the consumer
STALLED = "not moving"  # lag, and its position has not moved for `stall_after`


@dataclass(frozen=True)
class Partition:
    partition: int
    lag: int
    blocked: str | None = None  # why, or None


@dataclass(frozen=True)
class ScaleInputs:
    spec: Autoscale
    current: int  # executors in the driver's configuration now
    last_change: datetime | None  # when `current` was set (None: never changed)
    now: datetime
    partitions: tuple[Partition, ...] | None  # None: no reading yet
    cores: int = 1  # per executor: tasks it runs at once
    running: bool = True  # False: paused or disabled


@dataclass(frozen=True)
class ScaleDecision:
    executors: int  # the count to apply now
    desired: int  # what the lag asks for, within min and max
    reason: str
    message: str  # for status: changes with the decision, not with every reading
    detail: str = ""  # the numbers it was made from (Events, logs)

    @property
    def changed(self) -> bool:
        return self.reason in reasons.EVENT_REASONS


def _bounded(n: int, spec: Autoscale) -> int:
    return max(spec.min, min(spec.max, n))


NAMED_MAX = 12  # blocked partitions named in a message; a topic may have hundreds


def _names(parts: Iterable[Partition]) -> str:
    ordered = sorted(parts, key=lambda p: p.partition)
    text = ", ".join(f"{p.partition} ({p.blocked})" for p in ordered[:NAMED_MAX])
    return text + (f" and {len(ordered) - NAMED_MAX} more" if len(ordered) > NAMED_MAX else "")


def decide_executors(i: ScaleInputs) -> ScaleDecision:
    spec = i.spec
    current = _bounded(i.current, spec)
    if current != i.current:  # min or max changed since it was set: at once, no cool-down
        return ScaleDecision(current, current, reasons.SCALED_UP if current > i.current
                             else reasons.SCALED_DOWN,
                             f"{i.current} -> {current}: the count must be within min {spec.min} "
                             f"and max {spec.max}.")
    if not i.running:
        return ScaleDecision(current, current, reasons.NOT_RUNNING,
                             "The consumer is paused or its queue is disabled; the count is kept.")
    if i.partitions is None:
        return ScaleDecision(current, current, reasons.NO_LAG_YET,
                             "Waiting for the consumer's first reading of its source partitions.")
    usable = [p for p in i.partitions if p.blocked is None]
    blocked = [p for p in i.partitions if p.blocked is not None and p.lag > 0]
    lag = sum(max(0, p.lag) for p in usable)
    busy = sum(1 for p in usable if p.lag > 0)
    excluded = f" Left out, blocked: partition(s) {_names(blocked)}." if blocked else ""
    if blocked and busy == 0:
        # All the waiting work is behind blocked partitions: scaling either way only restarts
        # the driver in the middle of it.
        return ScaleDecision(current, current, reasons.BLOCKED,
                             f"All the lag is in blocked partitions: {_names(blocked)}; more "
                             "executors cannot move it, so the count is kept.")
    # Tasks that can run at once: one per partition with lag.
    useful = max(1, math.ceil(busy / max(1, i.cores)))
    up = _bounded(min(math.ceil(lag / spec.target_lag_per_executor), useful), spec)
    down = _bounded(min(math.ceil(lag / (spec.target_lag_per_executor * DOWN_FILL)), useful), spec)
    since = i.now - i.last_change if i.last_change is not None else None
    # The numbers go to the Event and the log only: status keeps words that change with the
    # decision, not with every reading, so it is not rewritten at every scrape.
    detail = (f"{lag} record(s) of lag in {busy} partition(s) that can use executors "
              f"(target {spec.target_lag_per_executor} per executor, {i.cores} core(s) each).")
    # Up first (up >= down always), each direction after its own cool-down.
    for wanted, to, cooldown, name, cooling, changed, why in (
            (up > current, up, spec.scale_up_cooldown, "scaleUpCooldown", reasons.UP_COOLING,
             reasons.SCALED_UP, f"Scaled up from {current} to {up} for the lag."),
            (down < current, down, spec.scale_down_cooldown, "scaleDownCooldown", reasons.DOWN_COOLING,
             reasons.SCALED_DOWN, f"Scaled down from {current} to {down}: the lag fell.")):
        if not wanted:
            continue
        if since is not None and since < timedelta(milliseconds=cooldown.ms):
            return ScaleDecision(current, to, cooling, f"The lag asks for {to}, after {name} "
                                 f"{cooldown} from the last change.{excluded}", detail)
        return ScaleDecision(to, to, changed, f"{why}{excluded}", detail)
    return ScaleDecision(current, current, reasons.STEADY,
                         f"The lag fits {current} executor(s).{excluded}", detail)


# --- which partitions are blocked ------------------------------------------------------------

# A partition with lag is taken as not moving when its position has not changed for
# STALL_STEPS times the time between its last two moves (a healthy consumer's batch length),
# at least STALL_MIN; before two moves are seen, after STALL_DEFAULT.
STALL_STEPS = 3
STALL_MIN = timedelta(seconds=10)
STALL_DEFAULT = timedelta(seconds=60)
NOT_SEEN_MOVING = "not seen moving yet"
NOT_MOVING_SINCE_RESTART = "not seen moving since the driver restarted"


@dataclass(frozen=True)
class Progress:
    """One partition between readings, kept by the operator (in memory: after a restart a
    partition has to be seen moving again before its lag counts)."""

    position: int
    lag: int
    moved_at: datetime | None = None  # the last reading at which its position had advanced
    step: timedelta | None = None  # between its last two moves, while it had lag throughout


def track(before: Mapping[int, Progress], positions: Mapping[int, tuple[int, int]],
          now: datetime) -> dict[int, Progress]:
    """The progress after a reading of `positions` (partition -> (position, lag))."""
    out = {}
    for p, (pos, lag) in positions.items():
        old = before.get(p)
        if old is None or (pos == old.position and old.lag <= 0 < lag):
            # First seen, or a new backlog on a partition that was caught up: how it moved
            # before says nothing about this backlog (a poison message may be at its head).
            out[p] = Progress(pos, lag)
        elif pos != old.position:
            step = now - old.moved_at if old.moved_at is not None and old.lag > 0 else None
            out[p] = Progress(pos, lag, now, step)
        else:
            out[p] = Progress(pos, lag, old.moved_at, old.step)
    return out


def stall_window(prog: Progress) -> timedelta:
    return max(STALL_MIN, STALL_STEPS * prog.step) if prog.step is not None else STALL_DEFAULT


def blocked_partitions(positions: Mapping[int, tuple[int, int]], progress: Mapping[int, Progress],
                       *, now: datetime, failing: bool, fault: tuple[int, int] | None,
                       restarted_at: datetime | None = None) -> tuple[Partition, ...]:
    """The partitions (partition -> (position, lag)) with their lag, and why each one with lag
    is blocked, if it is:
    - every one while whole batches are failing (`failing`): a batch is retried whole, and
      none of its partitions moves until it succeeds or the queue is disabled;
    - the partition of a Fault (`fault` = (partition, offset)) while its position is at or
      before that message: the consumer stops there every time it gets to it;
    - one not seen moving since its lag appeared (lag counts once the consumer shows it can
      work it off: the first batch does), or no longer moving (`stall_window`): a batch that
      does not end, such as a handler that hangs on a message;
    - one with lag not seen moving since `restarted_at` (the last change of the count, which
      restarts the driver): a driver pod's start-up (scheduling, the JVM, Spark's executors,
      the first batch) takes longer than a stall window measured from before the restart, and
      counting its partitions as stalled would scale the consumer back down (or up) in the
      middle of it. Blocked, so the count is kept until the new driver shows progress."""
    out = []
    for p, (pos, lag) in sorted(positions.items()):
        why = None
        prog = progress.get(p)
        if lag <= 0:
            pass
        elif failing:
            why = BATCH_FAILING
        elif fault is not None and fault[0] == p and pos <= fault[1]:
            why = FAULT
        elif prog is None or prog.moved_at is None:
            why = NOT_SEEN_MOVING
        elif restarted_at is not None and prog.moved_at <= restarted_at:  # the move that decided it was before
            why = NOT_MOVING_SINCE_RESTART
        elif now - prog.moved_at > stall_window(prog):
            why = STALLED
        out.append(Partition(p, lag, why))
    return tuple(out)
