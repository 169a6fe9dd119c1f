"""The retry topics as the driver sees them: each round's plan from offsets alone
(retry_plan.py), and for a small cycle the due records read by the driver itself.

A retry topic's records are in due order within a partition (one delay per topic, appended
as they fail), so a partition is read up to its first record that is not yet due, exactly
as a consumer that pauses the partition until then: nothing is attempted early and nothing
is re-queued. Read positions live in the ledger, committed with the batch's results."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from antidote_api.semantics import EffectiveSettings
from antidote_api.spark_conf import tunable
from antidote_consumer.kafka import auth as kafka_auth
from antidote_consumer.kafka.headers import consumer_of, due_of
from antidote_consumer.kafka.retry import LEADER_MOVED, retrying
from antidote_consumer.spark import KAFKA_READ_OPTIONS
from antidote_consumer.worker.executor import INPUT_COLUMNS, INPUT_SCHEMA

from .batches import Runtime
from .metrics import Metrics
from .recreated import RetryTopicGone, behind_ends
from .retry_plan import PartitionOffsets, RetryPlan, plan, position_key, spark_offsets

log = logging.getLogger("antidote.consumer")


# Records taken from the client per call when it has them fetched already (see read_due).
READ_CHUNK = 500


@dataclass
class DueBatch:
    rows: list[tuple] = field(default_factory=list)  # INPUT_COLUMNS order, headers as (key, value)
    positions: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> next offset
    next_due: int | None = None  # earliest due time of a record left waiting (ms)
    incomplete: bool = False  # a partition with records left gave no answer in time


class RetryReader:
    def __init__(self, bootstrap: str, delays: dict[str, int], client_conf: dict | None = None,
                 owner: str | None = None,
                 on_expired: Callable[[str, int, int, int], None] | None = None):
        """`delays`: each retry topic's cycle delay (ms), in cycle order."""
        self.topics = list(delays)
        self.delays = dict(delays)
        # Told (topic, partition, read position, first offset still kept) when records of a
        # retry partition expired before they were read: they are lost, and it must be loud.
        self.on_expired = on_expired
        self.reported: set[tuple[str, int, int]] = set()
        # Another QueueConsumer of the same source shares its retry topics: its records are
        # passed over, whatever their due time (its cycle delays may differ from ours).
        self.owner = owner
        base = {**(client_conf or {}), "bootstrap.servers": bootstrap}
        # The plan's offsets: earliest, last stable and by timestamp, each one request for
        # every retry partition at once.
        self.admin = AdminClient(base)
        conf = {**base, "group.id": "antidote-retry-reader", "enable.auto.commit": False,
                # A position before the first kept offset is found in plan (and reported);
                # never reset silently past lost records.
                "enable.partition.eof": True, "auto.offset.reset": "error",
                # It reads to the end and stops; the broker's default 500 ms long poll would
                # delay every end-of-partition (and so every retry batch) by that much.
                "fetch.wait.max.ms": 10}
        self.consumer = Consumer({**conf, "isolation.level": "read_committed"})
        # Offsets as read_committed sees them end at the last stable offset. Records of a
        # transaction that just committed stay behind it until the broker has written the
        # commit markers: the high watermark says whether something is still on its way.
        # (Also what the consumer's topic depths are read with.)
        self.uncommitted = Consumer({**conf, "isolation.level": "read_uncommitted"})
        self.partitions = {t: sorted(self.consumer.list_topics(t, timeout=30).topics[t].partitions)
                           for t in self.topics}
        # Where each partition was last read to its end, or past others' records. After a
        # transaction the last record is followed by a commit marker that read_committed
        # never returns; starting past it avoids waiting for a record that is not there.
        self.ends: dict[str, int] = {}

    def forget(self) -> None:
        """Read from the committed positions again: the rows of the last read were not
        committed, and the hints in `ends` may lie past them."""
        self.ends.clear()

    def close(self) -> None:
        self.consumer.close()
        self.uncommitted.close()

    def _list(self, specs: dict[TopicPartition, OffsetSpec],
              level: IsolationLevel) -> dict[tuple[str, int], tuple[int, int]]:
        """(offset, timestamp) by partition, as the broker answers `specs`."""
        if not specs:
            return {}

        def ask():
            futures = self.admin.list_offsets(specs, isolation_level=level, request_timeout=10)
            try:
                return {(tp.topic, tp.partition): (r.offset, r.timestamp)
                        for tp, r in ((tp, f.result()) for tp, f in futures.items())}
            except KafkaException as err:
                # A leader that moved or restarted (a broker crash): the client asked with the
                # leader and epoch it cached. Refresh its metadata, then `retrying` asks again.
                code = err.args[0].code() if err.args and isinstance(err.args[0], KafkaError) else None
                if code in LEADER_MOVED:
                    self.admin.list_topics(timeout=10)
                raise
        return retrying(ask, f"retry topics {', '.join(self.topics)}: reading their offsets")

    def _expired(self, topic: str, partition: int, start: int, low: int) -> None:
        """Records at [start, low) were deleted by retention before this consumer read them.
        (Markers of committed transactions take offsets too, so this is an upper bound; on a
        retry topic that several QueueConsumers share, some may have been another's.)"""
        if (topic, partition, low) in self.reported:
            return
        self.reported.add((topic, partition, low))
        log.error("retry records LOST: %s partition %d holds offsets from %d on, but this consumer "
                  "had read only up to %d; offsets %d..%d expired unread (retention.ms of %s is "
                  "shorter than the consumer was stopped or its cycle delay). Their messages got "
                  "no outcome; the original coordinates were in their antidote.original.* headers",
                  topic, partition, low, start, start, low - 1, topic)
        if self.on_expired is not None:
            self.on_expired(topic, partition, start, low)

    def plan(self, positions: dict[str, int], now_ms: int, limit: int) -> RetryPlan:
        """What is due now in every retry partition, from offsets alone (see retry_plan)."""
        tps = [TopicPartition(t, p) for t in self.topics for p in self.partitions[t]]
        committed = IsolationLevel.READ_COMMITTED
        low = self._list({tp: OffsetSpec.earliest() for tp in tps}, committed)
        stable = self._list({tp: OffsetSpec.latest() for tp in tps}, committed)
        # The first record with a timestamp after now - delay: not due yet (one at exactly
        # now - delay is due now, as its antidote.due says). With read_committed the broker
        # answers -1 when that record lies at or after the last stable offset: then
        # everything it lets us read is due.
        found = self._list({tp: OffsetSpec.for_timestamp(now_ms - self.delays[tp.topic] + 1) for tp in tps},
                           committed)
        starts = {(tp.topic, tp.partition): max(positions.get(position_key(tp.topic, tp.partition), 0),
                                                self.ends.get(position_key(tp.topic, tp.partition), 0))
                  for tp in tps}
        idle = [tp for tp in tps if max(starts[(tp.topic, tp.partition)], low[(tp.topic, tp.partition)][0])
                >= stable[(tp.topic, tp.partition)][0]]
        high = self._list({tp: OffsetSpec.latest() for tp in idle}, IsolationLevel.READ_UNCOMMITTED)
        # A position past the high watermark: the topic was deleted (and recreated) while this
        # consumer ran; its new records would lie below the position, never read.
        gone = behind_ends(positions, {where: end for where, (end, _ts) in high.items()})
        if gone:
            raise RetryTopicGone(gone)
        parts = []
        for tp in tps:
            where = (tp.topic, tp.partition)
            offset, ts = found[where]
            parts.append(PartitionOffsets(
                tp.topic, tp.partition, start=starts[where], low=low[where][0], stable=stable[where][0],
                delay=self.delays[tp.topic], found=(offset, ts) if offset >= 0 else None,
                high=high[where][0] if where in high else None))
        out = plan(parts, now_ms, limit)
        for topic, partition, start, first in out.expired:
            self._expired(topic, partition, start, first)
            self.ends[position_key(topic, partition)] = first
        return out

    def read_due(self, planned: RetryPlan, limit: int) -> DueBatch:
        """A small cycle, read by the driver: the due records of `planned`'s partitions, each
        up to its first record not due (by its own antidote.due), at most `limit`."""
        now_ms = planned.now
        # Past records lost to retention: committed with the next retry batch.
        out = DueBatch(positions={position_key(t, p): low for t, p, _start, low in planned.expired},
                       incomplete=planned.incomplete)
        tps = [TopicPartition(t, p, start) for (t, p), (start, _stable) in sorted(planned.reads.items())]
        if not tps:
            return out
        self.consumer.assign(tps)
        open_parts = {(tp.topic, tp.partition) for tp in tps}
        while open_parts and len(out.rows) < limit:
            # What the client has fetched already, in one call (one call per record was most
            # of this loop); when it has nothing, the next record is waited for up to a
            # second, as before. Never more than the rows still wanted: no record is taken
            # past `limit`, and nothing taken is dropped unread but what a closed partition
            # delivers, which a poll would have passed over too.
            msgs = self.consumer.consume(num_messages=min(READ_CHUNK, limit - len(out.rows)), timeout=0)
            if not msgs:
                msg = self.consumer.poll(1.0)
                if msg is None:
                    out.incomplete = True  # nothing arrived in time; the next round tries again
                    break
                msgs = [msg]
            for msg in msgs:
                if not open_parts:
                    break
                self._take(msg, open_parts, now_ms, out)
        self.consumer.unassign()
        return out

    def _take(self, msg, open_parts: set[tuple[str, int]], now_ms: int, out: DueBatch) -> None:
        """One record (or end of partition) of read_due's partitions into `out`."""
        where = (msg.topic(), msg.partition())
        if where not in open_parts:
            return
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                # Read to the end: what is before it is in `rows`, another consumer's, or a
                # transaction marker. Committing this position (with the rows) keeps the
                # markers and others' records behind it, so their expiry is not taken for
                # a loss (see _expired).
                self.ends[position_key(*where)] = out.positions[position_key(*where)] = msg.offset()
                open_parts.discard(where)
                return
            raise RuntimeError(f"retry topic {msg.topic()}: {msg.error()}")
        headers = msg.headers() or []  # a new list of (key, value) pairs at every call
        owner = consumer_of(headers) if self.owner is not None else None
        if owner is not None and owner != self.owner:
            self.ends[position_key(*where)] = out.positions[position_key(*where)] = msg.offset() + 1
            return
        due = due_of(headers)
        if due > now_ms:
            out.next_due = due if out.next_due is None else min(out.next_due, due)
            # Done with this partition; what it still delivers is passed over above.
            # (Pausing it instead made the next assign of it wait ~1 s for a first fetch.)
            open_parts.discard(where)
            return
        # Headers go to the local worker as the client gave them, (key, value) pairs: as
        # dicts they cost a dict per header to build and to pickle there and back.
        out.rows.append((msg.key(), msg.value(), where[0], where[1], msg.offset(), msg.timestamp()[1], headers))
        out.positions[position_key(*where)] = msg.offset() + 1


