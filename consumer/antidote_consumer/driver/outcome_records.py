"""The record a settled failure writes, before it is fitted to its topic: a retried message's
retry record (topic, cycle, due time, headers) and a final one's disposition record (the
poison or dead-letter topic and headers; none for Drop, none for Fault, which stops the
consumer instead). Pure. outcomes.settlement fits these to their topics and the Settler
writes them in its transaction; `antidote.testing` shows them to a handler's unit tests: one
definition, so a test sees what the consumer would write."""

from __future__ import annotations

from typing import NamedTuple

from antidote_api.semantics import EffectiveSettings, retry_after_bound
from antidote_consumer.kafka import headers as h
from antidote_consumer.worker.chosen import retry_delay_ms
from antidote_consumer.worker.governance import route_of

# The ledger's (and antidote_messages_total's) outcome of a message given the disposition.
# Fault counts nothing here: the consumer stops at the message, which stays unconsumed.
OUTCOME_OF = {"Move": "moved", "Reject": "rejected", "Drop": "dropped", "Fault": "moved"}


class RetryRecord(NamedTuple):
    topic: str
    cycle: int  # the retry cycle it waits for (1-based), its antidote.cycle
    due: int  # epoch ms, its antidote.due
    delay_ms: int  # due - now: the policy's delay, or Retry(after=...) within the bound
    headers: h.Headers
    capped: bool  # Retry(after=...) asked for longer than the bound


def retry_bound_ms(s: EffectiveSettings) -> int | None:
    """The longest wait a Retry(after=...) gets, in ms (semantics.retry_after_bound)."""
    bound = retry_after_bound(s.retries)
    return bound.ms if bound is not None else None


def retry_record(s: EffectiveSettings, *, cycle: int, retry_after: int | None, now: int,
                 bound: int | None, user: h.Headers, common: dict) -> RetryRecord:
    """The retry record of a message that failed its pass in cycle `cycle` (0: the first
    delivery) with attempts left: parked in retry topic `cycle + 1`, due after that cycle's
    delay or what its Retry(after=...) asked for, at most `bound`. `common`: the keyword
    arguments of `h.failure_headers` but cycle, reason and due."""
    delay = retry_delay_ms(retry_after, s.retries.cycle_delays[cycle].ms, bound)
    due = now + delay
    return RetryRecord(s.topics.retry[cycle], cycle + 1, due, delay,
                       user + h.failure_headers(cycle=cycle + 1, reason=None, due=due, **common),
                       retry_after is not None and bound is not None and retry_after > bound)


def disposition_of(s: EffectiveSettings, route: int | None) -> str:
    """The disposition a final failure gets: its route's (spec.routes), else the policy's."""
    return s.disposition if route is None or not s.routes else s.routes[route].disposition


def route_by_name(s: EffectiveSettings, reason: str, error_class: str) -> int | None:
    """The route of a failure the driver decided (batch-isolation: no exception object, so
    matched by its error class's name alone; worker.governance.route_of)."""
    return route_of(tuple(frozenset(r.errors) for r in s.routes or ()), reason, error_class, None)


def disposition_record(s: EffectiveSettings, *, cycle: int, reason: str, user: h.Headers,
                       common: dict, route: int | None = None) -> tuple[str, h.Headers] | None:
    """(topic, headers) of a message given its disposition with `reason`: the policy's, or
    the one of the route it took (`route`, an index of spec.routes: its topic, and the header
    antidote.route). Move to the poison topic, Reject to the dead-letter topic (or the
    route's topic); None for Drop (nothing written)."""
    disposition = disposition_of(s, route)
    if disposition == "Drop":
        return None
    topic = s.topics.poison if disposition == "Move" else s.topics.dlq
    if route is not None and s.routes:
        topic = s.routes[route].topic or topic
    hdrs = user + h.failure_headers(cycle=cycle, reason=reason, disposition=disposition, **common)
    if route is not None:
        hdrs.append((h.ROUTE, str(route).encode()))
    return topic, hdrs
