"""A partition's held chains (ordering Key) in ledger records of bounded size: cut in parts
past HELD_PART_BYTES, joined back as the ledger is read, old single records read as before."""

from __future__ import annotations

import json

from antidote_consumer.driver.held_parts import HELD_PART_BYTES, PARTS, HeldReader, held_entries
from antidote_consumer.driver.ledger import LedgerState
from antidote_consumer.worker.ordering import Chain, Held, key_text


def _chains(n: int, key: bytes = b"customer-42") -> dict:
    """One key's chain as worker.ordering writes it: its front, and `n` held behind it."""
    due = 1_764_300_000_000
    chain = Chain(1, due, 1_000_000, [Held(1_000_001 + i, 1, due) for i in range(n)])
    return {key_text(key): chain.wire()}


def _read(entries: dict[str, dict]) -> dict[str, dict]:
    state = LedgerState()
    for key, value in entries.items():
        state.apply(key, json.loads(json.dumps(value)))  # as the ledger stores them
    return state.held


def test_chains_that_fit_stay_one_record() -> None:
    chains = _chains(10)
    assert held_entries("held:", "3", chains) == {"held:3": chains}


def test_a_key_holding_forty_thousand_is_cut_in_parts_each_well_below_a_megabyte() -> None:
    """~1.16 MB of chains (one key, 40,000 held): the broker's default refused it as one record."""
    chains = _chains(40_000)
    assert len(json.dumps(chains)) > 1_048_588
    state = LedgerState(held={"0": chains, "1": _chains(3)})
    entries = state.entries()
    parts = [k for k in entries if k.startswith("held:0#")]
    assert entries["held:0"] == {PARTS: len(parts)} and len(parts) == 5
    assert max(len(json.dumps(v)) for v in entries.values()) <= HELD_PART_BYTES + 1024
    assert entries["held:1"] == _chains(3)
    assert _read(entries) == state.held


def test_parts_left_from_a_larger_state_are_not_read() -> None:
    big, smaller, small = _chains(40_000), _chains(20_000), _chains(2)
    first = held_entries("held:", "0", big)
    second = held_entries("held:", "0", smaller)
    assert len(first) > len(second) > 2
    # The log uncompacted: the first state, then the second; and compacted: the first's
    # extra parts (older offsets) before the second's head and parts.
    assert _read({**first, **second})["0"] == smaller
    stale = {k: v for k, v in first.items() if k not in second}
    assert stale and _read({**stale, **second})["0"] == smaller
    # A state that fits again is one record; parts left behind it are not read.
    reader, held = HeldReader(), {}
    for key, value in [*first.items(), *held_entries("held:", "0", small).items(), *stale.items()]:
        reader.apply(held, key[len("held:"):], value)
    assert held == {"0": small}


def test_a_ledger_written_before_parts_reads_the_same() -> None:
    state = LedgerState()
    state.apply("held:2", {"a2V5": {"cycle": 1, "due": 5, "front": 7, "held": [[8, 1, 5]]}})
    assert state.held == {"2": {"a2V5": {"cycle": 1, "due": 5, "front": 7, "held": [[8, 1, 5]]}}}
    assert state.entries()["held:2"] == state.held["2"]
