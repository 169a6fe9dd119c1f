"""What an exactly-once sink's ledger entries say (docs/consumer.md, "Exactly-once to a Kafka
sink"): `sink:<topic>:<partition>` = {"next": N, "pending": [[a, b], ...], "retried": [...],
"final": {"<reason>/<disposition>": [...]}}. Every offset below `next`, from the partition's
ledger position on, has its output committed (or needs none), except the pending ones
(ranges, ends included): failed, held or not attempted messages, whose outcomes the driver
settles. `retried` and `final` (absent when empty): failed messages whose retry record, or
disposition's record, the task wrote in the same transaction (worker.task_settle); a replay
passes over them too, and counts them as retried, or under their disposition. An executor writes
it in the transaction that commits the outputs and records it covers; the driver only reads
it (at start, from the ledger).

Pure, but for `scan_entry` (and `read_entry`), which scan the ledger topic for one partition's
entry from the ledger offset the driver last knew (driver.ledger_tail)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

PREFIX = "sink:"
# A scan of the ledger ends at the log's end, where the broker holds an empty fetch for up to
# fetch.wait.max.ms (librdkafka's default: 500 ms) before the client learns it is there (EOF).
# Half a second per scan, paid by every driver start (load_state) and by every task that reads
# its partition's entry (read_entry): after a restart, once per source partition (measured:
# 0.51 s a load; 0.05-0.11 s with this). A fetch with data is answered at once either way.
SCAN_FETCH_WAIT_MS = 10
# How long a task's scan may wait for the ledger's records below its end to be decided: a
# transaction of another writer (a dead attempt's, the sink's 60 s transaction.timeout.ms, or
# the ledger writer's) holds the log's last stable offset until it ends, at the latest when
# its coordinator aborts it (its timeout, checked every 10 s), and a committed entry past it
# is invisible to a read_committed reader until then. Also the longest wait for an answer.
SCAN_TIMEOUT_S = 90.0


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


def _offsets(value: dict, name: str) -> frozenset[int]:
    return frozenset(o for a, b in value.get(name) or () for o in range(a, b + 1))


@dataclass(frozen=True)
class SinkEntry:
    next: int
    pending: frozenset[int] = frozenset()
    retried: frozenset[int] = frozenset()  # settled by the task: their retry records are written
    # Settled by the task with their disposition: ("<reason>/<disposition>", offsets), sorted
    final: tuple[tuple[str, frozenset[int]], ...] = ()

    def to_json(self) -> dict:
        out: dict = {"next": self.next, "pending": ranges(self.pending)}
        if self.retried:
            out["retried"] = ranges(self.retried)
        if self.final:
            out["final"] = {name: ranges(offsets) for name, offsets in self.final}
        return out

    @classmethod
    def from_json(cls, value: dict) -> SinkEntry:
        final = value.get("final") or {}
        return cls(int(value["next"]), _offsets(value, "pending"), _offsets(value, "retried"),
                   tuple((name, _offsets(final, name)) for name in sorted(final)))

    def settled_as(self, offset: int) -> str | None:
        """How a task settled `offset`'s failure: "retried", a final's "<reason>/<disposition>",
        or None (an output, or nothing)."""
        if offset in self.retried:
            return "retried"
        for name, offsets in self.final:
            if offset in offsets:
                return name
        return None

    def covers(self, offset: int) -> bool:
        """Whether `offset`'s output is committed (or it needs none): a replay passes it over."""
        return offset < self.next and offset not in self.pending


def scan_conf(conf: dict, group: str) -> dict:
    """librdkafka settings of a reader that scans the ledger topic once, to its end: `conf`
    (the source's client settings, its credentials) with committed reads only, no group
    offsets, an end it is told of (EOF) and no wait for more records there."""
    return {**conf, "group.id": group, "enable.auto.commit": False, "isolation.level": "read_committed",
            "enable.partition.eof": True, "fetch.wait.max.ms": SCAN_FETCH_WAIT_MS}


@dataclass(frozen=True)
class EntryScan:
    """What a task's scan of the ledger for one key saw."""

    entry: SinkEntry | None  # the key's last value in [start, end) (None: none, or a tombstone)
    found: bool  # a record of the key was in [start, end) (else: the driver's copy is current)
    start: int  # where the scan began: the ledger offset the driver's copy is current to
    end: int  # where it ended: every record below it was decided and read
    records: int  # records read


def scan_done(offset: int, high: int) -> bool:
    """Whether a scan that has read (or skipped, as aborted or a transaction marker) every
    record below `offset` is done: it must reach `high`, the log's high watermark when it
    began (after the task's own producer fenced every earlier attempt of its partition, so
    nothing of its key can be written past it by anyone else). A read_committed reader is
    told the end (EOF), and the offsets it asks for (ListOffsets), at the last stable offset,
    which an open transaction of another writer holds back: an entry a dead attempt committed
    after that transaction began would be missed there (measured: "end of partition at
    offset 0 (HighwaterMark 3)")."""
    return offset >= high


def scan_entry(conf: dict, ledger_topic: str, key: str, since: int = 0,
               timeout: float = SCAN_TIMEOUT_S) -> EntryScan:
    """`key`'s last committed value among the ledger's records at or after `since` (the end
    offset the driver's copy of the entries is current to: ExactlyOnce.since; 0, the whole
    compacted topic), read once the task's producer has fenced every earlier attempt of its
    partition. Found nothing: the driver's copy is the ledger's (docs/consumer.md)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(scan_conf(conf, f"{ledger_topic}-sink-entry"))
    try:
        tp = TopicPartition(ledger_topic, 0)
        low, _ = consumer.get_watermark_offsets(tp, timeout=timeout)  # the second: the stable offset
        start = max(low, since)
        consumer.assign([TopicPartition(ledger_topic, 0, start)])
        found, seen, records = None, False, 0
        high: int | None = None  # the high watermark, from the first fetch's answer
        wanted = key.encode()
        deadline = time.monotonic() + timeout
        while True:
            msg = consumer.poll(max(0.1, deadline - time.monotonic()))
            if msg is None:
                raise TimeoutError(f"ledger {ledger_topic}: no record for {timeout:.0f}s while reading {key} "
                                   f"from offset {start} to {high} (a transaction below it still open?)")
            err, offset = msg.error(), msg.offset() or 0  # (set on records and on EOF)
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(f"ledger {ledger_topic}: {err}")
            if high is None:
                high = max(start, consumer.get_watermark_offsets(tp, cached=True)[1])
            if err is not None:
                if scan_done(offset, high):
                    return EntryScan(found, seen, start, offset, records)
                continue  # an open transaction below `high`: the end moves once it ends
            records += 1
            deadline = time.monotonic() + timeout  # a long log is read as long as it answers
            if msg.key() == wanted:
                value = msg.value()
                found, seen = SinkEntry.from_json(json.loads(value)) if value is not None else None, True
            if scan_done(offset + 1, high):
                return EntryScan(found, seen, start, offset + 1, records)
    finally:
        consumer.close()


def read_entry(conf: dict, ledger_topic: str, key: str, since: int = 0,
               timeout: float = SCAN_TIMEOUT_S) -> SinkEntry | None:
    """`key`'s last committed value at or after `since` (scan_entry), None if there is none
    (or it is a tombstone): the task then keeps what the driver passed."""
    return scan_entry(conf, ledger_topic, key, since, timeout).entry
