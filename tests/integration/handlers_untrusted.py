"""Handlers of tests/integration/test_consumer_untrusted_input.py: an error that cannot be
printed, and outcomes by value. Imported by name in Spark's Python workers and in the local
worker; every call is recorded as in handlers.py."""

from __future__ import annotations

from antidote import NonRetryable

from .handlers import _record


class Unprintable(Exception):
    """An error whose str() raises (as a careless __str__ over a missing field does)."""

    def __str__(self):
        raise RuntimeError("no text for this error")


def unprintable_on_odd(msg):
    """Raises Unprintable on b"odd"; upper-cases anything else."""
    _record(msg)
    if msg.value == b"odd":
        raise Unprintable()
    return (msg.value or b"").upper()


def by_value(msg):
    """b"fatal": NonRetryable (quarantined from the source batch itself); b"poison": ValueError
    (every attempt, through the retry cycles); anything else: upper-cased."""
    _record(msg)
    if msg.value == b"fatal":
        raise NonRetryable(f"offset {msg.offset} can never succeed")
    if msg.value == b"poison":
        raise ValueError(f"cannot process offset {msg.offset}")
    return (msg.value or b"").upper()
