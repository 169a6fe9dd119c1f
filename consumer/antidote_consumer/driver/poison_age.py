"""How long quarantined messages wait: for each poison and dead-letter topic of a consumer,
the records no reader has resolved yet (`antidote_poison_waiting_records`) and how long the
first of them has waited (`antidote_poison_oldest_age_seconds`; AntidotePoisonAging).

"Waiting" is what lies after the reader's position. The reader (`antidote reader`, the
operator's reader Jobs) commits, in its consumer group (antidote_api.names.reader_group_id,
one group for both topics), the first offset of each partition it has not resolved: every
record below it was redriven, archived, dropped or rejected. So a partition's waiting
records are those from that offset (from the log start when the group has none there, or
when retention removed records past it: a topic nobody reads has all its records waiting)
up to the last stable offset. Counted as offsets, like `antidote_topic_depth`: the commit
marker of each transaction that quarantined into a partition takes one, so the count is an
upper bound (0 exactly when nothing waits); records a reader resolved beyond a message it
left (Hold, or outside a drain's filter) count until that one is resolved too. The age is
that of the first committed record at the position, read from the record itself: its
timestamp is when it was quarantined (the consumer's producer stamps it when it settles the
batch; a record a reader rejects to the dead-letter topic when the reader wrote it).

Measured by a thread of its own every INTERVAL_S with clients of its own, never on a
batch's path: slow or unreachable brokers make the numbers older (logged once, as the retry
pump does), never the consumer slower. Between rounds the age gauge is computed when it is
scraped, from the timestamp the last round found, so it keeps growing while nothing is read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from antidote_api.names import reader_group_id
from antidote_api.semantics import EffectiveSettings

from .metrics import Metrics
from .outage_log import OutageLog

log = logging.getLogger("antidote.consumer")

INTERVAL_S = 30.0  # between rounds: a round costs a few requests per partition
REQUEST_TIMEOUT_S = 10.0  # one request (metadata, offsets); a round gives up past it
FIRST_RECORD_WAIT_S = 10.0  # reading the first waiting record of every partition
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group has no offset there


def quarantine_topics(s: EffectiveSettings) -> list[tuple[str, str]]:
    """(topic, kind) of the topics a disposition writes to, as `antidote_topic_depth` labels them;
    a route's own topic (spec.routes) is kind "route" (the reader reads it with --from)."""
    found = [(s.topics.poison, "poison"), (s.topics.dlq, "dlq")]
    for route in s.routes or ():
        if route.topic is not None and route.topic not in {t for t, _ in found}:
            found.append((route.topic, "route"))
    return found


def waiting_from(low: int, high: int, committed: int | None) -> int:
    """The first waiting offset of a partition whose records are low..high-1 and whose reader
    position is `committed` (None or negative: the reader has none)."""
    if committed is None or committed < 0:
        return low
    return min(max(low, committed), high)


class Partition(NamedTuple):
    waiting: int  # offsets from the first waiting one to the end
    first_ms: int | None  # the first waiting record's timestamp (None: nothing waits, or unread)


class Found(NamedTuple):
    waiting: int
    oldest_ms: int | None  # the earliest first_ms of its partitions


def summed(parts: Iterable[Partition]) -> Found:
    """A topic's waiting count and the timestamp of its oldest waiting record."""
    parts = list(parts)
    stamps = [p.first_ms for p in parts if p.waiting > 0 and p.first_ms is not None]
    return Found(sum(p.waiting for p in parts), min(stamps) if stamps else None)


def age_seconds(oldest_ms: int | None, now: float) -> float:
    """The age of the oldest waiting record at `now` (epoch s); 0 when none waits."""
    return 0.0 if oldest_ms is None else max(0.0, now - oldest_ms / 1000)


