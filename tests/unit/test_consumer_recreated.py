"""A source or retry topic deleted and recreated under the ledger's positions (issue 43,
item 4): found by topic id, or by an end offset below a position; never read past."""

from __future__ import annotations

import json

from antidote_consumer.driver.ledger import LedgerState
from antidote_consumer.driver.recreated import behind_ends, find_recreated, positions_of, refusal


def test_positions_are_read_by_topic_whatever_the_name() -> None:
    pos = {"a.b-c:0": 5, "a.b-c:1": 7, "a.b-c-retry-1:0": 3}
    assert positions_of(pos, "a.b-c") == {0: 5, 1: 7}
    assert positions_of(pos, "a.b-c-retry-1") == {0: 3}


def test_another_topic_id_is_a_recreated_topic_even_past_the_old_positions() -> None:
    pos = {"src:0": 120, "src:1": 80}
    ends = {"src": {0: 500, 1: 500}}  # the new topic has grown past the old positions
    (r,) = find_recreated(["src"], {"src": "OLD"}, {"src": "NEW"}, pos, ends)
    assert (r.topic, r.recorded_id, r.current_id) == ("src", "OLD", "NEW")
    assert r.positions == {0: (120, 500), 1: (80, 500)}
    assert find_recreated(["src"], {"src": "NEW"}, {"src": "NEW"}, pos, ends) == []


def test_without_a_recorded_id_an_end_below_a_position_tells() -> None:
    pos = {"r1:0": 40, "r1:1": 2}
    (r,) = find_recreated(["r1"], {}, {"r1": "NEW"}, pos, {"r1": {0: 3, 1: 9}})
    assert r.recorded_id is None and r.positions == {0: (40, 3)}  # only the partition behind
    assert find_recreated(["r1"], {}, {"r1": "NEW"}, pos, {"r1": {0: 40, 1: 9}}) == []
    # A partition that is gone (fewer partitions now) is behind too.
    (r,) = find_recreated(["r1"], {}, {"r1": "NEW"}, pos, {"r1": {0: 50}})
    assert r.positions == {1: (2, -1)}


def test_a_topic_never_read_loses_nothing_and_is_not_refused() -> None:
    assert find_recreated(["r2"], {"r2": "OLD"}, {"r2": "NEW"}, {"r2:0": 0}, {"r2": {0: 0}}) == []
    assert find_recreated(["r2"], {"r2": "OLD"}, {"r2": "NEW"}, {}, {"r2": {0: 0}}) == []


def test_the_refusal_names_topic_ids_positions_ends_and_the_way_on() -> None:
    found = find_recreated(["src", "r1"], {"src": "OLD", "r1": "R"}, {"src": "NEW", "r1": "R2"},
                           {"src:0": 12, "r1:0": 4}, {"src": {0: 0}, "r1": {0: 1}})
    line = refusal(found, "orders", "shop")
    assert line.startswith("topic src was deleted and recreated since the ledger recorded it "
                           "(topic id OLD in the ledger, NEW now; partition 0: ledger position 12, "
                           "end offset now 0)")
    assert "topic r1 was deleted" in line and "skip" in line
    assert line.endswith("antidote rebase orders -n shop --topic src --topic r1")


def test_the_pump_sees_a_position_past_a_partitions_high_watermark() -> None:
    pos = {"r1:0": 10, "r1:1": 4, "r2:0": 0}
    (r,) = behind_ends(pos, {("r1", 0): 2, ("r1", 1): 4, ("r2", 0): 0})
    assert r.topic == "r1" and r.positions == {0: (10, 2)}
    assert "end offsets are now below the ledger's positions" in r.describe()
    assert behind_ends(pos, {("r1", 0): 10, ("r1", 1): 5}) == []


def test_the_ledger_keeps_topic_ids_and_a_stale_checkpoint() -> None:
    state = LedgerState(topic_ids={"src": "AAA"}, stale_checkpoint=True)
    entries = json.loads(json.dumps(state.entries()))
    again = LedgerState()
    for key, value in entries.items():
        again.apply(key, value)
    assert again.topic_ids == {"src": "AAA"} and again.stale_checkpoint is True
    old = LedgerState()  # a ledger written before the entry existed
    for key, value in entries.items():
        if key != "topics":
            old.apply(key, value)
    assert old.topic_ids == {} and old.stale_checkpoint is False


def test_a_refusal_stays_short_enough_for_the_operator_to_keep_its_end() -> None:
    positions = {f"big:{p}": 1_000_000 + p for p in range(64)}
    ends = {"big": {p: 0 for p in range(64)}}
    found = find_recreated(["big"], {"big": "A" * 22}, {"big": "B" * 22}, positions, ends)
    line = refusal(found, "a-consumer-with-a-long-name", "a-namespace-with-a-long-name")
    assert len("antidote consumer: " + line) < 1024
    assert "partition 2: ledger position 1000002, end offset now 0 and 61 more partition(s)" in line
    assert line.endswith("--topic big")
