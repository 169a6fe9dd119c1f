"""Settling a batch (part of `batches.Runtime`): its outcomes written to the sink, retry,
poison and dead-letter topics and the ledger in one transaction, records fitted to their
topic's limit, the metrics of the poison messages. A mixin so Runtime reads as the batch's
life (execute, roll back, isolate, settle) with the transaction's details here."""

from __future__ import annotations

import copy
import json
import logging
import time

from antidote_api.semantics import retry_after_bound
from antidote_api.wire import DISABLE_EXIT, ExitCode
from antidote_consumer.kafka import headers as h
from antidote_consumer.kafka.native_headers import with_native
from antidote_consumer.worker.attempts import Reason, Verdict
from antidote_consumer.worker.chosen import NOT_ATTEMPTED, judged
from antidote_consumer.worker.ordering import HELD_OVERFLOW, held_count

from .outcome_records import OUTCOME_OF, disposition_record, retry_bound_ms, retry_record
from .frames import BatchResult, Failure, isolated_at, now_ms, origin_of, row_at
from .settle_refused import RefusedSettle

log = logging.getLogger("antidote.consumer")

# The reason a record that cannot fit its derived topic stops the consumer with (see _fitted).
TOO_LARGE = "too-large"
DEFAULT_BATCH_BYTES = 1_000_000  # librdkafka's batch.size
BATCH_FRAMING = 1024  # a record batch's header and the producer's own accounting margin


class QueueDisabled(Exception):
    """The consumer must stop: its queue is disabled for `reason` (a condition reason)."""

    codes = DISABLE_EXIT

    def __init__(self, reason: str, message: str, at: dict | None = None):
        super().__init__(f"{reason}: {message}")
        self.reason, self.message = reason, message
        self.at = at  # Fault: the poison record (as read) and why, for `antidote skip`

    @property
    def exit_code(self) -> ExitCode:
        return self.codes[self.reason]


