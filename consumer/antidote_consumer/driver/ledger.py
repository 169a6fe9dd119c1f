"""The failure ledger: a compacted Kafka topic, written only in transactions.

Each batch's retry, poison and dead-letter records are produced in the same Kafka
transaction as the ledger entries that say the batch is done: the next offset of every
source and retry partition the batch read, and the counts. So quarantine records are
written exactly once even when the consumer crashes and Spark replays a batch, and attempt
counts travel in the retry records themselves. What is accounted for is known by source
position, never by Spark's batch id: a lost or replaced checkpoint starts the ids at 0
again, and the positions still say, message by message, what already has its outcome.
Why Kafka and not the Spark checkpoint: the checkpoint cannot be updated atomically with
Kafka writes, and a checkpoint on local disk dies with its pod.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition

from antidote_consumer.kafka.retry import retrying
from antidote_consumer.kafka.transactions import MAX_RECORD_BYTES, Fenced, Record, TransactionalWriter

from .held_parts import HeldReader, held_entries

BATCH, COUNTS, POSITIONS, SKIPS = "batch", "counts", "positions", "skips"
HELD = "held:"  # + a source partition: its chains under ordering Key (worker.ordering)
OUTCOMES = ("processed", "retried", "moved", "rejected", "dropped")
LedgerFenced = Fenced  # a newer instance of this consumer owns its ledger: this one stops
__all__ = ["MAX_RECORD_BYTES", "Ledger", "LedgerFenced", "LedgerState", "load_state"]


@dataclass
class LedgerState:
    # The last Spark batch ids begun and committed: for logs only. What a batch skips is
    # decided by `positions`, since a new checkpoint starts the ids at 0 again.
    committed_batch: int = -1
    started_batch: int = -1
    in_batch: bool = False  # a source batch began and has not committed: a crash leaves it set
    consecutive_failures: int = 0
    disabled: str | None = None  # reason the consumer disabled itself, if it did
    resumed: str | None = None  # the last resume token honored (EffectiveSettings.resume_token)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    attempts: int = 0
    # "topic:partition" -> the next offset without an outcome, for the source topic and the
    # retry topics alike: records below it are accounted for (committed with their outcomes).
    positions: dict[str, int] = field(default_factory=dict)
    # ordering Key: source partition ("3") -> its keys' chains (what is held behind which
    # message, and where each is parked), one ledger entry per partition, committed with the
    # batch's retry records. A partition whose chains emptied keeps {} (written as such).
    held: dict[str, dict] = field(default_factory=dict)
    # Large chains are cut in parts, several records (held_parts): joined here as they are read.
    held_parts: HeldReader = field(default_factory=HeldReader, repr=False, compare=False)
    # Where a consumer with startingOffsets latest first started, by source partition: with
    # its checkpoint lost, a partition that never delivered a record starts there again.
    source_start: dict[str, int] = field(default_factory=dict)
    # Where a Fault stopped (the record as read, and why), and the records an administrator
    # moved out of the way with `antidote skip` ("topic:partition:offset", as read).
    fault: dict | None = None
    skipped: list[str] = field(default_factory=list)

    def entries(self) -> dict[str, dict]:
        return {
            BATCH: {"committed": self.committed_batch, "started": self.started_batch,
                    "inBatch": self.in_batch, "sourceStart": dict(self.source_start),
                    "consecutiveFailures": self.consecutive_failures, "disabled": self.disabled,
                    "resumed": self.resumed},
            COUNTS: {**self.counts, "attempts": self.attempts},
            POSITIONS: dict(self.positions),
            SKIPS: {"fault": self.fault, "skipped": list(self.skipped)},
            **{k: v for p, chains in self.held.items() for k, v in held_entries(HELD, p, dict(chains)).items()},
        }

    def apply(self, key: str, value: dict) -> None:
        if key == BATCH:
            self.committed_batch = value.get("committed", -1)
            self.started_batch = value.get("started", -1)
            # Ledgers written before inBatch existed said it by started > committed.
            self.in_batch = value.get("inBatch", self.started_batch > self.committed_batch)
            self.source_start = dict(value.get("sourceStart") or {})
            self.consecutive_failures = value.get("consecutiveFailures", 0)
            self.disabled = value.get("disabled")
            self.resumed = value.get("resumed")
        elif key == COUNTS:
            self.attempts = value.get("attempts", 0)
            self.counts = {k: value.get(k, 0) for k in OUTCOMES}
        elif key == POSITIONS:
            self.positions = dict(value)
        elif key.startswith(HELD):
            self.held_parts.apply(self.held, key[len(HELD):], value)
        elif key == SKIPS:
            self.fault = value.get("fault")
            self.skipped = list(value.get("skipped") or [])


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
    """A consumer's ledger: its state, loaded from the topic and committed with a batch's
    records through the one transactional writer (see transactions)."""

    def __init__(self, bootstrap: str, topic: str, transactional_id: str,
                 client_conf: dict[str, str] | None = None, max_batch_bytes: int | None = None):
        self.topic = topic
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self.conf = dict(client_conf or {})
        self.state = LedgerState()
        self.writer = TransactionalWriter(bootstrap, transactional_id, self.conf,
                                          what=f"the ledger {topic}", max_batch_bytes=max_batch_bytes)

    @property
    def fenced(self) -> str | None:
        return self.writer.fenced

    def close(self) -> None:
        self.writer.close()

    def load(self) -> LedgerState:
        self.state = load_state(self.bootstrap, self.topic, self.conf)
        return self.state

    def commit(self, state: LedgerState, records: Iterable[Record] = (),
               keys: Iterable[str] | None = None) -> None:
        """Produce `records` and `state`'s entries named by `keys` (default: all of them) in one
        transaction; the in-memory state becomes `state` only once Kafka has committed it.
        Raises LedgerFenced, for good, once a newer instance has taken the transactional id."""
        entries = state.entries()
        keys = entries.keys() if keys is None else keys
        self.writer.transaction(records, then=[(self.topic, None, k.encode(), json.dumps(entries[k]).encode(), [])
                                               for k in keys])
        self.state = state
