"""Key order through retries (`spec.ordering: Key`): which messages are held, and when they
are released. Pure: no Kafka, no Spark; the worker applies it row by row, the driver
commits its state in the ledger.

The model. Per source partition, a key with messages in the retry flow has a `Chain`:
- `front`: the source offset of the message ahead, while it waits for a retry cycle
  (None once it has its outcome: processed, or its disposition), and its place: the retry
  topic it waits in (`cycle`, 1-based) and when it falls due (`due`);
- `held`: the messages held behind it, in source order, each with its own place (a held
  message is a record in a retry topic, marked held, never attempted).

While a chain exists, every later message of its key is held, never run, so nothing
overtakes the message ahead. A held message is parked right behind the one ahead of it
(same topic, same due time, appended later), so it is read after that one; when it is read
it runs if the front has its outcome and it is first in line, else it is parked again behind
the one ahead (which has moved: it failed again, or was parked again itself). So a held
message is read again only after the one ahead of it was: no busy loop. Null keys are never
ordered. Holding is per source partition: keys map to partitions, and one partition's
messages are decided in one task, in order.

The bound. A key holds at most `max_held` messages. One more is quarantined in the poison
topic with reason `held-overflow` (never dropped, whatever the disposition): it loses
nothing (it can be redriven) and no other key waits for it. Pausing the partition instead
would hold every other key of it behind one slow key, which is what ordering must not do.

Crash safety is the ledger's: the chains are committed in the batch's transaction, with
the retry records they describe and the read positions, so a replayed batch starts from
the same chains and rebuilds the same decisions.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from enum import StrEnum

from antidote_api.wire import PoisonReason

HELD_OVERFLOW = PoisonReason.HELD_OVERFLOW.value  # the reason of a message past maxHeldPerKey


class Action(StrEnum):
    RUN = "run"            # give it to the handler now
    HOLD = "hold"          # park it in a retry topic, behind the last one of its key
    FORWARD = "forward"    # a held message read back early: park it again behind the one ahead
    OVERFLOW = "overflow"  # past max_held: quarantine it with reason held-overflow


@dataclass(frozen=True)
class Decision:
    action: Action
    cycle: int = 0  # HOLD/FORWARD: the retry topic (1-based) to park it in
    due: int = 0  # HOLD/FORWARD: its due time (ms)


RUN = Decision(Action.RUN)
OVERFLOW = Decision(Action.OVERFLOW)


@dataclass
class Held:
    """A held message: its source offset and where it is parked."""

    offset: int
    cycle: int
    due: int


@dataclass
class Chain:
    cycle: int  # the front's place (when front is None: where it last waited)
    due: int
    front: int | None = None
    held: list[Held] = field(default_factory=list)

    def place_ahead_of(self, i: int) -> tuple[int, int]:
        """(cycle, due) of the message ahead of held[i]: the front, or the held one before."""
        return (self.cycle, self.due) if i == 0 else (self.held[i - 1].cycle, self.held[i - 1].due)

    def index(self, offset: int) -> int | None:
        return next((i for i, m in enumerate(self.held) if m.offset == offset), None)

    def wire(self) -> dict:
        return {"cycle": self.cycle, "due": self.due, "front": self.front,
                "held": [[m.offset, m.cycle, m.due] for m in self.held]}

    @classmethod
    def from_wire(cls, value: dict) -> Chain:
        return cls(int(value["cycle"]), int(value["due"]), value.get("front"),
                   [Held(int(o), int(c), int(d)) for o, c, d in value.get("held") or ()])


def key_text(key: bytes) -> str:
    """A key as a JSON object key (keys are bytes, and any bytes)."""
    return base64.b64encode(key).decode()


class HeldKeys:
    """The chains of one or more source partitions, and the rules over them."""

    def __init__(self, max_held: int, chains: dict[int, dict[str, Chain]] | None = None):
        if max_held < 1:
            raise ValueError(f"maxHeldPerKey must be at least 1, not {max_held}")
        self.max_held = max_held
        self.chains: dict[int, dict[str, Chain]] = chains if chains is not None else {}

    # --- decisions, in source (or read) order within a partition ---------------------------
    def on_source(self, partition: int, key: bytes | None, offset: int) -> Decision:
        """A message read from the source topic."""
        chain = self._chain(partition, key)
        if chain is None:
            return RUN
        i = chain.index(offset)
        if i is not None:
            # Read again (the ledger's positions say it was not committed): it keeps its place.
            return Decision(Action.HOLD, chain.held[i].cycle, chain.held[i].due)
        if len(chain.held) >= self.max_held:
            return OVERFLOW
        cycle, due = chain.place_ahead_of(len(chain.held))
        chain.held.append(Held(offset, cycle, due))
        return Decision(Action.HOLD, cycle, due)

    def on_held(self, partition: int, key: bytes | None, offset: int) -> Decision:
        """A held message read back from a retry topic."""
        chain = self._chain(partition, key)
        i = chain.index(offset) if chain is not None else None
        if i is None:
            # Not held (any more): nothing is ahead of it. Running it loses nothing.
            return RUN
        if i == 0 and chain.front is None:
            chain.held.pop(0)
            self._drop_if_empty(partition, key)
            return RUN
        # The one ahead waits for a retry, or has not been read yet: behind it again.
        cycle, due = chain.place_ahead_of(i)
        chain.held[i].cycle, chain.held[i].due = cycle, due
        return Decision(Action.FORWARD, cycle, due)

    def on_outcome(self, partition: int, key: bytes | None, offset: int, *, retry_cycle: int | None,
                   due: int = 0) -> None:
        """The outcome of a message that ran: `retry_cycle` is the retry topic it now waits in
        (None: it has its outcome, processed or its disposition)."""
        if key is None:
            return
        chain = self._chain(partition, key)
        if retry_cycle is not None:
            if chain is None:
                chain = self.chains.setdefault(partition, {})[key_text(key)] = Chain(retry_cycle, due)
            chain.front, chain.cycle, chain.due = offset, retry_cycle, due
            return
        if chain is not None and chain.front == offset:
            chain.front = None
            self._drop_if_empty(partition, key)

    # --- what is held ----------------------------------------------------------------------
    def count(self) -> int:
        """Messages held (for antidote_held_messages)."""
        return sum(len(c.held) for chains in self.chains.values() for c in chains.values())

    def partition(self, partition: int) -> dict[str, Chain]:
        return self.chains.get(partition, {})

    def wire(self, partition: int) -> dict:
        """One partition's chains as the ledger stores them."""
        return {k: c.wire() for k, c in self.chains.get(partition, {}).items()}

    def load(self, partition: int, value: dict | None) -> None:
        chains = {k: Chain.from_wire(v) for k, v in (value or {}).items()}
        if chains:
            self.chains[partition] = chains
        else:
            self.chains.pop(partition, None)

    def _chain(self, partition: int, key: bytes | None) -> Chain | None:
        if key is None:
            return None  # null keys are not ordered
        return self.chains.get(partition, {}).get(key_text(key))

    def _drop_if_empty(self, partition: int, key: bytes) -> None:
        chains = self.chains.get(partition, {})
        chain = chains.get(key_text(key))
        if chain is not None and chain.front is None and not chain.held:
            del chains[key_text(key)]
            if not chains:
                self.chains.pop(partition, None)


