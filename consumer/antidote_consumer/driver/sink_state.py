"""The driver's side of an exactly-once Kafka sink (docs/consumer.md, "Exactly-once to a Kafka
sink"): what each run's tasks are told, and what the driver learns back.

The executors commit their partitions' outputs with ledger entries (worker.sink_txn); the
driver never writes those entries, it keeps a copy: loaded with the ledger at start, and
updated from the "sink" rows the tasks return. A partition is *fresh* once a task of this
driver has fenced its transactional id and read (or written) its entry since the start and
since the last failed job; only then may a task trust the copy the driver passes. Runs whose
outputs come back to the driver (the local worker's, a bisection's segments) are written
with the settle instead."""

from __future__ import annotations

import dataclasses

from antidote_consumer.kafka.sink_entries import SinkEntry
from antidote_consumer.worker.executor import WorkerConfig

from .frames import BatchResult
from .ledger import LedgerState


class SinkState:
    def __init__(self) -> None:
        self.fresh: set[str] = set()
        self.emit = False  # a bisection runs: every segment's outputs come back

    def current(self, cfg: WorkerConfig, state: LedgerState, *, emit: bool = False) -> WorkerConfig:
        """`cfg` for the next run: the entries ahead of their partition's position, the
        partitions whose entries are current, and whether the outputs come back."""
        eos = cfg.exactly_once
        if eos is None:
            return cfg
        ahead = {k: e for k, e in state.sink.items() if e.next > state.positions.get(k, 0)}
        eos = dataclasses.replace(
            eos, entries=tuple((k, state.positions.get(k, 0), e.next, tuple(sorted(e.pending)))
                               for k, e in sorted(ahead.items())),
            fresh=frozenset(self.fresh))
        return dataclasses.replace(cfg, exactly_once=eos, emit_outputs=cfg.emit_outputs or emit or self.emit)

    def failed(self) -> None:
        """A job failed: a task may have committed before it died, unseen. Every partition's
        next task reads its entry from the ledger."""
        self.fresh.clear()

    def ran(self, result: BatchResult, state: LedgerState) -> None:
        """A run ended: its tasks' entries (fenced and read, or written) are the ledger's."""
        for where, entry in result.sink.items():
            state.sink[where] = SinkEntry.from_json(entry)
        self.fresh.update(f"{t}:{p}" for t, p in result.ends)
