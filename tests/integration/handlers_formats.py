"""Handlers of the format tests (test_consumer_formats.py): they write what they were given,
decoded, so the test reads back from the sink what the handler saw."""

from __future__ import annotations

import json

from .handlers import _record


def seen(msg):
    """The decoded value (and key), as JSON: a dict as it is, a Protobuf message as
    protobuf's own JSON mapping; and the raw value's length, to show it was kept."""
    _record(msg)
    data = msg.data
    if hasattr(data, "DESCRIPTOR"):
        from google.protobuf.json_format import MessageToDict

        data = {"type": data.DESCRIPTOR.full_name, **MessageToDict(data)}
    return {"data": data, "key": msg.key_data, "raw": len(msg.value)}


def order_out(msg):
    """The decoded (Json) value as it is, for an encoded sink: the sink's schema decides."""
    _record(msg)
    return msg.data
