"""The failure ledger: a compacted Kafka topic, written only in transactions.

Each batch's retry, poison and dead-letter records are produced in the same Kafka
transaction as the ledger entries that say the batch is done (the source batch id, the
retry topics' read positions, the counts). So quarantine records are written exactly once
even when the consumer crashes and Spark replays a batch, and attempt counts travel in the
retry records themselves. Why Kafka and not the Spark checkpoint: the checkpoint cannot be
updated atomically with Kafka writes, and a checkpoint on local disk dies with its pod.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from .kafka_retry import retrying

BATCH, COUNTS, POSITIONS = "batch", "counts", "positions"
MAX_RECORD_BYTES = 64 * 1024 * 1024
OUTCOMES = ("processed", "retried", "moved", "rejected", "dropped")


@dataclass
class LedgerState:
    committed_batch: int = -1  # last Spark batch id whose records are committed
    started_batch: int = -1  # last Spark batch id begun (a crash leaves started > committed)
    consecutive_failures: int = 0
    disabled: str | None = None  # reason the consumer disabled itself, if it did
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    attempts: int = 0
    positions: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> next offset

    def entries(self) -> dict[str, dict]:
        return {
            BATCH: {"committed": self.committed_batch, "started": self.started_batch,
                    "consecutiveFailures": self.consecutive_failures, "disabled": self.disabled},
            COUNTS: {**self.counts, "attempts": self.attempts},
            POSITIONS: dict(self.positions),
        }

    def apply(self, key: str, value: dict) -> None:
        if key == BATCH:
            self.committed_batch = value.get("committed", -1)
            self.started_batch = value.get("started", -1)
            self.consecutive_failures = value.get("consecutiveFailures", 0)
            self.disabled = value.get("disabled")
        elif key == COUNTS:
            self.attempts = value.get("attempts", 0)
            self.counts = {k: value.get(k, 0) for k in OUTCOMES}
        elif key == POSITIONS:
            self.positions = dict(value)


Record = tuple[str, int | None, bytes | None, bytes | None, list]  # topic, partition, key, value, headers


class Ledger:
    def __init__(self, bootstrap: str, topic: str, transactional_id: str,
                 client_conf: dict[str, str] | None = None):
        self.topic = topic
        self.bootstrap = bootstrap
        self.conf = dict(client_conf or {})
        self.state = LedgerState()
        self._producer = Producer({
            **self.conf, "bootstrap.servers": bootstrap, "transactional.id": transactional_id,
            "enable.idempotence": True, "linger.ms": 5, "transaction.timeout.ms": 60000,
            # Quarantine keeps records whole, however large the source let them be.
            "message.max.bytes": MAX_RECORD_BYTES})
        # Fences any older instance with the same id (a zombie driver) and aborts its open
        # transaction, so what it wrote half-way is never read.
        self._producer.init_transactions(60)

    def load(self) -> LedgerState:
        consumer = Consumer({**self.conf, "bootstrap.servers": self.bootstrap,
                             "group.id": f"{self.topic}-loader", "enable.auto.commit": False,
                             "isolation.level": "read_committed", "enable.partition.eof": True})
        try:
            tp = TopicPartition(self.topic, 0, 0)
            low, high = retrying(lambda: consumer.get_watermark_offsets(tp, timeout=10),
                                 f"ledger {self.topic}: reading its offsets")
            state = LedgerState()
            if high > low:
                consumer.assign([TopicPartition(self.topic, 0, low)])
                while True:
                    msg = consumer.poll(30)
                    if msg is None:
                        raise TimeoutError(f"ledger {self.topic}: no answer while loading")
                    if msg.error():
                        if msg.error().code() == KafkaError._PARTITION_EOF:
                            break
                        raise RuntimeError(f"ledger {self.topic}: {msg.error()}")
                    if msg.value() is not None:
                        state.apply(msg.key().decode(), json.loads(msg.value()))
            self.state = state
            return state
        finally:
            consumer.close()

    def commit(self, state: LedgerState, records: Iterable[Record] = (),
               keys: Iterable[str] = (BATCH, COUNTS, POSITIONS)) -> None:
        """Produce `records` and `state`'s entries named by `keys` in one transaction; the
        in-memory state becomes `state` only once Kafka has committed it."""
        p = self._producer
        p.begin_transaction()
        try:
            for topic, partition, key, value, headers in records:
                # Spark hands binary columns over as bytearray; the client wants bytes.
                key, value = _bytes(key), _bytes(value)
                headers = [(k, _bytes(v)) for k, v in headers or ()]
                if partition is None:
                    p.produce(topic, key=key, value=value, headers=headers or None)
                else:
                    p.produce(topic, key=key, value=value, headers=headers or None, partition=partition)
                p.poll(0)
            entries = state.entries()
            for k in keys:
                p.produce(self.topic, key=k.encode(), value=json.dumps(entries[k]).encode())
            p.commit_transaction(60)
        except BaseException:
            p.abort_transaction(30)
            raise
        self.state = state


def _bytes(x):
    return bytes(x) if isinstance(x, (bytearray, memoryview)) else x
