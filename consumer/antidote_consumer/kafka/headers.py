"""The `antidote.*` headers of retried and quarantined records.

The names are defined once in `antidote_api.headers` (the on-call CLI reads them too); this
module writes and parses them. Values are UTF-8 text (numbers in decimal, times in epoch milliseconds), readable with
`kcat -f '%h'` or any client, like Kafka Connect's DLQ context headers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from antidote_api.headers import (ATTEMPTS, CONSUMER, CYCLE, DISPOSITION, DUE, ERROR_CLASS,  # noqa: F401
                                  ERROR_MESSAGE, ERROR_STACK, FIRST_FAILURE, HELD, LAST_FAILURE,
                                  ORIGINAL_OFFSET, ORIGINAL_PARTITION, ORIGINAL_TIMESTAMP,
                                  ORIGINAL_TOPIC, POLICY, PREFIX, REASON, REDACTED, REDACTED_PATHS,
                                  REDACTED_REASON, REDRIVE_COUNT, ROUTE, SKIPPED_AT)

# The header budget: Antidote's headers on a record stay under ~6 KiB (texts in UTF-8 bytes),
# so a record that fit its source fits a derived topic with the same max.message.bytes
# unless it was within that of the limit (then `fit_record` shortens the texts further).
MAX_MESSAGE = 1024
MAX_STACK = 4096
MAX_CLASS = 256  # as status.lastPoison.errorClass

Headers = list[tuple[str, bytes | None]]


def user_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> Headers:
    """The message's own headers, without Antidote's failure headers (the redrive count,
    which belongs to the message, is kept)."""
    return [(k, v) for k, v in (headers or ()) if not k.startswith(PREFIX) or k == REDRIVE_COUNT]


def has_ours(headers: Iterable[tuple[str, bytes | None]]) -> bool:
    """Whether `user_headers` would drop any of `headers` (a loop, not a new list: the
    workers ask for every source record that has headers)."""
    for k, _v in headers:
        if k.startswith(PREFIX) and k != REDRIVE_COUNT:
            return True
    return False


def source_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> Headers:
    """A source record's headers as Antidote takes them, before anything reads them: its
    `antidote.*` headers dropped, but the redrive count (the reader's Redrive sets it on the
    source, and its loop guard must see it again). Anyone who can write to the source can set
    those names: a forged `antidote.held` would make its retry record a first delivery again
    (its cycle and attempts reset), a forged `antidote.error.stack` or `antidote.due` would
    travel onto its quarantine record. A message's history lives on its retry records only,
    which Antidote writes; the reader's Redrive drops the same headers (reader.rules)."""
    return user_headers(headers)


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 15] + "... [truncated]"


def truncate_stack(text: str, limit: int) -> str:
    """Keep a traceback's end: the exception and the innermost frames matter most."""
    return text if len(text) <= limit else "[truncated] ..." + text[-(limit - 15):]


_CUT = "... [truncated]"


def cap_text(text: str, limit: int) -> bytes:
    """`text` as UTF-8 in at most `limit` bytes, its start kept (never a split character)."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return data
    return data[: max(0, limit - len(_CUT))].decode("utf-8", "ignore").encode() + _CUT.encode()


def cap_stack(text: str, limit: int) -> bytes:
    """`text` as UTF-8 in at most `limit` bytes, its end kept (a traceback's exception and
    innermost frames matter most)."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return data
    keep = max(0, limit - len("[truncated] ..."))
    return b"[truncated] ..." + (data[-keep:] if keep else b"").decode("utf-8", "ignore").encode()


class Origin(NamedTuple):
    """Where a message was first read. (Named tuples, not frozen dataclasses: one is made for
    every failed and retried message, and a frozen dataclass's __init__ costs ~3x as much.)"""

    topic: str
    partition: int
    offset: int
    timestamp: int


class RetryState(NamedTuple):
    """What a record read back from a retry topic carries about its history."""

    origin: Origin
    attempts: int
    cycle: int
    first_failure: int
    due: int


def _get(headers: Iterable[tuple[str, bytes | None]], name: str) -> str | None:
    found = None
    for k, v in headers:
        if k == name and v is not None:
            found = v.decode("utf-8", "replace")
    return found


def retry_state(headers: Iterable[tuple[str, bytes | None]]) -> RetryState:
    """Parse a retry record's headers; a record without them is not Antidote's: an error."""
    # One pass over the headers, keeping each name's last value as _get does, instead of one
    # pass per field: a retry record carries ~15 headers and every retried message is parsed.
    # Numbers straight from their bytes (int() takes ASCII digits as bytes): no decode each.
    found = {k: v for k, v in (headers or ()) if v is not None}
    try:
        topic = found.get(ORIGINAL_TOPIC)
        state = RetryState(
            Origin(topic.decode("utf-8", "replace") if topic is not None else "",
                   int(found[ORIGINAL_PARTITION]), int(found[ORIGINAL_OFFSET]),
                   int(found[ORIGINAL_TIMESTAMP])),
            int(found[ATTEMPTS]), int(found[CYCLE]), int(found[FIRST_FAILURE]), int(found[DUE]))
    except (KeyError, ValueError) as err:  # a header missing, or not a number
        raise ValueError(f"not an Antidote retry record (missing or bad antidote.* headers: {err})") from err
    # Numbers a retry record of ours never has: they would index past the policy's cycles or
    # give the handler a nonsense attempt number.
    bad = [name for name, value in ((ORIGINAL_PARTITION, state.origin.partition),
                                    (ORIGINAL_OFFSET, state.origin.offset), (ATTEMPTS, state.attempts),
                                    (CYCLE, state.cycle - 1)) if value < 0]
    if not state.origin.topic:
        bad.insert(0, ORIGINAL_TOPIC)
    if bad:
        raise ValueError(f"not an Antidote retry record (bad {', '.join(bad)})")
    return state