class TaskOrder:
    """The rules as one task (or the local worker) applies them to its rows: it starts from
    the chains the driver committed, decides row by row, and hands back the chains of the
    partitions it decided on (the driver commits them with the batch)."""

    def __init__(self, max_held: int, chains: str, delays: tuple[int, ...]):
        loaded = {int(p): {k: Chain.from_wire(v) for k, v in c.items()}
                  for p, c in json.loads(chains or "{}").items()}
        self.keys = HeldKeys(max_held, loaded)
        self.delays = delays  # ms, by cycle (0-based): the due time a failed front waits for
        self.touched: set[int] = set()

    def before(self, partition: int, key: bytes | None, offset: int, *, from_source: bool,
               held: bool) -> Decision:
        """What to do with a row: source coordinates (`partition`, `offset`) of the message."""
        if key is None:
            return RUN
        self.touched.add(partition)
        if from_source:
            return self.keys.on_source(partition, key, offset)
        return self.keys.on_held(partition, key, offset) if held else RUN

    def after(self, partition: int, key: bytes | None, offset: int, *, retry_cycle: int | None,
              now: int) -> None:
        """A row that ran: `retry_cycle` is the retry topic (1-based) it goes to, if it does."""
        if key is None:
            return
        self.touched.add(partition)
        due = now + self.delays[retry_cycle - 1] if retry_cycle is not None else 0
        self.keys.on_outcome(partition, key, offset, retry_cycle=retry_cycle, due=due)

    def results(self) -> list[tuple[int, str]]:
        """(source partition, its chains as JSON) of every partition this task decided on."""
        return [(p, json.dumps(self.keys.wire(p))) for p in sorted(self.touched)]


def held_count(by_partition: dict[str, dict]) -> int:
    """Messages held in the ledger's chains (wire form, as LedgerState.held)."""
    return sum(len(c.get("held") or ()) for chains in by_partition.values() for c in chains.values())
