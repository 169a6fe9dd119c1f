"""What a handler imports to choose a message's outcome itself (docs/consumer.md).

    from antidote import Retry, NonRetryable

    def handle(message):
        if rate_limited():
            raise Retry(after="10m")           # the next retry cycle, in 10 minutes
        if not known_customer(message):
            raise NonRetryable("unknown customer")  # no more attempts: the disposition

Both are ordinary exceptions: raise them from the handler, in the Spark worker or the local
worker, and the consumer's loop turns them into the outcome (they never travel as
exceptions). This module stays small and imports nothing heavy: handlers import it in every
Python worker. `message.attempt` is unchanged by either.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

__all__ = ["NonRetryable", "Retry"]


class Retry(Exception):
    """Retry this message in the next retry cycle, skipping the attempts left in this one.

    `after`: how long to wait, as the policy's durations are written (`"30s"`, `"10m"`,
    `"1h30m"`), as seconds (a number), or a `datetime.timedelta`; None waits the policy's
    own delay for that cycle. The wait is capped at the policy's `maxCycleDelay` (or, when it
    sets none, its longest cycle delay). With no cycle left the message gets the policy's
    disposition, reason `max-attempts`.

    A bad `after` (text that is not a duration, a negative number, another type) never
    loses the message: the attempt fails as any exception does, with an error message naming
    the message and the value."""

    def __init__(self, after: str | float | timedelta | None = None, message: str | None = None):
        self.after = after
        self.message = message
        # Parsed here, reported by the consumer (which knows the message's coordinates).
        self.after_ms, self.problem = parse_after(after)
        super().__init__(message if message is not None else
                         ("retry requested" if after is None else f"retry requested after {after}"))

    def __reduce__(self):  # picklable with its arguments, not `args`
        return (type(self), (self.after, self.message))


class NonRetryable(Exception):
    """This message can never succeed: skip every remaining attempt and cycle and give it the
    policy's disposition at once, reason `non-retryable`. The text (and the chained cause,
    `raise NonRetryable("why") from err`) goes into the record's error headers.

    Not counted as a sign of a systemic failure (`queueDisable.failureRatio`): the handler has
    judged the message itself, as a validation failure does (docs/consumer.md)."""


def parse_after(after: Any) -> tuple[int | None, str | None]:
    """(milliseconds, None), (None, None) for no `after`, or (None, why it is not a delay)."""
    if after is None:
        return None, None
    if isinstance(after, timedelta):
        seconds = after.total_seconds()
    elif isinstance(after, (int, float)) and not isinstance(after, bool):
        seconds = float(after)
    elif isinstance(after, str):
        from antidote_api.duration import Duration  # the manifests' durations, one parser

        try:
            return Duration.parse(after.strip()).ms, None
        except ValueError as err:
            return None, str(err)
    else:
        return None, (f"{type(after).__name__} is not a delay: give text like '30s', '10m', "
                      "'1h30m', seconds as a number, or a datetime.timedelta")
    if not math.isfinite(seconds) or seconds < 0:
        return None, f"{after!r} is not a delay: it must be a finite number of seconds, 0 or more"
    return round(seconds * 1000), None
