"""Helpers of the driver over Spark frames and the rows of a batch: where a record came from,
what an isolated record says, the offsets a batch left unaccounted, Spark's running tasks."""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field

from antidote_api.spark_conf import tunable
from antidote_consumer.kafka import headers as h
from antidote_consumer.worker.attempts import Reason
from antidote_consumer.worker.executor import (INPUT_COLUMNS, RESULT_FIELDS, RESULT_SCHEMA, ResultRow,
                                               WorkerConfig, process)
from antidote_consumer.worker.task_settle import SETTLED

# A failed row of RESULT_SCHEMA as the driver keeps it (see batch_result).
Failure = ResultRow


class HandlerMap:
    """`df.mapInArrow(process with cfg)`, its UDF made once per WorkerConfig.

    DataFrame.mapInArrow makes a new UDF at every call: it pickles the function with its
    config, makes the JVM's Python function and a column per input field: ~10 ms of calls
    into the JVM per batch, for a config that changes only with retry plans and key chains.
    The UDF's column names its inputs (INPUT_COLUMNS), so it fits any batch's frame; the rest
    is what DataFrame.mapInArrow does with the UDF (pyspark 4.2), with the same arguments."""

    def __init__(self, spark_conf: dict[str, str] | None = None, partitions: int = 0):
        self._cached: tuple | None = None  # (cfg, the UDF's column)
        self.tasks_per_core = tunable(spark_conf, "spark.antidote.tasksPerCore")
        self.partitions = partitions  # of the source topic, and so of the retry topics

    def __call__(self, df, cfg: WorkerConfig):
        # At most tasks_per_core tasks a core, each reading several partitions past that
        # (spark_conf.TUNABLES): a task's fixed cost is paid per task, not per partition. The
        # cores are read at each batch (executors that register late raise them); a topic
        # within the bound gets no coalesce, whose new Dataset costs the driver a few ms.
        if self.tasks_per_core and self.partitions > self.tasks_per_core:
            tasks = self.tasks_per_core * df.sparkSession.sparkContext.defaultParallelism
            if self.partitions > tasks:
                df = df.coalesce(tasks)
        if self._cached is None or self._cached[0] != cfg:
            self._cached = (cfg, _handler_udf(cfg))
        return _map_in_arrow(df, self._cached[1])


def _handler_udf(cfg: WorkerConfig):
    from pyspark.sql import functions as F
    from pyspark.sql.functions import pandas_udf
    from pyspark.util import PythonEvalType

    # pyspark's stubs know no overload for the Arrow-iterator eval type (207): it is mapInArrow's.
    udf = pandas_udf(functools.partial(process, cfg), returnType=RESULT_SCHEMA,  # type: ignore[call-overload]
                     functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF)
    return udf(*[F.col(name) for name in INPUT_COLUMNS])


def _map_in_arrow(df, udf_column):
    from pyspark.sql import DataFrame

    return DataFrame(df._jdf.mapInArrow(udf_column._jc, False, None), df.sparkSession)


def collect_results(df) -> list[ResultRow]:
    """The job's result rows (RESULT_SCHEMA), fetched as Arrow batches rather than by
    `DataFrame.collect`. collect() has the JVM pickle every row and pyspark build a Row of it;
    as Arrow they come over in columns: measured on 2,000 failed rows without headers, 15 ms
    less wall time a thousand rows, and a tenth of the driver's CPU with ~15 headers a row
    (docs/performance.md). `_collect_as_arrow` is what `DataFrame.toArrow` calls (pyspark
    4.2), without asking the JVM for the frame's schema again: the batches come in
    RESULT_SCHEMA. A failed job raises here as from collect(), with the job's own failure."""
    from py4j.protocol import Py4JJavaError

    try:
        batches = df._collect_as_arrow()
    except Py4JJavaError as err:
        # The Arrow path runs the job on a JVM thread of its own and hands its failure back
        # wrapped ("Exception thrown in awaitResult"). Raised as the job's failure, the
        # error a batch-isolated record carries names its cause (a crashed Python worker, a
        # task's exception) as it did with collect().
        cause = _awaited(err.java_exception)
        if cause is None:
            raise
        raise Py4JJavaError("An error occurred while collecting a batch's results.\n", cause) from None
    return results_of(batches)


def _awaited(java_exception):
    """The failure inside Spark's "Exception thrown in awaitResult" wrapper, or None."""
    if java_exception is None:
        return None
    message = java_exception.getMessage() or ""
    return java_exception.getCause() if message.startswith("Exception thrown in awaitResult") else None


