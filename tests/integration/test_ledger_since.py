"""A task's read of its partition's sink entry (worker.sink_txn, kafka.sink_entries) reads the
ledger only from the offset the driver's copy is current to (driver.ledger_tail), not the whole
log, and still finds an entry a dead attempt committed after it, even one a still-open
transaction of another writer hides from read_committed readers until it ends (docs/scaling.md,
"A defect written down"; docs/consumer.md, "Exactly-once to a Kafka sink"). On Kafka."""

from __future__ import annotations

import json
import threading
import time
import types
import uuid

import pytest
from confluent_kafka import Producer

from antidote_api.names import sink_transactional_id
from antidote_consumer.driver.ledger import LedgerState, load_state
from antidote_consumer.driver.sink_state import SinkState
from antidote_consumer.kafka import sink_entries
from antidote_consumer.kafka.sink_entries import EntryScan, SinkEntry, entry_key
from antidote_consumer.kafka.topics import LEDGER_CONFIG, ensure_topics, topic_config, wait_ready
from antidote_consumer.worker import sink_txn
from antidote_consumer.worker.executor import WorkerConfig
from antidote_consumer.worker.sink_txn import ExactlyOnce, PartitionSink

BEFORE = 20_000  # entries of other partitions before the driver's load: what a read no longer scans


def commit(bootstrap: str, tid: str, records: list[tuple[str, bytes | None, bytes]], per_txn: int = 1000) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5})
    p.init_transactions(30)
    for i in range(0, len(records), per_txn):
        p.begin_transaction()
        for topic, value, key in records[i:i + per_txn]:
            p.produce(topic, value, key)
        p.commit_transaction(60)
    return p  # left as is: an attempt that died after its commit


def entry(where: str, e: SinkEntry) -> tuple[bytes, bytes]:
    topic, _, partition = where.rpartition(":")
    return json.dumps(e.to_json()).encode(), entry_key(topic, int(partition)).encode()


@pytest.fixture
def scans(monkeypatch) -> list[EntryScan]:
    """Every scan a task makes, as made (the real read, recorded)."""
    seen: list[EntryScan] = []

    def read_entry(conf, ledger_topic, key, since=0, timeout=sink_entries.SCAN_TIMEOUT_S):
        seen.append(sink_entries.scan_entry(conf, ledger_topic, key, since, timeout))
        return seen[-1].entry

    monkeypatch.setattr(sink_txn, "read_entry", read_entry)
    return seen


