"""The record a settled failure writes, before it is fitted to its topic: a retried message's
retry record (topic, cycle, due time, headers) and a final one's disposition record (the
poison or dead-letter topic and headers; none for Drop, none for Fault, which stops the
consumer instead). Pure. The driver's settle (driver.outcomes) fits these to their topics and
writes them in its transaction, a task that settles its own failures (worker.task_settle)
in its chunk's, from the same rules (`parked`, `quarantine_topic`, `quarantined`: settings
as plain values, which a task is shipped); `antidote.testing` shows them to a handler's unit
tests: one definition, so a test sees what the consumer would write."""

from __future__ import annotations

from typing import NamedTuple

from antidote_api.semantics import EffectiveSettings, retry_after_bound
from antidote_consumer.kafka import headers as h

from .chosen import retry_delay_ms
from .governance import route_of

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
    return parked(s.topics.retry[cycle], s.retries.cycle_delays[cycle].ms, bound, cycle=cycle,
                  retry_after=retry_after, now=now, user=user, common=common)


def parked(topic: str, delay_ms: int, bound: int | None, *, cycle: int, retry_after: int | None, now: int,
           user: h.Headers, common: dict) -> RetryRecord:
    """retry_record's rule, given the cycle's retry topic and delay."""
    delay = retry_delay_ms(retry_after, delay_ms, bound)
    due = now + delay
    return RetryRecord(topic, cycle + 1, due, delay,
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
    route_topic = s.routes[route].topic if route is not None and s.routes else None
    topic = quarantine_topic(disposition, s.topics.poison, s.topics.dlq, route_topic)
    return topic, quarantined(disposition, cycle=cycle, reason=reason, user=user, common=common, route=route)


def quarantine_topic(disposition: str, poison: str, dlq: str, route_topic: str | None) -> str:
    """Where a final failure's record goes: its route's topic, else Move's poison topic or
    Reject's dead-letter topic."""
    return route_topic or (poison if disposition == "Move" else dlq)


def quarantined(disposition: str, *, cycle: int, reason: str, user: h.Headers, common: dict,
                route: int | None) -> h.Headers:
    """disposition_record's headers: the failure's, and antidote.route for a route's."""
    hdrs = user + h.failure_headers(cycle=cycle, reason=reason, disposition=disposition, **common)
    if route is not None:
        hdrs.append((h.ROUTE, str(route).encode()))
    return hdrs