def results_of(batches) -> list[ResultRow]:
    """ResultRows of Arrow record batches in RESULT_SCHEMA; a header is a (key, value) pair, as
    the Kafka client and the local worker give it."""
    rows: list[ResultRow] = []
    for batch in batches:
        columns = [batch.column(name).to_pylist() for name in RESULT_FIELDS]
        columns[_HEADERS] = [None if hs is None else [(x["key"], x["value"]) for x in hs]
                             for hs in columns[_HEADERS]]
        rows.extend(map(ResultRow._make, zip(*columns)))
    return rows


_HEADERS = RESULT_FIELDS.index("headers")


def running_tasks(spark) -> int:
    """Tasks the executors are running now, killed ones included until they end."""
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    return sum(e.numRunningTasks() for e in tracker.getExecutorInfos())


def frame(df):
    """A retry batch's DataFrame is made only if a Spark job needs it: building one from
    driver-side rows costs more than running the batch in the local worker."""
    return df() if callable(df) else df


def is_job_failure(err: BaseException) -> bool:
    """A failure of the Spark job (a task, a worker, the JVM), not a bug in the driver code."""
    from py4j.protocol import Py4JError
    from pyspark.errors.exceptions.captured import CapturedException

    return isinstance(err, (Py4JError, CapturedException))


def origin_of(raw, source_topic: str):
    """(origin, user headers, cycle) of a record as read. A source record's antidote.* headers
    are dropped (h.source_headers), as the workers drop them. A malformed retry record (not
    written by Antidote) is taken as it is: the worker quarantines it as invalid."""
    hdrs = [(x.key, x.value) for x in (raw.headers or [])]
    if raw.topic == source_topic:
        return h.Origin(raw.topic, raw.partition, raw.offset, raw.ts), h.source_headers(hdrs), 0
    st = h.retry_state_or_none(hdrs)
    if st is None:
        return h.Origin(raw.topic, raw.partition, raw.offset, raw.ts), hdrs, 0
    return st.origin, h.user_headers(hdrs), st.cycle


def attempts_before(raw, source_topic: str) -> int:
    """Handler calls a retry record had in its earlier cycles; 0 for a source record (and for
    a malformed retry record)."""
    if raw.topic == source_topic:
        return 0
    st = h.retry_state_or_none([(x.key, x.value) for x in (raw.headers or [])])
    return st.attempts if st is not None else 0


def row_at(r) -> dict:
    """Where a failed row was read and why, as the ledger records a Fault (`antidote skip`)."""
    return dict(topic=r.topic, partition=r.partition, offset=r.offset, reason=r.reason,
                attempts=r.attempts, error_class=r.error_class, error_message=r.error_message,
                first_failure=r.first_failure, last_failure=r.last_failure, cycle=r.cycle)


def isolated_at(raw, attempts: int, error: str, cycle: int, now: int) -> dict:
    return dict(topic=raw.topic, partition=raw.partition, offset=raw.offset,
                reason=Reason.BATCH_ISOLATION.value, attempts=attempts,
                error_class="antidote.BatchFailure", error_message=error,
                first_failure=now, last_failure=now, cycle=cycle)


def unaccounted(df, floor: dict[int, int], read: dict[int, int]):
    """`df` (a source batch) without the records below `floor` (partition -> next offset
    without an outcome): those were committed with their outcomes by an earlier batch. `read`:
    where the running query has read to (see caught_up); once it is caught up, `df` as it is
    (the filter cost ~4-5 ms of the driver's time a batch)."""
    if caught_up(floor, read):
        return df
    return df.filter(floor_condition(floor))


def caught_up(floor: dict[int, int], read: dict[int, int]) -> bool:
    """Whether a query that has read each source partition up to `read` (the offset after
    the last record its committed batches held) is at or past the ledger's `floor` in every
    partition the floor names. Spark starts each batch where the last ended, so no later batch
    of that query holds a record below the floor: `unaccounted` would keep every record. A
    partition the query has not read yet may start below it (a replay from an old checkpoint
    spans as many batches as maxOffsetsPerTrigger cuts it into), so it is not caught up."""
    return all(read.get(p, -1) >= offset for p, offset in floor.items())


