"""What an exactly-once sink's ledger entries say (docs/consumer.md, "Exactly-once to a Kafka
sink"): `sink:<topic>:<partition>` = {"next": N, "pending": [[a, b], ...]}. Every offset
below `next`, from the partition's ledger position on, has its output committed (or needs
none), except the pending ones (ranges, ends included): failed, held or not attempted
messages, whose outcomes the driver settles. An executor writes it in the transaction that
commits the outputs it covers; the driver only reads it (at start, from the ledger).

Pure, but for `read_entry`, which scans the ledger topic for one partition's entry."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

PREFIX = "sink:"
# A scan of the ledger ends at the log's end, where the broker holds an empty fetch for up to
# fetch.wait.max.ms (librdkafka's default: 500 ms) before the client learns it is there (EOF).
# Half a second per scan, paid by every driver start (load_state) and by every task that reads
# its partition's entry (read_entry): after a restart, once per source partition (measured:
# 0.51 s a load; 0.05-0.11 s with this). A fetch with data is answered at once either way.
SCAN_FETCH_WAIT_MS = 10


def entry_key(topic: str, partition: int) -> str:
    return f"{PREFIX}{topic}:{partition}"


def parse_key(key: str) -> str | None:
    """"topic:partition" of a sink entry's key (the ledger's positions' form), or None."""
    return key[len(PREFIX):] if key.startswith(PREFIX) else None


def ranges(offsets: Iterable[int]) -> list[list[int]]:
    """Sorted offsets as [first, last] ranges."""
    out: list[list[int]] = []
    for o in sorted(set(offsets)):
        if out and o == out[-1][1] + 1:
            out[-1][1] = o
        else:
            out.append([o, o])
    return out


@dataclass(frozen=True)
class SinkEntry:
    next: int
    pending: frozenset[int] = frozenset()

    def to_json(self) -> dict:
        return {"next": self.next, "pending": ranges(self.pending)}

    @classmethod
    def from_json(cls, value: dict) -> SinkEntry:
        return cls(int(value["next"]), frozenset(o for a, b in value.get("pending") or () for o in range(a, b + 1)))

    def covers(self, offset: int) -> bool:
        """Whether `offset`'s output is committed (or it needs none): a replay passes it over."""
        return offset < self.next and offset not in self.pending


def scan_conf(conf: dict, group: str) -> dict:
    """librdkafka settings of a reader that scans the ledger topic once, to its end: `conf`
    (the source's client settings, its credentials) with committed reads only, no group
    offsets, an end it is told of (EOF) and no wait for more records there."""
    return {**conf, "group.id": group, "enable.auto.commit": False, "isolation.level": "read_committed",
            "enable.partition.eof": True, "fetch.wait.max.ms": SCAN_FETCH_WAIT_MS}


def read_entry(conf: dict, ledger_topic: str, key: str, timeout: float = 30.0) -> SinkEntry | None:
    """The last committed value of `key` in the ledger topic (read_committed), by a scan of
    the whole (compacted) topic: for a task that runs after a failure, once its own
    init_transactions has fenced every earlier attempt of its partition."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(scan_conf(conf, f"{ledger_topic}-sink-entry"))
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(ledger_topic, 0), timeout=timeout)
        if high <= low:
            return None
        consumer.assign([TopicPartition(ledger_topic, 0, low)])
        found = None
        wanted = key.encode()
        while True:
            msg = consumer.poll(timeout)
            if msg is None:
                raise TimeoutError(f"ledger {ledger_topic}: no answer while reading {key}")
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return found
                raise RuntimeError(f"ledger {ledger_topic}: {err}")
            if msg.key() == wanted:
                value = msg.value()
                found = SinkEntry.from_json(json.loads(value)) if value is not None else None
    finally:
        consumer.close()
