"""Handlers that choose their messages' outcomes (antidote.Retry, antidote.NonRetryable), for
tests/integration/test_consumer_chosen.py. Imported by name in Spark's Python workers and in
the local worker; every call is recorded as in handlers.py."""

from __future__ import annotations

from antidote import NonRetryable, Retry

from .handlers import _record


def chooses(msg):
    """By value: b"later-<s>" asks Retry(after=<s> seconds) on its first attempt, then
    succeeds; b"always-later" asks Retry(after="1s") every time; b"bad-after" raises
    Retry(after="soon"); b"never" raises NonRetryable from a KeyError; else the value."""
    _record(msg)
    value = msg.value or b""
    if value.startswith(b"later-"):
        if msg.attempt == 1:
            raise Retry(after=float(value[len(b"later-"):]), message="rate limited")
        return value
    if value == b"always-later":
        raise Retry(after="1s")
    if value == b"bad-after":
        raise Retry(after="soon")
    if value == b"never":
        try:
            {}["customer"]
        except KeyError as err:
            raise NonRetryable("unknown customer") from err
    return value
