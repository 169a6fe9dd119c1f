"""Isolating the messages that make a whole batch fail (a worker crash, not an exception):
bisection, as WCF falls back from a failed batch to one message at a time, but in
O(log n) re-executions instead of n."""

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
    being run; a single message is run on its own before it is called a culprit.
    Raises RuntimeError when `budget` executions are not enough.
    """
    iso: Isolation[K, R] = Isolation()

    def execute(segment: Sequence[K]) -> R | None:
        if iso.executions >= budget:
            raise RuntimeError(f"isolation needs more than {budget} re-executions")
        iso.executions += 1
        result = run(segment)
        if result is None:
            for k in segment:
                iso.failures[k] = iso.failures.get(k, 0) + 1
        return result

    def search(segment: Sequence[K], ran: bool) -> None:
        # `segment` fails as a whole: it was run and failed (`ran`), or its sibling succeeded.
        if len(segment) == 1:
            result = None if ran else execute(segment)
            if result is None:
                iso.culprits.append(segment[0])
            else:
                iso.results.append(result)
            return
        mid = len(segment) // 2
        left, right = segment[:mid], segment[mid:]
        result = execute(left)
        if result is not None:
            iso.results.append(result)
            search(right, ran=False)
            return
        search(left, ran=True)
        result = execute(right)
        if result is not None:
            iso.results.append(result)
        else:
            search(right, ran=True)

    search(list(keys), ran=True)
    return iso
