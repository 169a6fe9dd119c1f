"""An exactly-once sink's ledger entries and the bookkeeping around them (pure): what an
entry covers, what a task's commit writes (its chunk, the pending offsets, a partition that
stops early, a replay that ends before the crashed run did), and what the driver passes on."""

from __future__ import annotations

from antidote_consumer.driver.frames import BatchResult
from antidote_consumer.driver.ledger import LedgerState
from antidote_consumer.driver.sink_state import SinkState
from antidote_consumer.kafka.sink_entries import SinkEntry, entry_key, parse_key, ranges
from antidote_consumer.worker.executor import WorkerConfig
from antidote_consumer.worker.sink_txn import ExactlyOnce, PartitionSink

EOS = ExactlyOnce("src.ledger-ns.c", "antidote/ns/c")


def part(carried: SinkEntry | None = None, position: int = 0) -> PartitionSink:
    return PartitionSink("src", 0, "out", EOS, {}, position=position, carried=carried,
                         pending=set(carried.pending) if carried else set())


def test_an_entry_round_trips_as_ranges_and_covers_what_it_says() -> None:
    assert ranges([7, 3, 4, 5, 9, 4]) == [[3, 5], [7, 7], [9, 9]]
    e = SinkEntry(10, frozenset({3, 4, 5, 9}))
    assert e.to_json() == {"next": 10, "pending": [[3, 5], [9, 9]]}
    assert SinkEntry.from_json(e.to_json()) == e
    assert [o for o in range(12) if e.covers(o)] == [0, 1, 2, 6, 7, 8]
    assert parse_key(entry_key("src.retry-1", 2)) == "src.retry-1:2" and parse_key("positions") is None


def test_a_commit_covers_up_to_the_next_message_with_the_pending_ones_listed() -> None:
    p = part()
    p.add(100, b"k", b"V100", None)
    p.pend(101)
    p.add(102, b"k", b"V102", None)
    assert p.entry(103) == SinkEntry(103, frozenset({101}))
    p.pend(103)
    p.stop = 104  # a Fault at 103: it is pending, nothing after it is done
    assert p.entry(110) == SinkEntry(104, frozenset({101, 103}))


def test_a_replay_clears_what_succeeds_now_and_keeps_what_it_did_not_reach() -> None:
    crashed = SinkEntry(200, frozenset({105, 150, 190}))
    p = part(crashed, position=100)
    assert p.covers(104) and not p.covers(105) and not p.covers(200)
    p.add(105, b"k", b"V105", None)  # a pending one that succeeds this time
    # The replay's batch ends at 160 (another maxMessagesPerBatch): 190 stays pending, and the
    # entry still ends where the crashed run's did.
    assert p.entry(161) == SinkEntry(200, frozenset({150, 190}))


def test_the_driver_passes_the_entries_ahead_of_their_positions_and_what_is_fresh() -> None:
    state = LedgerState(positions={"src:0": 50, "src:1": 80})
    state.sink = {"src:0": SinkEntry(70, frozenset({60})), "src:1": SinkEntry(80)}
    cfg = WorkerConfig("m:h", "src", 0, 0, frozenset(), None, {"topic": "out"}, False, exactly_once=EOS)
    sink = SinkState()
    first = sink.current(cfg, state)
    assert first.exactly_once.entries == (("src:0", 50, '{"next": 70, "pending": [[60, 60]]}'),)  # src:1 is settled
    assert first.exactly_once.fresh == frozenset() and not first.emit_outputs
    assert first.exactly_once.entry("src:0") == (50, SinkEntry(70, frozenset({60})))
    result = BatchResult(ends={("src", 0): 90}, sink={"src:0": {"next": 91, "pending": []}})
    sink.ran(result)
    assert sink.told["src:0"] == SinkEntry(91) and sink.fresh == {"src:0"}
    assert sink.current(cfg, state).exactly_once.entry("src:0") == (50, SinkEntry(91))
    assert sink.current(cfg, state, emit=True).emit_outputs
    sink.failed()
    assert sink.current(cfg, state).exactly_once.fresh == frozenset()


def test_the_driver_never_writes_the_executors_entries() -> None:
    state = LedgerState()
    state.apply("sink:src:0", {"next": 5, "pending": [[1, 2]]})
    assert state.sink == {"src:0": SinkEntry(5, frozenset({1, 2}))}
    assert not any(k.startswith("sink:") for k in state.entries())
