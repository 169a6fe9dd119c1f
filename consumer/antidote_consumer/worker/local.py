"""Small retry batches without a Spark job: the same `worker.process`, in one long-lived
Python process beside the driver (below spark.antidote.retry.localMaxRecords due records;
larger cycles are read and run by the executors, see driver.retry_plan).

A Spark job costs about a second however few rows it has (measured: 1.2-2.9 s for ~100
retry records), and retry batches are small and frequent. The handler still never runs in
the driver itself: if it kills its process (a native crash), the pool breaks, the batch
falls back to a Spark job, and there batch isolation finds the culprit as before. The
per-attempt time limit is the same as in Spark (the same `process`, see deadline.py): an
attempt past it fails with antidote.AttemptTimeout, and a process stuck past its grace ends
itself, which is a dead worker here too. A stopping driver kills the process (`close`).
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from . import collector
from .executor import INPUT_FIELDS, RESULT_FIELDS, ResultRow, WorkerConfig

log = logging.getLogger("antidote.consumer")

class LocalWorkerDied(Exception):
    """The local worker process died with the batch: run it as a Spark job instead."""


class LocalWorkerStuck(LocalWorkerDied):
    """The local worker ran a batch past its bound (driver/liveness.py, run_bound): killed."""


def _run(cfg: WorkerConfig, rows: list[tuple]) -> list[dict[str, list]]:
    """`rows` (INPUT_COLUMNS, headers as (key, value) pairs) through `process`; its result
    batches as columns, as they are pickled back. (They were Arrow batches turned into a dict
    per row and per header, ~24 keys each: pickling those both ways, and building them, was
    most of what a retried message cost beside its handler calls.)"""
    from .executor import process

    # The rows' columns as lists, the form process turns an Arrow batch into first.
    columns = tuple(list(c) for c in zip(*rows)) if rows else tuple([] for _ in INPUT_FIELDS)
    return list(process(cfg, iter([columns]), as_columns=True))


def _warm(cfg: WorkerConfig) -> None:
    import pyarrow  # noqa: F401

    from . import sink
    from .executor import _plan

    _plan(cfg)  # imports the handler's module
    _topic, producer = sink.producer_for(cfg.sink_kafka)
    if producer is not None:
        producer.list_topics(timeout=10)  # connected before the first batch needs it
    # The modules are long-lived: frozen, Python's full collections (every few retry batches
    # at 1% poison, ~50 ms each walking them) walk only what came after (as in the driver
    # and Spark's Python workers).
    collector.tune()


class LocalWorker:
    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._warming: Future | None = None
        # `warm` comes from a source batch's settle, `run` from the retry pump's thread
        # (outside the batch lock): one process between them.
        self._lock = threading.Lock()

    def _started(self) -> tuple[ProcessPoolExecutor, bool]:
        """The process pool, and whether this call started it."""
        with self._lock:
            if self._pool is not None:
                return self._pool, False
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
            return self._pool, True

    def warm(self, cfg: WorkerConfig) -> None:
        """Start the process, import the handler and connect the sink in the background, once:
        the first retry batch is due a cycle delay later and should not wait ~1 s for that."""
        pool, started = self._started()
        if started:
            self._warming = pool.submit(_warm, cfg)  # a failure shows again in run()

    def warmed(self, timeout: float) -> bool:
        """Whether the start-up `warm` began has ended (waiting up to `timeout`). The retry
        pump waits for it before it takes the batch lock: a start-up (measured: 1 s idle, 14 s
        on a loaded machine) inside the lock held the source batches up as long."""
        warming = self._warming
        if warming is None:
            return True
        try:
            warming.result(timeout)
        except TimeoutError:
            return False
        except BaseException:  # noqa: BLE001 - a failed start-up shows again in run()
            pass
        self._warming = None
        return True

    def run(self, cfg: WorkerConfig, rows: list[tuple], timeout: float | None = None) -> list[ResultRow]:
        """The result rows of `rows` (INPUT_COLUMNS, headers as (key, value) pairs, as the
        driver read them). Past `timeout` seconds the process is stuck where no attempt time
        limit reaches (C code holding the GIL, a frozen process): it is killed, and
        LocalWorkerStuck says so."""
        pool, _ = self._started()
        try:
            out = pool.submit(_run, cfg, rows).result(timeout)
        except BrokenProcessPool as err:
            self._pool = None  # a fresh process next time
            raise LocalWorkerDied(str(err) or "the local worker process died") from err
        except TimeoutError:
            self.close()  # a fresh process next time
            raise LocalWorkerStuck(
                f"the local worker ran a retry batch of {len(rows)} message(s) for {timeout:.0f}s, past "
                f"its bound ({len(rows)} x (immediate + 1) x (attemptTimeout {cfg.attempt_timeout:g}s "
                "+ grace) + margin): killed") from None
        return [ResultRow._make(r) for cols in out for r in zip(*(cols[name] for name in RESULT_FIELDS))]

    def close(self) -> None:
        """Ends the process at once: a stop must not wait on a batch (nor a hung handler) in it;
        an unfinished batch is not committed and runs again."""
        pool, self._pool, self._warming = self._pool, None, None
        if pool is not None:
            # The executor has no public way to kill its workers before Python 3.14.
            procs = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in procs:
                proc.kill()
