"""A task reads its partition's sink entry only from the ledger offset the driver's copy is
current to (driver.ledger_tail, driver.sink_state), and the ledger topic is created to be
compacted in practice (kafka.topics): the pure parts."""

from __future__ import annotations

import json

from antidote_consumer.driver.frames import BatchResult
from antidote_consumer.driver.ledger import LedgerState
from antidote_consumer.driver.ledger_tail import LedgerTail
from antidote_consumer.driver.sink_state import SinkState
from antidote_consumer.kafka.sink_entries import SinkEntry, entry_key, scan_done
from antidote_consumer.kafka.topics import (DEFAULT_MAX_MESSAGE_BYTES, LEDGER_CONFIG, LEDGER_SEGMENT_BYTES,
                                            ledger_advice, ledger_misfits)
from antidote_consumer.worker.executor import WorkerConfig
from antidote_consumer.worker.sink_txn import ExactlyOnce

EOS = ExactlyOnce("src.ledger-ns.c", "antidote/ns/c")
CFG = WorkerConfig("m:h", "src", 0, 0, frozenset(), None, {"topic": "out"}, False, exactly_once=EOS)


def record(tail: LedgerTail, offset: int, where: str, entry: SinkEntry | None) -> None:
    topic, _, partition = where.rpartition(":")
    tail.apply(offset, entry_key(topic, int(partition)).encode(),
               json.dumps(entry.to_json()).encode() if entry is not None else None)


def test_the_tail_applies_entries_and_tombstones_in_order_and_knows_how_far_it_read() -> None:
    tail = LedgerTail({"src:0": SinkEntry(10)}, known=100)
    record(tail, 100, "src:0", SinkEntry(20, frozenset({12})))
    tail.apply(101, b"positions", json.dumps({"src:0": 20}).encode())  # the driver's own: not an entry
    record(tail, 102, "src:1", SinkEntry(5))
    record(tail, 103, "src:1", None)  # antidote rebase's tombstone
    assert tail.caught_up() == ({"src:0": SinkEntry(20, frozenset({12}))}, 104)
    tail.reached(110)  # told the end there: markers and aborted records below it, nothing to read
    tail.reached(50)  # never backwards
    assert tail.caught_up()[1] == 110


def test_a_task_is_told_where_the_drivers_copy_is_current_and_a_fresh_partition_what_its_task_returned() -> None:
    state = LedgerState(positions={"src:0": 50, "src:1": 50})
    sink = SinkState(follows=True)
    sink.tail = LedgerTail({"src:0": SinkEntry(70)}, known=1000)  # as loaded, to offset 1000
    eos = sink.current(CFG, state).exactly_once
    assert eos.since == 1000 and eos.fresh == frozenset()
    assert eos.entries == (("src:0", 50, '{"next": 70, "pending": []}'),)
    # A run: src:0's task wrote an entry the tail has not read yet; src:1's found none.
    sink.ran(BatchResult(ends={("src", 0): 90, ("src", 1): 60}, sink={"src:0": {"next": 91, "pending": []}}))
    eos = sink.current(CFG, state).exactly_once
    assert eos.fresh == {"src:0", "src:1"} and eos.entry("src:0") == (50, SinkEntry(91)) and eos.since == 1000
    # A failed job: src:0's next task reads from 1000 on, where that entry is (it was written
    # after): it is passed the ledger's copy as of 1000, never a task's word for what follows.
    sink.failed()
    eos = sink.current(CFG, state).exactly_once
    assert eos.fresh == frozenset() and eos.entry("src:0") == (50, SinkEntry(70)) and eos.since == 1000
    # The tail reads it (and a dead attempt's entry for src:1 after it): its copy moves on with it.
    record(sink.tail, 1000, "src:0", SinkEntry(91))
    record(sink.tail, 1001, "src:1", SinkEntry(64, frozenset({55})))
    eos = sink.current(CFG, state).exactly_once
    assert eos.since == 1002 and eos.entry("src:0") == (50, SinkEntry(91))
    assert eos.entry("src:1") == (50, SinkEntry(64, frozenset({55})))
    assert [k for k, _, _ in eos.entries] == ["src:0", "src:1"]


def test_without_a_tail_a_task_reads_the_whole_ledger() -> None:
    state = LedgerState(positions={"src:0": 50}, end=300)
    state.sink = {"src:0": SinkEntry(70)}
    eos = SinkState().current(CFG, state).exactly_once
    assert eos.since == 0 and eos.entry("src:0") == (50, SinkEntry(70))


def test_a_scan_ends_only_once_it_has_read_below_the_end_it_began_with() -> None:
    # read_committed tells the end at the last stable offset: an open transaction at 40
    # holds it there while a dead attempt's committed entry sits at 45.
    assert not scan_done(40, high=50)
    assert scan_done(50, high=50) and scan_done(51, high=50)


def test_the_ledger_topic_is_created_to_be_compacted_and_an_existing_one_only_warned_about() -> None:
    assert LEDGER_CONFIG["cleanup.policy"] == "compact" and ledger_misfits(LEDGER_CONFIG) == []
    # A segment holds the largest record batch (max.message.bytes) several times.
    assert LEDGER_SEGMENT_BYTES > 3 * DEFAULT_MAX_MESSAGE_BYTES
    assert ledger_advice(LEDGER_CONFIG) == []
    kafka_defaults = {"cleanup.policy": "compact", "segment.bytes": "1073741824", "segment.ms": "604800000",
                      "delete.retention.ms": "86400000"}
    advice = ledger_advice(kafka_defaults)
    assert [a.split(" ")[0] for a in advice] == ["segment.bytes", "segment.ms", "delete.retention.ms"]
    assert "1073741824" in advice[0] and ledger_misfits(kafka_defaults) == []  # not refused
    assert ledger_advice({"cleanup.policy": "compact"}) == []  # not described: not judged
