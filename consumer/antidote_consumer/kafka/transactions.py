"""One transactional Kafka writer, for everything Antidote commits exactly once: the
consumer's ledger (a batch's retry and quarantine records with its positions) and the
poison-queue reader (a chunk's redriven or rejected records, its progress and the group's
offsets).

What it gets right once, for both: a newer instance with the same transactional id fences
this one for good (`Fenced`, never retried, nothing more written); a retriable commit error
is retried as librdkafka asks; an abort never hides why the transaction failed; a producer
left unusable is replaced by a new one, whose init_transactions aborts what was left open;
a record the broker refuses is reported as `RecordRefused` with the broker's reason; a commit
whose result is unknown (it timed out, or failed in a way that does not say it was aborted) is
marked `in_doubt` until a new producer's init_transactions has finished it, one way or the
other (`settle_doubt`), so that a caller re-reads what it committed before deciding anything.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

log = logging.getLogger("antidote.consumer")

MAX_RECORD_BYTES = 64 * 1024 * 1024  # quarantine keeps records whole, however large
COMMIT_TIMEOUT_S = 60.0  # commit_transaction's own part: the coordinator's answer
DELIVERY_TIMEOUT_S = 60.0  # the transaction's records delivered, before the commit
# What librdkafka and the broker say to a producer whose transactional id a newer one took.
FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
# A transaction's error that is a topic's refusal of its records, though no record's delivery
# report says so: the coordinator would not add a topic this producer may not write (an ACL)
# to the transaction, which fails the whole transaction at its commit.
TOPIC_REFUSALS = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED})

# topic, partition, key, value, headers[, timestamp]: a timestamp (epoch ms) sets the record's
# CreateTime (retry records carry their settle time, see driver.retry_plan); else the client's now.
Record = tuple  # (str, int | None, bytes | None, bytes | None, list[, int])


class Fenced(RuntimeError):
    """A newer instance with this transactional id owns what this one wrote: this one is a
    zombie (a driver that lost its pod, a second replica, a killed reader's twin) and must
    stop without writing."""


class RecordRefused(RuntimeError):
    """The broker refused a record of the transaction (too large, no such topic, no
    permission); the transaction was aborted and nothing of it is visible."""


class CommitInDoubt(RuntimeError):
    """commit_transaction was called and did not say whether it committed (internal to
    TransactionalWriter: the caller gets the commit's own error and `in_doubt`)."""


def commit_aborted(err: KafkaError) -> bool:
    """Whether a failed commit_transaction certainly committed nothing. Only an error that
    requires an abort says so (a record was refused, the coordinator refused the commit):
    a transaction that can still be aborted was not committed. A timeout, an error that
    leaves the producer fatal or any other answer may come after the coordinator took the
    commit, which then completes at the next init_transactions: its result is unknown."""
    return err.txn_requires_abort()


class TransactionalWriter:
    def __init__(self, bootstrap: str, transactional_id: str, conf: dict[str, str] | None = None,
                 *, what: str = "the ledger", max_batch_bytes: int | None = None,
                 topic_refusals: bool = False):
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self.conf = dict(conf or {})
        # librdkafka packs records of one partition into batches of up to batch.size (1 MB),
        # and a broker refuses a batch above the topic's max.message.bytes even when each
        # record fits: a topic with a smaller limit needs smaller batches, or every commit
        # to it fails the same way.
        self.batching = {} if max_batch_bytes is None else {"batch.size": max(1024, max_batch_bytes)}
        self.what = what
        # Whether a transaction an ACL refuses (TOPIC_REFUSALS) raises RecordRefused too: the
        # consumer's ledger, whose caller retries the same settle and disables the queue. Not
        # the reader's, which takes a refused record for its message's failure and would give
        # every message its disposition (Drop: lose them) for a topic it may not write.
        self.topic_refusals = topic_refusals
        # Why this instance was fenced. Kept as text: a kept exception would keep its
        # traceback's frames, and with them the dead producer, alive.
        self.fenced: str | None = None
        self._refusals: list[str] = []
        # Why the last commit's result is unknown, until settle_doubt ends it (see _commit).
        self.in_doubt: str | None = None
        self._settling = threading.Lock()
        self._producer: Producer | None = self._new_producer()

    def _new_producer(self) -> Producer:
        p = Producer({
            **self.conf, "bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
            "enable.idempotence": True, "linger.ms": 5, "transaction.timeout.ms": 60000,
            "message.max.bytes": MAX_RECORD_BYTES, **self.batching,
            # Refusals through one producer-level callback, not one Python call per record.
            "delivery.report.only.error": True, "on_delivery": self._refused})
        # Fences any older instance with the same id and aborts its open transaction, so what
        # it wrote half-way is never read.
        p.init_transactions(60)
        return p

    def _refused(self, err, msg) -> None:
        if err.code() not in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):  # our abort's
            self._refusals.append(f"{msg.topic()}: {err.str()}")

    def close(self) -> None:
        """Let go of the producer (a later transaction makes a new one). Left to the garbage
        collector, an idle producer outlives its brokers and logs a refused connection a
        second."""
        self._producer = None

    def transaction(self, records: Iterable[Record], *, check_records: bool = False,
                    then: Iterable[Record] = (), offsets: list[TopicPartition] | None = None,
                    group=None, before: Callable[[str], None] | None = None) -> None:
        """Produce `records`, then `then` (progress entries), and commit `offsets` of consumer
        group `group`, in one transaction. With `check_records`, `records` must all be
        accepted before `then` is produced (a refusal raises RecordRefused at once).
        `before(topic)` runs before each of `records` is produced (pacing)."""
        if self.fenced is not None:
            raise Fenced(self.fenced)
        self.settle_doubt()
        if self._producer is None:
            self._producer = self._new_producer()
        p = self._producer
        self._refusals.clear()
        topics: set[str] = set()  # of `records`: what a topic refusal names
        try:
            p.begin_transaction()
            try:
                self._produce_all(p, records, before, topics)
                if check_records:
                    p.flush(COMMIT_TIMEOUT_S)
                    self._raise_refused()
                self._produce_all(p, then, None)
                if offsets:
                    p.send_offsets_to_transaction(offsets, group, COMMIT_TIMEOUT_S)
                self._delivered(p)
                self._commit(p)
            except CommitInDoubt as doubt:
                p.poll(0)
                if self._refusals:  # a transaction with a refused record never commits
                    self._abort(p, doubt.__cause__ or doubt)
                    raise RecordRefused(self._refusals[0]) from doubt.__cause__
                # Not aborted: an abort now would be refused (the commit is still in flight)
                # or would hide that it may have landed. The next producer's init_transactions
                # finishes it either way; until then nothing is decided from the caller's copy.
                self._producer = None
                self.in_doubt = str(doubt)
                log.warning("the commit of %s has an unknown result (%s): it is re-read before "
                            "anything else is decided", self.what, doubt)
                raise doubt.__cause__ or doubt  # a fenced one is handled below
            except BaseException as err:
                p.poll(0)  # serves the refusals that made the commit fail, before the abort purges
                self._abort(p, err)
                if self._refusals and not isinstance(err, RecordRefused):
                    raise RecordRefused(self._refusals[0]) from err
                if (self.topic_refusals and isinstance(err, KafkaException)
                        and err.args[0].code() in TOPIC_REFUSALS and topics):
                    raise RecordRefused(topic_refusal(sorted(topics), err.args[0].str())) from err
                raise
        except KafkaException as err:
            if err.args[0].code() in FENCED:
                self._fence(err)
            if self.fenced is not None:
                raise Fenced(self.fenced) from err
            raise

    def _produce_all(self, p: Producer, records: Iterable[Record], before,
                     topics: set[str] | None = None) -> None:
        for topic, partition, key, value, headers, *stamp in records:
            ts = stamp[0] if stamp else 0  # 0: librdkafka's now
            if topics is not None:
                topics.add(topic)
            if before is not None:
                before(topic)
            # Spark hands binary columns over as bytearray; the client wants bytes.
            key, value = _bytes(key), _bytes(value)
            # Copied only when a value needs it: a quarantined record carries ~15 headers,
            # every retried and quarantined record passes here, and a copy is as many new
            # objects, which the garbage collector then walks.
            if headers and not (headers.__class__ is list and _plain(headers)):
                headers = [(k, _bytes(v)) for k, v in headers]
            headers = headers or None
            while True:
                try:
                    if partition is None:
                        p.produce(topic, value, key, headers=headers, timestamp=ts)
                    else:
                        p.produce(topic, value, key, partition=partition, headers=headers, timestamp=ts)
                    break
                except BufferError:  # the local queue is full: let the network catch up
                    p.poll(0.1)
                except KafkaException as err:  # refused before it left: too large, say
                    self._refusals.append(f"{topic}: {err.args[0].str()}")
                    raise RecordRefused(self._refusals[-1]) from None
            p.poll(0)

    def _raise_refused(self) -> None:
        if self._refusals:
            raise RecordRefused(self._refusals[0])

    def _delivered(self, p: Producer) -> None:
        """Every record of the transaction delivered (or refused) before the commit is asked
        for: then a refusal or a delivery that takes too long certainly aborts it (the commit
        was never asked for), and what commit_transaction may leave unknown is the
        coordinator's answer alone (see _commit)."""
        # A flush that meets a fatal error (a newer instance fenced this one) calls the refusal
        # callback with that error still pending in confluent-kafka 2.16, and fails with a
        # SystemError caused by it: the error itself is raised. (Polling instead of flushing
        # waits out linger.ms too: 4 ms more per commit, measured.)
        try:
            p.flush(DELIVERY_TIMEOUT_S)
        except SystemError as err:
            if isinstance(err.__cause__, KafkaException):
                raise err.__cause__ from None
            raise
        left = len(p)
        self._raise_refused()
        if left:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{left} record(s) of the transaction "
                                            f"not delivered within {DELIVERY_TIMEOUT_S:g}s"))

    def settle_doubt(self) -> bool:
        """End an in-doubt commit: a new producer's init_transactions completes a commit the
        coordinator had begun, or aborts one it never got, and returns only then. True if
        there was one: what it wrote is now either all visible or never will be."""
        with self._settling:  # two producers at once: the older would be fenced by the newer
            if self.in_doubt is None or self.fenced is not None:
                return False  # a fenced one never makes a producer again (it would fence the owner)
            if self._producer is None:
                self._producer = self._new_producer()
            self.in_doubt = None
            return True

    @staticmethod
    def _commit(p: Producer) -> None:
        # A retriable error (a timeout) leaves the commit in flight: librdkafka wants the same
        # call again, and refuses any other transactional call until it ends.
        deadline = time.monotonic() + COMMIT_TIMEOUT_S
        while True:
            try:
                p.commit_transaction(max(min(1.0, COMMIT_TIMEOUT_S), deadline - time.monotonic()))
                return
            except KafkaException as err:
                if err.args[0].retriable() and time.monotonic() < deadline:
                    continue
                if commit_aborted(err.args[0]):
                    raise
                raise CommitInDoubt(err.args[0].str()) from err
            except BaseException as err:  # interrupted while the commit was in flight
                raise CommitInDoubt(f"interrupted ({type(err).__name__})") from err

    def _fence(self, err: KafkaException) -> None:
        self._producer = None
        self.fenced = (
            f"{self.what} was taken over by a newer instance (transactional id "
            f"{self.transactional_id!r}): this one stops without writing ({err.args[0].str()})")

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
            log.warning("could not abort the transaction of %s (%s) after: %s", self.what, abort_err, err)
            self._producer = None
            if abort_err.args[0].code() in FENCED:
                self._fence(abort_err)


def topic_refusal(topics: list[str], error: str) -> str:
    """RecordRefused's text for a transaction refused for one of `topics` (the broker does
    not say which): `<topic>: <error>`, as a record's refusal reads."""
    return f"{topics[0]}: {error}" if len(topics) == 1 else f"one of {', '.join(topics)}: {error}"


def _plain(headers: list) -> bool:
    """Whether every header value is bytes or None already."""
    for _k, v in headers:
        if v is not None and v.__class__ is not bytes:
            return False
    return True


def _bytes(x):
    return bytes(x) if isinstance(x, (bytearray, memoryview)) else x
