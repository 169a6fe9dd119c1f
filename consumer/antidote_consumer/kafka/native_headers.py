"""Kafka-native error headers on quarantined records (PoisonPolicy `spec.nativeHeaders`), so
Kafka's own dead-letter tooling reads Antidote's poison and dead-letter topics.

The names are defined once in `antidote_api.headers`; they and the value encodings match
the upstream sources (not copied from them):
- `Connect`: Kafka Connect's dead-letter context headers, the constants of
  `connect/runtime/.../errors/DeadLetterQueueReporter.java` (apache/kafka), every value UTF-8
  text (numbers in decimal).
- `ShareGroup`: the share-group dead-letter queue of KIP-1191, the constants of
  `server/.../share/dlq/ShareGroupDLQStateManager.java`, released in Kafka 4.4.0
  (kafka-server-4.4.0.jar); values UTF-8 text.

Every value is derived from the record's own `antidote.*` headers, after they were fitted to
the topic: the same facts, cut the same way. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

from antidote_api.headers import (CONNECT, CONNECT_CLASS, CONNECT_CONNECTOR, CONNECT_EXCEPTION,
                                  CONNECT_MESSAGE, CONNECT_OFFSET, CONNECT_PARTITION, CONNECT_STACK,
                                  CONNECT_STAGE, CONNECT_TASK, CONNECT_TOPIC, DLQ_DELIVERY_COUNT,
                                  DLQ_GROUP, DLQ_MESSAGE, DLQ_OFFSET, DLQ_PARTITION, DLQ_TOPIC,
                                  NATIVE_SETS, SHARE_GROUP)
from antidote_api.wire import PoisonReason

from . import headers as h

# Connect's stages (org.apache.kafka.connect.runtime.errors.Stage): content the policy's
# validation refused failed where Connect's converter would; everything else in the handler,
# Connect's sink task `put`.
STAGE_VALIDATION = "VALUE_CONVERTER"
STAGE_HANDLER = "TASK_PUT"
_VALIDATION = PoisonReason.VALIDATION.value.encode()

# When a record would not fit its topic, these copies give way first, in this order; then
# every native header (the `antidote.*` ones are the contract and stay).
_GIVE_WAY = ((CONNECT_STACK,), (CONNECT_MESSAGE, DLQ_MESSAGE))


def _last(hdrs: Iterable[tuple[str, bytes | None]], name: str) -> bytes | None:
    found = None
    for k, v in hdrs:
        if k == name:
            found = v
    return found


def derive(hdrs: h.Headers, sets: Iterable[str], handler: str) -> h.Headers:
    """The native headers of `sets` for a quarantined record whose headers are `hdrs` (the
    user's and Antidote's); `handler` is the QueueConsumer's `package.module:function`."""
    sets = set(sets)
    get = lambda name: _last(hdrs, name)  # noqa: E731
    topic, partition, offset = get(h.ORIGINAL_TOPIC), get(h.ORIGINAL_PARTITION), get(h.ORIGINAL_OFFSET)
    consumer, reason = get(h.CONSUMER), get(h.REASON)
    error_class, message, stack = get(h.ERROR_CLASS), get(h.ERROR_MESSAGE), get(h.ERROR_STACK)
    out: h.Headers = []
    if CONNECT in sets:
        out += [(CONNECT_TOPIC, topic), (CONNECT_PARTITION, partition), (CONNECT_OFFSET, offset),
                (CONNECT_CONNECTOR, consumer), (CONNECT_TASK, b"0"),
                (CONNECT_STAGE, (STAGE_VALIDATION if reason == _VALIDATION else STAGE_HANDLER).encode()),
                (CONNECT_CLASS, handler.encode())]
        if error_class is not None:
            out.append((CONNECT_EXCEPTION, error_class))
            out.append((CONNECT_MESSAGE, message if message is not None else b""))
            if stack:
                out.append((CONNECT_STACK, stack))
    if SHARE_GROUP in sets:
        out += [(DLQ_TOPIC, topic), (DLQ_PARTITION, partition), (DLQ_OFFSET, offset),
                (DLQ_GROUP, consumer), (DLQ_DELIVERY_COUNT, get(h.ATTEMPTS))]
        # KIP-1191's one text says why the record was dead-lettered: the reason and the error.
        why = ": ".join(x.decode("utf-8", "replace") for x in (reason, error_class, message) if x)
        if why:
            out.append((DLQ_MESSAGE, h.cap_text(why, h.MAX_MESSAGE)))
    return [(k, v) for k, v in out if v is not None]


def with_native(key: bytes | None, value: bytes | None, hdrs: h.Headers, sets: Iterable[str],
                handler: str, limit: int | None) -> h.Headers:
    """`hdrs` plus the native headers of `sets`, within `limit` bytes (the topic's
    max.message.bytes, or None). Headers of those sets already on the record (a redriven
    message quarantined again) are replaced, not repeated. The copies of the stack, then of
    the messages, give way when the record would not fit; then every native header: `hdrs`
    was fitted already and stays as it is."""
    sets = [s for s in sets if s in NATIVE_SETS]
    if not sets:
        return hdrs
    prefixes = tuple(NATIVE_SETS[s] for s in sets)
    base = [(k, v) for k, v in hdrs if not k.startswith(prefixes)]
    native = derive(base, sets, handler)
    if limit is None:
        return base + native
    for drop in ((), *_GIVE_WAY):
        native = [(k, v) for k, v in native if k not in drop]
        if h.record_size(key, value, base + native) <= limit:
            return base + native
    return base
