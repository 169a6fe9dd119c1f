"""A batch's outcomes as records, decided without side effects: what its failed messages
become (retry records parked for their next cycle, records held behind their key, records
for the disposition's topic), the ledger's next state, and the figures the metrics and the
log report. The Settler (settle.py) writes them in one transaction; nothing here writes,
counts a metric or logs, so the rules are tested as plain functions.

Also the Fault rule: a batch with a message whose disposition is `Fault` is not settled at
all; the consumer stops at that message (`fault_stop`)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from antidote_api.conditions import DisableReason
from antidote_api.semantics import EffectiveSettings, retry_after_bound
from antidote_api.duration import Duration
from antidote_consumer.kafka import headers as h
from antidote_consumer.kafka.native_headers import with_native
from antidote_consumer.worker.attempts import Reason
from antidote_consumer.worker.chosen import NOT_ATTEMPTED
from antidote_consumer.worker.ordering import HELD_OVERFLOW
from antidote_consumer.worker.outcome_records import (OUTCOME_OF, disposition_of, disposition_record, retry_bound_ms,
                                                      retry_record, route_by_name)
from antidote_consumer.worker.redact import Redacted
from antidote_consumer.worker.verdict import Verdict

from .disabled import QueueDisabled
from .frames import BatchResult, Failure, isolated_at, now_ms, origin_of, row_at
from .ledger import LedgerState

# The error class of a message batch isolation pinned a failure on.
BATCH_FAILURE = "antidote.BatchFailure"
# The reason a record that cannot fit its derived topic stops the consumer with (see fitted).
TOO_LARGE = "too-large"

# A record as the ledger's transaction writes it: (topic, partition, key, value, headers)
# and, for records the retry pump plans from, their timestamp.
Record = tuple


@dataclass(frozen=True)
class Targets:
    """Where a consumer's outcome records go, and what bounds them."""

    s: EffectiveSettings
    partitions: int  # of the source topic, and so of every derived topic
    max_bytes: dict[str, int]  # max.message.bytes of the derived topics, read at the start
    consumer_id: str
    # The policy's quarantine (worker.redact.Redactor): what a poison or dead-letter record
    # keeps of its value; None keeps it byte-identical. Retry and held records never use it.
    redact: Callable[..., Redacted] | None = None

    @classmethod
    def of(cls, s: EffectiveSettings, partitions: int, max_bytes: dict[str, int], consumer_id: str) -> Targets:
        """A consumer's targets, with the redactor its policy's quarantine asks for."""
        from antidote_consumer.worker.redact import redactor_for

        return cls(s, partitions, max_bytes, consumer_id, redactor_for(s))


@dataclass
class Settlement:
    """What settling one batch writes (`state`, `records`) and what it reports."""

    state: LedgerState
    records: list[Record] = field(default_factory=list)
    # (reason, error class, origin, disposition: the policy's or its route's)
    poisoned: list[tuple[str, str | None, h.Origin, str]] = field(default_factory=list)
    overflowed: list[h.Origin] = field(default_factory=list)
    scheduled: dict[int, int] = field(default_factory=dict)  # retry cycle -> messages parked
    dues: list[int] = field(default_factory=list)  # due times of the records parked
    retried: int = 0
    capped: int = 0  # Retry(after=...) longer than the bound
    bound: Duration | None = None
    outcome: str = "moved"


def fault_stop(s: EffectiveSettings, result: BatchResult, isolated: list
               ) -> tuple[QueueDisabled, h.Origin] | None:
    """With disposition Fault, the stop at the batch's first message that got it (or the first
    one bisection isolated), and where it was read; None when nothing stops the batch."""
    # A message a route took (spec.routes) gets the route's disposition, never Fault.
    finals = [r for r in result.failures if r.kind == Verdict.FINAL.value and r.route is None]
    isolated = [i for i in isolated if route_by_name(s, Reason.BATCH_ISOLATION.value, BATCH_FAILURE) is None]
    if s.disposition != "Fault" or not (finals or isolated):
        return None
    r = finals[0] if finals else None
    if r is not None:
        where = f"{r.otopic}/{r.opartition}/{r.ooffset}"
        why = f"{r.reason} after {r.attempts} attempts, {r.error_class}"
        at = row_at(r)
        origin = h.Origin(r.otopic, r.opartition, r.ooffset, r.ots)
    else:
        raw, attempts, error = isolated[0]
        where, why = f"{raw.topic}/{raw.partition}/{raw.offset}", "batch-isolation"
        at = isolated_at(raw, attempts, error, 0, now_ms())
        origin = origin_of(raw, s.source.topic)[0]
    return QueueDisabled(DisableReason.FAULT, f"poison message at {where} ({why}); it and the "
                         "messages after it stay unconsumed", at), origin