def test_a_tasks_read_starts_where_the_drivers_copy_is_current_and_finds_what_a_dead_attempt_wrote(
        kafka_bootstrap, kafka_admin, topic_factory, scans) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    ledger = f"{source}.ledger"
    writer = f"antidote/tests/since-{uuid.uuid4().hex[:6]}"
    conf = {"bootstrap.servers": kafka_bootstrap}
    kafka_topic = {"topic": sink, "bootstrap.servers": kafka_bootstrap}
    wait_ready(kafka_admin, [source, sink])  # (created a moment ago: known to every broker)
    ensure_topics(kafka_admin, source, [], ledger)  # the ledger, as a consumer creates it
    try:
        assert topic_config(kafka_admin, ledger, tuple(LEDGER_CONFIG)) == LEDGER_CONFIG
        # A long log before the driver's load: other partitions' entries, and src:0's.
        records = [(ledger, *entry(f"other:{i % 512}", SinkEntry(i))) for i in range(BEFORE)]
        commit(kafka_bootstrap, f"{writer}-before", records + [(ledger, *entry("src:0", SinkEntry(70)))])
        state = load_state(kafka_bootstrap, ledger)
        assert state.end > BEFORE and state.sink["src:0"] == SinkEntry(70)
        drv = SinkState(follows=True)
        drv.loaded(types.SimpleNamespace(bootstrap=kafka_bootstrap, topic=ledger, conf={}), state)
        try:
            cfg = WorkerConfig("m:h", "src", 0, 0, frozenset(), None, kafka_topic, False,
                               exactly_once=ExactlyOnce(ledger, writer))
            positions = LedgerState(positions={f"src:{p}": 50 for p in range(4)})
            eos = drv.current(cfg, positions).exactly_once
            assert eos.since == state.end and eos.fresh == frozenset()

            # The driver's copy is current: a task fences, reads from its end, finds nothing.
            p0 = PartitionSink.open(eos, kafka_topic, "src", 0, retried_task=False)
            assert p0.carried == SinkEntry(70)
            assert (scans[-1].start, scans[-1].found, scans[-1].records) == (state.end, False, 0)

            # An attempt of src:1 that died after it committed, unseen by the driver.
            dead = SinkEntry(90, frozenset({61}))
            commit(kafka_bootstrap, sink_transactional_id(writer, "src", 1),
                   [(sink, b"out", None), (ledger, *entry("src:1", dead))])
            p1 = PartitionSink.open(eos, kafka_topic, "src", 1, retried_task=False)
            assert p1.carried == dead and p1.pending == {61}
            assert scans[-1].start == state.end and scans[-1].found and scans[-1].records == 1

            # src:3's dead attempt committed after src:2's (still running) opened a
            # transaction: read_committed readers are told the end there, before src:3's
            # entry. The read waits until that transaction ended, and finds it.
            zombie = Producer({**conf, "transactional.id": sink_transactional_id(writer, "src", 2)})
            zombie.init_transactions(30)
            zombie.begin_transaction()
            zombie.produce(ledger, *entry("src:2", SinkEntry(55)))
            zombie.flush(30)
            hidden = SinkEntry(80)
            commit(kafka_bootstrap, sink_transactional_id(writer, "src", 3), [(ledger, *entry("src:3", hidden))])
            opened: list[PartitionSink] = []
            reader = threading.Thread(target=lambda: opened.append(
                PartitionSink.open(eos, kafka_topic, "src", 3, retried_task=False)))
            reader.start()
            reader.join(8)  # it must still be waiting: a read that stopped at that end has ended
            assert reader.is_alive() and not opened, "the read ended at an end an open transaction held"
            zombie.abort_transaction(30)
            reader.join(60)
            assert opened and opened[0].carried == hidden
            assert scans[-1].start == state.end and scans[-1].found

            # The driver learns what was committed after its load by following the ledger: its
            # copy moves on, and the next read starts after those records.
            deadline = time.monotonic() + 30
            while (eos := drv.current(cfg, positions).exactly_once).since <= scans[-1].end - 2:
                assert time.monotonic() < deadline, f"the driver's copy stays at {eos.since}"
                time.sleep(0.05)
            assert eos.entry("src:1") == (50, dead) and eos.entry("src:3") == (50, hidden)
            assert eos.entry("src:2") is None  # aborted: never the ledger's
        finally:
            drv.close()
            for tid in (sink_transactional_id(writer, "src", p) for p in range(4)):
                sink_txn.forget(tid)
    finally:
        for fut in kafka_admin.delete_topics([ledger]).values():
            fut.result(timeout=30)


def test_an_existing_ledger_with_kafkas_default_segments_is_warned_about_not_refused(
        kafka_admin, topic_factory, caplog) -> None:
    source = topic_factory()
    ledger = topic_factory(".ledger", config={"cleanup.policy": "compact"})  # as created before
    wait_ready(kafka_admin, [source, ledger])
    with caplog.at_level("WARNING", logger="antidote.consumer"):
        assert ensure_topics(kafka_admin, source, [], ledger) == 1
    (warning,) = [r.getMessage() for r in caplog.records if ledger in r.getMessage()]
    kept = topic_config(kafka_admin, ledger, ("segment.bytes",))["segment.bytes"]  # untouched: the broker's
    assert int(kept) > 4 * 1024 * 1024 and f"segment.bytes is {kept}" in warning and "kafka-configs --alter" in warning
