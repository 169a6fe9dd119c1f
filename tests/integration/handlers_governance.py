"""Handlers for tests/integration/test_consumer_governance.py (routes by error class, age
limits). Imported by name in Spark's Python workers and the local worker; every call is
recorded as in handlers.py."""

from __future__ import annotations

from .handlers import _record


class PaymentError(Exception):
    """The base a route names: its subclasses are routed with it."""


class CardDeclined(PaymentError):
    pass


def pays(msg):
    """By value: b"declined..." raises CardDeclined (a PaymentError), b"missing..." a KeyError,
    b"bad..." a ValueError, b"down..." a ConnectionError; else the value, upper-cased."""
    _record(msg)
    value = msg.value or b""
    if value.startswith(b"declined"):
        raise CardDeclined(f"card declined at offset {msg.offset}")
    if value.startswith(b"missing"):
        raise KeyError("customer")
    if value.startswith(b"bad"):
        raise ValueError(f"bad order at offset {msg.offset}")
    if value.startswith(b"down"):
        raise ConnectionError("downstream service unavailable")
    return value.upper()