def floor_condition(floor: dict[int, int]) -> str:
    """The SQL condition of `unaccounted`: one expression string, so the filter costs one call
    into the JVM per batch (built from Column objects it took one per partition and operator,
    ~10 ms a batch)."""
    pairs = ", ".join(f"{int(p)}, {int(o)}L" for p, o in sorted(floor.items()))
    return f"offset >= coalesce(map({pairs})[partition], 0L)"


def batch_keys(df, cfg) -> tuple[list[tuple[str, int, int]], dict]:
    """The (topic, partition, offset) of a batch that a bisection divides, in order. A planned
    retry batch (`cfg.due_by`) is cut where its executors stop (retry_plan.cut_waiting): a
    segment without the record a partition waits on would run what comes after it."""
    from pyspark.sql import functions as F

    from .retry_plan import cut_waiting

    ordered = df.orderBy("topic", "partition", "offset")
    if cfg.due_by is None:
        return [tuple(r) for r in ordered.select("topic", "partition", "offset").collect()], {}
    ours = F.filter("headers", lambda x: x.key.isin(h.DUE, h.CONSUMER))
    rows = [(r.topic, r.partition, r.offset, [(x.key, x.value) for x in r.h or []])
            for r in ordered.select("topic", "partition", "offset", ours.alias("h")).collect()]
    return cut_waiting(rows, cfg.due_by, cfg.source_topic, cfg.owner, h.due_of, h.consumer_of)


def segment_filter(keys):
    """A filter selecting exactly `keys` (topic, partition, offset), as offset ranges."""
    from pyspark.sql import functions as F

    ranges: dict[tuple[str, int], list[int]] = {}
    for topic, partition, offset in keys:
        ranges.setdefault((topic, partition), []).append(offset)
    cond = None
    for (topic, partition), offsets in ranges.items():
        offsets.sort()
        start = prev = offsets[0]
        spans = []
        for o in offsets[1:]:
            if o != prev + 1:
                spans.append((start, prev))
                start = o
            prev = o
        spans.append((start, prev))
        for lo, hi in spans:
            c = ((F.col("topic") == topic) & (F.col("partition") == partition)
                 & F.col("offset").between(lo, hi))
            cond = c if cond is None else cond | c
    return cond


def write_path_outputs(mapped, sink) -> None:
    """A batch's outputs written to a path sink (`spec.sink.path`, an EffectiveSink).

    One folder per batch, named after the first record it read (where it was read: the
    source or a retry topic). A record is read by one batch only, so no other batch
    overwrites it, and a replayed batch reads the same record first and overwrites its own
    folder: idempotent. (Original offsets collide: a retried message's with the batch it
    came from, partitions' with each other.)"""
    assert sink is not None and sink.path is not None  # only a path sink's batches get here
    out = mapped.filter("kind = 'ok'").selectExpr(
        "key", "output AS value", "otopic AS topic", "opartition AS partition",
        "ooffset AS offset", "ots AS timestamp")
    first = mapped.filter("kind NOT IN ('summary', 'end', 'chains', 'waiting')").selectExpr(
        "min(struct(topic, partition, offset)) AS f").first().f
    if first is not None:
        out.write.mode("overwrite").format(sink.format).save(
            f"{sink.path.rstrip('/')}/batch={first.topic}-{first.partition}-{first.offset}")


def now_ms() -> int:
    return int(time.time() * 1000)


def skip_key(text: str) -> tuple[str, int, int]:
    topic, partition, offset = text.rsplit(":", 2)
    return topic, int(partition), int(offset)


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    for line in text:
        if line[:1].isspace():
            continue  # a traceback's frames and source lines, not the error itself
        if "Error" in line or "Exception" in line:
            return line.strip()[:300]
    return (text[0] if text else type(err).__name__)[:300]