class Settler(RefusedSettle):
    def _reloaded(self, before, after) -> None:
        """The ledger was read again after an in-doubt commit (Ledger.reload): what a commit
        that landed counted is counted in the metrics too, as its settle would have."""
        m = self.metrics
        for outcome, n in after.counts.items():
            if n > before.counts.get(outcome, 0):
                m.count(outcome, n - before.counts.get(outcome, 0))
        if after.attempts > before.attempts:
            m.attempts.labels(**m.ids).inc(after.attempts - before.attempts)
        m.consecutive.labels(**m.ids).set(after.consecutive_failures)

    def _settle(self, result: BatchResult, isolated: list, batch_id: int | None,
                positions: dict[str, int] | None) -> None:
        # Long on purpose: every record of one batch (sink, retries, poison, dead letters, the
        # ledger's entry) is gathered and written in ONE transaction; split up, the order of
        # the checks before the commit (systemic? too large? Fault?) would be harder to see.
        s = self.s
        if not isolated and self._systemic(result):
            failed, total = judged(result.n_ok, result.failures)
            raise QueueDisabled("SystemicFailure",
                                f"{failed} of {total} messages failed in this batch (threshold "
                                f"{s.queue_disable.failure_ratio.threshold:g}); nothing was "
                                "quarantined and the batch stays unconsumed")
        finals = [r for r in result.failures if r.kind == Verdict.FINAL.value]
        if s.disposition == "Fault" and (finals or isolated):
            r = finals[0] if finals else None
            where = (f"{r.otopic}/{r.opartition}/{r.ooffset}" if r else
                     f"{isolated[0][0].topic}/{isolated[0][0].partition}/{isolated[0][0].offset}")
            why = (f"{r.reason} after {r.attempts} attempts, {r.error_class}" if r
                   else "batch-isolation")
            if r is not None:
                at = row_at(r)
            else:
                raw, attempts, error = isolated[0]
                at = isolated_at(raw, attempts, error, 0, now_ms())
            origin = (h.Origin(r.otopic, r.opartition, r.ooffset, r.ots) if r is not None
                      else origin_of(isolated[0][0], s.source.topic)[0])
            self._last_poison(at["reason"], at["error_class"], origin)  # where it stopped
            raise QueueDisabled("Fault", f"poison message at {where} ({why}); it and the "
                                "messages after it stay unconsumed", at)

        now = int(time.time() * 1000)
        records = []
        state = copy.deepcopy(self.ledger.state)
        counts = state.counts
        counts["processed"] += result.n_ok
        state.attempts += result.n_attempts  # every handler call of the batch, failed ones too
        poisoned = []
        overflowed: list[h.Origin] = []
        dues: list[int] = []
        bound_d = retry_after_bound(s.retries)
        bound = retry_bound_ms(s)
        capped = 0  # Retry(after=...) longer than the bound
        scheduled: dict[int, int] = {}  # retry cycle -> messages parked for it
        for r in result.failures:
            # (key, value) pairs: pyspark's Row of a header is a tuple in that order too.
            user = [(k, v) for k, v in (r.headers or ())]
            origin = h.Origin(r.otopic, r.opartition, r.ooffset, r.ots)
            common = dict(origin=origin, attempts=r.attempts, first_failure=r.first_failure,
                          last_failure=r.last_failure, error_class=r.error_class,
                          error_message=r.error_message, stack=r.stack, consumer=self.consumer_id,
                          policy=s.policy)
            if r.kind in NOT_ATTEMPTED:  # ordering Key: never attempted here
                # A retry record's timestamp is this settle's time, when its due time was set:
                # the retry pump plans from timestamps (retry_plan).
                held = self._held_record(r, user, common)
                records.append(held + (now,) if r.kind == "held" else held)
                if r.kind == "held":
                    dues.append(r.last_failure)
                else:
                    overflowed.append(origin)
                continue
            if r.kind == Verdict.RETRY.value:
                rec = retry_record(s, cycle=r.cycle, retry_after=r.retry_after, now=now,
                                   bound=bound, user=user, common=common)
                capped += rec.capped
                dues.append(rec.due)
                hdrs = self._fitted(rec.topic, r.key, r.value, rec.headers, r)
                records.append((rec.topic, r.opartition % self.partitions, r.key, r.value, hdrs, now))
                counts["retried"] += 1
                scheduled[rec.cycle] = scheduled.get(rec.cycle, 0) + 1
                continue
            poisoned.append((r.reason, r.error_class, origin))
            records += self._disposition(r.key, r.value, user, r.cycle, r.reason, common, r)
        for raw, attempts, error in isolated:
            origin, user, cycle = origin_of(raw, s.source.topic)
            common = dict(origin=origin, attempts=attempts, first_failure=now, last_failure=now,
                          error_class="antidote.BatchFailure", error_message=error, stack=None,
                          consumer=self.consumer_id, policy=s.policy)
            poisoned.append((Reason.BATCH_ISOLATION.value, "antidote.BatchFailure", origin))
            records += self._disposition(raw.key, raw.value, user, cycle,
                                         Reason.BATCH_ISOLATION.value, common,
                                         isolated_at(raw, attempts, error, cycle, now))
        # Fault never gets here with a poisoned message (it stopped above): nothing is counted.
        outcome = OUTCOME_OF[s.disposition]
        counts[outcome] += len(poisoned)
        counts["moved"] += len(overflowed)
        for p, chains in result.chains.items():
            state.held[str(p)] = json.loads(chains)
        state.consecutive_failures = 0
        if batch_id is not None:
            state.committed_batch = state.started_batch = batch_id
            state.in_batch = False
            source = s.source.topic
            for (topic, partition), last in result.ends.items():
                key = f"{topic}:{partition}"
                if topic == source and last + 1 > state.positions.get(key, 0):
                    state.positions[key] = last + 1
        if positions:
            state.positions.update(positions)
            for (topic, partition), (offset, _due) in result.waiting.items():
                key = f"{topic}:{partition}"  # stopped at a record not due yet: read it again
                if key in positions:
                    state.positions[key] = min(positions[key], offset)
        self._commit_settle(state, records)  # again while a record is refused (settle_refused)
        retried = sum(1 for r in result.failures if r.kind == Verdict.RETRY.value)
        if capped:
            log.warning("%d message(s) asked Retry(after=...) longer than %s (maxCycleDelay, or the "
                        "longest cycle delay without one): scheduled at that", capped, bound_d)
        if dues:
            due = min(dues)
            self.scheduled_due = due if self.scheduled_due is None else min(self.scheduled_due, due)
            if self.on_scheduled is not None:
                self.on_scheduled()
            if self.local is not None:
                self.local.warm(self.cfg)

        m, ids = self.metrics, self.metrics.ids
        m.count("processed", result.n_ok)
        for cycle, n in scheduled.items():
            m.retries_scheduled.labels(**ids, cycle=str(cycle)).inc(n)
        m.count("retried", retried)
        m.count(outcome, len(poisoned))
        m.count("moved", len(overflowed))
        if self.cfg.max_held:
            m.set_held(held_count(state.held))
        for origin in overflowed:
            m.poison.labels(**ids, reason=HELD_OVERFLOW, disposition="Move").inc()
            self._last_poison(HELD_OVERFLOW, None, origin)
        if overflowed:
            log.warning("%d message(s) held past maxHeldPerKey (%d) moved to %s (reason %s); last: "
                        "%s/%d/%d", len(overflowed), s.max_held_per_key, s.topics.poison, HELD_OVERFLOW,
                        overflowed[-1].topic, overflowed[-1].partition, overflowed[-1].offset)
        m.attempts.labels(**ids).inc(result.n_attempts)
        m.consecutive.labels(**ids).set(0)
        for reason, error_class, origin in poisoned:
            m.poison.labels(**ids, reason=reason, disposition=s.disposition).inc()
        if poisoned:
            reason, error_class, origin = poisoned[-1]
            self._last_poison(reason, error_class, origin)
            log.warning("%d message(s) got disposition %s; last: %s/%d/%d (%s, %s)", len(poisoned),
                        s.disposition, origin.topic, origin.partition, origin.offset, reason, error_class)

    def _last_poison(self, reason: str, error_class: str | None, origin: h.Origin) -> None:
        self.metrics.set_last_poison(reason, error_class, origin.topic, origin.partition, origin.offset,
                                     time.time())

    def _held_record(self, r, user, common) -> tuple:
        """The record of a row the ordering rules did not run (worker.ordering): "held", parked
        in retry topic `r.cycle` behind its key's message ahead, due at `r.last_failure`; or
        "overflow", past maxHeldPerKey: moved to the poison topic whatever the disposition
        (dropping it would lose it; a Fault would stop every other key for one busy key)."""
        s = self.s
        base = {**common, "last_failure": r.first_failure}
        if r.kind == "held":
            topic = s.topics.retry[r.cycle - 1]
            hdrs = user + h.failure_headers(cycle=r.cycle, reason=None, due=r.last_failure, **base)
            hdrs.append((h.HELD, b"1"))
        else:
            topic = s.topics.poison
            hdrs = user + h.failure_headers(cycle=0, reason=HELD_OVERFLOW, disposition="Move", **base)
        hdrs = self._fitted(topic, r.key, r.value, hdrs, r)
        if r.kind != "held" and s.native_headers:  # quarantined, like any disposition's record
            hdrs = with_native(r.key, r.value, hdrs, s.native_headers, s.handler, self.max_bytes.get(topic))
        return (topic, r.opartition % self.partitions, r.key, r.value, hdrs)

    def _disposition(self, key, value, user, cycle, reason, common, at) -> list:
        s = self.s
        rec = disposition_record(s, cycle=cycle, reason=reason, user=user, common=common)
        if rec is None:  # Drop
            return []
        topic, hdrs = rec
        hdrs = self._fitted(topic, key, value, hdrs, at)
        if s.native_headers:
            hdrs = with_native(key, value, hdrs, s.native_headers, s.handler, self.max_bytes.get(topic))
        return [(topic, common["origin"].partition % self.partitions, key, value, hdrs)]

    def _fitted(self, topic: str, key, value, hdrs: list, at) -> list:
        """`hdrs` with Antidote's texts shortened so the record fits `topic`; `at`: where the
        record was read, a failed row or already `row_at`'s dict (made only for the error,
        not for every record). A record that
        cannot fit even so (its key, value and own headers alone are too large) stops the
        consumer at it, as a Fault would, with reason too-large: dropping it would lose it, and
        a commit the broker refuses would fail the batch over and over. Nothing of the batch
        is committed; raising the topic's max.message.bytes and resuming processes it."""
        limit = self.max_bytes.get(topic)
        if limit is None:
            return hdrs
        fitted = h.fit_record(key, value, hdrs, limit)
        if fitted is not None:
            return fitted
        size = h.record_size(key, value, h.user_headers(hdrs))
        at = row_at(at) if isinstance(at, Failure) else at
        where = f"{at['topic']}/{at['partition']}/{at['offset']}"
        raise QueueDisabled(
            "Fault", f"the message at {where} cannot be written to {topic} (reason {TOO_LARGE}): "
            f"{size} bytes without Antidote's headers, and its max.message.bytes is {limit}; it and "
            f"the messages after it stay unconsumed. Raise max.message.bytes of {topic}, then resume",
            {**at, "reason": TOO_LARGE})
