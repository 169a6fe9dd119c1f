"""The `antidote.*` headers of retried and quarantined records.

Values are UTF-8 text (numbers in decimal, times in epoch milliseconds), readable with
`kcat -f '%h'` or any client, like Kafka Connect's DLQ context headers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

PREFIX = "antidote."
ERROR_CLASS = PREFIX + "error.class"
ERROR_MESSAGE = PREFIX + "error.message"
ERROR_STACK = PREFIX + "error.stack"
REASON = PREFIX + "reason"
DISPOSITION = PREFIX + "disposition"
ATTEMPTS = PREFIX + "attempts"
CYCLE = PREFIX + "cycle"
DUE = PREFIX + "due"
ORIGINAL_TOPIC = PREFIX + "original.topic"
ORIGINAL_PARTITION = PREFIX + "original.partition"
ORIGINAL_OFFSET = PREFIX + "original.offset"
ORIGINAL_TIMESTAMP = PREFIX + "original.timestamp"
FIRST_FAILURE = PREFIX + "failure.first"
LAST_FAILURE = PREFIX + "failure.last"
CONSUMER = PREFIX + "consumer"
POLICY = PREFIX + "policy"
# Set by the poison-queue reader on a redriven message; it travels with the message (through
# retry cycles back into the poison topic) so the reader's loop guard can count redrives.
REDRIVE_COUNT = PREFIX + "redrive.count"
# Set by `antidote skip` on the record it moved past a Fault: when (epoch ms).
SKIPPED_AT = PREFIX + "skipped.at"

MAX_MESSAGE = 1024
MAX_STACK = 4096

Headers = list[tuple[str, bytes | None]]


def user_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> Headers:
    """The message's own headers, without Antidote's failure headers (the redrive count,
    which belongs to the message, is kept)."""
    return [(k, v) for k, v in (headers or ()) if not k.startswith(PREFIX) or k == REDRIVE_COUNT]


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 15] + "... [truncated]"


def truncate_stack(text: str, limit: int) -> str:
    """Keep a traceback's end: the exception and the innermost frames matter most."""
    return text if len(text) <= limit else "[truncated] ..." + text[-(limit - 15):]


@dataclass(frozen=True)
class Origin:
    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass(frozen=True)
class RetryState:
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
    headers = list(headers or ())
    try:
        return RetryState(
            origin=Origin(_get(headers, ORIGINAL_TOPIC) or "", int(_get(headers, ORIGINAL_PARTITION)),
                          int(_get(headers, ORIGINAL_OFFSET)), int(_get(headers, ORIGINAL_TIMESTAMP))),
            attempts=int(_get(headers, ATTEMPTS)), cycle=int(_get(headers, CYCLE)),
            first_failure=int(_get(headers, FIRST_FAILURE)), due=int(_get(headers, DUE)))
    except (TypeError, ValueError) as err:
        raise ValueError(f"not an Antidote retry record (missing or bad antidote.* headers: {err})") from err


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
        out.append((ERROR_CLASS, error_class.encode()))
    if error_message is not None:
        out.append((ERROR_MESSAGE, truncate(error_message, MAX_MESSAGE).encode("utf-8", "replace")))
    if stack:
        out.append((ERROR_STACK, truncate_stack(stack, MAX_STACK).encode("utf-8", "replace")))
    if due is not None:
        out.append((DUE, str(due).encode()))
    return out