class PoisonAge:
    """The background measurement (see the module). start() once the ledger is loaded,
    stop() when the consumer stops; the gauges stay as last measured."""

    def __init__(self, settings: EffectiveSettings, client_conf: dict, metrics: Metrics,
                 interval: float = INTERVAL_S, clock: Callable[[], float] = time.time):
        self.s, self.conf, self.metrics = settings, client_conf, metrics
        self.interval, self.clock = interval, clock
        self.topics = quarantine_topics(settings)
        self.group = reader_group_id(settings.namespace, settings.consumer)
        self.oldest: dict[str, int | None] = {}  # topic -> oldest waiting timestamp (ms)
        self.errors = OutageLog("measuring the poison queues' waiting records")
        self.done = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, name="poison-age", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.done.set()  # the thread closes its clients when its round ends

    def _loop(self) -> None:
        bootstrap = self.s.source.bootstrap_servers
        admin = AdminClient({**self.conf, "bootstrap.servers": bootstrap})
        reader = Consumer({**self.conf, "bootstrap.servers": bootstrap, "group.id": "antidote-poison-age",
                           "enable.auto.commit": False, "isolation.level": "read_committed",
                           "enable.partition.eof": True,
                           # One record per partition is all a round reads.
                           "max.partition.fetch.bytes": 65536, "fetch.max.bytes": 1048576})
        try:
            while not self.done.is_set():
                try:
                    self.measure(admin, reader)
                except Exception as err:  # noqa: BLE001 - measured again next round
                    self.errors.failed(err)
                else:
                    self.errors.ok()
                self.done.wait(self.interval)
        finally:
            reader.close()

    # --- one round ------------------------------------------------------------------------
    def measure(self, admin: AdminClient, reader: Consumer) -> None:
        parts: dict[str, list[int]] = {}
        for topic, _kind in self.topics:
            md = admin.list_topics(topic, timeout=REQUEST_TIMEOUT_S).topics.get(topic)
            if md is not None and md.error is None:
                parts[topic] = sorted(md.partitions)
        committed = self._committed(admin, parts)
        spans: dict[tuple[str, int], tuple[int, int]] = {}  # (topic, partition) -> first waiting, end
        for topic, ps in parts.items():
            for p in ps:
                low, high = reader.get_watermark_offsets(TopicPartition(topic, p), timeout=REQUEST_TIMEOUT_S)
                spans[(topic, p)] = (waiting_from(low, high, committed.get((topic, p))), high)
        firsts = self._first_timestamps(reader, {tp: a for tp, (a, b) in spans.items() if a < b}, spans)
        for topic, kind in self.topics:
            if topic not in parts:
                continue  # a deleted topic: its last numbers stay until it is back
            found = summed(Partition(spans[(topic, p)][1] - spans[(topic, p)][0], firsts.get((topic, p)))
                           for p in parts[topic])
            self._export(topic, kind, found)

    def _committed(self, admin: AdminClient, parts: dict[str, list[int]]) -> dict[tuple[str, int], int]:
        tps = [TopicPartition(t, p) for t, ps in parts.items() for p in ps]
        if not tps:
            return {}
        futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(self.group, tps)],
                                                    request_timeout=REQUEST_TIMEOUT_S)
        got = futures[self.group].result(timeout=REQUEST_TIMEOUT_S + 5)
        return {(tp.topic, tp.partition): tp.offset for tp in got.topic_partitions or []
                if tp.error is None and tp.offset != NO_OFFSET}

    def _first_timestamps(self, reader: Consumer, starts: dict[tuple[str, int], int],
                          spans: dict[tuple[str, int], tuple[int, int]]) -> dict[tuple[str, int], int]:
        """The timestamp of the first committed record at or after each start (read_committed
        skips markers and aborted records); a partition whose first waiting records are all
        aborted ones, or that does not answer in FIRST_RECORD_WAIT_S, has none."""
        if not starts:
            return {}
        reader.assign([TopicPartition(t, p, o) for (t, p), o in starts.items()])
        out: dict[tuple[str, int], int] = {}
        left = set(starts)
        deadline = time.monotonic() + FIRST_RECORD_WAIT_S
        try:
            while left and time.monotonic() < deadline and not self.done.is_set():
                msg = reader.poll(0.5)
                if msg is None:
                    continue
                tp = (msg.topic(), msg.partition())
                if tp not in left:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        left.discard(tp)
                        continue
                    raise RuntimeError(f"{tp[0]}/{tp[1]}: {err}")
                kind, ms = msg.timestamp()
                offset = msg.offset()
                if offset is not None and offset < spans[tp][1] and kind != 0 and ms >= 0:  # 0: none
                    out[tp] = ms
                left.discard(tp)
        finally:
            reader.unassign()
        return out

    def _export(self, topic: str, kind: str, found: Found) -> None:
        m, ids = self.metrics, self.metrics.ids
        m.poison_waiting.labels(**ids, topic=topic, kind=kind).set(found.waiting)
        first = topic not in self.oldest
        self.oldest[topic] = found.oldest_ms
        if first:  # computed at each scrape from the last round's timestamp
            m.poison_oldest_age.labels(**ids, topic=topic, kind=kind).set_function(
                lambda: age_seconds(self.oldest.get(topic), self.clock()))
