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
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from .kafka_retry import retrying

log = logging.getLogger("antidote.consumer")

BATCH, COUNTS, POSITIONS, SKIPS = "batch", "counts", "positions", "skips"
MAX_RECORD_BYTES = 64 * 1024 * 1024
OUTCOMES = ("processed", "retried", "moved", "rejected", "dropped")
COMMIT_TIMEOUT_S = 60.0
# What librdkafka and the broker say to a producer whose transactional id a newer one took.
FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


class LedgerFenced(RuntimeError):
    """A newer instance with this consumer's transactional id owns the ledger: this one is a
    zombie (a driver that lost its pod, a second replica) and must stop without writing."""


@dataclass
class LedgerState:
    committed_batch: int = -1  # last Spark batch id whose records are committed
    started_batch: int = -1  # last Spark batch id begun (a crash leaves started > committed)
    consecutive_failures: int = 0
    disabled: str | None = None  # reason the consumer disabled itself, if it did
    resumed: str | None = None  # the last resume token honored (EffectiveSettings.resume_token)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    attempts: int = 0
    positions: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> next offset
    # Where a Fault stopped (the record as read, and why), and the records an administrator
    # moved out of the way with `antidote skip` ("topic:partition:offset", as read).
    fault: dict | None = None
    skipped: list[str] = field(default_factory=list)

    def entries(self) -> dict[str, dict]:
        return {
            BATCH: {"committed": self.committed_batch, "started": self.started_batch,
                    "consecutiveFailures": self.consecutive_failures, "disabled": self.disabled,
                    "resumed": self.resumed},
            COUNTS: {**self.counts, "attempts": self.attempts},
            POSITIONS: dict(self.positions),
            SKIPS: {"fault": self.fault, "skipped": list(self.skipped)},
        }

    def apply(self, key: str, value: dict) -> None:
        if key == BATCH:
            self.committed_batch = value.get("committed", -1)
            self.started_batch = value.get("started", -1)
            self.consecutive_failures = value.get("consecutiveFailures", 0)
            self.disabled = value.get("disabled")
            self.resumed = value.get("resumed")
        elif key == COUNTS:
            self.attempts = value.get("attempts", 0)
            self.counts = {k: value.get(k, 0) for k in OUTCOMES}
        elif key == POSITIONS:
            self.positions = dict(value)
        elif key == SKIPS:
            self.fault = value.get("fault")
            self.skipped = list(value.get("skipped") or [])


Record = tuple[str, int | None, bytes | None, bytes | None, list]  # topic, partition, key, value, headers


def transactional_id(namespace: str, consumer: str) -> str:
    """The one writer of a consumer's ledger: a second producer with this id fences the first."""
    who = f"{namespace}-{consumer}".strip("-") or "antidote"
    return f"antidote-{who}"


def load_state(bootstrap: str, topic: str, conf: dict[str, str] | None = None) -> LedgerState:
    """The ledger's committed state, read without becoming its writer."""
    consumer = Consumer({**(conf or {}), "bootstrap.servers": bootstrap,
                         "group.id": f"{topic}-loader", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        tp = TopicPartition(topic, 0, 0)
        low, high = retrying(lambda: consumer.get_watermark_offsets(tp, timeout=10),
                             f"ledger {topic}: reading its offsets")
        state = LedgerState()
        if high > low:
            consumer.assign([TopicPartition(topic, 0, low)])
            while True:
                msg = consumer.poll(30)
                if msg is None:
                    raise TimeoutError(f"ledger {topic}: no answer while loading")
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        break
                    raise RuntimeError(f"ledger {topic}: {msg.error()}")
                if msg.value() is not None:
                    state.apply(msg.key().decode(), json.loads(msg.value()))
        return state
    finally:
        consumer.close()


class Ledger:
    def __init__(self, bootstrap: str, topic: str, transactional_id: str,
                 client_conf: dict[str, str] | None = None):
        self.topic = topic
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self.conf = dict(client_conf or {})
        self.state = LedgerState()
        # Why this instance was fenced. Kept as text: a kept exception would keep its
        # traceback's frames, and with them the dead producer, alive.
        self.fenced: str | None = None
        self._producer: Producer | None = self._new_producer()

    def _new_producer(self) -> Producer:
        p = Producer({
            **self.conf, "bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
            "enable.idempotence": True, "linger.ms": 5, "transaction.timeout.ms": 60000,
            # Quarantine keeps records whole, however large the source let them be.
            "message.max.bytes": MAX_RECORD_BYTES})
        # Fences any older instance with the same id (a zombie driver) and aborts its open
        # transaction, so what it wrote half-way is never read.
        p.init_transactions(60)
        return p

    def close(self) -> None:
        """Let go of the producer (a later commit makes a new one). Left to the garbage
        collector, an idle producer outlives its brokers and logs a refused connection a
        second."""
        self._producer = None

    def load(self) -> LedgerState:
        self.state = load_state(self.bootstrap, self.topic, self.conf)
        return self.state

    def commit(self, state: LedgerState, records: Iterable[Record] = (),
               keys: Iterable[str] = (BATCH, COUNTS, POSITIONS, SKIPS)) -> None:
        """Produce `records` and `state`'s entries named by `keys` in one transaction; the
        in-memory state becomes `state` only once Kafka has committed it. Raises
        LedgerFenced, for good, once a newer instance has taken the transactional id."""
        if self.fenced is not None:
            raise LedgerFenced(self.fenced)
        if self._producer is None:
            self._producer = self._new_producer()
        p = self._producer
        try:
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
                self._commit_transaction(p)
            except BaseException as err:
                self._abort(p, err)
                raise
        except KafkaException as err:
            if err.args[0].code() in FENCED:
                self._fence(err)
            if self.fenced is not None:
                raise LedgerFenced(self.fenced) from err
            raise
        self.state = state

    def _fence(self, err: KafkaException) -> None:
        self._producer = None
        self.fenced = (
            f"the ledger {self.topic} was taken over by a newer instance of this consumer "
            f"(transactional id {self.transactional_id!r}): this one stops without writing "
            f"({err.args[0].str()})")

    @staticmethod
    def _commit_transaction(p: Producer) -> None:
        # A retriable error (a timeout) leaves the commit in flight: librdkafka wants the same
        # call again, and refuses any other transactional call until it ends.
        deadline = time.monotonic() + COMMIT_TIMEOUT_S
        while True:
            try:
                p.commit_transaction(max(1.0, deadline - time.monotonic()))
                return
            except KafkaException as err:
                if not err.args[0].retriable() or time.monotonic() >= deadline:
                    raise

    def _abort(self, p: Producer, err: BaseException) -> None:
        if isinstance(err, KafkaException) and err.args[0].fatal():
            self._producer = None  # unusable; a fenced one is never replaced
            return
        try:
            p.abort_transaction(30)
        except KafkaException as abort_err:
            # An abort must not hide why the transaction failed. The producer may be stuck
            # (a commit still in flight): a new one's init_transactions aborts what is open,
            # unless the abort says we are fenced (a new one would fence the newer owner).
            log.warning("could not abort the ledger transaction (%s) after: %s", abort_err, err)
            self._producer = None
            if abort_err.args[0].code() in FENCED:
                self._fence(abort_err)


def _bytes(x):
    return bytes(x) if isinstance(x, (bytearray, memoryview)) else x