def settlement(t: Targets, before: LedgerState, result: BatchResult, isolated: list,
               batch_id: int | None, positions: dict[str, int] | None, now: int) -> Settlement:
    """The records and the ledger's next state of a batch that is settled (see the module)."""
    s = t.s
    state = copy.deepcopy(before)
    out = Settlement(state=state, outcome=OUTCOME_OF[s.disposition])
    counts = state.counts
    counts["processed"] += result.n_ok
    state.attempts += result.n_attempts  # every handler call of the batch, failed ones too
    out.bound = retry_after_bound(s.retries)
    bound = retry_bound_ms(s)
    if result.outputs:  # an exactly-once sink's outputs that came back (driver.sink_state)
        assert s.sink is not None and s.sink.kafka is not None
        out.records += [(s.sink.kafka.topic, None, key, value, headers) for key, value, headers in result.outputs]
    for r in result.failures:
        # (key, value) pairs: pyspark's Row of a header is a tuple in that order too.
        user = [(k, v) for k, v in (r.headers or ())]
        origin = h.Origin(r.otopic, r.opartition, r.ooffset, r.ots)
        common = dict(origin=origin, attempts=r.attempts, first_failure=r.first_failure,
                      last_failure=r.last_failure, error_class=r.error_class,
                      error_message=r.error_message, stack=r.stack, consumer=t.consumer_id,
                      policy=s.policy)
        if r.kind in NOT_ATTEMPTED:  # ordering Key: never attempted here
            # A retry record's timestamp is this settle's time, when its due time was set:
            # the retry pump plans from timestamps (retry_plan).
            held = held_record(t, r, user, common)
            out.records.append(held + (now,) if r.kind == Verdict.HELD.value else held)
            if r.kind == Verdict.HELD.value:
                out.dues.append(r.last_failure)
            else:
                out.overflowed.append(origin)
            continue
        if r.kind == Verdict.RETRY.value:
            rec = retry_record(s, cycle=r.cycle, retry_after=r.retry_after, now=now, bound=bound,
                               user=user, common=common)
            out.capped += rec.capped
            out.dues.append(rec.due)
            hdrs = fitted(t, rec.topic, r.key, r.value, rec.headers, r)
            out.records.append((rec.topic, r.opartition % t.partitions, r.key, r.value, hdrs, now))
            counts["retried"] += 1
            out.retried += 1
            out.scheduled[rec.cycle] = out.scheduled.get(rec.cycle, 0) + 1
            continue
        out.poisoned.append((r.reason, r.error_class, origin, disposition_of(s, r.route)))
        out.records += disposition(t, r.key, r.value, user, r.cycle, r.reason, common, r, r.route)
    for raw, attempts, error in isolated:
        origin, user, cycle = origin_of(raw, s.source.topic)
        common = dict(origin=origin, attempts=attempts, first_failure=now, last_failure=now,
                      error_class=BATCH_FAILURE, error_message=error, stack=None,
                      consumer=t.consumer_id, policy=s.policy)
        route = route_by_name(s, Reason.BATCH_ISOLATION.value, BATCH_FAILURE)
        out.poisoned.append((Reason.BATCH_ISOLATION.value, BATCH_FAILURE, origin, disposition_of(s, route)))
        out.records += disposition(t, raw.key, raw.value, user, cycle, Reason.BATCH_ISOLATION.value,
                                   common, isolated_at(raw, attempts, error, cycle, now), route)
    for cycle, n in result.settled.items():  # retries the tasks wrote (worker.task_settle)
        counts["retried"] += n
        out.retried += n
        out.scheduled[cycle] = out.scheduled.get(cycle, 0) + n
    if result.settled_due is not None:
        out.dues.append(result.settled_due)
    out.capped += result.settled_capped
    for (_reason, disp), (n, _signals) in result.settled_finals.items():  # their records are written
        counts[OUTCOME_OF[disp]] += n
    for *_, disp in out.poisoned:
        counts[OUTCOME_OF[disp]] += 1
    counts["moved"] += len(out.overflowed)
    for p, chains in result.chains.items():
        state.held[str(p)] = json.loads(chains)
    state.consecutive_failures = 0
    if batch_id is not None:
        state.committed_batch = state.started_batch = batch_id
        state.in_batch = False
        for (topic, partition), last in result.ends.items():
            key = f"{topic}:{partition}"
            if topic == s.source.topic and last + 1 > state.positions.get(key, 0):
                state.positions[key] = last + 1
    if positions:
        state.positions.update(positions)
        for (topic, partition), (offset, _due) in result.waiting.items():
            key = f"{topic}:{partition}"  # stopped at a record not due yet: read it again
            if key in positions:
                state.positions[key] = min(positions[key], offset)
    return out


