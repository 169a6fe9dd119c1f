"""An exactly-once Kafka sink in the executors' Python workers (docs/consumer.md, "Exactly-once
to a Kafka sink"): a task's outputs from one partition, kept in memory while the handler runs
and written in chunks, each in one Kafka transaction with the ledger entry that says which of
the partition's offsets the committed outputs cover (kafka.sink_entries).

A transaction lasts as long as writing one chunk: the handler never runs inside one, so no
attempt or batch is sized against the transaction timeout. One transactional producer per
partition id (antidote_api.names.sink_transactional_id), kept across tasks; its
init_transactions fences every earlier attempt of the partition, wherever it runs. In a Spark
task the producers are the executor's, kept by its transactional writer process
(worker.txn_writer) for all its Python workers; elsewhere (the driver's local worker, tests)
by the process itself."""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from antidote_api.names import sink_transactional_id
from antidote_consumer.kafka.sink_entries import SinkEntry, entry_key, read_entry

from . import sink, txn_writer
from .task_settle import Held, label
from .txn_writer import COMMIT_TIMEOUT_S, init_producer  # one producer setup, the writer's

# A chunk is written before the next message once this much waits, or its first output has
# waited this long: the memory a task holds, and how late its outputs become visible.
CHUNK_BYTES = 8 * 1024 * 1024
CHUNK_AGE_S = 10.0
# How often a chunk's producer is made again when fenced (or left unusable) before the task
# fails: a partition moved between Python workers fences once, and a second fence within
# one commit was seen under load (steady_state.py's Avro runs: "_STATE, Erroneous state").
FENCED_TRIES = 3
# With the executor's writer (worker.txn_writer) a chunk is committed while the task goes on,
# so chunks are smaller: most of a task's outputs are written while its handler still runs,
# and the task waits at its end only for its last chunk. At most this many of a partition's
# chunks wait for the writer at once (the memory a task holds: one more, being filled).
# Each chunk is a transaction, which costs the broker: 2 MB chunks cost it 0.65 us of CPU an
# output against 0.45 at 4 MB and at 8 MB (benchmarks/sink_cost.py).
SHARED_CHUNK_BYTES = 4 * 1024 * 1024
MAX_INFLIGHT = 2

_producers: dict[str, Any] = {}  # transactional id -> producer, kept by the process


@dataclass(frozen=True)
class ExactlyOnce:
    """What a task needs for an exactly-once sink (part of WorkerConfig)."""

    ledger_topic: str
    ledger_writer: str  # the ledger writer's transactional id: the partitions' ids' prefix
    # "topic:partition" -> (the ledger's position, the entry: SinkEntry.to_json), for the
    # partitions whose entry is ahead of their position (after a crash).
    entries: tuple[tuple[str, int, str], ...] = ()
    # The partitions whose entries the driver knows to be current: fenced and read by a task
    # of this driver since its start and since the last failed job. A task of any other
    # partition (an attempt that died may have committed an entry the driver has not seen)
    # reads its entry from the ledger once its own producer has fenced the others.
    fresh: frozenset[str] = frozenset()
    # The ledger offset the driver's copy is current to (driver.ledger_tail): a task that reads
    # its entry reads only the records from there on; none of its key there, and the entry
    # passed in `entries` (or none) is the ledger's. 0: the whole topic.
    since: int = 0

    def entry(self, where: str) -> tuple[int, SinkEntry] | None:
        for key, position, entry in self.entries:
            if key == where:
                return position, SinkEntry.from_json(json.loads(entry))
        return None


def producer(conf: dict, transactional_id: str):
    """The process's producer of `transactional_id`, initialized once (which fences the
    partition's earlier attempts). The broker answers CONCURRENT_TRANSACTIONS while it still
    ends a fenced producer's transaction: retried until COMMIT_TIMEOUT_S."""
    p = _producers.get(transactional_id)
    if p is None:
        p = _producers[transactional_id] = init_producer(conf, transactional_id)
    return p


def _fenced(err) -> bool:
    """A producer another has taken the partition's id from (or one no longer usable). A
    producer learns it was fenced from the broker's answer to its first record's partition
    (AddPartitionsToTxn), while the chunk's later records are still being produced: those
    fail with code _FATAL, whose error does not say fatal() (confluent-kafka 2.16). Seen
    whenever a partition's task moves to another Python worker of the executor (each keeps
    its own producers) with more records in its chunk than the round trip takes to produce."""
    from confluent_kafka import KafkaError

    # _STATE: the producer's transaction state machine left unusable by such a fence.
    return err.fatal() or err.code() in (KafkaError._FATAL, KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH, KafkaError._STATE)


def forget(transactional_id: str) -> None:
    """A producer that failed (fenced by a newer attempt elsewhere, or broken) is made again
    the next time this process serves the partition."""
    _producers.pop(transactional_id, None)


