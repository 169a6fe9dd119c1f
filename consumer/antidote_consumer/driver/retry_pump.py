"""Reading due records from the retry topics, on the driver.

A retry topic's records are in due order within a partition (one delay per topic, appended
as they fail), so a partition is read up to its first record that is not yet due, exactly
as a consumer that pauses the partition until then: nothing is attempted early and nothing
is re-queued. Read positions live in the ledger, committed with the batch's results."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition

from antidote_consumer.kafka.headers import consumer_of, due_of
from antidote_consumer.kafka.retry import retrying

log = logging.getLogger("antidote.consumer")


@dataclass
class DueBatch:
    rows: list[tuple] = field(default_factory=list)  # INPUT_COLUMNS order
    positions: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> next offset
    next_due: int | None = None  # earliest due time of a record left waiting (ms)
    incomplete: bool = False  # a partition with records left gave no answer in time


def position_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


class RetryReader:
    def __init__(self, bootstrap: str, topics: list[str], client_conf: dict | None = None,
                 owner: str | None = None,
                 on_expired: Callable[[str, int, int, int], None] | None = None):
        self.topics = topics
        # Told (topic, partition, read position, first offset still kept) when records of a
        # retry partition expired before they were read: they are lost, and it must be loud.
        self.on_expired = on_expired
        self.reported: set[tuple[str, int, int]] = set()
        # Another QueueConsumer of the same source shares its retry topics: its records are
        # passed over, whatever their due time (its cycle delays may differ from ours).
        self.owner = owner
        conf = {**(client_conf or {}), "bootstrap.servers": bootstrap,
                "group.id": "antidote-retry-reader", "enable.auto.commit": False,
                # A position before the first kept offset is found in read_due (and reported);
                # never reset silently past lost records.
                "enable.partition.eof": True, "auto.offset.reset": "error",
                # It reads to the end and stops; the broker's default 500 ms long poll would
                # delay every end-of-partition (and so every retry batch) by that much.
                "fetch.wait.max.ms": 10}
        self.consumer = Consumer({**conf, "isolation.level": "read_committed"})
        # Offsets as read_committed sees them end at the last stable offset. Records of a
        # transaction that just committed stay behind it until the broker has written the
        # commit markers: the high watermark says whether something is still on its way.
        self.uncommitted = Consumer({**conf, "isolation.level": "read_uncommitted"})
        self.partitions = {t: sorted(self.consumer.list_topics(t, timeout=30).topics[t].partitions)
                           for t in topics}
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

    @staticmethod
    def _offsets(consumer: Consumer, topic: str, partition: int) -> tuple[int, int]:
        return retrying(lambda: consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10),
                        f"retry topic {topic}: reading its offsets")

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

    def read_due(self, positions: dict[str, int], now_ms: int, limit: int) -> DueBatch:
        out = DueBatch()
        tps = []
        for t in self.topics:
            for p in self.partitions[t]:
                start = max(positions.get(position_key(t, p), 0), self.ends.get(position_key(t, p), 0))
                low, stable = self._offsets(self.consumer, t, p)
                if start < low:
                    self._expired(t, p, start, low)
                    start = self.ends[position_key(t, p)] = low
                    out.positions[position_key(t, p)] = low  # committed with the next retry batch
                if start < stable:
                    tps.append(TopicPartition(t, p, start))
                elif self._offsets(self.uncommitted, t, p)[1] > stable:
                    out.incomplete = True  # a transaction is open or its markers are not written yet
        if not tps:
            return out
        self.consumer.assign(tps)
        open_parts = {(tp.topic, tp.partition) for tp in tps}
        while open_parts and len(out.rows) < limit:
            msg = self.consumer.poll(1.0)
            if msg is None:
                out.incomplete = True  # nothing arrived in time; the next round tries again
                break
            where = (msg.topic(), msg.partition())
            if where not in open_parts:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    # Read to the end: what is before it is in `rows`, another consumer's, or a
                    # transaction marker. Committing this position (with the rows) keeps the
                    # markers and others' records behind it, so their expiry is not taken for
                    # a loss (see _expired).
                    self.ends[position_key(*where)] = out.positions[position_key(*where)] = msg.offset()
                    open_parts.discard(where)
                    continue
                raise RuntimeError(f"retry topic {msg.topic()}: {msg.error()}")
            owner = consumer_of(msg.headers()) if self.owner is not None else None
            if owner is not None and owner != self.owner:
                self.ends[position_key(*where)] = out.positions[position_key(*where)] = msg.offset() + 1
                continue
            due = due_of(msg.headers())
            if due > now_ms:
                out.next_due = due if out.next_due is None else min(out.next_due, due)
                # Done with this partition; what it still delivers is passed over above.
                # (Pausing it instead made the next assign of it wait ~1 s for a first fetch.)
                open_parts.discard(where)
                continue
            ts = msg.timestamp()[1]
            out.rows.append((msg.key(), msg.value(), msg.topic(), msg.partition(), msg.offset(), ts,
                             [{"key": k, "value": v} for k, v in (msg.headers() or [])]))
            out.positions[position_key(*where)] = msg.offset() + 1
        self.consumer.unassign()
        return out
