"""The trivial handler both pipelines of the throughput benchmark call."""

from __future__ import annotations

import json
import os


def enrich(msg):
    doc = json.loads(msg.value)
    if doc.get("poison"):
        raise ValueError(f"order {doc['id']} cannot be priced")
    doc["total"] = doc["qty"] * doc["price"]
    return json.dumps(doc, separators=(",", ":")).encode()


def crash(msg):
    if msg.value == b"crash":
        os._exit(1)  # a native crash of the Python worker, not an exception
    return msg.value


def tagged(msg):
    """The chaos run's handler: a value starting with b"poison" always fails; any other is
    written with its original coordinates ("partition:offset:value"), so an audit can tell
    each source offset's outcome and count the sink's duplicates."""
    if msg.value.startswith(b"poison"):
        raise ValueError(f"poison at {msg.partition}/{msg.offset}")
    return b"%d:%d:" % (msg.partition, msg.offset) + msg.value
