"""Reading due records from the retry topics, on the driver.

A retry topic's records are in due order within a partition (one delay per topic, appended
as they fail), so a partition is read up to its first record that is not yet due, exactly
as a consumer that pauses the partition until then: nothing is attempted early and nothing
is re-queued. Read positions live in the ledger, committed with the batch's results."""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition

from .headers import due_of
from .kafka_retry import retrying


@dataclass
class DueBatch:
    rows: list[tuple] = field(default_factory=list)  # INPUT_COLUMNS order
    positions: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> next offset
    next_due: int | None = None  # earliest due time of a record left waiting (ms)
    incomplete: bool = False  # a partition with records left gave no answer in time


def position_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


class RetryReader:
    def __init__(self, bootstrap: str, topics: list[str], client_conf: dict | None = None):
        self.topics = topics
        self.consumer = Consumer({**(client_conf or {}), "bootstrap.servers": bootstrap,
                                  "group.id": "antidote-retry-reader", "enable.auto.commit": False,
                                  "isolation.level": "read_committed",
                                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        self.partitions = {t: sorted(self.consumer.list_topics(t, timeout=30).topics[t].partitions)
                           for t in topics}
        # Where each partition was last read to its end. After a transaction the position of
        # the last record is followed by a commit marker that read_committed never returns;
        # starting past it avoids waiting for a record that is not there.
        self.ends: dict[str, int] = {}

    def close(self) -> None:
        self.consumer.close()

    def read_due(self, positions: dict[str, int], now_ms: int, limit: int) -> DueBatch:
        out = DueBatch()
        tps = []
        for t in self.topics:
            for p in self.partitions[t]:
                start = max(positions.get(position_key(t, p), 0), self.ends.get(position_key(t, p), 0))
                _low, high = retrying(
                    lambda t=t, p=p: self.consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10),
                    f"retry topic {t}: reading its offsets")
                if start < high:  # else nothing was written there since we last read
                    tps.append(TopicPartition(t, p, start))
        if not tps:
            return out
        self.consumer.assign(tps)
        self.consumer.resume(tps)  # a partition paused by the last read stays paused otherwise
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
                    self.ends[position_key(*where)] = msg.offset()
                    open_parts.discard(where)
                    continue
                raise RuntimeError(f"retry topic {msg.topic()}: {msg.error()}")
            due = due_of(msg.headers())
            if due > now_ms:
                out.next_due = due if out.next_due is None else min(out.next_due, due)
                open_parts.discard(where)
                self.consumer.pause([TopicPartition(*where)])
                continue
            ts = msg.timestamp()[1]
            out.rows.append((msg.key(), msg.value(), msg.topic(), msg.partition(), msg.offset(), ts,
                             [{"key": k, "value": v} for k, v in (msg.headers() or [])]))
            out.positions[position_key(*where)] = msg.offset() + 1
        self.consumer.unassign()
        return out
