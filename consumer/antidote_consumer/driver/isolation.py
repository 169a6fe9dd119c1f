"""Isolating the messages that make a whole batch fail (a worker crash, not an exception):
bisection, as WCF falls back from a failed batch to one message at a time, but in
O(log n) re-executions instead of n.

The cost that matters is Spark jobs: each one is a re-execution. A descent runs one half per
level only. When the left half fails, the right half is not run at that level: it is set
aside, and everything set aside on the way down runs afterwards as one segment (usually it
all succeeds at once). One crasher in n messages therefore costs at most ceil(log2 n) runs
down, one run of the last message alone when it was never run by itself, and one run of
what was set aside: ceil(log2 n) + 2 (docs/consumer.md, batch isolation)."""

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


def bisect(keys: Sequence[K], run: Callable[[Sequence[K]], R | None], budget: int) -> Isolation[K, R]:
    """Split a failing batch until each failure is pinned on a single message.

    `run(segment)` executes a segment and returns its result, or None when it fails as a
    whole. When the left half succeeds the right half is known to fail and is split without
    being run; a single message is run on its own before it is called a culprit. Messages set
    aside (see the module) keep the batch's order when they run together.
    Raises RuntimeError when `budget` executions are not enough.
    """
    iso: Isolation[K, R] = Isolation()
    items = list(keys)
    aside: list[list[int]] = []  # index ranges of `items` not run yet and not known to fail

    def execute(idx: Sequence[int]) -> R | None:
        if iso.executions >= budget:
            raise RuntimeError(f"isolation needs more than {budget} re-executions")
        iso.executions += 1
        segment = [items[i] for i in idx]
        result = run(segment)
        if result is None:
            for k in segment:
                iso.failures[k] = iso.failures.get(k, 0) + 1
        else:
            iso.results.append(result)
        return result

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
            iso.culprits.append(items[segment[0]])

    segment, ran = list(range(len(items))), True
    while segment:
        descend(segment, ran)
        # What was set aside runs together, in the batch's order; when it fails it holds
        # another culprit and is searched the same way.
        segment = sorted(i for part in aside for i in part)
        aside.clear()
        ran = bool(segment) and execute(segment) is None
        if not ran:
            break
    return iso