@dataclass(frozen=True)
class Chunk:
    start: int  # the first offset it covers
    records: tuple[list, list, list | None]  # its outputs' keys, values and headers (Records.lists)
    entry: SinkEntry
    extra: list  # failure records the task settled (task_settle): (topic, partition, key, value, headers, ts)

    def __len__(self) -> int:
        return len(self.records[1])


@dataclass
class Records:
    """Outputs waiting for their chunk, as three lists rather than a tuple each: serialized for
    the executor's writer (and read back there) in about half the time, measured, and
    produced with no `headers=None` argument when none has headers (which librdkafka's
    Python binding parses at a cost per call)."""

    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)
    headers: list | None = None  # None while no output has headers

    def __bool__(self) -> bool:
        return bool(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def append(self, key: bytes | None, value: bytes, headers) -> None:
        if headers and self.headers is None:
            self.headers = [None] * len(self.values)
        self.keys.append(key)
        self.values.append(value)
        if self.headers is not None:
            self.headers.append(headers or None)

    def lists(self) -> tuple[list, list, list | None]:
        return self.keys, self.values, self.headers


@dataclass
class PartitionSink:
    """One partition's outputs in one task, and what their ledger entry says."""

    topic: str  # where the records were read (the source, or a retry topic)
    partition: int
    sink_topic: str
    eos: ExactlyOnce
    conf: dict
    position: int = 0  # the ledger's position at the batch's start (below it: settled)
    carried: SinkEntry | None = None  # the entry a crashed run left, ahead of the position
    pending: set[int] = field(default_factory=set)
    retried: set[int] = field(default_factory=set)  # settled (task_settle): retries,
    final: dict[str, set[int]] = field(default_factory=dict)  # and final ones, by their label
    held: Held | None = None  # the chunk's failures the task may settle itself
    stop: int | None = None  # the partition stops here (a record not due yet; a Fault)
    faulted: bool = False  # at a Fault: its chunk's failures are the driver's (task_settle)
    buffer: Records = field(default_factory=Records)
    size: int = 0
    start: int = -1  # the first offset the buffered chunk covers (the last commit's end)
    # The buffered chunk is due (see due()) once `size` reaches `limit` or at `due_at`
    # (monotonic: its first output's time + CHUNK_AGE_S; never while nothing is buffered).
    limit: int = CHUNK_BYTES
    due_at: float = math.inf
    _id: str = ""
    _open: Any = None  # the producer; the writer's token (shared)
    _shared: Any = False  # the executor's writer client (set by open() in a Spark task); False: this process's producers
    # Shared: the chunks sent to the writer and not yet committed, oldest first; how many of
    # the writer's replies are still to come; the first refusal, handled by _recover.
    inflight: list[Chunk] = field(default_factory=list)
    outstanding: int = 0
    failed: Exception | None = None
    tries: int = 0

    @classmethod
    def open(cls, eos: ExactlyOnce, sink_kafka: dict, topic: str, partition: int,
             retried_task: bool) -> PartitionSink:
        where = f"{topic}:{partition}"
        part = cls(topic, partition, sink_kafka.get("topic", ""), eos,
                   sink.client_conf(sink_kafka) if sink_kafka else {})
        part._id = sink_transactional_id(eos.ledger_writer, topic, partition)
        part._shared = txn_writer.client() if part.conf and in_spark_task() else False
        part.limit = SHARED_CHUNK_BYTES if part._shared else CHUNK_BYTES
        known = eos.entry(where)
        if known is not None:
            part.position, part.carried = known
        if (where not in eos.fresh or retried_task) and part.conf:
            # Fence first, then read: an attempt that died after it committed is seen, and
            # one still running can commit nothing more.
            part._producer()
            found = read_entry(part.conf, eos.ledger_topic, entry_key(topic, partition), eos.since)
            if found is not None and (part.carried is None or found.next >= part.carried.next):
                part.carried = found
        if part.carried is not None:
            part.pending = {o for o in part.carried.pending if o >= part.position}
            part.retried = {o for o in part.carried.retried if o >= part.position}
            part.final = {name: {o for o in offsets if o >= part.position} for name, offsets in part.carried.final}
        return part

    def _producer(self):
        """Takes the partition's id: this process's producer of it, or the executor writer's
        (with a token of this task's, which the writer's other tasks then fence)."""
        if self._open is None:
            if self._shared:
                token = uuid.uuid4().hex
                self._shared.call("take", self._id, self.conf, token)
                self._open = token
                return token
            try:
                self._open = producer(self.conf, self._id)
            except Exception:
                forget(self._id)
                raise
        return self._open

    def covers(self, offset: int) -> bool:
        """A replay passes over `offset`: its output is committed, or it needs none."""
        carried = self.carried
        return carried is not None and offset < carried.next and offset not in self.pending

    def add(self, offset: int, key: bytes | None, value: bytes, headers) -> None:
        # Called once per output, so written for it: no method call on the common path
        # (together with due(), ~0.3 us a message before; measured in performance-history.md).
        buf = self.buffer
        if not buf.values:  # the chunk's first output
            if self.start < 0:
                self.start = offset
            self.due_at = time.monotonic() + CHUNK_AGE_S
        if headers or buf.headers is not None:
            buf.append(key, value, headers)
        else:
            buf.keys.append(key)
            buf.values.append(value)
        self.size += len(value) + (len(key) if key else 0)
        if self.pending:
            self.pending.discard(offset)  # a pending message that succeeded this time

    def pend(self, offset: int) -> None:
        if self.start < 0:
            self.start = offset
        self.pending.add(offset)

    def settle(self, candidate) -> None:
        """A failure whose record the task may write with the chunk (task_settle): pending until
        the chunk's answer."""
        assert self.held is not None
        self.pend(candidate.offset)
        self.held.waiting.append(candidate)
        self.size += len(candidate.record[3] or b"") if candidate.record is not None else 0
        if self.due_at == math.inf:
            self.due_at = time.monotonic() + CHUNK_AGE_S

    def _decide(self) -> list:
        """The chunk's failure records the task writes (task_settle.Held.decide; none for a
        Drop); their offsets are settled once the chunk is committed."""
        if self.held is None or not self.held.waiting:
            return []
        settled = self.held.decide(self.faulted)
        for c in settled:
            self.pending.discard(c.offset)
            if c.final is None:
                self.retried.add(c.offset)
            else:
                self.final.setdefault(label(c.final), set()).add(c.offset)
        return [c.record for c in settled if c.record is not None]

    def due(self) -> bool:
        """Whether the buffered chunk is to be committed before the next message (False while
        nothing is buffered)."""
        return self.size >= self.limit or time.monotonic() >= self.due_at

    def entry(self, upto: int) -> SinkEntry:
        """The entry of a commit once every offset below `upto` is done with."""
        nxt = upto if self.stop is None else min(upto, self.stop)
        pending = {o for o in self.pending if o < nxt}
        if self.carried is not None and self.carried.next > nxt:
            # A replay that ends before the crashed run did: what it has not reached stays.
            pending |= {o for o in self.carried.pending if o >= nxt}
            nxt = self.carried.next
        return SinkEntry(nxt, frozenset(pending), frozenset(self.retried),
                         tuple((name, frozenset(o)) for name, o in sorted(self.final.items()) if o))

    def commit(self, upto: int) -> SinkEntry | None:
        """Writes the buffered outputs and the entry for every offset below `upto` in one
        transaction; raises (failing the task: the batch is replayed) when it is refused or
        not done within COMMIT_TIMEOUT_S. Nothing buffered: nothing to protect, no commit.

        A producer fenced since this process initialized it (Spark ran the partition's last
        task in another Python worker, which took the id over) is made again, fencing that
        one, and the chunk is committed only if the partition's entry, read after that, covers
        none of it: else another attempt of these offsets committed them, and this one stops."""
        from confluent_kafka import KafkaException

        if not self.buffer and not (self.held and self.held.waiting):
            return None
        extra = self._decide()
        if self._shared:
            return self._send(upto, extra)
        for tries in range(1, FENCED_TRIES + 1):
            try:
                entry = self._write(self.entry(upto), extra)
                break
            except KafkaException as err:
                if not _fenced(err.args[0]) or tries == FENCED_TRIES:
                    raise self._refused(err) from err
                self._take_back(err)
        self.buffer, self.size, self.start, self.due_at = Records(), 0, upto, math.inf
        self.carried = entry if self.carried is None or entry.next >= self.carried.next else self.carried
        return entry

    def _send(self, upto: int, extra: list) -> SinkEntry:
        """Shared: the chunk goes to the executor's writer, which commits it while this task
        goes on; it is kept until the writer says it is committed (done() waits for that)."""
        entry = self.entry(upto)
        chunk = Chunk(self.start, self.buffer.lists(), entry, extra)
        self.inflight.append(chunk)
        self._post(chunk)
        self.buffer, self.size, self.start, self.due_at = Records(), 0, upto, math.inf
        self.carried = entry if self.carried is None or entry.next >= self.carried.next else self.carried
        self._shared.poll()
        while self.failed is not None or len(self.inflight) > MAX_INFLIGHT:
            if self.failed is not None:
                self._recover()
            else:
                self._shared.wait_one()
        return entry

    def _post(self, chunk: Chunk) -> None:
        token = self._producer()
        self._shared.send(("commit", self._id, token, self.sink_topic, chunk.records, self.eos.ledger_topic,
                           entry_key(self.topic, self.partition).encode(),
                           json.dumps(chunk.entry.to_json()).encode(), chunk.extra), self._replied)
        self.outstanding += 1

    def _replied(self, reply: tuple) -> None:
        self.outstanding -= 1
        if self.failed is not None:
            return  # a later chunk of a refused one: the writer refused it too; resent or dropped with it
        err = txn_writer.error_of(reply)
        if err is None:
            self.inflight.pop(0)  # replies come in order: the oldest is committed
        else:
            self.failed = err

    def _recover(self) -> None:
        """The writer refused a chunk (and so every later one of this task's). Fenced (another
        task took the partition, or another executor's producer fenced the writer's): the
        partition is taken back and every chunk not committed is sent again, unless the entry
        read after that says another attempt committed their offsets; else the task fails."""
        from confluent_kafka import KafkaException

        while self.outstanding:
            self._shared.wait_one()
        err, self.failed = self.failed, None
        self.tries += 1
        fenced = isinstance(err, KafkaException) and _fenced(err.args[0])
        if not fenced or self.tries >= FENCED_TRIES:
            raise self._refused(err) from err
        self._open = None
        self._producer()  # a new token; a new producer if the writer's was fenced
        found = read_entry(self.conf, self.eos.ledger_topic, entry_key(self.topic, self.partition),
                           self.eos.since)
        first = self.inflight[0].start
        if found is not None and found.next > first:
            raise RuntimeError(f"{self.topic}/{self.partition}: another attempt committed offsets "
                               f"from {first} on (its entry ends at {found.next}): this one stops") from err
        for chunk in self.inflight:
            self._post(chunk)

    def done(self) -> None:
        """Returns once every chunk sent is committed (shared); raises as commit does."""
        while self._shared and self.inflight:
            if self.failed is not None:
                self._recover()
            else:
                self._shared.wait_one()

    def _take_back(self, err) -> None:
        """A new producer for the partition's id (fencing whichever took it), then its entry:
        raises if another attempt committed any of the buffered chunk's offsets."""
        forget(self._id)
        self._open = None
        self._producer()
        found = read_entry(self.conf, self.eos.ledger_topic, entry_key(self.topic, self.partition), self.eos.since)
        if found is not None and found.next > self.start:
            raise RuntimeError(f"{self.topic}/{self.partition}: another attempt committed offsets "
                               f"from {self.start} on (its entry ends at {found.next}): this one "
                               "stops") from err
        if found is not None and (self.carried is None or found.next >= self.carried.next):
            self.carried = found

    def _write(self, entry: SinkEntry, extra: list) -> SinkEntry:
        p = self._producer()  # this process's (commit() sends a shared chunk to the writer)
        p.begin_transaction()
        sink.produce_all(p, self.sink_topic, self.buffer.lists())
        sink.produce_records(p, extra)
        p.produce(self.eos.ledger_topic, json.dumps(entry.to_json()).encode(),
                  entry_key(self.topic, self.partition).encode())
        p.commit_transaction(COMMIT_TIMEOUT_S)
        return entry

    def _refused(self, err) -> Exception:
        """The chunk was not committed (a record refused, a timeout): its transaction is
        aborted and its producer made again for the next chunk (one whose transaction was
        aborted for a refused record fails its next commit with OUT_OF_ORDER_SEQUENCE_NUMBER,
        librdkafka 2.x); the task fails and the batch is replayed."""
        if self._shared:  # the writer aborted it (or dropped its producer) before it answered
            lost = len(self.buffer) + sum(len(c) for c in self.inflight)
            return RuntimeError(f"sink topic {self.sink_topic}: {lost} outputs not committed: {err}")
        try:
            if err.args[0].txn_requires_abort() and self._open is not None:
                self._open.abort_transaction(COMMIT_TIMEOUT_S)  # ended now, not at its timeout
        except Exception:  # noqa: BLE001, S110 - the next producer's init fences it anyway
            pass
        forget(self._id)
        self._open = None
        return RuntimeError(f"sink topic {self.sink_topic}: {len(self.buffer)} outputs not committed: "
                            f"{err.args[0]}")


def _task_context():
    """The running Spark task's context; None outside one (the local worker: no Spark)."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    return TaskContext.get()


def in_spark_task() -> bool:
    """Whether this runs a Spark task (a Python worker of an executor): its producers are the
    executor's writer's."""
    return _task_context() is not None


def retried_task() -> bool:
    """Whether this task is Spark's retry of one that failed (which may have committed part of
    its partition's outputs before it died): it reads its entry from the ledger."""
    ctx = _task_context()
    return ctx is not None and ctx.attemptNumber() > 0  # (no shuffle: no stage is retried)
