"""The driver's side of an exactly-once Kafka sink (docs/consumer.md, "Exactly-once to a Kafka
sink"): what each run's tasks are told, and what the driver learns back.

The executors commit their partitions' outputs with ledger entries (worker.sink_txn); the
driver never writes those entries, it keeps two copies: the ledger's as of the offset it has
read up to (driver.ledger_tail: loaded at start, then followed), and the entries the tasks
return ("sink" rows). A partition is *fresh* once a task of this driver has fenced its
transactional id and read (or written) its entry since the start and since the last failed
job; only then may a task trust the returned entry the driver passes, and read nothing. Any
other partition's task is passed the ledger's copy and the offset it is current to, and
reads the records after it only. Runs whose outputs come back to the driver (the local
worker's, a bisection's segments) are written with the settle instead."""

from __future__ import annotations

import dataclasses
import json
import threading

from antidote_consumer.kafka.sink_entries import SinkEntry
from antidote_consumer.worker.executor import WorkerConfig

from .frames import BatchResult
from .ledger import LedgerState
from .ledger_tail import LedgerTail


class SinkState:
    def __init__(self, follows: bool = False) -> None:
        self.fresh: set[str] = set()
        self.emit = False  # a bisection runs: every segment's outputs come back
        self.told: dict[str, SinkEntry] = {}  # the tasks' last entries: what a fresh partition has
        self.follows = follows  # an exactly-once sink: `loaded` follows the ledger
        self.tail: LedgerTail | None = None
        self._lock = threading.Lock()  # the local worker's runs take `current` outside the batch lock

    def loaded(self, ledger, state: LedgerState) -> LedgerState:
        """The driver loaded the ledger (at start): its entries, followed from its end on."""
        if self.follows and self.tail is None:
            self.tail = LedgerTail.follow(ledger.bootstrap, ledger.topic, ledger.conf, state.sink, state.end)
        return state

    def current(self, cfg: WorkerConfig, state: LedgerState, *, emit: bool = False) -> WorkerConfig:
        """`cfg` for the next run: the entries ahead of their partition's position, the
        partitions whose entries are current, the ledger offset the others' are current to,
        and whether the outputs come back."""
        eos = cfg.exactly_once
        if eos is None:
            return cfg
        with self._lock:
            # Without a tail (not followed): the load's entries, and a task reads the whole topic.
            view, since = self.tail.caught_up() if self.tail is not None else (state.sink, 0)
            fresh = frozenset(self.fresh)
            known = {k: e for k in view.keys() | self.told.keys()
                     if (e := (self.told.get(k) if k in fresh else view.get(k))) is not None}
        ahead = {k: e for k, e in known.items() if e.next > state.positions.get(k, 0)}
        eos = dataclasses.replace(
            eos, entries=tuple((k, state.positions.get(k, 0), json.dumps(e.to_json()))
                               for k, e in sorted(ahead.items())),
            fresh=fresh, since=since)
        return dataclasses.replace(cfg, exactly_once=eos, emit_outputs=cfg.emit_outputs or emit or self.emit)

    def failed(self) -> None:
        """A job failed: a task may have committed before it died, unseen. Every partition's
        next task reads its entry from the ledger."""
        with self._lock:
            self.fresh.clear()

    def ran(self, result: BatchResult) -> None:
        """A run ended: its tasks' entries (fenced and read, or written) are the ledger's."""
        with self._lock:
            for where, entry in result.sink.items():
                self.told[where] = SinkEntry.from_json(entry)
            self.fresh.update(f"{t}:{p}" for t, p in result.ends)

    def close(self) -> None:
        if self.tail is not None:
            self.tail.close()
