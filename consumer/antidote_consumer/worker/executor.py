"""The executor side: `mapInArrow` over a batch, one pass per message, outputs to the sink.

Only what the driver must act on comes back: failed messages in full, one summary row per
task (successes and handler calls), and one "end" row per partition read (its last offset,
which the ledger records as accounted for). Successful outputs never travel to the driver.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from antidote_consumer.kafka import headers as h

from . import attempt_reports, collector, result_rows, sink
from .result_rows import emit as _emit
from .result_rows import row as _row
from .attempts import Plan, Reason, plan_of, run_pass
from .deadline import AttemptTimeout, watchdog
from .encode import with_formats
from .governance import Governance
from .handler import encode_output, load_handler
from .input_notes import largest_record, note_ends, note_one_partition
from .message import Message
from .ordering import HELD_OVERFLOW, Action, TaskOrder
from .sink_txn import ExactlyOnce, PartitionSink, retried_task
from .task_settle import TaskSettle, of_failure
from .task_sinks import TaskSinks
from .verdict import Verdict

# Input rows: the Kafka source's columns, timestamps as epoch ms.
HEADERS = "array<struct<key:string,value:binary>>"
INPUT_FIELDS = [("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
                ("offset", "long"), ("ts", "long"), ("headers", HEADERS)]
INPUT_COLUMNS = [name for name, _ in INPUT_FIELDS]
INPUT_SCHEMA = ", ".join(f"{name} {ddl}" for name, ddl in INPUT_FIELDS)

# Rows the driver gets back: failed messages (and, for path sinks, outputs), plus one
# "summary" row per task and an "end" row per (topic, partition) read, whose offset is the
# last one the task read there (whatever its outcome). o* columns are the original coordinates; topic/partition/offset
# are where the record was read (the source or a retry topic). A planned retry batch adds a
# "waiting" row per retry partition it stopped in: the offset of its first record not due
# by the plan's time, and that record's due time in last_failure.
RESULT_COLUMNS = [
    ("kind", "string"), ("key", "binary"), ("value", "binary"), ("headers", HEADERS),
    ("otopic", "string"), ("opartition", "int"), ("ooffset", "long"), ("ots", "long"),
    ("topic", "string"), ("partition", "int"), ("offset", "long"),
    ("attempts", "int"), ("cycle", "int"), ("reason", "string"), ("error_class", "string"),
    ("error_message", "string"), ("stack", "string"), ("first_failure", "long"),
    ("last_failure", "long"), ("output", "binary"), ("n_ok", "long"), ("n_attempts", "long"),
    # What the handler chose by raising antidote.Retry / NonRetryable (chosen.py), and the
    # delay a Retry asked for (ms; the driver bounds it when it sets the due time).
    ("chosen", "string"), ("retry_after", "long"),
    # The summary row's: bytes of the largest record the task read from Arrow batches (key,
    # value and headers), from which the driver sizes the next source batch's Arrow batches
    # (spark.ArrowRows); 0 from the local worker, whose rows are never Arrow.
    ("largest", "long"),
    ("route", "int"),  # the policy's route a final failure takes (spec.routes index; governance.py)
    ("disposition", "string"),  # a "settled" row's of final failures (task_settle)
]
RESULT_SCHEMA = ", ".join(f"{name} {ddl}" for name, ddl in RESULT_COLUMNS)
RESULT_FIELDS = [name for name, _ in RESULT_COLUMNS]


class ResultRow(NamedTuple):
    """A result row as the driver keeps it, whichever process ran it (a tuple: pyspark's Row
    finds a field by a linear search of its names, and the settle reads ~30 fields of every
    failed row). Typed as a failed message's row, the rows the driver settles; a summary,
    end, chains or waiting row has None in the message's fields (RESULT_COLUMNS' order,
    checked by a unit test)."""

    kind: str
    key: bytes | None
    value: bytes | None
    headers: list | None
    otopic: str
    opartition: int
    ooffset: int
    ots: int
    topic: str
    partition: int
    offset: int
    attempts: int
    cycle: int
    reason: str | None
    error_class: str | None
    error_message: str | None
    stack: str | None
    first_failure: int
    last_failure: int
    output: bytes | None
    n_ok: int | None
    n_attempts: int | None
    chosen: str | None
    retry_after: int | None
    largest: int | None
    route: int | None
    disposition: str | None = None


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a task needs, small and picklable (shipped with the function)."""

    handler: str
    source_topic: str
    immediate: int
    cycles: int
    non_retryable: frozenset[str]
    validation: dict | None  # the policy's validation, wire form
    # {"bootstrap.servers", "topic", "secret_dir"}: the sink's Secret is read from its
    # directory on the executor (mounted there too), so no credential travels with a task.
    sink_kafka: dict | None
    emit_outputs: bool  # path sinks: outputs come back as rows for Spark to write
    fault_stops: bool = False  # disposition Fault: nothing after a poison message is processed
    skip: frozenset[tuple[str, int, int]] = frozenset()  # moved away by `antidote skip`
    attempt_timeout: float = 60.0  # seconds, spec.retries.attemptTimeout
    # spec.ordering Key (see ordering.py): the bound per key (0: no ordering), the chains at
    # the batch's start (JSON, from the ledger) and the cycle delays (ms) a failed front waits.
    max_held: int = 0
    chains: str = ""
    delays: tuple[int, ...] = ()
    # Retry records are passed over unless this consumer wrote them (`namespace/name`; a retry
    # topic is shared by the QueueConsumers of one source). A retry batch planned from offsets
    # (driver.retry_plan) gives its time: a record due later stops its partition, unattempted.
    owner: str | None = None
    due_by: int | None = None
    # An exactly-once Kafka sink (sink_txn): the outputs go through each partition's
    # transactions, or, with emit_outputs, back to the driver (which writes them with its
    # settle); either way a replay passes over what the ledger's entries say is written.
    exactly_once: ExactlyOnce | None = None
    # spec.source.kafka.valueFormat / keyFormat and the registry ({"value", "key", "registry":
    # {"url", "secret_dir"}}), decoded before each attempt (decode.py); None: bytes as they are.
    formats: dict | None = None
    # spec.sink.kafka.valueFormat: outputs encoded with a registry's schema (encode.py)
    sink_format: dict | None = None
    governance: Governance | None = None  # spec.routes, retries/validation.maxAge (governance.py)
    # Failures the task may settle itself with its chunks (task_settle; exactly-once writes only)
    settle: TaskSettle | None = None
    # The driver's attempt reports endpoint, (url, secret, run): worker/attempt_reports.py
    reports: tuple[str, str, str] | None = None


