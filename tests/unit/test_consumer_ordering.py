"""Key order through retries: the hold/release rules (ordering.py), alone and in a small
simulation of the source, the retry topics and crashes."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass

import pytest

from antidote_consumer.worker.ordering import (HELD_OVERFLOW, OVERFLOW, RUN, Action, Chain, Decision, Held,
                                        HeldKeys, key_text)


def test_other_keys_and_null_keys_are_not_held() -> None:
    held = HeldKeys(max_held=5)
    held.on_outcome(0, b"a", 10, retry_cycle=1, due=1000)
    assert held.on_source(0, b"b", 11) == RUN
    assert held.on_source(0, None, 12) == RUN
    assert held.on_source(1, b"a", 13) == RUN  # another partition: another key space
    held.on_outcome(0, None, 14, retry_cycle=1, due=1000)  # a null key never starts a chain
    assert held.on_source(0, None, 15) == RUN
    assert held.count() == 0


def test_later_messages_of_a_key_are_held_behind_the_one_in_retry() -> None:
    held = HeldKeys(max_held=5)
    assert held.on_source(0, b"a", 10) == RUN
    held.on_outcome(0, b"a", 10, retry_cycle=1, due=1000)
    assert held.on_source(0, b"a", 11) == Decision(Action.HOLD, 1, 1000)
    assert held.on_source(0, b"a", 12) == Decision(Action.HOLD, 1, 1000)
    assert held.partition(0)[key_text(b"a")] == Chain(1, 1000, front=10, held=[Held(11, 1, 1000), Held(12, 1, 1000)])
    assert held.count() == 2


def test_held_messages_follow_the_front_to_its_next_cycle_then_run_in_order() -> None:
    held = HeldKeys(max_held=5)
    held.on_outcome(0, b"a", 10, retry_cycle=1, due=1000)
    held.on_source(0, b"a", 11)
    held.on_source(0, b"a", 12)
    # Cycle 1: the front fails again; its held messages, read after it, follow it.
    held.on_outcome(0, b"a", 10, retry_cycle=2, due=5000)
    assert held.on_held(0, b"a", 11) == Decision(Action.FORWARD, 2, 5000)
    assert held.on_held(0, b"a", 12) == Decision(Action.FORWARD, 2, 5000)
    # Cycle 2: the front is processed; the held ones run, in order.
    held.on_outcome(0, b"a", 10, retry_cycle=None)
    assert held.on_held(0, b"a", 11) == RUN
    held.on_outcome(0, b"a", 11, retry_cycle=None)
    assert held.on_held(0, b"a", 12) == RUN
    held.on_outcome(0, b"a", 12, retry_cycle=None)
    assert held.chains == {} and held.count() == 0
    assert held.on_source(0, b"a", 13) == RUN


def test_a_released_message_that_fails_becomes_the_front() -> None:
    held = HeldKeys(max_held=5)
    held.on_outcome(0, b"a", 10, retry_cycle=1, due=1000)
    held.on_source(0, b"a", 11)
    held.on_source(0, b"a", 12)
    held.on_outcome(0, b"a", 10, retry_cycle=None)  # its disposition, say
    assert held.on_held(0, b"a", 11) == RUN
    held.on_outcome(0, b"a", 11, retry_cycle=1, due=2000)
    assert held.on_held(0, b"a", 12) == Decision(Action.FORWARD, 1, 2000)
    assert held.partition(0)[key_text(b"a")] == Chain(1, 2000, front=11, held=[Held(12, 1, 2000)])


def test_a_held_message_read_before_the_one_ahead_is_parked_behind_it_again() -> None:
    held = HeldKeys(max_held=5)
    held.on_outcome(0, b"a", 10, retry_cycle=1, due=1000)
    held.on_source(0, b"a", 11)
    held.on_outcome(0, b"a", 10, retry_cycle=2, due=5000)
    held.on_source(0, b"a", 12)  # behind 11, which is still parked in cycle 1
    assert held.partition(0)[key_text(b"a")].held == [Held(11, 1, 1000), Held(12, 1, 1000)]
    # 11 is read (behind the front's old place) and follows the front; 12, read after it,
    # follows 11 (not the front): it is read after 11 again.
    assert held.on_held(0, b"a", 11) == Decision(Action.FORWARD, 2, 5000)
    held.on_outcome(0, b"a", 10, retry_cycle=None)
    held.on_source(0, b"a", 13)
    assert held.on_held(0, b"a", 12) == Decision(Action.FORWARD, 2, 5000)
    assert held.partition(0)[key_text(b"a")].held[-1] == Held(13, 1, 1000)
    assert held.on_held(0, b"a", 13) == Decision(Action.FORWARD, 2, 5000)
    assert [held.on_held(0, b"a", o) for o in (11, 12, 13)] == [RUN, RUN, RUN]


def test_past_the_bound_a_message_overflows_and_the_held_ones_keep_their_place() -> None:
    held = HeldKeys(max_held=2)
    held.on_outcome(0, b"a", 10, retry_cycle=1, due=1000)
    held.on_source(0, b"a", 11)
    held.on_source(0, b"a", 12)
    assert held.on_source(0, b"a", 13) == OVERFLOW
    assert [m.offset for m in held.partition(0)[key_text(b"a")].held] == [11, 12]
    assert HELD_OVERFLOW == "held-overflow"


def test_a_source_message_read_again_keeps_its_place() -> None:
    held = HeldKeys(max_held=1)
    held.on_outcome(0, b"a", 10, retry_cycle=1, due=1000)
    held.on_source(0, b"a", 11)
    assert held.on_source(0, b"a", 11) == Decision(Action.HOLD, 1, 1000)  # not an overflow
    assert [m.offset for m in held.partition(0)[key_text(b"a")].held] == [11]


def test_a_held_record_the_chains_do_not_know_runs() -> None:
    assert HeldKeys(max_held=1).on_held(0, b"a", 11) == RUN


def test_the_ledger_form_round_trips_per_partition() -> None:
    held = HeldKeys(max_held=5)
    held.on_outcome(0, b"\xff\x00", 10, retry_cycle=1, due=1000)
    held.on_source(0, b"\xff\x00", 11)
    held.on_outcome(3, b"b", 4, retry_cycle=2, due=9)
    again = HeldKeys(max_held=5)
    for p in (0, 3):
        again.load(p, held.wire(p))
    assert again.chains == held.chains
    again.load(3, {})
    assert 3 not in again.chains


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="maxHeldPerKey"):
        HeldKeys(max_held=0)


# --- a simulation: one source partition, retry topics, a handler, crashes -------------------

@dataclass
class Rec:
    key: bytes | None
    offset: int  # in the source
    cycle: int = 0  # the retry cycle it is read in (0: the source)
    due: int = 0
    held: bool = False


def simulate(seed: int, *, keys: int = 6, messages: int = 120, cycles: int = 2, max_held: int = 1000,
             crash_rate: float = 0.0, ordered: bool = True) -> tuple[list[Rec], list[int], list[int], HeldKeys]:
    """Runs a source partition through the rules: batches of the source and of due retry
    records (read up to a random limit, as the retry reader does), each batch committed as a
    whole or, with `crash_rate`, lost and run again from the committed chains. Returns the
    source, the processed offsets in processing order, the quarantined ones, and the chains.
    `ordered=False` runs every record as read (today's behaviour), for comparison."""
    # Long on purpose: the model of the retry reader's batch loop in one piece, to be read
    # against the rules it checks (docs/consumer.md, Key order).
    rnd = random.Random(seed)
    source = [Rec(rnd.choice([b"k%d" % i for i in range(keys)] + [None]), o) for o in range(messages)]
    # Per message: how many handler calls fail before one succeeds (99: poison).
    fails = {r.offset: rnd.choice([0, 0, 0, 0, 1, 2, 99]) for r in source}
    calls = dict.fromkeys(fails, 0)
    committed = HeldKeys(max_held)
    retry: list[list[Rec]] = [[] for _ in range(cycles + 1)]  # retry[c]: topic of cycle c
    read = [0] * (cycles + 1)
    processed: list[int] = []
    quarantined: list[int] = []
    overflowed: list[int] = []  # of the quarantined (appended also by lost batches: a hint only)
    now, pos = 0, 0

    def run(rec: Rec, held: HeldKeys, out: dict) -> None:
        calls[rec.offset] += 1
        cycle = 0 if rec.held else rec.cycle
        if calls[rec.offset] > fails[rec.offset]:
            out["processed"].append(rec.offset)
            held.on_outcome(0, rec.key, rec.offset, retry_cycle=None)
        elif cycle < cycles:
            due = now + 10 * (cycle + 1)
            out["parked"].append(Rec(rec.key, rec.offset, cycle + 1, due))
            held.on_outcome(0, rec.key, rec.offset, retry_cycle=cycle + 1, due=due)
        else:
            out["quarantined"].append(rec.offset)
            held.on_outcome(0, rec.key, rec.offset, retry_cycle=None)

    def park(rec: Rec, d: Decision, out: dict) -> None:
        out["parked"].append(Rec(rec.key, rec.offset, d.cycle, d.due, held=True))

    def batch(rows: list[Rec], from_source: bool) -> dict:
        held = copy.deepcopy(committed)
        out: dict = {"processed": [], "parked": [], "quarantined": []}
        for rec in rows:
            d = (RUN if not ordered else held.on_source(0, rec.key, rec.offset) if from_source
                 else held.on_held(0, rec.key, rec.offset) if rec.held else RUN)
            if d.action is Action.RUN:
                run(rec, held, out)
            elif d.action is Action.OVERFLOW:
                out["quarantined"].append(rec.offset)
                overflowed.append(rec.offset)
            else:
                park(rec, d, out)
        out["held"] = held
        return out

    for _step in range(10_000):
        # A source batch, then a retry batch; each may crash (nothing of it is committed).
        kinds = ["source", "retry"]
        for kind in kinds:
            if kind == "source":
                n = rnd.randint(1, 15)
                rows, moved = source[pos:pos + n], ("source", min(len(source), pos + n))
            else:
                rows, ends = [], list(read)
                limit = rnd.randint(1, 8)
                for c in range(1, cycles + 1):
                    i = read[c]
                    while i < len(retry[c]) and retry[c][i].due <= now and len(rows) < limit:
                        rows.append(retry[c][i])
                        i += 1
                    ends[c] = i
                moved = ("retry", ends)
            if not rows:
                continue
            out = batch(rows, from_source=kind == "source")
            if rnd.random() < crash_rate:
                continue  # lost: read again from the committed positions and chains
            committed = out["held"]
            processed += out["processed"]
            quarantined += out["quarantined"]
            for rec in out["parked"]:
                retry[rec.cycle].append(rec)
            if moved[0] == "source":
                pos = moved[1]
            else:
                read = moved[1]
        now += 1
        if pos == len(source) and all(read[c] == len(retry[c]) for c in range(1, cycles + 1)):
            break
    simulate.overflowed = overflowed
    return source, processed, quarantined, committed


def out_of_order(source: list[Rec], processed: list[int]) -> list[bytes]:
    key_of = {r.offset: r.key for r in source}
    bad = []
    for key in {r.key for r in source if r.key is not None}:
        mine = [o for o in processed if key_of[o] == key]
        if mine != sorted(mine):
            bad.append(key)
    return bad


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("crash_rate", [0.0, 0.3])
def test_simulated_every_key_is_processed_in_source_order(seed: int, crash_rate: float) -> None:
    source, processed, quarantined, chains = simulate(seed, crash_rate=crash_rate)
    # Every message has exactly one outcome, and nothing is held at the end.
    assert sorted(processed + quarantined) == [r.offset for r in source]
    assert chains.count() == 0 and chains.chains == {}
    # For every key, the processed messages are in source order.
    assert out_of_order(source, processed) == []


def test_simulated_without_the_rules_keys_are_reordered() -> None:
    # The simulation has teeth: the same runs without holding reorder keys.
    reordered = [seed for seed in range(12) if out_of_order(*simulate(seed, ordered=False)[:2])]
    assert len(reordered) >= 10, reordered


def test_simulated_overflow_quarantines_and_keeps_the_rest_in_order() -> None:
    source, processed, quarantined, chains = simulate(3, keys=2, max_held=2)
    assert simulate.overflowed and set(simulate.overflowed) <= set(quarantined)
    assert sorted(processed + quarantined) == [r.offset for r in source]
    assert out_of_order(source, processed) == [] and chains.count() == 0


def test_inspect_lists_held_keys_from_the_ledger_form() -> None:
    from antidote_cli.oncall.held import held_keys, render_held

    held = HeldKeys(max_held=5)
    held.on_outcome(2, b"order-42", 10, retry_cycle=1, due=1000)
    for o in (11, 12, 13):
        held.on_source(2, b"order-42", o)
    held.on_outcome(0, b"\xff", 3, retry_cycle=2, due=9)
    rows = held_keys({str(p): held.wire(p) for p in (0, 2)})
    assert [(r.partition, r.key, r.front, r.cycle, r.held, r.first_held, r.last_held) for r in rows] == [
        (0, "b64:/w==", 3, 2, 0, None, None), (2, "order-42", 10, 1, 3, 11, 13)]
    lines = render_held(rows, limit=1)
    assert lines[0] == "ordering Key: 3 message(s) held behind 2 key(s)"
    assert lines[-1] == "1 more key(s) not shown (--limit 1)"


def test_the_ledger_keeps_one_held_entry_per_source_partition() -> None:
    from antidote_consumer.driver.ledger import LedgerState

    held = HeldKeys(max_held=5)
    held.on_outcome(1, b"a", 10, retry_cycle=1, due=1000)
    held.on_source(1, b"a", 11)
    state = LedgerState(held={"1": held.wire(1), "0": {}})
    entries = state.entries()
    assert entries["held:1"] == held.wire(1) and entries["held:0"] == {}
    again = LedgerState()
    for key, value in entries.items():
        again.apply(key, value)
    assert again.held == state.held
