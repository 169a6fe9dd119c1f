"""`antidote reader`: a finite job over the poison (or dead-letter) topic that applies the
policy's `reader` section to each message: Redrive, Archive, Drop or Hold.

It reads each partition from where the last run left off to the end offset seen at start
(later arrivals wait for the next run) and commits in chunks, exactly once: each chunk's
records (redriven, parked, rejected), its progress record in the reader ledger and the
consumer group's offsets (`send_offsets_to_transaction`) are one Kafka transaction. A killed
reader's open transaction is aborted when the next run starts (same transactional id), so
nothing it half-did is seen and nothing is redriven twice. An archive chunk writes its files
first (idempotent slices, see reader_archive) and then commits.

The reader ledger (`<read topic>.ledger-reader-<consumer>`, compacted) keeps, per partition,
the offsets resolved above the group's offset: held and filtered-out messages are left
alone, so a later run (another filter, another action) still finds them."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import cast

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from antidote_api.names import ledger_topic, parking_topic, reader_group_id, transactional_id
from antidote_api.semantics import EffectiveSettings, reader_topic
from antidote_consumer.kafka import auth as kafka_auth
from antidote_consumer.kafka.retry import retrying
from antidote_consumer.kafka.topics import max_message_bytes, partitions_of, wait_ready
from antidote_consumer.kafka.transactions import RecordRefused, TransactionalWriter

from .actions import Actions, Failed, Polled, Stopped, resolved
from .rules import (Plan, Progress, RateLimiter, ReaderError, ReaderOptions, ReaderReport,
                    original_partition, plan, read_fields, redrive_count, redrive_headers)

log = logging.getLogger("antidote.reader")

# Messages per transaction when no rate limit paces them. Each transaction costs a flush,
# the offsets and a commit (about 7 ms here): at 500 they were a quarter of a redrive's time
# (docs/performance.md, reader Redrive). A chunk is also held in memory whole, hence the
# byte bound: poison records can be as large as the topic allows.
CHUNK = 2000
CHUNK_BYTES = 32 * 1024 * 1024
EOF_WAIT = 70.0  # longest wait for an open transaction in the read topic (its timeout is 60s)
# Longest wait for any answer (a record or the end) of a partition that has records left to
# read: the client's own request timeout (librdkafka's socket.timeout.ms, 60 s) and a margin.
# Past it the broker does not deliver, and the run stops with an error instead of polling on.
READ_WAIT = 70.0


def group_id(settings: EffectiveSettings) -> str:
    return reader_group_id(settings.namespace, settings.consumer)


def reader_ledger(read_topic: str, settings: EffectiveSettings) -> str:
    return ledger_topic(read_topic, settings.namespace, f"reader-{settings.consumer}")


def run_reader(settings: EffectiveSettings, options: ReaderOptions, *, spark=None,
               stop: threading.Event | None = None, log_every: float = 5.0,
               client_conf: dict[str, str] | None = None) -> ReaderReport:
    """Run the reader once, to the end offsets seen at start. ReaderError for bad settings
    or options; the report's faultAt is set when the Fault disposition stopped it.
    `client_conf`: librdkafka properties over the secretRef's (`antidote redrive
    --kafka-property`, its quiet log level)."""
    p = plan(settings.reader, options)
    run = _Run(settings, p, spark=spark, stop=stop or threading.Event(), log_every=log_every,
               client_conf=client_conf)
    try:
        return run.execute()
    finally:
        run.close()


class _Run(Actions):
    def __init__(self, settings: EffectiveSettings, p: Plan, *, spark, stop: threading.Event,
                 log_every: float, client_conf: dict[str, str] | None = None):
        self.s, self.p, self.stop, self.log_every = settings, p, stop, log_every
        try:  # the poison or dead-letter topic, or a route's (spec.routes) by name
            self.topic = reader_topic(settings, p.source)
        except ValueError as err:
            raise ReaderError(str(err)) from None
        if self.topic == settings.topics.dlq and p.disposition == "Reject":
            raise ReaderError(f"spec.reader.disposition: Reject would write a message the reader cannot "
                              f"handle back into the dead-letter topic it reads ({self.topic}); use Drop or Fault")
        self.bootstrap = settings.source.bootstrap_servers
        self.conf = {**kafka_auth.source_config(settings, verify=True),  # the secretRef's, for librdkafka
                     **(client_conf or {})}
        self.report = ReaderReport(action=p.action, dryRun=p.dry_run, source=p.source,
                                   archivePath=p.archive_path if p.action == "Archive" else None)
        self.admin = AdminClient({**self.conf, "bootstrap.servers": self.bootstrap})
        self.ledger_topic = reader_ledger(self.topic, settings)
        self.limiter = RateLimiter(None if p.dry_run else p.rate)
        self.consumer: Consumer | None = None
        self.writer: TransactionalWriter | None = None  # not for a dry run
        self.progress: dict[int, Progress] = {}
        self.pending: str | None = None
        self.spark = spark
        self.own_spark = False
        self.archive = None
        self.source_partitions = 0
        self.created: set[str] = set()
        self.done = self.total = 0
        self.last_log = time.monotonic()

    # --- set-up ---------------------------------------------------------------------------
    def _exists(self, topic: str) -> bool:
        md = self.admin.list_topics(topic, timeout=30).topics.get(topic)
        return md is not None and md.error is None

    def _ensure(self, topic: str, like: str | None, config: dict | None = None) -> None:
        """Create `topic` (once) with `like`'s partition count and max.message.bytes."""
        if topic in self.created:
            return
        if not self._exists(topic):
            n = partitions_of(self.admin, like) if like else 1
            conf = dict(config or {})
            if like:
                conf["max.message.bytes"] = str(max_message_bytes(self.admin, like))
            for name, fut in self.admin.create_topics([NewTopic(topic, n, -1, config=conf)]).items():
                try:
                    fut.result(timeout=30)
                except Exception as err:  # noqa: BLE001
                    if "TOPIC_ALREADY_EXISTS" not in str(err):
                        raise RuntimeError(f"cannot create topic {name}: {err}") from err
            wait_ready(self.admin, [topic])
        self.created.add(topic)

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
        if self.writer is not None:
            self.writer.close()
        if self.own_spark and self.spark is not None:
            self.spark.stop()

    def _load_ledger(self) -> None:
        if not self._exists(self.ledger_topic):
            return
        c = Consumer({**self.conf, "bootstrap.servers": self.bootstrap,
                      "group.id": f"{group_id(self.s)}-loader",
                      "enable.auto.commit": False, "isolation.level": "read_committed",
                      "enable.partition.eof": True})
        try:
            tp = TopicPartition(self.ledger_topic, 0)
            low, high = retrying(lambda: c.get_watermark_offsets(tp, timeout=10),
                                 f"reader ledger {self.ledger_topic}: reading its offsets")
            if high <= low:
                return
            c.assign([TopicPartition(self.ledger_topic, 0, low)])
            while True:
                msg = c.poll(30)
                if msg is None:
                    raise TimeoutError(f"reader ledger {self.ledger_topic}: no answer while loading")
                err, raw_key, value = msg.error(), msg.key(), msg.value()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        break
                    raise RuntimeError(f"reader ledger {self.ledger_topic}: {err}")
                key = raw_key.decode() if raw_key is not None else ""
                doc = json.loads(value) if value is not None else None
                if key == "pending":
                    self.pending = (doc or {}).get("slice")
                elif key.startswith("partition-") and doc is not None:
                    self.progress[int(key.removeprefix("partition-"))] = Progress.from_json(doc)
        finally:
            c.close()

    def _open(self) -> list[int]:
        md = self.admin.list_topics(self.topic, timeout=30).topics.get(self.topic)
        if md is None or md.error is not None:
            return []
        parts = sorted(md.partitions)
        self.consumer = Consumer({
            **self.conf, "bootstrap.servers": self.bootstrap, "group.id": group_id(self.s),
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        if not self.p.dry_run:
            self._ensure(self.ledger_topic, None, {"cleanup.policy": "compact"})
            # Fences a killed (or still running) earlier reader and aborts its open
            # transaction, so nothing it did half-way is ever read.
            self.writer = TransactionalWriter(
                self.bootstrap, transactional_id(self.s.namespace, self.s.consumer, f"reader-{self.p.source}"),
                self.conf, what=f"the reader ledger {self.ledger_topic}")
        self._load_ledger()
        if self.p.action == "Redrive":
            self.source_partitions = partitions_of(self.admin, self.s.topics.source)
        if self.p.action == "Archive" and not self.p.dry_run:
            from .archive import ArchiveWriter

            if self.spark is None:
                from antidote_consumer.spark import spark_session

                self.spark = spark_session(self.s)
                self.spark.sparkContext.setLogLevel("WARN")
                self.own_spark = True
            assert self.p.archive_path is not None  # action Archive needs one (rules.Plan)
            self.archive = ArchiveWriter(self.spark, self.p.archive_path, self.p.archive_format)
            if self.pending:
                # A slice written by a reader killed before its commit: its messages are
                # still unresolved and are archived again below.
                log.info("removing archive slice %s of an interrupted run", self.pending)
                self.archive.discard(self.pending)
                self._commit({}, pending=None)
        return parts

    # --- the run --------------------------------------------------------------------------
    def execute(self) -> ReaderReport:
        parts = self._open()
        if not parts:
            log.info("topic %s does not exist: nothing to read", self.topic)
            return self.report
        consumer = self.consumer
        assert consumer is not None  # opened by _open
        ends, starts = {}, {}
        for part in parts:
            def ends_of(part: int = part) -> tuple[int, int]:
                return consumer.get_watermark_offsets(TopicPartition(self.topic, part), timeout=10)
            low, high = retrying(ends_of, f"topic {self.topic}: reading its offsets")
            prog = self.progress.setdefault(part, Progress())
            if prog.next < low:  # removed by retention: nothing left to resolve there
                prog.add(prog.next, low - 1)
            starts[part], ends[part] = prog.next, high
        self.total = sum(max(0, ends[q] - starts[q]) for q in parts)
        log.info("reader %s over %s: %d record(s) to read in %d partition(s)%s", self.p.action,
                 self.topic, self.total, len(parts), " (dry run)" if self.p.dry_run else "")
        try:
            for part in parts:
                if starts[part] < ends[part] and not self.stop.is_set():
                    self._read_partition(part, starts[part], ends[part])
        except Stopped:
            pass
        log.info("reader done: %s", self.report.dumps())
        return self.report

    def _chunk_size(self) -> int:
        return max(1, min(CHUNK, self.p.rate)) if self.p.rate and not self.p.dry_run else CHUNK

    def _read_partition(self, part: int, start: int, end: int) -> None:
        c = self.consumer
        assert c is not None  # opened by _open
        c.assign([TopicPartition(self.topic, part, start)])
        chunk: list[Polled] = []
        size = 0  # bytes of the chunk's keys and values
        lo = start  # the chunk covers offsets lo..(last read)
        deadline = None
        heard = time.monotonic()
        try:
            while not self.stop.is_set():
                msg = c.poll(1.0)
                if msg is None:
                    if time.monotonic() - heard > READ_WAIT:
                        raise TimeoutError(
                            f"topic {self.topic}/{part}: no record and no end from the broker for "
                            f"{READ_WAIT:g}s, after offset {chunk[-1].offset if chunk else lo - 1} of "
                            f"{start}..{end - 1}; nothing past the last settled record is lost: "
                            "the next run reads it again")
                    continue
                heard = time.monotonic()
                err = msg.error()
                offset = cast(int, msg.offset())  # set on records and on a partition's EOF
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"topic {self.topic}/{part}: {err}")
                    if offset >= end:
                        self._settle(part, chunk, lo, end - 1)
                        return
                    # An open transaction holds the rest back (read_committed): wait for it.
                    deadline = deadline or time.monotonic() + EOF_WAIT
                    if time.monotonic() > deadline:
                        log.warning("%s/%d: records up to %d are held by an open transaction; "
                                    "left for the next run", self.topic, part, end)
                        self._settle(part, chunk, lo, offset - 1)
                        return
                    continue
                if offset >= end:
                    self._settle(part, chunk, lo, end - 1)
                    return
                hdrs = cast(list, msg.headers() or [])  # (name, value) pairs, as consumed
                key, value = msg.key(), msg.value()
                chunk.append(Polled(offset, msg.timestamp()[1], key, value, hdrs, read_fields(hdrs)))
                size += len(key or b"") + len(value or b"")
                if offset + 1 >= end:
                    self._settle(part, chunk, lo, offset)
                    return
                if len(chunk) >= self._chunk_size() or size >= CHUNK_BYTES:
                    self._settle(part, chunk, lo, offset)
                    lo, chunk, size = offset + 1, [], 0
            self._settle(part, chunk, lo, chunk[-1].offset if chunk else lo - 1)
        finally:
            c.unassign()

    def _log_progress(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last_log >= self.log_every:
            self.last_log = now
            log.info("reader %s: %d/%d records read (%d redriven, %d archived, %d dropped, "
                     "%d left alone)", self.topic, self.done, self.total, self.report.redriven,
                     self.report.archived, self.report.dropped,
                     self.report.held + self.report.skippedByFilter)

    # --- one chunk ------------------------------------------------------------------------
    def _settle(self, part: int, chunk: list[Polled], lo: int, hi: int) -> None:
        """Decide and commit records `chunk` of offsets lo..hi (offsets without a record, such
        as transaction markers, are resolved with them)."""
        if hi < lo:
            return
        prog = self.progress[part]
        r, f = self.report, self.p.filter
        act: list[Polled] = []
        keep: list[int] = []  # offsets left unresolved (filtered out, held)
        for m in chunk:
            if prog.is_done(m.offset):
                continue  # handled by an earlier run
            if not f.matches(m.headers, m.timestamp, m.found):
                r.skippedByFilter += 1
                keep.append(m.offset)
                continue
            r.messages += 1
            if self.p.action == "Redrive" and self._refused(part, m):
                keep.append(m.offset)  # left in place, for Archive or Drop
                continue
            if self.p.action == "Hold":
                r.held += 1
                keep.append(m.offset)
                continue
            act.append(m)
        self._log_progress(len(chunk))
        if self.p.dry_run:
            self._count(act)
            return
        if self.p.action == "Hold":
            return  # Hold commits no progress
        if self.p.action == "Archive":
            self._archive(part, act, lo, hi, keep)
        elif self.p.action == "Drop":
            for _ in act:
                self.limiter.acquire()
            self._commit({part: resolved(prog, lo, hi, keep)})
            r.dropped += len(act)
        else:
            self._redrive(part, act, lo, hi, keep)

    def _count(self, act: list[Polled]) -> None:
        r = self.report
        for m in act:
            if self.p.action == "Redrive":
                if redrive_count(m.headers, m.found) >= self.p.max_redrives:
                    r.parked += 1
                else:
                    r.redriven += 1
            elif self.p.action == "Archive":
                r.archived += 1
            else:
                r.dropped += 1

    def _target(self, m: Polled, part: int) -> tuple[str, int | None, list, str]:
        """Where a redriven message goes: (topic, partition, headers, counter)."""
        source = self.s.topics.source
        n = redrive_count(m.headers, m.found)
        if n >= self.p.max_redrives:
            self._ensure(parking_topic(source), source)  # the loop guard
            return parking_topic(source), part % self.source_partitions, m.headers, "parked"
        p = original_partition(m.headers, m.found)
        return (source, p if p is not None and p < self.source_partitions else None,
                redrive_headers(m.headers, n), "redriven")

    def _commit(self, progress: dict[int, Progress], **pending) -> None:
        self._transaction([], progress, **pending)

    def _transaction(self, records: list, progress: dict[int, Progress], **pending) -> None:
        """Produce `records`, the ledger's progress (and pending slice) and the group offsets
        in one transaction; Failed (aborted, nothing written) when a record is refused."""
        paced = (self.s.topics.source, parking_topic(self.s.topics.source))

        def pace(topic: str) -> None:
            if topic in paced:
                self.limiter.acquire()  # redrives are paced; dispositions are not

        then: list[tuple] = [(self.ledger_topic, None, f"partition-{part}".encode(), json.dumps(prog.to_json()).encode(), [])
                for part, prog in progress.items()]
        if "pending" in pending:
            then.append((self.ledger_topic, None, b"pending",
                         json.dumps({"slice": pending["pending"]}).encode(), []))
        offsets = [TopicPartition(self.topic, part, prog.next) for part, prog in progress.items()]
        writer, consumer = self.writer, self.consumer
        assert writer is not None and consumer is not None  # no transaction in a dry run
        try:
            writer.transaction(records, check_records=True, then=then, offsets=offsets or None,
                               group=consumer.consumer_group_metadata() if offsets else None,
                               before=pace)
        except RecordRefused as err:
            raise Failed(str(err)) from None
        self.progress.update(progress)
        if "pending" in pending:
            self.pending = pending["pending"]
