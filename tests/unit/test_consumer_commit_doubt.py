"""Commits whose result is unknown, and settles the broker refuses: the writer's and the
ledger's decisions, with a stand-in producer (the real broker: test_consumer_commit_doubt in
tests/integration)."""

from __future__ import annotations

import copy
import threading
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from antidote_consumer.driver import ledger as ledger_mod
from antidote_consumer.driver.ledger import Ledger, LedgerState
from antidote_consumer.driver.disabled import QueueDisabled
from antidote_consumer.driver.settle_refused import RefusedCommit, refused_backoff, refused_disables
from antidote_consumer.kafka import transactions
from antidote_consumer.kafka.transactions import RecordRefused, TransactionalWriter, commit_aborted


class FakeProducer:
    """Records the transactional calls; commit_transaction raises `commit_error` if set."""

    def __init__(self, commit_error: KafkaError | None = None):
        self.commit_error = commit_error
        self.calls: list[str] = []

    def begin_transaction(self):
        self.calls.append("begin")

    def produce(self, *a, **kw):
        self.calls.append("produce")

    def poll(self, _t):
        return 0

    def flush(self, _t):
        return 0

    def __len__(self):  # nothing left undelivered
        return 0

    def commit_transaction(self, _t):
        self.calls.append("commit")
        if self.commit_error is not None:
            raise KafkaException(self.commit_error)

    def abort_transaction(self, _t):
        self.calls.append("abort")


class FakeWriter(TransactionalWriter):
    """A writer whose producers are FakeProducers, handed out in order."""

    def __init__(self, producers: list[FakeProducer]):
        self.producers = producers
        self.made = 0
        super().__init__("b:9092", "tid")

    def _new_producer(self):
        p = self.producers[self.made]
        self.made += 1
        return p


TIMED_OUT = KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True)
ABORTABLE = KafkaError(KafkaError.INVALID_TXN_STATE, "refused", txn_requires_abort=True)
RECORD = [("t", 0, b"k", b"v", [])]


@pytest.fixture(autouse=True)
def short_commit(monkeypatch):
    monkeypatch.setattr(transactions, "COMMIT_TIMEOUT_S", 0.01)


def test_only_an_error_that_requires_an_abort_says_a_commit_was_aborted() -> None:
    assert commit_aborted(ABORTABLE)
    assert not commit_aborted(TIMED_OUT)
    assert not commit_aborted(KafkaError(KafkaError._FATAL, "fatal", fatal=True))
    assert not commit_aborted(KafkaError(KafkaError.UNKNOWN, "other"))


def test_a_commit_that_timed_out_is_in_doubt_not_aborted_and_the_next_producer_ends_it() -> None:
    first, second = FakeProducer(TIMED_OUT), FakeProducer()
    w = FakeWriter([first, second])

    with pytest.raises(KafkaException):
        w.transaction(RECORD)

    assert w.in_doubt and "commit timed out" in w.in_doubt
    assert "abort" not in first.calls  # an abort would race the commit in flight
    assert first.calls.count("commit") >= 1
    assert w.settle_doubt() and w.made == 2 and w.in_doubt is None  # init_transactions ended it
    assert not w.settle_doubt()
    w.transaction(RECORD)
    assert second.calls[-1] == "commit"


def test_a_commit_that_requires_an_abort_is_aborted_and_not_in_doubt() -> None:
    p = FakeProducer(ABORTABLE)
    w = FakeWriter([p])

    with pytest.raises(KafkaException):
        w.transaction(RECORD)

    assert w.in_doubt is None and p.calls[-1] == "abort"


def test_a_commit_in_doubt_with_a_refused_record_is_a_refusal() -> None:
    p = FakeProducer(TIMED_OUT)
    w = FakeWriter([p])
    # The delivery report of the refused record, served by the poll after the commit failed.
    p.poll = lambda _t: (w._refusals or w._refusals.append("poison: Broker: Message size too large"))

    with pytest.raises(RecordRefused, match="poison: Broker: Message size too large"):
        w.transaction(RECORD)
    assert w.in_doubt is None


def test_a_fenced_writer_never_makes_a_producer_to_end_a_doubt() -> None:
    w = FakeWriter([FakeProducer(TIMED_OUT)])
    with pytest.raises(KafkaException):
        w.transaction(RECORD)
    w.fenced = "taken over"
    assert not w.settle_doubt() and w.made == 1


def _ledger(monkeypatch, producers, kafka: list[LedgerState]) -> Ledger:
    """A Ledger over a FakeWriter; `kafka[0]` is what load_state reads from the topic."""
    monkeypatch.setattr(ledger_mod, "TransactionalWriter",
                        lambda *a, **kw: FakeWriter(producers))
    monkeypatch.setattr(ledger_mod, "load_state", lambda *a, **kw: copy.deepcopy(kafka[0]))
    return Ledger("b:9092", "ledger", "tid")


