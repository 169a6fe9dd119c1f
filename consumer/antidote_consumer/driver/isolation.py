"""Isolating the messages that make a whole batch fail (a worker crash, not an exception):
bisection, as WCF falls back from a failed batch to one message at a time, but in
O(log n) re-executions instead of n.

The cost that matters is Spark jobs: each one is a re-execution. A descent runs one half per
level only. When the left half fails, the right half is not run at that level: it is set
aside, and everything set aside on the way down runs afterwards as one segment (usually it
all succeeds at once). One crasher in n messages therefore costs at most ceil(log2 n) runs
down, one run of the last message alone when it was never run by itself, and one run of
what was set aside: ceil(log2 n) + 2 (docs/consumer.md, batch isolation).

A failure is evidence against a message only when the environment was working: a sink or
a downstream service that is down fails every run, and one that comes back during the
bisection leaves the runs before it failed for no fault of their messages. So a message that
fails on its own is a culprit only when a part of the batch succeeded between its previous
failure (the batch's own, or a segment's that held it) and this one. One that did not is a
suspect, run alone again once something has succeeded after it: a culprit if it fails
again, processed if it succeeds. That run replaces the solo run the descent no longer needs
there, so the bound above holds. A suspect that nothing succeeded after is left undecided:
the batch is not settled (the queue stops, nothing is quarantined)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K")
R = TypeVar("R")


@dataclass
class Isolation(Generic[K, R]):
    results: list[R] = field(default_factory=list)  # results of segments that succeeded
    culprits: list[K] = field(default_factory=list)  # single messages that fail on their own
    executions: int = 0
    failures: dict[K, int] = field(default_factory=dict)  # failed executions per message
    # Messages that failed on their own while nothing else succeeded, then succeeded when run
    # again after a part of the batch had: an outage that ended, not a culprit.
    cleared: list[K] = field(default_factory=list)
    # Messages that failed on their own and after which nothing succeeded: not known to be
    # culprits, so the batch cannot be settled.
    undecided: list[K] = field(default_factory=list)

    def unsettled(self, name: Callable[[K], str] = str) -> str | None:
        """Why the batch cannot be settled from this isolation (the queue must stop and
        quarantine nothing), or None."""
        if not self.results and (self.culprits or self.undecided):
            # Nothing in the batch succeeds on its own: the environment is broken, not a message.
            return "no part of the batch succeeds"
        if self.undecided:
            return (f"message(s) {', '.join(name(k) for k in self.undecided)} failed on their own "
                    "and no other part of the batch succeeded after, so their failures cannot be "
                    "told from the environment's")
        return None


def last_offsets(keys: Sequence[tuple[str, int, int]]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the last offset of `keys` (topic, partition, offset) there."""
    ends: dict[tuple[str, int], int] = {}
    for topic, partition, offset in keys:
        ends[(topic, partition)] = max(offset, ends.get((topic, partition), -1))
    return ends


def bisect(keys: Sequence[K], run: Callable[[Sequence[K]], R | None], budget: int) -> Isolation[K, R]:
    """Split a failing batch until each failure is pinned on a single message.

    `run(segment)` executes a segment and returns its result, or None when it fails as a
    whole. When the left half succeeds the right half is known to fail and is split without
    being run; a single message is run on its own before it is called a culprit, and is one
    only when a part of the batch succeeded since its previous failure (see the module).
    Messages set aside keep the batch's order when they run together.
    Raises RuntimeError when `budget` executions are not enough.
    """
    iso: Isolation[K, R] = Isolation()
    items = list(keys)
    aside: list[list[int]] = []  # index ranges of `items` not run yet and not known to fail
    suspects: list[int] = []  # failed on their own with no success since their failure before
    succeeded = 0  # executions that succeeded so far
    # Per message: `succeeded` at its last failed execution, and at the one before it. The
    # batch's own failures (before the bisection) count as one at 0.
    last: dict[int, int] = {}
    before: dict[int, int] = {}

    def execute(idx: Sequence[int]) -> R | None:
        nonlocal succeeded
        if iso.executions >= budget:
            raise RuntimeError(f"isolation needs more than {budget} re-executions")
        iso.executions += 1
        segment = [items[i] for i in idx]
        result = run(segment)
        if result is None:
            for i, k in zip(idx, segment):
                iso.failures[k] = iso.failures.get(k, 0) + 1
                before[i], last[i] = last.get(i, 0), succeeded
        else:
            succeeded += 1
            iso.results.append(result)
        return result

    def failed_alone(i: int) -> None:
        # `i` has just failed on its own (or is the whole batch): judged against the failure before.
        if last.get(i, 0) > before.get(i, 0):
            iso.culprits.append(items[i])
        else:
            suspects.append(i)

    def descend(segment: list[int], ran: bool) -> None:
        # `segment` fails as a whole: it was run and failed (`ran`), or its sibling succeeded.
        while len(segment) > 1:
            mid = len(segment) // 2
            left, right = segment[:mid], segment[mid:]
            if execute(left) is not None:
                segment, ran = right, False
            else:
                aside.append(right)
                segment, ran = left, True
        if ran or execute(segment) is None:
            failed_alone(segment[0])

    segment, ran = list(range(len(items))), True
    while True:
        if segment:
            descend(segment, ran)
        # What was set aside runs together, in the batch's order; when it fails it holds
        # another culprit (or the outage goes on) and is searched the same way.
        segment = sorted(i for part in aside for i in part)
        aside.clear()
        if segment and execute(segment) is None:
            ran = True
            continue
        # Suspects that something succeeded after run alone again, one by one.
        due = [i for i in suspects if succeeded > last.get(i, 0)]
        if not due:
            break
        suspects = [i for i in suspects if i not in due]
        for i in due:
            if execute([i]) is None:
                failed_alone(i)
            else:
                iso.cleared.append(items[i])
        segment = []
    iso.undecided = [items[i] for i in suspects]
    return iso