def held_record(t: Targets, r: Failure, user: list, common: dict) -> Record:
    """The record of a row the ordering rules did not run (worker.ordering): "held", parked
    in retry topic `r.cycle` behind its key's message ahead, due at `r.last_failure`; or
    "overflow", past maxHeldPerKey: moved to the poison topic whatever the disposition
    (dropping it would lose it; a Fault would stop every other key for one busy key)."""
    s = t.s
    base = {**common, "last_failure": r.first_failure}
    if r.kind == Verdict.HELD.value:
        topic = s.topics.retry[r.cycle - 1]
        hdrs = user + h.failure_headers(cycle=r.cycle, reason=None, due=r.last_failure, **base)
        hdrs.append((h.HELD, b"1"))
        value = r.value
    else:
        topic = s.topics.poison
        hdrs = user + h.failure_headers(cycle=0, reason=HELD_OVERFLOW, disposition="Move", **base)
        value, hdrs = redacted(t, r.value, hdrs)  # quarantined, like any disposition's
    hdrs = fitted(t, topic, r.key, value, hdrs, r)
    if r.kind != Verdict.HELD.value and s.native_headers:
        hdrs = with_native(r.key, value, hdrs, s.native_headers, s.handler, t.max_bytes.get(topic))
    return (topic, r.opartition % t.partitions, r.key, value, hdrs)


def redacted(t: Targets, value, hdrs: list) -> tuple:
    """(value, headers) of a quarantined record under the policy's quarantine.payload: the
    value kept, dropped or with fields hidden, and the antidote.redacted* headers saying so."""
    if t.redact is None:
        return value, hdrs
    done = t.redact(value)  # never "already redacted": a source record's antidote.* are not its own
    return done.value, hdrs + done.headers


def disposition(t: Targets, key, value, user: list, cycle: int, reason: str, common: dict,
                at, route: int | None = None) -> list[Record]:
    """The record of a message that got its disposition, the policy's or its route's (none
    for Drop)."""
    s = t.s
    rec = disposition_record(s, cycle=cycle, reason=reason, user=user, common=common, route=route)
    if rec is None:  # Drop
        return []
    topic, hdrs = rec
    value, hdrs = redacted(t, value, hdrs)
    hdrs = fitted(t, topic, key, value, hdrs, at)
    if s.native_headers:
        hdrs = with_native(key, value, hdrs, s.native_headers, s.handler, t.max_bytes.get(topic))
    return [(topic, common["origin"].partition % t.partitions, key, value, hdrs)]


def fitted(t: Targets, topic: str, key, value, hdrs: list, at) -> list:
    """`hdrs` with Antidote's texts shortened so the record fits `topic`; `at`: where the
    record was read, a failed row or already `row_at`'s dict (made only for the error, not
    for every record). A record that cannot fit even so (its key, value and own headers alone
    are too large) stops the consumer at it, as a Fault would, with reason too-large: dropping
    it would lose it, and a commit the broker refuses would fail the batch over and over.
    Nothing of the batch is committed; raising the topic's max.message.bytes and resuming
    processes it."""
    limit = t.max_bytes.get(topic)
    if limit is None:
        return hdrs
    done = h.fit_record(key, value, hdrs, limit)
    if done is not None:
        return done
    size = h.record_size(key, value, h.user_headers(hdrs))
    at = row_at(at) if isinstance(at, tuple) else at  # a Failure row, else row_at's dict
    where = f"{at['topic']}/{at['partition']}/{at['offset']}"
    raise QueueDisabled(
        DisableReason.FAULT, f"the message at {where} cannot be written to {topic} (reason {TOO_LARGE}): "
        f"{size} bytes without Antidote's headers, and its max.message.bytes is {limit}; it and "
        f"the messages after it stay unconsumed. Raise max.message.bytes of {topic}, then resume",
        {**at, "reason": TOO_LARGE})