class RetryPump:
    """One round of the retry pump: a plan from offsets, then a small cycle read by the driver
    and run in its local worker, or a large one read and run by the executors."""

    def __init__(self, settings: EffectiveSettings, spark, runtime: Runtime, metrics: Metrics,
                 reader: RetryReader):
        self.s, self.spark, self.runtime, self.metrics, self.reader = settings, spark, runtime, metrics, reader
        self.lock = threading.Lock()  # one reader of the retry topics at a time
        # Below this many due records a retry cycle is read and run beside the driver; from
        # it on, by the executors (docs/api.md, "Antidote's settings in spark.conf").
        self.local_max = tunable(settings.spark.conf, "spark.antidote.retry.localMaxRecords")

    def once(self) -> tuple[int, int | None]:
        """(records processed, next due ms); nothing processed and no next due time: no retry
        is pending."""
        local = self.runtime.local
        while local is not None and not local.warmed(0.5):  # outside the batch lock (see warmed)
            if self.runtime.stopping.is_set():
                return 0, None
        with self.lock:
            planned = self.reader.plan(self.runtime.ledger.state.positions, int(time.time() * 1000),
                                       self.s.source.max_messages_per_batch)
            if planned.ranges and planned.records >= self.local_max:
                n, next_due, incomplete = self._run_planned(planned)
            else:
                n, next_due, incomplete = self._run_local(planned)
        if incomplete and not n:
            return 0, int(time.time() * 1000)  # unknown yet: ask again at once, not idle
        # For dashboards: when the next parked message falls due (0: none is waiting).
        self.metrics.retry_next_due.labels(**self.metrics.ids).set(
            next_due / 1000 if next_due is not None else 0)
        return n, next_due

    def _ran(self, path: str, n: int) -> None:
        self.metrics.retry_batches.labels(**self.metrics.ids, path=path).inc()
        self.metrics.retry_records.labels(**self.metrics.ids, path=path).inc(n)

    def _run_local(self, planned: RetryPlan) -> tuple[int, int | None, bool]:
        """A small cycle: the driver reads the due records and runs them in its local worker."""
        limit = max(1, min(self.local_max, self.s.source.max_messages_per_batch))
        due = self.reader.read_due(planned, limit)
        if due.rows:
            try:
                # The handler calls outside the batch lock where they can be (Runtime.run_ahead);
                # a failed local run goes straight to a Spark job, as it would under the lock.
                tried, ran = self.runtime.run_ahead(due.rows)
                self.runtime.handle(functools.cache(lambda: self._rows_frame(due.rows)),
                                    positions=due.positions, local_rows=due.rows, ran=ran,
                                    local_failed=tried and ran is None)
            except BaseException:
                self.reader.forget()
                raise
            self._ran("local", len(due.rows))
        return len(due.rows), due.next_due, due.incomplete

    def _run_planned(self, planned: RetryPlan) -> tuple[int, int | None, bool]:
        """A large cycle: the executors read the planned ranges and run them like a source
        batch; the driver reads no retry record."""
        try:
            result = self.runtime.handle(functools.cache(lambda: self._planned_frame(planned)),
                                         positions=planned.positions, due_by=planned.now)
        except BaseException:
            self.reader.forget()
            raise
        n = result.n_ok + result.n_failed
        self._ran("executors", n)
        dues = [d for d in [planned.next_due, *(due for _o, due in result.waiting.values())] if d is not None]
        return n, min(dues, default=None), planned.incomplete

    def _rows_frame(self, rows: list[tuple]):
        """Rows the driver read, as a DataFrame: only when the local worker cannot run them."""
        df = self.spark.createDataFrame(rows, INPUT_SCHEMA).select(*INPUT_COLUMNS)
        # ordering Key: one task, in read order, so a key's rows are decided in order (the rows
        # would be split across tasks arbitrarily otherwise).
        return df.coalesce(1) if self.s.ordering == "Key" else df

    def _planned_frame(self, planned: RetryPlan):
        """The planned ranges as the executors read them: Spark's Kafka batch source, with the
        source's client options, committed records only (a retry topic is written in
        transactions), and the columns of a source batch."""
        from pyspark.sql import functions as F

        src = self.s.source
        df = (self.spark.read.format("kafka")
              .option("kafka.bootstrap.servers", src.bootstrap_servers)
              .options(**KAFKA_READ_OPTIONS)
              .options(**kafka_auth.source_spark_options(self.s))
              .options(**spark_offsets(planned.ranges))
              .option("kafka.isolation.level", "read_committed")
              .option("includeHeaders", "true").load()
              .select("key", "value", "topic", "partition", "offset",
                      F.unix_millis("timestamp").alias("ts"), "headers"))
        # ordering Key: one task, each partition in offset order (see _rows_frame).
        return df.coalesce(1) if self.s.ordering == "Key" else df
