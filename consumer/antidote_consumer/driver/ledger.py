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
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition

from antidote_consumer.kafka.retry import retrying
from antidote_consumer.kafka.sink_entries import SinkEntry, parse_key, scan_conf
from antidote_consumer.kafka.transactions import MAX_RECORD_BYTES, Fenced, Record, TransactionalWriter

from .held_parts import HeldReader, held_entries

BATCH, COUNTS, POSITIONS, SKIPS, TOPICS = "batch", "counts", "positions", "skips", "topics"
HELD = "held:"  # + a source partition: its chains under ordering Key (worker.ordering)
OUTCOMES = ("processed", "retried", "moved", "rejected", "dropped")
log = logging.getLogger("antidote.consumer")
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
    # Topic name -> its Kafka topic id, for the topics `positions` are kept for: a topic
    # deleted and recreated under the same name has another id (driver.recreated).
    topic_ids: dict[str, str] = field(default_factory=dict)
    # The Spark checkpoint's source offsets belong to a source topic that was recreated and
    # rebased (`antidote rebase`): the next start removes it and starts from `positions`.
    stale_checkpoint: bool = False
    # An exactly-once sink's entries ("topic:partition" -> what its committed outputs cover),
    # written by the executors (worker.sink_txn), never by the driver: not in entries().
    sink: dict[str, SinkEntry] = field(default_factory=dict)
    # Where the load that made this state ended: every committed record below it was read
    # (driver.ledger_tail follows the ledger from there).
    end: int = field(default=0, compare=False)

    def entries(self) -> dict[str, dict]:
        return {
            BATCH: {"committed": self.committed_batch, "started": self.started_batch,
                    "inBatch": self.in_batch, "sourceStart": dict(self.source_start),
                    "consecutiveFailures": self.consecutive_failures, "disabled": self.disabled,
                    "resumed": self.resumed},
            COUNTS: {**self.counts, "attempts": self.attempts},
            POSITIONS: dict(self.positions),
            SKIPS: {"fault": self.fault, "skipped": list(self.skipped)},
            TOPICS: {"ids": dict(self.topic_ids), "staleCheckpoint": self.stale_checkpoint},
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
        elif key == TOPICS:
            self.topic_ids = dict(value.get("ids") or {})
            self.stale_checkpoint = bool(value.get("staleCheckpoint"))
        elif (where := parse_key(key)) is not None:
            self.sink[where] = SinkEntry.from_json(value)


def load_state(bootstrap: str, topic: str, conf: dict[str, str] | None = None) -> LedgerState:
    """The ledger's committed state, read without becoming its writer."""
    consumer = Consumer(scan_conf({**(conf or {}), "bootstrap.servers": bootstrap}, f"{topic}-loader"))
    try:
        tp = TopicPartition(topic, 0, 0)
        low, high = retrying(lambda: consumer.get_watermark_offsets(tp, timeout=10),
                             f"ledger {topic}: reading its offsets")
        state = LedgerState(end=high)
        if high > low:
            consumer.assign([TopicPartition(topic, 0, low)])
            while True:
                msg = consumer.poll(30)
                if msg is None:
                    raise TimeoutError(f"ledger {topic}: no answer while loading")
                err, key, value = msg.error(), msg.key(), msg.value()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        state.end = msg.offset() or 0  # the last stable offset: all below it decided
                        break
                    raise RuntimeError(f"ledger {topic}: {err}")
                if key is not None and value is not None:
                    state.apply(key.decode(), json.loads(value))
                elif key is not None and (where := parse_key(key.decode())) is not None:
                    state.sink.pop(where, None)  # a tombstone: `antidote rebase` of a recreated topic
        return state
    finally:
        consumer.close()


class Ledger:
    """A consumer's ledger: its state, loaded from the topic and committed with a batch's
    records through the one transactional writer (see transactions).

    After a commit whose result is unknown (it timed out, say: it may land at the next
    init_transactions), the copy in memory may be behind Kafka, and a decision from it would
    run settled retry records again or write positions backwards. So `state` is read again
    from the topic, once that commit has ended one way or the other, before anyone reads it."""

    def __init__(self, bootstrap: str, topic: str, transactional_id: str,
                 client_conf: dict[str, str] | None = None, max_batch_bytes: int | None = None):
        self.topic = topic
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self.conf = dict(client_conf or {})
        self._state = LedgerState()
        # Why the copy in memory may be behind Kafka (a commit with an unknown result), until
        # it was read again; the lock makes one reader of it (the retry pump reads `state`
        # outside the batch lock), and the others wait for what it read.
        self._stale: str | None = None
        self._reading = threading.Lock()
        # Told (state before, state read again) after an in-doubt commit was resolved.
        self.on_reload: Callable[[LedgerState, LedgerState], None] | None = None
        self.writer = TransactionalWriter(bootstrap, transactional_id, self.conf,
                                          what=f"the ledger {topic}", max_batch_bytes=max_batch_bytes,
                                          topic_refusals=True)

    @property
    def fenced(self) -> str | None:
        return self.writer.fenced

    @property
    def in_doubt(self) -> str | None:
        """Why the last commit's result is unknown (None: the state in memory is Kafka's)."""
        return self._stale

    @property
    def state(self) -> LedgerState:
        if self._stale is not None and self.writer.fenced is None:
            self.reload()
        return self._state

    @state.setter
    def state(self, value: LedgerState) -> None:
        self._state = value

    def reload(self) -> LedgerState:
        """The in-doubt commit ended (a new producer's init_transactions), then the state as
        Kafka has it: raises, leaving the doubt in place, while either cannot be done."""
        with self._reading:
            if self._stale is None:
                return self._state  # read by another thread meanwhile
            before = self._state
            self.writer.settle_doubt()
            self._state = load_state(self.bootstrap, self.topic, self.conf)
            self._stale = None
        log.warning("the ledger %s was read again after a commit with an unknown result: that "
                    "commit %s", self.topic, "landed" if self._state.entries() != before.entries()
                    else "did not change it (aborted, or it wrote what was there)")
        if self.on_reload is not None:
            self.on_reload(before, self._state)
        return self._state

    def close(self) -> None:
        self.writer.close()

    def load(self) -> LedgerState:
        self._state = load_state(self.bootstrap, self.topic, self.conf)
        return self._state

    def commit(self, state: LedgerState, records: Iterable[Record] = (),
               keys: Iterable[str] | None = None) -> None:
        """Produce `records` and `state`'s entries named by `keys` (default: all of them) in one
        transaction; the in-memory state becomes `state` only once Kafka has committed it.
        Raises LedgerFenced, for good, once a newer instance has taken the transactional id.
        A commit whose result is unknown raises too, and leaves `in_doubt` set: `state` is
        read again before it is next read."""
        if self._stale is not None and self.writer.fenced is None:
            # `state` was made from a copy that the in-doubt commit may have outdated.
            self.reload()
            raise RuntimeError(f"the ledger {self.topic} was read again after a commit with an "
                               "unknown result: a state made before it is not committed")
        entries = state.entries()
        keys = entries.keys() if keys is None else keys
        try:
            self.writer.transaction(records, then=[(self.topic, None, k.encode(), json.dumps(entries[k]).encode(), [])
                                                   for k in keys])
        except BaseException:
            self._stale = self.writer.in_doubt
            raise
        self._state = state
