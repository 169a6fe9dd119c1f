"""The driver: turns batches (from the source query, or due records from retry topics)
into committed outcomes, and decides when the queue must be disabled."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
import math
import threading
import time
from collections.abc import Callable

from antidote_api.conditions import DisableReason
from antidote_api.names import ledger_names
from antidote_api.semantics import EffectiveSettings
from antidote_consumer.spark import ARROW_ROWS_CONF, ArrowRows
from antidote_consumer.worker.executor import WorkerConfig
from antidote_consumer.worker.local import LocalWorker
from antidote_consumer.worker.ordering import held_count

from .disabled import QueueDisabled
from .frames import (BatchResult, HandlerMap, batch_result, attempts_before, batch_keys, collect_results, frame,
                     is_job_failure, running_tasks, segment_filter, skip_key, unaccounted, first_line,
                     write_path_outputs)
from .isolation import bisect, last_offsets
from .ledger import Ledger, LedgerState
from .live_breaker import spark_run, started as live_breaker
from .worker_config import task_settle, worker_config
from .liveness import RunBounds
from .metrics import Metrics
from .outcomes import Targets
from .settle import BATCH_FRAMING, DEFAULT_BATCH_BYTES, Settler
from .settle_refused import RefusedCommit
from .sink_state import SinkState
from .systemic import SystemicRule

log = logging.getLogger("antidote.consumer")


# A task that died on this did not run its messages (see _isolate).
STALE_WORKER = "java.nio.channels.CancelledKeyException"
# How long a failed job's killed tasks may take to end (Spark's task reaper would step in
# only after spark.task.reaper.killTimeout, off by default).
QUIET_TIMEOUT = 30.0


class Runtime:
    def __init__(self, settings: EffectiveSettings, spark, metrics: Metrics, *,
                 partitions: int, retry_sleep: float = 1.0, client_conf: dict | None = None,
                 max_bytes: dict[str, int] | None = None, reports_port: int | None = 0):
        self.s = settings
        self.spark = spark
        self.metrics = metrics
        self.partitions = partitions
        self.retry_sleep = retry_sleep
        self.cfg = worker_config(settings)
        self.bounds = RunBounds.of(settings, spark.sparkContext.master if spark is not None else "local")
        self.handler_map = HandlerMap(settings.spark.conf, partitions)
        names = ledger_names(settings)
        self.consumer_id = names.consumer_id
        # Small retry batches run without a Spark job; a path sink is written by Spark.
        path_sink = settings.sink is not None and settings.sink.path is not None
        self.local: LocalWorker | None = None if path_sink else LocalWorker()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.sink = SinkState(self.cfg.exactly_once is not None)  # an exactly-once sink's entries (sink_state)
        # The earliest due time of the retry records this process wrote, and who to tell:
        # the retry pump sleeps until then instead of polling the retry topics.
        self.scheduled_due: int | None = None
        self.on_scheduled: Callable[[], None] | None = None
        self.disabled: QueueDisabled | None = None
        # max.message.bytes of the derived topics: their records are fitted (outcomes.fitted).
        self.max_bytes: dict[str, int] = dict(max_bytes or {})
        # Rows per Arrow batch of source batches, from the records seen (set by the Consumer,
        # which knows the source topic's max.message.bytes); the value last set on the query's
        # session, so it is set only when it changes.
        self.arrow: ArrowRows | None = None
        self.arrow_rows_set: int | None = None
        # Source partition -> the offset after the last record the running query's committed
        # batches read (see caught_up); the Consumer empties it when it starts a query.
        self.query_read: dict[int, int] = {}
        smallest = min(self.max_bytes.values(), default=None)
        self.ledger = Ledger(settings.source.bootstrap_servers,
                             names.topic, transactional_id=names.transactional_id,
                             client_conf=client_conf,
                             # Below librdkafka's 1 MB default only: room for a batch's framing.
                             max_batch_bytes=smallest - BATCH_FRAMING
                             if smallest is not None and smallest < DEFAULT_BATCH_BYTES else None)
        self.settler = Settler(Targets.of(settings, partitions, self.max_bytes, self.consumer_id),
                               self.ledger, metrics, SystemicRule.of(settings.queue_disable),
                               RefusedCommit(self.ledger, settings.queue_disable, self._rollback,
                                             self.stopping, retry_sleep),
                               max_held=self.cfg.max_held)
        self.live = live_breaker(spark, self.settler.systemic, reports_port)  # judged as attempts end
        self.cfg = dataclasses.replace(self.cfg, reports=self.live.target(),  # tasks read the run from Spark
                                       settle=task_settle(settings, partitions, self.max_bytes, self.live))

    # --- start-up -----------------------------------------------------------------------
    def recover(self) -> LedgerState:
        state = self.sink.loaded(self.ledger, self.ledger.load())  # followed from there (ledger_tail)
        new = copy.deepcopy(state)
        token = self.s.resume_token
        if token is not None:
            new.resumed = token
        if state.disabled and (token is None or token == state.resumed):
            # Only a resume re-enables a queue: a container restarted by its kubelet would
            # otherwise run the failing batch again before the operator scales it to 0.
            self.disabled = QueueDisabled(
                DisableReason(state.disabled), f"the queue was disabled ({state.disabled}) by an earlier run and "
                "has not been resumed since (antidote resume, or the antidote.dev/resume "
                "annotation)", state.fault)
        elif state.disabled:
            log.info("resuming a queue disabled for %s: consecutive failures reset", state.disabled)
            new.disabled, new.consecutive_failures = None, 0
        elif state.in_batch:
            # The last run died inside batch `started`: a rollback, like a driver crash.
            new.consecutive_failures += 1
            log.warning("batch %d did not finish in the last run: counted as failure %d in a row",
                        state.started_batch, new.consecutive_failures)
        new.started_batch, new.in_batch = new.committed_batch, False
        threshold = self.s.queue_disable.consecutive_batch_failures
        if self.s.queue_disable.enabled and not state.disabled and new.consecutive_failures >= threshold:
            # A driver that dies in every batch never reaches the in-batch check: a crash loop
            # is stopped here, before the batch runs again.
            self.disabled = QueueDisabled(
                DisableReason.CONSECUTIVE_BATCH_FAILURES,
                f"the driver died in {new.consecutive_failures} batches in a row (last: batch "
                f"{state.started_batch}); the batch stays unconsumed")
            new.disabled = self.disabled.reason
        self.ledger.commit(new, keys=("batch",))
        if new.skipped:
            self.cfg = dataclasses.replace(self.cfg, skip=frozenset(skip_key(k) for k in new.skipped))
        self.metrics.restore(new.counts, new.attempts)
        if self.cfg.max_held:
            self.metrics.set_held(held_count(new.held))
        self.metrics.consecutive.labels(**self.metrics.ids).set(new.consecutive_failures)
        if self.disabled:
            self.metrics.set_disabled(self.disabled.reason)
            log.error("queue disabled (%s): %s", self.disabled.reason, self.disabled.message)
        return new

    # --- executing a batch --------------------------------------------------------------
    def execute(self, df, local_rows: list | None = None) -> BatchResult:
        """Run the handler over `df` (INPUT_COLUMNS, or a function making it); raises when the
        batch fails as a whole. A small batch whose rows are at hand (`local_rows`) runs in the
        local worker process, and then needs no DataFrame at all."""
        if local_rows is not None and self.local is not None:
            result = self._run_local(self.cfg, local_rows)
            if result is not None:
                return result
        # The liveness: a job past its bound stops the heartbeat (driver/liveness.py).
        try:
            with self.metrics.running("a batch's Spark job", self.bounds.job()), spark_run(self.spark, self.live):
                result = batch_result(self._run_job(df))
        except Exception as err:
            self.sink.failed()
            self.live.check(err)  # a trip cancelled the job: the stop, no rollback
            if is_job_failure(err):
                self._await_quiet_executors()
            raise
        self.live.check()
        self.sink.ran(result)
        return result

    def _run_job(self, df) -> list:
        mapped = self.handler_map(frame(df), self.sink.current(self.cfg, self.ledger.state))
        sink = self.s.sink
        if sink is not None and sink.path is not None:
            mapped = mapped.persist()
            try:
                rows = collect_results(mapped.filter("kind != 'ok'"))
                write_path_outputs(mapped, self.s.sink)
            finally:
                mapped.unpersist()
            return rows
        return collect_results(mapped)

    def _await_quiet_executors(self, timeout: float = QUIET_TIMEOUT) -> None:
        """A failed job returns before Spark has killed its other tasks. The next job (a
        rollback, a bisection segment) can then be handed the Python worker being killed and
        die of CancelledKeyException without running its messages, so wait for those tasks
        to end first. Batches are serialized (`lock`), so no other job of ours is running."""
        start = time.monotonic()
        try:
            while time.monotonic() < start + timeout and not self.stopping.is_set():
                if running_tasks(self.spark) == 0:
                    if time.monotonic() > start + 0.1:
                        log.info("waited %.1fs for the failed job's tasks to end", time.monotonic() - start)
                    return
                time.sleep(0.1)
            if not self.stopping.is_set():
                log.info("tasks of the failed job still running after %gs; going on", timeout)
        except Exception as err:  # noqa: BLE001 - best effort: a dead JVM fails the next job anyway
            log.info("could not read the executors' running tasks: %s", first_line(err))

    # --- one batch, end to end -------------------------------------------------------------
    def run_ahead(self, local_rows: list) -> tuple[bool, BatchResult | None]:
        """A small retry batch's handler calls in the local worker, before `handle` takes the
        batch lock: (ran, result). Its settle still waits for the lock, but a source batch no
        longer waits for the calls (measured at 1% poison: a fifth of the time the lock was
        held). `ran` False: not here (ordering Key needs the chains the lock protects; no
        local worker; a disabled or stopping queue); `result` None: the local worker failed,
        and `handle(local_failed=True)` runs the batch as a Spark job under the lock, as it
        would have after that failure."""
        if self.local is None or self.cfg.max_held or self.disabled or self.stopping.is_set():
            return False, None
        cfg = self.cfg  # one snapshot: a source batch replaces self.cfg, never changes it
        if cfg.due_by is not None:
            cfg = dataclasses.replace(cfg, due_by=None)
        try:
            return True, self._run_local(cfg, local_rows)
        except QueueDisabled:
            return True, None  # handle raises it, under the lock, and records it

    def _run_local(self, cfg: WorkerConfig, rows: list) -> BatchResult | None:
        """A retry batch in the local worker; None when it failed there (a dead worker, a sink
        error): Spark decides then. With an exactly-once sink its outputs come back and are
        written with the settle."""
        assert self.local is not None
        cfg = self.sink.current(cfg, self.ledger.state, emit=True)
        bound = self.bounds.local(len(rows))
        run = self.live.begin(self.local.close)  # a trip kills the process: no outcome
        cfg = dataclasses.replace(cfg, reports=self.live.target(run)) if run else cfg
        try:
            with self.metrics.running(f"a retry batch of {len(rows)} in the local worker", bound):
                ran = batch_result(self.local.run(cfg, rows, timeout=bound))
            self.live.check()
            return ran
        except Exception as err:  # noqa: BLE001 - see the docstring
            self.live.check(err)  # QueueDisabled: run_ahead leaves it to handle
            if self.stopping.is_set():
                raise  # killed by the stop: the batch runs again after the restart
            log.warning("retry batch in the local worker failed (%s): running it as a Spark job",
                        first_line(err))
            return None
        finally:
            self.live.end(run)

    def handle(self, df, *, batch_id: int | None = None, positions: dict[str, int] | None = None,
               local_rows: list | None = None, due_by: int | None = None,
               ran: BatchResult | None = None, local_failed: bool = False) -> BatchResult:
        """Process and commit a source batch (`batch_id`) or a retry batch (`positions`: where
        its partitions stand once it is done). `due_by`: a retry batch planned from offsets
        (retry_plan), whose records the executors hold against that time. `ran`: a retry
        batch `run_ahead` already ran, to settle; `local_failed`: run_ahead's local run of it
        failed."""
        with self.lock:
            if self.disabled:
                raise self.disabled
            if batch_id is not None:
                # A replayed batch (a crash after the ledger committed it, before the
                # checkpoint did), or a new checkpoint that starts over: what the ledger
                # already accounts for is passed over, message by message, until this query
                # has read up to the ledger's positions.
                df = unaccounted(df, self.source_floor(), self.query_read)
                marked = copy.deepcopy(self.ledger.state)
                marked.started_batch, marked.in_batch = batch_id, True
                self.ledger.commit(marked, keys=("batch",))
            if self.cfg.max_held:
                # ordering Key: the tasks start from the chains the ledger committed.
                self.cfg = dataclasses.replace(self.cfg, chains=json.dumps(self.ledger.state.held))
            if due_by != self.cfg.due_by:
                self.cfg = dataclasses.replace(self.cfg, due_by=due_by)
            started = time.monotonic()
            # Rows the driver read (a retry batch the local worker could not run): Spark splits
            # their DataFrame across tasks arbitrarily, so an exactly-once sink's outputs come
            # back and are written with the settle, as the local worker's are (sink_state).
            emitting, self.sink.emit = self.sink.emit, self.sink.emit or local_rows is not None
            try:
                self.live.check()  # tripped in run_ahead, or in a batch on another thread
                isolated: list
                if ran is not None:
                    result, isolated = ran, []
                else:
                    result, isolated = self._execute_with_rollbacks(
                        df, local_rows, local_failed, source=batch_id is not None)
                executed = time.monotonic()
                self._settle(result, isolated, batch_id, positions)
                if batch_id is not None:
                    self._read_up_to(result.ends)
                if batch_id is not None and self.arrow is not None:
                    self.arrow.seen(result.largest)
                    self.metrics.largest_record.labels(**self.metrics.ids).set(self.arrow.largest)
                log.info("%s: %d messages, %d failed, in %.2fs (commit %.2fs)",
                         f"batch {batch_id}" if batch_id is not None else "retry batch",
                         result.n_ok + result.n_failed, result.n_failed,
                         time.monotonic() - started, time.monotonic() - executed)
                return result
            except QueueDisabled as err:
                self._disable(err)
                raise
            finally:
                self.sink.emit = emitting
                self.metrics.batch_seconds.labels(**self.metrics.ids).observe(time.monotonic() - started)

    def record_source_start(self, ends: dict[int, int]) -> None:
        with self.lock:
            state = copy.deepcopy(self.ledger.state)
            state.source_start = {str(p): o for p, o in ends.items()}
            self.ledger.commit(state, keys=("batch",))

    def _read_up_to(self, ends: dict[tuple[str, int], int]) -> None:
        source = self.s.source.topic
        for (topic, partition), last in ends.items():
            if topic == source and last + 1 > self.query_read.get(partition, 0):
                self.query_read[partition] = last + 1

    def source_floor(self) -> dict[int, int]:
        """Source partition -> the next offset without an outcome, as the ledger says."""
        prefix = f"{self.s.source.topic}:"
        return {int(k[len(prefix):]): v for k, v in self.ledger.state.positions.items()
                if k.startswith(prefix)}

    def _execute_with_rollbacks(self, df, local_rows: list | None = None, local_failed: bool = False,
                                source: bool = False) -> tuple[BatchResult, list]:
        """`local_failed`: the local worker already failed this batch once (run_ahead), so its
        first run here is the Spark job that failure leads to; a rollback tries both again.
        `source`: a source batch, whose Arrow batches are sized from the records seen."""
        threshold = self.s.queue_disable.consecutive_batch_failures
        first = True
        while True:
            if source:
                self._size_arrow(df, after_failure=not first)
            try:
                return self.execute(df, None if first and local_failed else local_rows), []
            except Exception as err:  # noqa: BLE001 - a whole-batch failure: a rollback
                first = False
                if self.stopping.is_set() or not is_job_failure(err):
                    raise
                n = self._rollback(err)
                if n >= threshold:
                    if source:
                        self._size_arrow(df, after_failure=True)
                    return self._isolate(df, err)
                time.sleep(min(self.retry_sleep * 2 ** (n - 1), 30))

    def _size_arrow(self, df, *, after_failure: bool) -> None:
        """Rows per Arrow batch for the next run of a source batch (spark.ArrowRows), set on
        the batch's own session: the query's, which Spark cloned from ours at its start."""
        rows = self.arrow.rows(after_failure=after_failure) if self.arrow is not None else None
        if rows is None or rows == self.arrow_rows_set:
            return
        df.sparkSession.conf.set(ARROW_ROWS_CONF, str(rows))
        self.arrow_rows_set = rows
        self.metrics.arrow_rows.labels(**self.metrics.ids).set(rows)
        if after_failure:
            log.info("the batch runs again with %d rows per Arrow batch (the source topic's bound)", rows)

    def _rollback(self, err: Exception) -> int:
        state = copy.deepcopy(self.ledger.state)
        state.consecutive_failures += 1
        self.ledger.commit(state, keys=("batch",))
        self.metrics.batch_failures.labels(**self.metrics.ids).inc()
        self.metrics.consecutive.labels(**self.metrics.ids).set(state.consecutive_failures)
        log.warning("batch failed as a whole (%d in a row): %s", state.consecutive_failures,
                    first_line(err))
        return state.consecutive_failures

    def _isolate(self, df, err: Exception) -> tuple[BatchResult, list]:
        if self.cfg.max_held:
            # Bisection runs parts of the batch apart, each from the same chains: a key's later
            # message could run in one part before its earlier one failed in another. So with
            # ordering Key the queue is disabled instead; nothing of the batch is lost.
            raise QueueDisabled(DisableReason.CONSECUTIVE_BATCH_FAILURES,
                                f"{self.ledger.state.consecutive_failures} batch failures in a row; "
                                "with ordering Key the batch is not bisected (it would break key "
                                f"order), it stays unconsumed; last error: {first_line(err)}")
        df = frame(df)
        keys, waiting = batch_keys(df, self.cfg)
        # Every message of the batch gets its outcome here, the isolated ones too: the ends
        # come from all of them, not from the segments that succeeded.
        ends = last_offsets(keys)
        log.warning("isolating the failure in a batch of %d messages by bisection", len(keys))
        stale = 0  # segments run twice because of a stale worker: counted, not hidden

        def run(segment, again: bool = True):
            nonlocal stale
            try:
                return self.execute(df.filter(segment_filter(segment)))
            except Exception as seg_err:  # noqa: BLE001
                if self.stopping.is_set() or not is_job_failure(seg_err):
                    raise
                if again and STALE_WORKER in str(seg_err):
                    # Spark reused a Python worker's socket that a crash in the previous run
                    # left behind: the job died before running this segment, which says
                    # nothing about its messages (seen in CI: an innocent one quarantined).
                    log.info("segment of %d failed on a stale Python worker (%s): running it again",
                             len(segment), STALE_WORKER)
                    stale += 1
                    return run(segment, again=False)
                log.info("segment of %d failed: %s", len(segment), first_line(seg_err))
                return None

        budget = 4 * max(1, math.ceil(math.log2(max(len(keys), 2)))) + 8
        # An exactly-once sink: a segment's partitions are not whole, so their outputs come
        # back and are written with the settle, by position (sink_state).
        emitting, self.sink.emit = self.sink.emit, True
        try:
            iso = bisect(keys, run, budget)
        except RuntimeError as budget_err:
            raise QueueDisabled(DisableReason.CONSECUTIVE_BATCH_FAILURES, f"{budget_err}; last error: "
                                f"{first_line(err)}") from err
        finally:
            self.sink.emit = emitting
        self.metrics.isolation_runs.labels(**self.metrics.ids).inc(iso.executions + stale)
        merged = functools.reduce(BatchResult.merge, iso.results, BatchResult())
        merged.ends, merged.waiting = ends, waiting
        unsettled = iso.unsettled(name=lambda k: "/".join(map(str, k)))
        if unsettled:  # a broken environment, not a message: nothing is quarantined
            raise QueueDisabled(DisableReason.CONSECUTIVE_BATCH_FAILURES, f"{self.ledger.state.consecutive_failures} batch "
                                f"failures in a row and {unsettled}; last error: {first_line(err)}")
        if iso.cleared:  # an outage that ended during the bisection (isolation.py)
            log.warning("not culprits, they succeeded when run again: %s", iso.cleared)
        if not iso.culprits:
            return merged, []
        raws = df.filter(segment_filter(iso.culprits)).collect()
        isolated = [(raw, iso.failures.get((raw.topic, raw.partition, raw.offset), 1)
                     + self.ledger.state.consecutive_failures + attempts_before(raw, self.s.source.topic),
                     first_line(err)) for raw in raws]
        log.warning("isolated %d message(s) that fail the whole batch in %d re-executions: %s",
                    len(isolated), iso.executions + stale,
                    ", ".join(f"{r.topic}/{r.partition}/{r.offset}" for r, _, _ in isolated))
        return merged, isolated

    # --- deciding and committing ----------------------------------------------------------
    def _settle(self, result: BatchResult, isolated: list, batch_id: int | None,
                positions: dict[str, int] | None) -> None:
        done = self.settler.settle(result, isolated, batch_id, positions)
        if done.dues:
            self.scheduled_due = min(done.dues + [d for d in (self.scheduled_due,) if d is not None])
            if self.on_scheduled is not None:
                self.on_scheduled()
            if self.local is not None:
                self.local.warm(self.cfg)

    def _disable(self, err: QueueDisabled) -> None:
        self.disabled = err
        state = copy.deepcopy(self.ledger.state)
        state.disabled = err.reason
        state.fault = err.at
        try:
            self.ledger.commit(state, keys=("batch", "skips"))
        except Exception:  # noqa: BLE001 - still stop; the metric says why
            log.exception("could not record the disabled queue in the ledger")
        self.metrics.set_disabled(err.reason)
        log.error("queue disabled (%s): %s", err.reason, err.message)

