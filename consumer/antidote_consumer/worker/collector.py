"""Python's cyclic garbage collector while an Antidote task runs in a Spark Python worker.

A worker's heap is mostly long-lived (pyspark, pyarrow, the handler's modules), and with
Python's default thresholds a full collection walks all of it: in the steady-state
benchmark's Antidote windows each worker ran ~20 full collections per 30 s, 1.6-1.9 s of
its CPU with the GIL held. Antidote's own loop, run alone, makes none (measured apart), so
the garbage comes from what runs around it in the worker (pyspark's Arrow serializers).
For the length of a task, what is alive at its start is frozen (never walked again) and
young collections come every 10,000 new objects instead of 700; at its end both are put
back as they were, so a worker that Spark reuses for other tasks (another query of the
same application) runs them with the settings it had. Objects are still freed as their last reference goes; cycles
frozen at a task's start are collected after it ends.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

YOUNG_EVERY = 10_000  # gen-0 threshold while a task runs (Python's default: 700)


def tuned(task: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
    """`task` (a generator function: mapInArrow's), run with the collector tuned."""

    def run(*args: Any, **kwargs: Any) -> Iterator[Any]:
        thresholds = gc.get_threshold()
        gc.freeze()  # O(1): the generations' lists are moved, nothing is walked
        gc.set_threshold(YOUNG_EVERY, *thresholds[1:])
        try:
            yield from task(*args, **kwargs)
        finally:
            gc.set_threshold(*thresholds)
            gc.unfreeze()

    run.__name__ = getattr(task, "__name__", "task")
    run.__doc__ = task.__doc__
    return run
