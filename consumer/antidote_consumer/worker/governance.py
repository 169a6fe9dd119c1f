"""A PoisonPolicy's routes by error and its age limits, as the workers apply them: pure.

- `spec.routes`: a message's final failure is matched against each route's `errors` in order
  (exception classes by their fully qualified name, as `antidote.error.class` writes them,
  the raised class or any of its bases; `validation` for what the content checks refused);
  the first that matches gives its disposition and topic (the driver writes the record).
- `retries.maxAge`: a pass that would send its message to another retry cycle gives it its
  disposition instead, reason `expired`, when the message is older than that at the cycle's
  due time.
- `validation.maxAge`: a record older than that when first read is refused like invalid
  content, without a handler call.

Ages count from the record's Kafka timestamp (`message.timestamp`: the original record's,
also on a retry cycle). A timestamp in the future (a producer's clock ahead of ours) is age
0, and a record without one (-1, from very old producers) has no age: neither expires.
"""

from __future__ import annotations

from dataclasses import dataclass

from antidote_api.duration import Duration
from antidote_api.policy import VALIDATION_ERRORS
from antidote_api.wire import PoisonReason

from .describe import class_name


@dataclass(frozen=True)
class Governance:
    """What a worker needs of the policy's routes and age limits (small, picklable)."""

    routes: tuple[frozenset[str], ...] = ()  # each route's `errors`, in the policy's order
    max_age_ms: int | None = None  # retries.maxAge
    stale_ms: int | None = None  # validation.maxAge
    delays: tuple[int, ...] = ()  # the cycle delays (ms): cycle k + 1 is due delays[k] after a pass
    retry_bound_ms: int | None = None  # the longest Retry(after=...) (semantics.retry_after_bound)


def age_ms(timestamp: int | None, now: int) -> int:
    """How old a record of `timestamp` (epoch ms) is at `now`: 0 for one from the future (a
    skewed clock is not an old message) and for one without a timestamp."""
    if timestamp is None or timestamp <= 0:
        return 0
    return max(0, now - timestamp)


def stale(timestamp: int | None, now: int, stale_ms: int | None) -> str | None:
    """Why validation.maxAge refuses a record first read at `now`, or None when it is young
    enough (or no limit is set). Names the limit and the age, never the payload."""
    if stale_ms is None:
        return None
    age = age_ms(timestamp, now)
    if age <= stale_ms:
        return None
    return (f"record is {Duration(age)} old (timestamp {timestamp}), above validation.maxAge "
            f"{Duration(stale_ms)}: refused without a handler call")


def expired(timestamp: int | None, due: int, max_age_ms: int | None) -> bool:
    """Whether a message is older than retries.maxAge when its next cycle is due (epoch ms)."""
    return max_age_ms is not None and age_ms(timestamp, due) > max_age_ms


def expired_text(text: str | None, timestamp: int | None, due: int, cycle: int, max_age_ms: int) -> str:
    """The error message of an expired message: its last failure's, and why no cycle follows."""
    note = (f"(expired: {Duration(age_ms(timestamp, due))} old when retry cycle {cycle} would "
            f"start, above retries.maxAge {Duration(max_age_ms)})")
    return f"{text} {note}" if text else note


def route_of(routes: tuple[frozenset[str], ...], reason: str | None, error_class: str | None,
             error_type: type | None) -> int | None:
    """The index of the first route whose `errors` take this final failure, or None.

    A route takes it when it lists: `validation` and the content checks refused it (reason
    `validation`); its `antidote.error.class` as written; or the fully qualified name of the
    raised class or of any of its bases (its MRO), so a route for `payments.PaymentError`
    takes `payments.CardDeclined(PaymentError)` too, as Spring Kafka's classifier does."""
    if not routes:
        return None
    names: tuple[str, ...] = ()
    if error_type is not None:
        try:
            names = tuple(class_name(c) for c in error_type.__mro__)
        except Exception:  # noqa: BLE001 - a metaclass of the handler's: its header name alone
            names = ()
    for i, errors in enumerate(routes):
        if reason == PoisonReason.VALIDATION.value and VALIDATION_ERRORS in errors:
            return i
        if error_class is not None and error_class in errors:
            return i
        if any(n in errors for n in names):
            return i
    return None