_cache: dict[Any, Any] = {}


def _plan(cfg: WorkerConfig) -> tuple[Plan, Any]:
    # dicts: not hashable; chains and due_by change with every batch
    key = ("plan", repr(dataclasses.replace(cfg, chains="", due_by=None, exactly_once=None, reports=None)))
    if key not in _cache:
        _cache[key] = (plan_of(cfg), with_formats(load_handler(cfg.handler), cfg.formats, cfg.sink_format))
    return _cache[key]


def process(cfg: WorkerConfig, batches: Iterator, *, as_columns: bool = False) -> Iterator:
    """The handler over `batches`: Arrow batches of INPUT_COLUMNS (Spark), or their columns
    as lists with each record's headers as (key, value) pairs (the local worker's rows, as
    the driver read them). Yields result batches of RESULT_FIELDS: Arrow, or with
    `as_columns` the columns as lists (name -> list, headers as pairs), which the local
    worker pickles to the driver as they are."""
    # Long on purpose: the per-message hot loop of the Python workers. Helpers called per
    # message cost measurable CPU here (docs/consumer.md, throughput), so it stays inline.
    import pyarrow as pa

    collector.tune()  # once per process: see worker.collector
    sent = _columns if as_columns else _sent

    plan, handler = _plan(cfg)
    wd = watchdog(cfg.attempt_timeout)
    timed = wd.timed(handler)  # for the attempts after the first, made by run_pass
    clock = time.monotonic
    eos = cfg.exactly_once
    sink_topic, producer = sink.producer_for(None if eos is not None or cfg.emit_outputs else cfg.sink_kafka)
    if producer is not None:
        sink.begin()
    rep = attempt_reports.reporter(cfg.reports)  # outcomes told to the driver as they come
    out: list[tuple] = []  # result rows, RESULT_FIELDS order (see _emit)
    # Exactly-once: each partition's PartitionSink (the current one in `part`); `writes`: their
    # outputs go through its transactions (else back to the driver, emit_outputs).
    part: PartitionSink | None = None
    writes = eos is not None and not cfg.emit_outputs and cfg.sink_kafka is not None
    settle = cfg.settle if writes and not cfg.max_held else None
    sinks = None if eos is None else TaskSinks(  # (cfg.settle: a replay's cycles, in every run)
        eos, cfg.sink_kafka or {}, retried_task(), cfg.settle,
        (lambda: rep.ask(n_ok)) if settle is not None and settle.ask else None, out)

    n_ok = n_attempts = largest = 0
    ends: dict[tuple[str, int], int] = {}
    faulted: set[tuple[str, int]] = set()  # (topic, partition) stopped at a poison message
    # (topic, partition) -> (offset, due) of the record a planned retry batch stops at
    waiting: dict[tuple[str, int], tuple[int, int]] = {}
    owner, due_by = cfg.owner, cfg.due_by
    source = cfg.source_topic
    fault_stops = cfg.fault_stops
    skip = cfg.skip
    ok = Verdict.OK
    check = plan.check
    stale_ms = plan.gov.stale_ms if plan.gov is not None else None  # validation.maxAge
    order = TaskOrder(cfg.max_held, cfg.chains, cfg.delays) if cfg.max_held else None
    # Result rows are gathered across the task's Arrow batches and sent in as few batches as
    # the memory bound allows: each batch sent has a fixed cost (from_pydict, pyspark's struct
    # wrapping, the stream write, the JVM's read), and at 1% poison nearly every 256-row
    # input batch had a failure or two, so that was most of what failures cost here
    # (profiled). They are sent once they reach the largest input batch seen (checked where
    # a row is added): never more rows than Spark's own batches hold (maxRecordsPerBatch,
    # which the consumer sets from the records seen: spark.ArrowRows), the same memory bound.
    cap, read_at = 1, -1  # read_at: the offset of `part` last read
    # The hot loop: a success costs one Message, one handler call and one produce; everything a
    # failure needs (origin, headers parsing, error details) is built only on failure.
    for batch in batches:
        # An Arrow batch (Spark), or its columns as lists already: the local worker's rows were
        # made into Arrow only to be turned back into lists here (with the group-by of their
        # ends, about a third of that process's samples at 1% poison).
        pairs = isinstance(batch, tuple)  # headers as (key, value) pairs already
        keys, values, topics, parts, offsets, stamps, headers = batch if pairs else (
            batch.column(name).to_pylist() for name in INPUT_COLUMNS)
        if not pairs:
            # Only a source batch's largest record sizes the next source batch's Arrow batches
            # (driver.batches). The local worker's rows are retry records, never in an Arrow
            # batch, their antidote.* headers the largest part: adding them up was 6% of that
            # process's time at 1% poison (profiled), for a figure no one read.
            largest = max(largest, largest_record(batch))
        one_partition = note_one_partition(topics, parts, offsets, ends)
        if not one_partition:
            note_ends(topics, parts, offsets, ends)
        cap = max(cap, len(keys))
        rep.progress(n_ok)
        now = int(time.time() * 1000)
        stale = now - stale_ms if stale_ms else -1  # first read before it: too old (governance)
        for key, value, topic, partition, offset, ts, raw in zip(
                keys, values, topics, parts, offsets, stamps, headers):
            if faulted and (topic, partition) in faulted:
                continue  # left unconsumed: the consumer stops at the poison message before it
            if waiting and (topic, partition) in waiting:
                continue  # behind a record not due yet: a later batch reads it
            if skip and (topic, partition, offset) in skip:
                continue  # already in the poison topic, and counted, by `antidote skip`
            if sinks is not None:
                if part is None or partition != part.partition or topic != part.topic:
                    part = sinks.moved_to(part, read_at + 1 if writes else None, topic, partition)
                read_at = offset  # every offset of `part` below it is done with
                if part.carried is not None and part.covers(offset):
                    # Its output (or retry record) is committed: a replay does not run it again.
                    how = part.carried.settled_as(offset)
                    if how is None:
                        n_ok += 1
                    else:
                        sinks.passed(topic, how, now)
                    continue
                if writes and part.due():
                    part.commit(offset)
            user = (raw if pairs else [(x["key"], x["value"]) for x in raw]) if raw else ()
            if topic == source:
                cycle, before, first = 0, 0, None
                # Its antidote.* headers go before anything reads them (h.source_headers): a
                # forged one reaches neither the handler nor any record written for it.
                if user and h.has_ours(user):
                    user = h.source_headers(user)
                msg = Message(key, value, tuple(user) if user else (), topic, partition, offset, ts)
            else:
                if owner is not None:
                    wrote = h.consumer_of(user)
                    if wrote is not None and wrote != owner:
                        continue  # another QueueConsumer's, sharing the topic: not ours to run
                if due_by is not None:
                    due = h.due_of(user)
                    if due > due_by:
                        waiting[(topic, partition)] = (offset, due)
                        if part is not None:
                            part.stop = offset
                        continue
                try:
                    state = h.retry_state(user)
                    if state.cycle > cfg.cycles:
                        raise ValueError(f"not a retry record of this policy (antidote.cycle "
                                         f"{state.cycle}, the policy has {cfg.cycles} cycles)")
                except ValueError as err:
                    # Not written by Antidote: quarantine it as invalid, keep it whole.
                    _emit(out, Verdict.FINAL.value, key, value, user,
                          h.Origin(topic, partition, offset, ts), topic, partition, offset,
                          0, 0, Reason.VALIDATION.value, "antidote.ValidationError", str(err),
                          None, now, now, None)
                    if part is not None:
                        part.pend(offset)
                    if len(out) >= cap:
                        yield sent(out)
                    continue
                cycle, before, first, o = state.cycle, state.attempts, state.first_failure, state.origin
                held = h.HELD in (k for k, _ in user)
                user = h.user_headers(user)
                if held:  # parked for its key's order, never attempted: a first delivery
                    cycle, before, first = 0, 0, None
                msg = Message(key, value, tuple(user), o.topic, o.partition, o.offset, o.timestamp,
                              attempt=before + 1)
            if order is not None and key is not None:
                decided = order.before(msg.partition, key, msg.offset, from_source=topic == source,
                                       held=topic != source and held)
                if decided.action is not Action.RUN:
                    # Held (parked behind its key's message ahead) or past the bound: no
                    # attempt. `cycle` is the retry topic it goes to, `last_failure` its due.
                    overflow = decided.action is Action.OVERFLOW
                    _emit(out, (Verdict.OVERFLOW if overflow else Verdict.HELD).value, key, value, user,
                          _origin(msg),
                          topic, partition, offset, before, decided.cycle,
                          HELD_OVERFLOW if overflow else None, None, None, None,
                          first if first is not None else now, decided.due, None)
                    if part is not None:
                        part.pend(offset)
                    if len(out) >= cap:
                        yield sent(out)
                    continue
            # The first attempt is made here, inline: a pass through run_pass costs ~2.5us a
            # message (an Outcome, enum lookups), as much as a small handler. run_pass takes
            # over when validation refuses the message or the first attempt fails.
            result = failed = None
            if check is not None and check(value) is not None or stale > 0 and not cycle and msg.timestamp < stale:
                result = run_pass(msg, timed, plan, cycle)  # the validation verdict
            else:
                # Under the time limit: the watchdog reads these two (see deadline.py).
                wd.msg = msg
                wd.started = clock()
                try:
                    output = handler(msg)
                    if output is not None and output.__class__ is not bytes:
                        output = encode_output(output)
                except (Exception, AttemptTimeout) as err:  # noqa: BLE001 - the policy decides
                    failed = err
                finally:  # also when SystemExit & co. end the task: the worker may be reused
                    wd.started = 0.0
            if failed is not None:
                rep.failed(failed, n_ok)  # a failing message for the live breaker, before its retries
                # Outside the except block: the next attempts' errors must not chain to this one.
                result = run_pass(msg, timed, plan, cycle, failed=failed)
            if result is None:
                n_attempts += 1
                calls = 1
            else:
                n_attempts += result.attempts
                if result.verdict is not ok:
                    if part is not None:
                        part.pend(offset)
                    if fault_stops and result.verdict is Verdict.FINAL and result.route is None:
                        faulted.add((topic, partition))
                        if part is not None:
                            part.stop, part.faulted = offset + 1, True  # it (pending) and nothing after it
                    if order is not None:
                        order.after(msg.partition, key, msg.offset, now=now,
                                    retry_cycle=cycle + 1 if result.verdict is Verdict.RETRY else None)
                    origin, tried, since = _origin(msg), before + result.attempts, first if first is not None else now
                    row = _row(result.verdict.value, key, value, user, origin, topic, partition, offset, tried,
                               cycle, result.reason.value if result.reason else None, result.error_class,
                               result.error_message, result.stack, since, now, None, result.chosen,
                               result.retry_after, result.route)
                    if settle is not None and part is not None:
                        c = of_failure(settle, result.verdict is Verdict.RETRY, offset, row, reason=row[13],
                                       chosen=result.chosen, retry_after=result.retry_after, route=result.route,
                                       key=key, value=value, user=list(user), origin=origin, attempts=tried,
                                       cycle=cycle, first_failure=since, now=now, error_class=result.error_class,
                                       error_message=result.error_message, stack=result.stack)
                        if c is not None:
                            part.settle(c)  # written with its chunk if the breaker says yes (task_settle)
                            continue
                    out.append(row)
                    if len(out) >= cap:
                        yield sent(out)
                    continue
                output, calls = result.output, result.attempts
                rep.failing -= failed is not None  # it failed, then succeeded: a success
            n_ok += 1
            if order is not None:
                order.after(msg.partition, key, msg.offset, retry_cycle=None, now=now)
            if output is None:
                continue
            if writes:
                assert part is not None
                part.add(offset, key, output, user or None)
            elif producer is not None:
                try:
                    if user:
                        producer.produce(sink_topic, output, key, headers=user)
                    else:  # positional, no keywords: ~1us less a call
                        producer.produce(sink_topic, output, key)
                except BufferError:  # the local queue is full: let the network catch up
                    sink.produce(producer, sink_topic, key, output, user or None)
                if n_ok % 1000 == 0:
                    producer.poll(0)
            elif cfg.emit_outputs:
                _emit(out, "ok", key, value, user, _origin(msg), topic, partition, offset,
                      before + calls, cycle, None, None, None, None, None, None, output)
                if len(out) >= cap:
                    yield sent(out)
    if producer is not None:
        sink.delivered(producer, sink_topic)
    rep.close(n_ok)
    if sinks is not None:
        sinks.finish(ends, writes)  # the rest of each partition's outputs and records, and its entry
    for where, p in (sinks.parts if sinks is not None else {}).items():
        if p.carried is not None:  # what the ledger holds now, told to the driver ("sink" row)
            _emit(out, "sink", None, None, (), h.Origin(where[0], where[1], p.carried.next, 0),
                  where[0], where[1], p.carried.next, 0, 0, None, None,
                  json.dumps(p.carried.to_json()), None, None, None, None)
    chains = order.results() if order is not None else []
    end_rows = result_rows.summary(RESULT_FIELDS, n_ok=n_ok, n_attempts=n_attempts, largest=largest, ends=ends,
                                   chains=chains, waiting=waiting, settled=sinks.tally if sinks else None)
    # The rows still gathered go with the summary, in one batch.
    last = _columns(out)
    for name in RESULT_FIELDS:
        last[name] += end_rows[name]
    yield last if as_columns else pa.RecordBatch.from_pydict(last, schema=_arrow_schema())


def _columns(out: list[tuple]) -> dict[str, list]:
    return result_rows.columns(out, RESULT_FIELDS)


def _sent(out: list[tuple]):
    """The rows gathered in `out` as one Arrow batch; `out` is emptied for the next ones."""
    import pyarrow as pa

    return pa.RecordBatch.from_pydict(_columns(out), schema=_arrow_schema())


def _origin(msg: Message) -> h.Origin:
    return h.Origin(msg.topic, msg.partition, msg.offset, msg.timestamp)


def arrow_schema(fields: list[tuple[str, str]]):
    """The Arrow schema of (name, Spark DDL type) fields."""
    import pyarrow as pa

    types = {"string": pa.string(), "binary": pa.binary(), "int": pa.int32(), "long": pa.int64(),
             HEADERS: pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))}
    return pa.schema([(name, types[ddl]) for name, ddl in fields])


def _arrow_schema():
    if "arrow-schema" not in _cache:
        _cache["arrow-schema"] = arrow_schema(RESULT_COLUMNS)
    return _cache["arrow-schema"]
