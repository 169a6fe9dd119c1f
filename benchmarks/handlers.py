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


def enrich_avro(msg):
    """enrich on an Avro value (steady_state.py's "b avro" and "a avro"): the same work on the
    decoded dict (`msg.data`: what valueFormat Avro gives the handler, or what plain Spark's
    from_avro gives its mapInArrow) and the same output bytes as enrich on the same order."""
    doc = msg.data
    if doc.get("poison"):
        raise ValueError(f"order {doc['id']} cannot be priced")
    doc["total"] = doc["qty"] * doc["price"]
    return json.dumps(doc, separators=(",", ":")).encode()


def crash(msg):
    if msg.value == b"crash":
        os._exit(1)  # a native crash of the Python worker, not an exception
    return msg.value


# The chaos run's flaky messages fail their first FLAKY_FAILS attempts, then succeed: with the
# chaos policy (1 immediate retry, 2 cycles) attempts 1-2 in the source batch and 3 in the first
# retry cycle fail, attempt 4 succeeds.
FLAKY_FAILS = 3


def tagged(msg):
    """The chaos run's handler: a value starting with b"poison" always fails; one starting with
    b"flaky" fails its first FLAKY_FAILS attempts; any other (and a flaky one after that) is
    written with its original coordinates and the attempt that succeeded
    ("partition:offset:attempt:value"), so an audit can tell each source offset's outcome, check
    that a retried message succeeded at exactly the attempt it should, and count the sink's
    duplicates."""
    if msg.value.startswith(b"poison"):
        raise ValueError(f"poison at {msg.partition}/{msg.offset}")
    if msg.value.startswith(b"flaky") and msg.attempt <= FLAKY_FAILS:
        raise ConnectionError(f"flaky at {msg.partition}/{msg.offset}, attempt {msg.attempt}")
    return b"%d:%d:%d:" % (msg.partition, msg.offset, msg.attempt) + msg.value
