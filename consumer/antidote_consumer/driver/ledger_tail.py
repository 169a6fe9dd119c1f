"""The driver's copy of an exactly-once sink's ledger entries, kept current by following the
ledger topic from where the driver loaded it (docs/consumer.md, "Exactly-once to a Kafka sink").

A task whose partition is not fresh (driver.sink_state) reads its entry from the ledger once
its producer has fenced every earlier attempt of the partition. It reads only the records at
or after `known`: the copy here (`view`) is, for every key, the last committed value among
the records below `known`, applied in the log's order, tombstones included, and never
changed by anything else (the tasks' results are kept apart, in SinkState). So:
- a record of the key at or after `known`: the scan sees it, the last one is the ledger's;
- none: the ledger's last value is the one below `known`, which is the view's.
A new driver starts from its load (LedgerState.end); an attempt that died after committing an
entry the driver did not see committed it before the new attempt's fence, so either below
`known` (then the view has it) or after (then the scan does). `antidote rebase`'s tombstones
are records like any other. So a task's read from `known` with the view gives what a read of
the whole topic gave, on the same premise (its fence precedes its read): after a failed job,
under a new driver, and for the local worker's retry batches, whose partitions are never
fresh and which read every time. `known` only moves to where the reader has read everything below
(a record's offset + 1, or the end it was told of: read_committed, so at the last stable
offset, below which every transaction has ended).

The reader is one librdkafka consumer kept by the driver: it fetches the ledger's new records in
the background as they are committed, and `caught_up` takes what it has so far, once per run:
a batch's records, not the log."""

from __future__ import annotations

import json
import logging
import threading

from antidote_consumer.kafka.sink_entries import SinkEntry, parse_key, scan_conf

log = logging.getLogger("antidote.consumer")
# The background fetch waits this long for new records at the log's end (librdkafka's
# default): a read_committed fetch is answered as soon as records come.
TAIL_FETCH_WAIT_MS = 500
# Records it holds before the driver takes them: a batch writes about 60 KB at 512 partitions.
TAIL_QUEUE_KB = 4096


class LedgerTail:
    def __init__(self, view: dict[str, SinkEntry], known: int, consumer=None):
        self.view = dict(view)
        self.known = known
        self._consumer = consumer
        self._lock = threading.Lock()

    @classmethod
    def follow(cls, bootstrap: str, topic: str, conf: dict, view: dict[str, SinkEntry], known: int) -> LedgerTail:
        """A tail from a load of the ledger (its entries and its end)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({**scan_conf({**conf, "bootstrap.servers": bootstrap}, f"{topic}-tail"),
                             "fetch.wait.max.ms": TAIL_FETCH_WAIT_MS, "queued.max.messages.kbytes": TAIL_QUEUE_KB})
        consumer.assign([TopicPartition(topic, 0, known)])
        return cls(view, known, consumer)

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """A record read at `offset` (in the log's order): a sink entry, or its tombstone."""
        where = parse_key(key.decode()) if key is not None else None
        if where is not None:
            if value is None:
                self.view.pop(where, None)
            else:
                self.view[where] = SinkEntry.from_json(json.loads(value))
        self.known = max(self.known, offset + 1)

    def reached(self, offset: int) -> None:
        """Told the end (EOF) at `offset`: every record below it was decided and read."""
        self.known = max(self.known, offset)

    def caught_up(self) -> tuple[dict[str, SinkEntry], int]:
        """The view and `known` with what the reader fetched so far (never waits)."""
        with self._lock:
            if self._consumer is not None:
                self._take()
            return dict(self.view), self.known

    def _take(self) -> None:
        from confluent_kafka import KafkaError

        while True:
            msgs = self._consumer.consume(1000, 0)
            if not msgs:
                return
            for msg in msgs:
                err = msg.error()
                if err is None:
                    self.apply(msg.offset(), msg.key(), msg.value())
                elif err.code() == KafkaError._PARTITION_EOF:
                    self.reached(msg.offset())
                else:  # the reader retries by itself; the tasks read a little more meanwhile
                    log.debug("following the ledger: %s", err)

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
