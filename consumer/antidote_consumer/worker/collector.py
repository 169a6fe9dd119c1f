"""Python's cyclic garbage collector in a Spark Python worker that runs Antidote's tasks.

pyspark's daemon calls `gc.collect()` after every task of a reused worker (pyspark/daemon.py),
and that full collection walks the whole heap: pyspark, pyarrow, pandas, the handler's
modules. In the steady-state benchmark each worker ran ~73 of them, 50-200 ms each, ~6 s of
its CPU in a ~45-s run with the GIL held, whatever the handler did: Antidote's own loop, run
alone, makes no full collection (docs/performance.md).

So at the first Antidote task in a worker, what the worker holds after one collection is
frozen (`gc.freeze`: never walked again), and young collections come every 10,000 new
objects instead of 700. pyspark's collection after each task then walks only what came
after the freeze, and still frees every cycle the tasks leave. It stays for the worker's
life: an Antidote consumer's Spark application runs no other tasks. Objects are still freed
as their last reference goes; only what was alive at that first freeze is never collected.
"""

from __future__ import annotations

import gc

YOUNG_EVERY = 10_000  # gen-0 threshold (Python's default: 700)

_tuned = False


def freeze_long_lived() -> None:
    """Collect once, then freeze what is left (`gc.freeze`): later full collections walk only
    what came after. Objects are still freed when their last reference goes; only cycles
    made before the freeze and dropped later are never collected. Also the driver's, once it
    is up (driver.consumer)."""
    gc.collect()
    gc.freeze()


def tune() -> None:
    """Once per worker process (a forked worker starts untuned: the daemon never runs this)."""
    global _tuned
    if _tuned:
        return
    _tuned = True
    freeze_long_lived()
    gc.set_threshold(YOUNG_EVERY, *gc.get_threshold()[1:])