def test_after_a_commit_in_doubt_the_ledger_is_read_again_before_it_is_read(monkeypatch) -> None:
    landed = LedgerState(positions={"t.retry-1:0": 10}, counts={"processed": 3})
    kafka = [LedgerState(positions={"t.retry-1:0": 5})]
    first = FakeProducer()
    led = _ledger(monkeypatch, [first, FakeProducer()], kafka)
    led.load()
    led.commit(copy.deepcopy(kafka[0]))
    first.commit_error = TIMED_OUT
    reloads = []
    led.on_reload = lambda before, after: reloads.append((before.positions, after.positions))

    with pytest.raises(KafkaException):
        led.commit(landed)
    kafka[0] = landed  # the commit landed at the next init_transactions

    assert led.in_doubt
    assert led.state.positions == {"t.retry-1:0": 10}  # Kafka's, not the copy from before
    assert led.in_doubt is None and led.writer.made == 2
    assert reloads == [({"t.retry-1:0": 5}, {"t.retry-1:0": 10})]


def test_a_state_made_before_a_commit_in_doubt_is_not_committed(monkeypatch) -> None:
    kafka = [LedgerState(positions={"s:0": 7})]
    led = _ledger(monkeypatch, [FakeProducer(TIMED_OUT), FakeProducer()], kafka)
    stale = LedgerState(positions={"s:0": 3})
    with pytest.raises(KafkaException):
        led.commit(LedgerState(positions={"s:0": 7}))

    with pytest.raises(RuntimeError, match="unknown result"):
        led.commit(stale)  # would write 3 over the 7 that landed
    assert led.state.positions == {"s:0": 7} and led.in_doubt is None


def test_refused_settles_back_off_like_rollbacks_and_disable_at_the_threshold() -> None:
    assert [refused_backoff(n, 1.0) for n in (1, 2, 3, 6, 7)] == [1, 2, 4, 30, 30]
    assert not refused_disables(4, True, 5)
    assert refused_disables(5, True, 5)
    assert not refused_disables(500, False, 5)  # queueDisable off: backed off, never disabled


class Refusing:
    """A ledger that refuses `refusals` commits, and the rollbacks RefusedCommit counts."""

    def __init__(self, refusals: int, threshold: int = 3):
        self.failures = 0
        self.committed: list = []
        self.stopping = threading.Event()
        left = [refusals]

        def commit(state, records):
            if left[0]:
                left[0] -= 1
                raise RecordRefused("t.poison: Broker: Message size too large")
            self.committed.append((state, records))

        def rollback(err) -> int:
            self.failures += 1
            return self.failures
        qd = SimpleNamespace(enabled=True, consecutive_batch_failures=threshold)
        self.refused = RefusedCommit(SimpleNamespace(commit=commit), qd, rollback, self.stopping, 0.0)

def test_a_refused_settle_is_written_again_unchanged_until_it_is_taken() -> None:
    rt = Refusing(refusals=2)
    state, records = LedgerState(), [("t.poison", 0, b"k", b"v", [])]
    rt.refused.commit(state, records)
    assert rt.failures == 2 and rt.committed == [(state, records)]


def test_refused_settles_disable_the_queue_naming_the_topic_and_the_brokers_error() -> None:
    rt = Refusing(refusals=10, threshold=3)
    with pytest.raises(QueueDisabled) as err:
        rt.refused.commit(LedgerState(), [])
    assert err.value.reason == "ConsecutiveBatchFailures" and rt.failures == 3 and not rt.committed
    assert "t.poison: Broker: Message size too large" in err.value.message


def test_a_stop_ends_the_wait_of_a_refused_settle_without_disabling() -> None:
    rt = Refusing(refusals=10, threshold=3)
    rt.stopping.set()
    with pytest.raises(RecordRefused):
        rt.refused.commit(LedgerState(), [])
    assert rt.failures == 1


def test_records_left_undelivered_abort_the_transaction_before_its_commit_is_asked_for() -> None:
    p = FakeProducer()
    p.__class__ = type("Stuck", (FakeProducer,), {"__len__": lambda self: 3})
    w = FakeWriter([p])

    with pytest.raises(KafkaException, match="3 record"):
        w.transaction(RECORD)

    assert "commit" not in p.calls and p.calls[-1] == "abort" and w.in_doubt is None


def test_a_flush_that_fails_inside_the_refusal_callback_raises_the_kafka_error() -> None:
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))

    def flush(_t):  # as confluent-kafka 2.16 fails a flush that meets a fatal error
        raise SystemError("returned a result with an exception set") from fenced

    p = FakeProducer()
    p.flush = flush
    w = FakeWriter([p])

    with pytest.raises(transactions.Fenced, match="newer instance"):
        w.transaction(RECORD)
    assert "commit" not in p.calls


def test_what_a_commit_that_landed_counted_is_counted_in_the_metrics_once() -> None:
    from antidote_consumer.driver.metrics import Metrics
    from antidote_consumer.driver.settle import Settler

    m = Metrics("tests", "c")
    settler = Settler(None, None, m, None, None, max_held=0)  # reloaded() needs the metrics alone
    before = LedgerState(counts={"processed": 5, "retried": 1}, attempts=7)
    landed = LedgerState(counts={"processed": 8, "retried": 1, "moved": 2}, attempts=12,
                         consecutive_failures=0)

    settler.reloaded(before, landed)
    settler.reloaded(landed, copy.deepcopy(landed))  # read again, nothing new

    def sample(name, **labels):
        return m.registry.get_sample_value(name, {**m.ids, **labels}) or 0.0
    assert sample("antidote_messages_total", outcome="processed") == 3
    assert sample("antidote_messages_total", outcome="moved") == 2
    assert sample("antidote_messages_total", outcome="retried") == 0
    assert sample("antidote_attempts_total") == 5