def retry_state_or_none(headers: Iterable[tuple[str, bytes | None]] | None) -> RetryState | None:
    """`retry_state`, or None for a record that is not a well-formed retry record: the
    callers then treat it as read (its own coordinates, no earlier attempts)."""
    try:
        return retry_state(headers or ())
    except ValueError:
        return None


def consumer_of(headers: Iterable[tuple[str, bytes | None]] | None) -> str | None:
    """Which consumer wrote a retry or quarantine record (`namespace/name`), if any."""
    return _get(list(headers or ()), CONSUMER)


def due_of(headers: Iterable[tuple[str, bytes | None]] | None) -> int:
    """The due time of a retry record; 0 (due now) when it has none."""
    value = _get(list(headers or ()), DUE)
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def failure_headers(*, origin: Origin, attempts: int, cycle: int, first_failure: int,
                    last_failure: int, reason: str | None, error_class: str | None,
                    error_message: str | None, stack: str | None, consumer: str, policy: str,
                    disposition: str | None = None, due: int | None = None) -> Headers:
    out: Headers = [
        (ORIGINAL_TOPIC, origin.topic.encode()),
        (ORIGINAL_PARTITION, str(origin.partition).encode()),
        (ORIGINAL_OFFSET, str(origin.offset).encode()),
        (ORIGINAL_TIMESTAMP, str(origin.timestamp).encode()),
        (ATTEMPTS, str(attempts).encode()),
        (CYCLE, str(cycle).encode()),
        (FIRST_FAILURE, str(first_failure).encode()),
        (LAST_FAILURE, str(last_failure).encode()),
        (CONSUMER, consumer.encode()),
        (POLICY, policy.encode()),
    ]
    if reason:
        out.append((REASON, reason.encode()))
    if disposition:
        out.append((DISPOSITION, disposition.encode()))
    if error_class:
        out.append((ERROR_CLASS, cap_text(error_class, MAX_CLASS)))
    if error_message is not None:
        out.append((ERROR_MESSAGE, cap_text(error_message, MAX_MESSAGE)))
    if stack:
        out.append((ERROR_STACK, cap_stack(stack, MAX_STACK)))
    if due is not None:
        out.append((DUE, str(due).encode()))
    return out


# What Kafka adds to a record on the wire, counted generously: a record batch's header (61
# bytes) and the record's own varints, then each header's two length varints.
BATCH_OVERHEAD = 61 + 40
HEADER_OVERHEAD = 10
MIN_MESSAGE = 128  # the error message is shortened to this before giving up


def record_size(key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]]) -> int:
    """An upper bound of the bytes a record takes in a batch of its own, uncompressed."""
    # Every quarantined or retried record is measured (twice for one that is fitted): a
    # plain loop with ASCII names counted without encoding them (Antidote's always are)
    # costs about half the generator over `k.encode()` it replaced.
    n = BATCH_OVERHEAD + len(key or b"") + len(value or b"")
    for k, v in headers:
        n += HEADER_OVERHEAD + (len(k) if k.isascii() else len(k.encode())) + (len(v) if v else 0)
    return n


def fit_record(key: bytes | None, value: bytes | None, headers: Headers, limit: int) -> Headers | None:
    """`headers` shortened so the record fits `limit` bytes (a topic's max.message.bytes),
    or None when it cannot. Only Antidote's texts give way, in this order: the stack, then
    the error message (to MIN_MESSAGE bytes); key, value and every other header stay whole.
    The check is on uncompressed bytes, so a record that passes fits whatever the codec."""
    excess = record_size(key, value, headers) - limit
    if excess <= 0:
        return headers
    out = list(headers)
    for name, floor, cut in ((ERROR_STACK, 0, _cut_end), (ERROR_MESSAGE, MIN_MESSAGE, _cut_start)):
        i = next((j for j in range(len(out) - 1, -1, -1) if out[j][0] == name), None)
        old = out[i][1] if i is not None else None
        if i is None or old is None:
            continue
        keep = max(floor, len(old) - excess)
        if keep <= 0:
            del out[i]
            excess -= HEADER_OVERHEAD + len(name) + len(old)
        elif keep < len(old):
            shorter = cut(old, keep)
            out[i] = (name, shorter)
            excess -= len(old) - len(shorter)
        if excess <= 0:
            return out
    return None


def _cut_start(data: bytes, limit: int) -> bytes:
    return cap_text(data.decode("utf-8", "replace"), limit)


def _cut_end(data: bytes, limit: int) -> bytes:
    return cap_stack(data.decode("utf-8", "replace"), limit)
