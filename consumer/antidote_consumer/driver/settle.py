"""Settling a batch: its outcomes (decided by driver.outcomes, a pure function) written to
the sink, retry, poison and dead-letter topics and the ledger in one transaction, then
counted in the metrics and the log. The Runtime holds one Settler and hands it each batch's
result; the Settler knows the ledger, the metrics and the two rules that stop a batch before
it is settled: the systemic-failure rule (driver.systemic) and Fault (outcomes.fault_stop)."""

from __future__ import annotations

import logging
import time

from antidote_consumer.worker.chosen import judged
from antidote_consumer.worker.ordering import HELD_OVERFLOW, held_count
from antidote_consumer.worker.outcome_records import OUTCOME_OF
from antidote_consumer.worker.registry import RegistryUnavailable

from . import outcomes
from .frames import BatchResult
from .ledger import Ledger, LedgerState
from .metrics import Metrics
from .outcomes import Settlement, Targets
from .settle_refused import RefusedCommit
from .systemic import SystemicRule

log = logging.getLogger("antidote.consumer")

DEFAULT_BATCH_BYTES = 1_000_000  # librdkafka's batch.size
BATCH_FRAMING = 1024  # a record batch's header and the producer's own accounting margin


class Settler:
    def __init__(self, targets: Targets, ledger: Ledger, metrics: Metrics, systemic: SystemicRule,
                 refused: RefusedCommit, *, max_held: int):
        self.t = targets
        self.ledger = ledger
        self.metrics = metrics
        self.systemic = systemic
        self.refused = refused
        self.max_held = max_held

    def settle(self, result: BatchResult, isolated: list, batch_id: int | None,
               positions: dict[str, int] | None) -> Settlement:
        """Writes the batch's outcomes and the ledger's entry in ONE transaction, or raises
        QueueDisabled (systemic failure, Fault, a record too large for its topic, refused
        settles) with nothing of the batch written."""
        if not isolated:
            failed, total = judged(result.n_ok, result.failures)
            by_tasks = result.settled_figures()  # the failures the tasks settled count too
            failed, total = failed + by_tasks[0], total + by_tasks[1]
            if self.systemic.tripped(failed, total, time.monotonic()):
                raise self.systemic.disabled(failed, total)
        stop = outcomes.fault_stop(self.t.s, result, isolated)
        if stop is not None:
            err, origin = stop
            assert err.at is not None  # a Fault says where it stopped
            self.last_poison(err.at["reason"], err.at["error_class"], origin)  # where it stopped
            raise err
        while True:
            try:
                done = outcomes.settlement(self.t, self.ledger.state, result, isolated, batch_id,
                                           positions, int(time.time() * 1000))
                break
            except RegistryUnavailable as err:  # redacting a quarantined record needs its schema
                self.refused.again(err, "the batch's quarantined records could not be redacted "
                                   f"{{failures}} times in a row: {err}. Nothing of the batch was "
                                   "committed and its handlers are not run again: it stays "
                                   "unconsumed. Make the Schema Registry reachable, then resume",
                                   "could not be redacted")
        self.refused.commit(done.state, done.records)  # again while a record is refused
        self._report(result, done)
        return done

    def _report(self, result: BatchResult, done: Settlement) -> None:
        s, m, ids = self.t.s, self.metrics, self.metrics.ids
        if done.capped:
            log.warning("%d message(s) asked Retry(after=...) longer than %s (maxCycleDelay, or the "
                        "longest cycle delay without one): scheduled at that", done.capped, done.bound)
        m.count("processed", result.n_ok)
        for cycle, n in done.scheduled.items():
            m.retries_scheduled.labels(**ids, cycle=str(cycle)).inc(n)
        m.count("retried", done.retried)
        for *_, disposition in done.poisoned:
            m.count(OUTCOME_OF[disposition], 1)
        m.count("moved", len(done.overflowed))
        if self.max_held:
            m.set_held(held_count(done.state.held))
        for origin in done.overflowed:
            m.poison.labels(**ids, reason=HELD_OVERFLOW, disposition="Move").inc()
            self.last_poison(HELD_OVERFLOW, None, origin)
        if done.overflowed:
            last = done.overflowed[-1]
            log.warning("%d message(s) held past maxHeldPerKey (%d) moved to %s (reason %s); last: "
                        "%s/%d/%d", len(done.overflowed), s.max_held_per_key, s.topics.poison,
                        HELD_OVERFLOW, last.topic, last.partition, last.offset)
        m.attempts.labels(**ids).inc(result.n_attempts)
        m.consecutive.labels(**ids).set(0)
        for reason, _error_class, _origin, disposition in done.poisoned:
            m.poison.labels(**ids, reason=reason, disposition=disposition).inc()
        for (reason, disposition), (n, _signals) in result.settled_finals.items():  # the tasks'
            m.count(OUTCOME_OF[disposition], n)
            m.poison.labels(**ids, reason=reason, disposition=disposition).inc(n)
        if result.settled_last is not None and not done.poisoned:
            reason, error_class, origin, disposition = result.settled_last
            self.last_poison(reason, error_class, origin)
            log.warning("%d message(s) got their disposition in their tasks; last: %s/%d/%d (%s, %s, %s)",
                        sum(n for n, _ in result.settled_finals.values()), origin.topic, origin.partition,
                        origin.offset, reason, error_class, disposition)
        if done.poisoned:
            reason, error_class, origin, disposition = done.poisoned[-1]
            self.last_poison(reason, error_class, origin)
            # The last one's disposition: the policy's, or its route's (spec.routes).
            log.warning("%d message(s) got disposition %s; last: %s/%d/%d (%s, %s)", len(done.poisoned),
                        disposition, origin.topic, origin.partition, origin.offset, reason, error_class)

    def last_poison(self, reason: str, error_class: str | None, origin) -> None:
        self.metrics.set_last_poison(reason, error_class, origin.topic, origin.partition, origin.offset,
                                     time.time())

    def reloaded(self, before: LedgerState, after: LedgerState) -> None:
        """The ledger was read again after an in-doubt commit (Ledger.reload): what a commit
        that landed counted is counted in the metrics too, as its settle would have."""
        m = self.metrics
        for outcome, n in after.counts.items():
            if n > before.counts.get(outcome, 0):
                m.count(outcome, n - before.counts.get(outcome, 0))
        if after.attempts > before.attempts:
            m.attempts.labels(**m.ids).inc(after.attempts - before.attempts)
        m.consecutive.labels(**m.ids).set(after.consecutive_failures)
