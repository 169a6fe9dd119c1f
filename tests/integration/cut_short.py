"""What a consumer cut short (SIGKILLed, or fenced by a newer instance) had committed, and
the exact counts that follow once a later run has finished: the tests of
test_consumer_process.py and test_consumer_fencing.py assert equality, not bounds.

A pass is one delivery of a message: its first (from the source), then one per retry
cycle; each calls the handler (immediate + 1) times when it fails, once when it succeeds.
A pass whose batch was committed is never run again, nor is a successful pass whose output
an exactly-once sink committed (its partition's ledger entry covers it); a pass cut short is
run again from the start, so its calls before the cut are made twice and its attempts
counted once."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from antidote_api.semantics import EffectiveSettings
from antidote_consumer.driver.ledger import Ledger, load_state

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import read_all


def abort_open_transaction(bootstrap: str, s: EffectiveSettings) -> None:
    """Ends the dead driver's open transaction as its restart would (init_transactions with
    its transactional id), so what it committed can be read at once, not after the
    transaction's timeout."""
    from antidote_api.names import ledger_names

    names = ledger_names(s)
    Ledger(bootstrap, names.topic, names.transactional_id).close()


@dataclass
class Committed:
    """Read once the cut-short driver is gone and its open transaction ended."""
    calls: Counter  # handler calls per "topic/partition/offset" so far (the cut run's included)
    positions: dict[int, int]  # source partition -> next offset without an outcome
    passes: dict[tuple[int, int], int]  # (partition, offset) -> passes committed
    outputs: Counter  # sink values so far, read_committed (at least once: the cut batch's too)
    covered: set[tuple[int, int]]  # passes whose outputs an exactly-once sink committed, unsettled

    @classmethod
    def read(cls, bootstrap: str, s: EffectiveSettings, sink: str, calls_dir: Path,
             source_offsets: list[tuple[int, int]]) -> "Committed":
        from antidote_api.names import ledger_names

        state = load_state(bootstrap, ledger_names(s).topic)
        prefix = f"{s.source.topic}:"
        positions = {int(k[len(prefix):]): v for k, v in state.positions.items() if k.startswith(prefix)}
        passes = {(p, o): 1 for p, o in source_offsets if o < positions.get(p, 0)}
        for cycle, topic in enumerate(s.topics.retry, start=1):
            for where in cu.quarantined(bootstrap, topic):  # one record per message and cycle
                passes[where] = cycle  # its record in retry-<cycle>: that many passes committed
        for where in cu.quarantined(bootstrap, s.topics.poison):
            passes[where] = len(s.topics.retry) + 1
        # An exactly-once sink: a pass past the ledger's position whose output the executor
        # committed (its entry covers it) is done too, and is not run again.
        covered = set()
        for where in source_offsets:
            entry = state.sink.get(f"{s.source.topic}:{where[0]}")
            if where not in passes and entry is not None and entry.covers(where[1]):
                passes[where] = 1
                covered.add(where)
        for cycle, topic in enumerate(s.topics.retry, start=1):
            for r in read_all(bootstrap, topic, missing_ok=True):
                entry = state.sink.get(f"{topic}:{r.partition}")
                if (entry is not None and r.offset >= state.positions.get(f"{topic}:{r.partition}", 0)
                        and entry.covers(r.offset)):
                    headers = {k: v.decode() for k, v in r.headers}
                    where = (int(headers["antidote.original.partition"]), int(headers["antidote.original.offset"]))
                    passes[where] = cycle + 1
                    covered.add(where)
        return cls(cu.calls(calls_dir, s.source.topic), positions, passes,
                   Counter(r.value for r in read_all(bootstrap, sink)), covered)

    def expected_calls(self, s: EffectiveSettings, where: tuple[int, int], poison: bool) -> int:
        """Handler calls on `where` once every pass has run: the policy's, plus the calls of
        the pass cut short (made before the cut and again after)."""
        per_pass = s.retries.immediate + 1 if poison else 1
        total = per_pass * (s.retries.cycles + 1) if poison else 1
        key = f"{s.source.topic}/{where[0]}/{where[1]}"
        return total + self.calls[key] - per_pass * self.passes.get(where, 0)

    def expected_outputs(self, values: dict[tuple[int, int], bytes]) -> Counter:
        """Sink values once every message is processed (`values`: each good message's output):
        each once, plus once more for each output the cut batch wrote before it was cut (a
        message whose outcome was not committed, written again: at-least-once, that batch only;
        with an exactly-once sink, read_committed, what was written is a committed pass)."""
        out = Counter(values.values())
        for where, v in values.items():
            if where not in self.passes:
                out[v] += self.outputs[v]
        return out
