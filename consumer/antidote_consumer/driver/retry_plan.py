"""Planning a retry cycle from offsets alone: what is due in each retry partition, without
reading a record (the pure part; retry_pump.py asks the broker).

A retry topic's records are appended in due order with one delay per topic, and a record's
timestamp (CreateTime) is the settle time its due time was set from (`due = settle time +
delay`; driver.settle gives it to the producer: left to the client it would be later by
the transaction's produce time, up to seconds for a large one, and a plan made at the due
time would find most of the batch not due yet). So every record with a timestamp before
`now - delay` (or at it) is due, and the first offset whose timestamp is after it (the
broker's offsets-for-times, one request for all partitions) ends what is due. The plan is the range
`[position, due end)` per partition, which executors read with Spark's Kafka batch source
like a source batch. (A topic with LogAppendTime gets the broker's clock instead: later
than the driver's, the plan is only late; earlier, the executors' check below holds.)

A handler's `Retry(after=...)` longer than the cycle's delay (or a clock that stepped) can
put a record that is not due yet inside the range: the executors compare each record's
`antidote.due` with the plan's `now` and stop that partition there (worker.executor,
"waiting"), so nothing is attempted early; the ledger position then stops at that record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


def position_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


@dataclass(frozen=True)
class PartitionOffsets:
    """What the broker says of one retry partition, and where this consumer stands in it."""
    topic: str
    partition: int
    start: int  # the ledger's position (or a later hint of the reader): next offset to read
    low: int  # the first offset still kept (retention)
    stable: int  # the last stable offset: read_committed sees nothing at or after it
    delay: int  # the topic's cycle delay (ms)
    # (offset, timestamp) of the first record below `stable` whose timestamp is after
    # `now - delay` (not due yet); None when there is none (everything below `stable` is due).
    found: tuple[int, int] | None = None
    high: int | None = None  # the high watermark (read_uncommitted), asked only when start >= stable


@dataclass
class RetryPlan:
    now: int  # ms; the executors hold every record's due time against it
    # (topic, partition) -> [first, end) to read: what is due by the timestamps, capped
    ranges: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    # (topic, partition) -> [first, stable): what the driver reads itself for a small cycle
    reads: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    # "topic:partition" -> the next offset without an outcome once the planned ranges are
    # done: their ends, and past records lost to retention (committed with the batch)
    positions: dict[str, int] = field(default_factory=dict)
    expired: list[tuple[str, int, int, int]] = field(default_factory=list)  # (topic, partition, from, low)
    next_due: int | None = None  # earliest due time known beyond the ranges (ms)
    incomplete: bool = False  # a transaction is open, or its markers are not written yet

    @property
    def records(self) -> int:
        """Offsets in the planned ranges: an upper bound of the records due (transaction
        markers and other consumers' records take offsets too)."""
        return sum(end - first for first, end in self.ranges.values())


def plan(parts: list[PartitionOffsets], now: int, limit: int) -> RetryPlan:
    out = RetryPlan(now=now)
    for p in parts:
        where = (p.topic, p.partition)
        start = p.start
        if start < p.low:
            out.expired.append((p.topic, p.partition, start, p.low))
            start = out.positions[position_key(*where)] = p.low
        if start >= p.stable:
            if p.high is not None and p.high > p.stable:
                out.incomplete = True  # records on their way: ask again, do not call it idle
            continue
        out.reads[where] = (start, p.stable)
        end = p.stable
        if p.found is not None:
            offset, ts = p.found
            # The last offset before `stable` is most often the last transaction's commit
            # marker, which the broker stamps with its own clock when it commits, after the
            # records' settle time: ending there would leave it (and the record of having
            # passed it) out of every plan until it is `delay` old. So it is read too; a
            # record there that is not due yet is held by the executors' check.
            end = p.stable if offset == p.stable - 1 else max(start, min(offset, p.stable))
            _sooner(out, ts + p.delay)
        if end > start:
            out.ranges[where] = (start, end)
    _cap(out, limit)
    for where, (_first, end) in out.ranges.items():
        out.positions[position_key(*where)] = end
    return out


def _sooner(out: RetryPlan, due: int) -> None:
    out.next_due = due if out.next_due is None else min(out.next_due, due)


def _cap(out: RetryPlan, limit: int) -> None:
    """At most `limit` offsets in one batch (the source's maxMessagesPerBatch), shared in
    proportion to what each partition has due, at least one each so every partition moves.
    A partition cut short has more due at once."""
    total = out.records
    if total <= limit:
        return
    for where, (first, end) in list(out.ranges.items()):
        share = max(1, (end - first) * limit // total)
        if first + share < end:
            out.ranges[where] = (first, first + share)
            _sooner(out, out.now)


def spark_offsets(ranges: dict[tuple[str, int], tuple[int, int]]) -> dict[str, str]:
    """The options of Spark's Kafka batch source that read exactly `ranges`."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for (topic, partition), (first, end) in sorted(ranges.items()):
        assign.setdefault(topic, []).append(partition)
        starting.setdefault(topic, {})[str(partition)] = first
        ending.setdefault(topic, {})[str(partition)] = end
    return {"assign": json.dumps(assign), "startingOffsets": json.dumps(starting),
            "endingOffsets": json.dumps(ending)}


def cut_waiting(rows, now: int, source: str, owner: str | None,
                due_of, consumer_of) -> tuple[list[tuple[str, int, int]], dict[tuple[str, int], tuple[int, int]]]:
    """Batch isolation of a planned retry batch: `rows` (topic, partition, offset, headers),
    in offset order per partition, cut where the executors stop (the first record of this
    consumer not due by `now`), so every segment runs exactly what the whole batch would.
    Returns the keys to run and, per partition cut, (offset, due) of the record it waits on."""
    keys: list[tuple[str, int, int]] = []
    waiting: dict[tuple[str, int], tuple[int, int]] = {}
    for topic, partition, offset, headers in rows:
        where = (topic, partition)
        if where in waiting:
            continue
        if topic != source:
            mine = owner is None or consumer_of(headers) in (None, owner)
            due = due_of(headers)
            if mine and due > now:
                waiting[where] = (offset, due)
                continue
        keys.append((topic, partition, offset))
    return keys, waiting