@dataclass
class BatchResult:
    failures: list = field(default_factory=list)  # Rows of RESULT_SCHEMA (retry / final)
    n_ok: int = 0
    n_attempts: int = 0
    ends: dict[tuple[str, int], int] = field(default_factory=dict)  # last offset read, by partition
    # ordering Key: source partition -> its chains after the batch (JSON), see worker.ordering
    chains: dict[int, str] = field(default_factory=dict)
    # A planned retry batch: (topic, partition) -> (offset, due) of the first record the
    # executors found not due yet; the partition's position stops there.
    waiting: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    largest: int = 0  # bytes of the largest record the executors read (spark.ArrowRows)
    # An exactly-once sink: outputs that came back to be written with the settle (the local
    # worker's, a bisection's), as (key, value, headers); and the entries the tasks committed.
    outputs: list[tuple] = field(default_factory=list)
    sink: dict[str, dict] = field(default_factory=dict)  # "topic:partition" -> entry (JSON)
    # Retries the tasks wrote themselves (worker.task_settle): retry cycle -> messages, the
    # earliest due time among them, and how many asked Retry(after=...) past the bound.
    settled: dict[int, int] = field(default_factory=dict)
    settled_due: int | None = None
    settled_capped: int = 0
    # Final failures the tasks settled: (reason, disposition) -> [messages, systemic signals],
    # and the last one's (reason, error class, origin, disposition) when a task knew it.
    settled_finals: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    settled_last: tuple | None = None

    @property
    def n_failed(self) -> int:
        """Its failed messages: the rows the driver settles, and those the tasks did."""
        return len(self.failures) + self.settled_figures()[1]

    def settled_figures(self) -> tuple[int, int]:
        """(failed, judged) of the failures the tasks settled, as queueDisable.failureRatio
        counts them: every retry is a failure, a final one when it is a systemic signal."""
        retries = sum(self.settled.values())
        return (retries + sum(signals for _, signals in self.settled_finals.values()),
                retries + sum(n for n, _ in self.settled_finals.values()))

    def add_final(self, reason: str, disposition: str, n: int, signals: int) -> None:
        held = self.settled_finals.setdefault((reason, disposition), [0, 0])
        held[0] += n
        held[1] += signals

    def add_settled(self, cycle: int, n: int, due: int | None, capped: int) -> None:
        self.settled[cycle] = self.settled.get(cycle, 0) + n
        if due is not None:
            self.settled_due = due if self.settled_due is None else min(self.settled_due, due)
        self.settled_capped += capped

    def wait_at(self, where: tuple[str, int], offset: int, due: int) -> None:
        if where not in self.waiting or offset < self.waiting[where][0]:
            self.waiting[where] = (offset, due)

    def merge(self, other: BatchResult) -> BatchResult:
        ends = dict(self.ends)
        for where, last in other.ends.items():
            ends[where] = max(last, ends.get(where, -1))
        out = BatchResult(self.failures + other.failures, self.n_ok + other.n_ok,
                          self.n_attempts + other.n_attempts, ends, {**self.chains, **other.chains},
                          dict(self.waiting), max(self.largest, other.largest),
                          self.outputs + other.outputs, {**self.sink, **other.sink})
        for where, (offset, due) in other.waiting.items():
            out.wait_at(where, offset, due)
        for result in (self, other):
            for cycle, n in result.settled.items():
                out.add_settled(cycle, n, result.settled_due, 0)
            out.settled_capped += result.settled_capped
            for (reason, disposition), (n, signals) in result.settled_finals.items():
                out.add_final(reason, disposition, n, signals)
            out.settled_last = result.settled_last or out.settled_last
        return out


def batch_result(rows) -> BatchResult:
    """A run's result rows (executors' or the local worker's) gathered into its BatchResult."""
    result = BatchResult()
    for r in rows:
        if r.kind == "summary":
            result.n_ok += r.n_ok
            result.n_attempts += r.n_attempts
            result.largest = max(result.largest, r.largest or 0)
        elif r.kind == "end":
            where = (r.topic, r.partition)
            result.ends[where] = max(r.offset, result.ends.get(where, -1))
        elif r.kind == "chains":
            result.chains[r.partition] = r.error_message
        elif r.kind == "waiting":
            result.wait_at((r.topic, r.partition), r.offset, r.last_failure)
        elif r.kind == SETTLED and r.reason is None:  # retries, per cycle
            result.add_settled(r.cycle, r.n_ok, r.last_failure, r.retry_after or 0)
        elif r.kind == SETTLED:  # final failures, per reason and disposition
            result.add_final(r.reason, r.disposition, r.n_ok, r.n_attempts)
            if r.otopic is not None:
                result.settled_last = (r.reason, r.error_class, h.Origin(r.otopic, r.opartition, r.ooffset, r.ots),
                                       r.disposition)
        elif r.kind == "sink":
            result.sink[f"{r.topic}:{r.partition}"] = json.loads(r.error_message)
        elif r.kind == "ok":  # an output to write with the settle (exactly-once, emitted)
            result.outputs.append((r.key, r.output, [(k, v) for k, v in (r.headers or ())]))
        else:
            # A ResultRow (namedtuple), from the executors (collect_results) and the local
            # worker alike: the settle reads ~30 fields of every failed row by name.
            result.failures.append(r)
    return result
