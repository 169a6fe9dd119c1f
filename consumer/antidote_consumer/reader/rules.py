"""The poison-queue reader's pure parts: options, filters, redrive headers, the rate
limiter, the offsets a reader has resolved, and its report. No Kafka, no Spark here."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from antidote_api.policy import Reader
from antidote_api.types import TOPIC_PATTERN
from antidote_api.wire import READER_ACTIONS, READER_SOURCES
from antidote_consumer.kafka import headers as h

ACTIONS, SOURCES = READER_ACTIONS, READER_SOURCES


class ReaderError(ValueError):
    """Bad settings or options: the reader does not start (exit 2)."""


@dataclass(frozen=True)
class ReaderOptions:
    """What one run does; None means "the policy's reader section says"."""

    source: str = "poison"  # which topic is read: "poison", "dlq" or a route's topic (by name)
    action: str | None = None
    rate: int | None = None
    error_classes: tuple[str, ...] | None = None
    reasons: tuple[str, ...] | None = None
    since: datetime | None = None
    until: datetime | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class Filter:
    error_classes: frozenset[str] | None = None
    reasons: frozenset[str] | None = None
    since_ms: int | None = None  # inclusive
    until_ms: int | None = None  # exclusive

    def matches(self, headers: Iterable[tuple[str, bytes | None]], record_ts: int,
                found: Mapping[str, str] | None = None) -> bool:
        """Whether a poison record is the filter's: by `antidote.error.class`,
        `antidote.reason`, and its last failure time (the record's own time without one).
        `found`: the record's headers as `read_fields` parsed them already."""
        if found is None:
            found = header_map(headers, READ_FIELDS)
        if self.error_classes is not None and found.get(h.ERROR_CLASS) not in self.error_classes:
            return False
        if self.reasons is not None and found.get(h.REASON) not in self.reasons:
            return False
        if self.since_ms is not None or self.until_ms is not None:
            when = _int(found.get(h.LAST_FAILURE), record_ts)
            if self.since_ms is not None and when < self.since_ms:
                return False
            if self.until_ms is not None and when >= self.until_ms:
                return False
        return True


@dataclass(frozen=True)
class Plan:
    """The effective run: the policy's reader section with the command line's overrides."""

    source: str
    action: str
    rate: int | None
    max_redrives: int
    filter: Filter
    retries: int
    disposition: str
    dry_run: bool
    archive_path: str | None
    archive_format: str


def epoch_ms(t: datetime) -> int:
    if t.tzinfo is None:  # a time without a zone is UTC, as the API's are
        t = t.replace(tzinfo=timezone.utc)
    return int(t.timestamp() * 1000)


def plan(reader: Reader, options: ReaderOptions) -> Plan:
    """Merge `options` over the policy's `reader`; ReaderError names the field that is wrong."""
    if options.source not in SOURCES and not re.fullmatch(TOPIC_PATTERN, options.source):
        # A route's topic (spec.routes) by name: the run checks it is one (semantics.reader_topic).
        raise ReaderError(f"--from must be one of {', '.join(SOURCES)} or a route's topic, not "
                          f"{options.source!r}")
    action = options.action or reader.action
    if action not in ACTIONS:
        raise ReaderError(f"--action must be one of {', '.join(ACTIONS)}, not {action!r}")
    if reader.disposition == "Move":
        raise ReaderError("spec.reader.disposition: Move is refused on the poison queue (a poison "
                          "topic does not quarantine into itself); use Reject, Drop or Fault")
    if reader.disposition == "Reject" and options.source == "dlq":
        raise ReaderError("spec.reader.disposition: Reject would write a message the reader cannot "
                          "handle back into the dead-letter topic it reads (--from dlq); use Drop or Fault")
    if action == "Archive" and reader.archive is None:
        raise ReaderError("spec.reader.archive: is required when the action is Archive "
                          "(the directory and format of the archive)")
    rate = options.rate if options.rate is not None else reader.rate_limit
    if rate is not None and rate < 1:
        raise ReaderError(f"--rate must be at least 1 message per second, not {rate}")
    f = reader.filter
    classes = options.error_classes if options.error_classes is not None else (
        f.error_classes if f else None)
    reasons = options.reasons if options.reasons is not None else (f.reasons if f else None)
    since = options.since if options.since is not None else (f.since if f else None)
    until = options.until if options.until is not None else (f.until if f else None)
    since_ms = epoch_ms(since) if since is not None else None
    until_ms = epoch_ms(until) if until is not None else None
    if since_ms is not None and until_ms is not None and since_ms >= until_ms:
        raise ReaderError("--until must be later than --since (the filter's time window is empty)")
    return Plan(
        source=options.source, action=action, rate=rate, max_redrives=reader.max_redrives,
        filter=Filter(frozenset(classes) if classes is not None else None,
                      frozenset(reasons) if reasons is not None else None, since_ms, until_ms),
        retries=reader.retries.immediate, disposition=reader.disposition, dry_run=options.dry_run,
        archive_path=reader.archive.path if reader.archive else None,
        archive_format=reader.archive.format if reader.archive else "parquet")


# --- headers ------------------------------------------------------------------------------

# The headers a reader decides on (filter, loop guard, target partition). A poison record
# carries a dozen of Antidote's, a stack among them: decoding all of them, once per question
# asked, was the reader's largest cost (docs/performance.md, reader Redrive).
READ_FIELDS = frozenset({h.ERROR_CLASS, h.REASON, h.LAST_FAILURE, h.REDRIVE_COUNT, h.ORIGINAL_PARTITION,
                         h.REDACTED, h.REDACTED_PATHS})


def header_map(headers: Iterable[tuple[str, bytes | None]] | None,
               names: frozenset[str] | None = None) -> dict[str, str]:
    """Antidote's headers as text (only `names` when given), the last value of each name
    winning."""
    raw: dict[str, bytes] = {}
    for k, v in headers or ():
        if v is not None and (k in names if names is not None else k.startswith(h.PREFIX)):
            raw[k] = v
    return {k: v.decode("utf-8", "replace") for k, v in raw.items()}


def read_fields(headers: Iterable[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """What the reader decides on in a record's headers, parsed once per record."""
    return header_map(headers, READ_FIELDS)


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def redrive_count(headers: Iterable[tuple[str, bytes | None]] | None,
                  found: Mapping[str, str] | None = None) -> int:
    """How often this message was redriven already (0 when never, or unreadable)."""
    if found is None:
        found = read_fields(headers)
    return max(0, _int(found.get(h.REDRIVE_COUNT), 0))


def redrive_headers(headers: Iterable[tuple[str, bytes | None]] | None,
                    count: int | None = None) -> h.Headers:
    """The headers of a redriven message: its own headers, byte-identical and in order,
    Antidote's failure headers removed, and `antidote.redrive.count` incremented (from
    `count` when the caller has it)."""
    n = redrive_count(headers) if count is None else count
    own = [(k, v) for k, v in headers or () if not k.startswith(h.PREFIX)]
    return own + [(h.REDRIVE_COUNT, str(n + 1).encode())]


def redrive_refusal(topic: str, partition: int, offset: int,
                    headers: Iterable[tuple[str, bytes | None]] | None,
                    found: Mapping[str, str] | None = None) -> str | None:
    """Why the record at topic/partition/offset cannot be redriven, or None: its payload was
    dropped or had fields masked by the policy's quarantine.payload (a handler would process
    a value that is not the one produced). A Redact that matched no field left the value as it
    was produced; that record is redriven as any other."""
    if found is None:
        found = read_fields(headers)
    action = found.get(h.REDACTED)
    if action is None:
        return None
    where = f"{topic}/{partition}/{offset}"
    if action == "Redact":
        try:
            paths = json.loads(found.get(h.REDACTED_PATHS) or "[]")
        except ValueError:
            paths = ["?"]
        if not paths:
            return None
        return (f"cannot redrive {where}: its payload was redacted ({', '.join(map(str, paths))} "
                "masked or hashed): it cannot be processed again; Archive or Drop it")
    return (f"cannot redrive {where}: its payload was dropped ({h.REDACTED}: {action}): it "
            "cannot be processed again; Archive or Drop it")


def original_partition(headers: Iterable[tuple[str, bytes | None]] | None,
                       found: Mapping[str, str] | None = None) -> int | None:
    if found is None:
        found = read_fields(headers)
    p = _int(found.get(h.ORIGINAL_PARTITION), -1)
    return p if p >= 0 else None


# --- resolved offsets ---------------------------------------------------------------------

@dataclass
class Progress:
    """What a reader has resolved in one partition: every offset below `next`, and the
    ranges in `done` above it (handled messages, and offsets that hold no record, such as
    transaction markers). Held and filtered-out messages stay unresolved for later runs."""

    next: int = 0
    done: list[list[int]] = field(default_factory=list)  # sorted, disjoint [first, last]

    def is_done(self, offset: int) -> bool:
        if offset < self.next:
            return True
        return any(a <= offset <= b for a, b in self.done)

    def add(self, first: int, last: int) -> None:
        if last < first or last < self.next:
            return
        first = max(first, self.next)
        spans = sorted(self.done + [[first, last]])
        merged: list[list[int]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        while merged and merged[0][0] <= self.next:
            self.next = max(self.next, merged.pop(0)[1] + 1)
        self.done = merged

    def to_json(self) -> dict:
        return {"next": self.next, "done": [list(s) for s in self.done]}

    @classmethod
    def from_json(cls, doc: dict) -> Progress:
        p = cls(int(doc.get("next", 0)))
        for a, b in doc.get("done", []):
            p.add(int(a), int(b))
        return p

    def copy(self) -> Progress:
        return Progress(self.next, [list(s) for s in self.done])


# --- pacing -------------------------------------------------------------------------------

class RateLimiter:
    """At most `rate` messages per second, on a fixed schedule (message i not before
    start + i/rate), so a slow commit is caught up and the average rate stays exact."""

    def __init__(self, rate: int | None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.rate, self.clock, self.sleep = rate, clock, sleep
        self.start: float | None = None
        self.n = 0

    def acquire(self) -> None:
        if self.rate is None:
            return
        now = self.clock()
        if self.start is None:
            self.start = now
        due = self.start + self.n / self.rate
        if due > now:
            self.sleep(due - now)
        elif now - due > 1.0:
            # Far behind (a long stall): restart the schedule instead of bursting to catch up.
            self.start = now - self.n / self.rate
        self.n += 1


# --- the report ---------------------------------------------------------------------------

@dataclass
class ReaderReport:
    action: str
    dryRun: bool  # noqa: N815 - the report's keys are its JSON keys
    source: str  # "from" in JSON (a Python keyword)
    messages: int = 0  # matched by the filter
    redriven: int = 0
    parked: int = 0
    archived: int = 0
    dropped: int = 0
    held: int = 0
    rejected: int = 0
    skippedByFilter: int = 0  # noqa: N815
    failed: int = 0  # messages the reader's own action could not handle (after retries)
    refused: int = 0  # Redrive: messages whose payload was redacted or dropped, left in place
    archivePath: str | None = None  # noqa: N815
    faultAt: str | None = None  # noqa: N815

    def to_json(self) -> dict:
        doc = asdict(self)
        source = doc.pop("source")
        return {"action": doc.pop("action"), "dryRun": doc.pop("dryRun"), "from": source, **doc}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    def summary(self) -> str:
        verb = "would handle" if self.dryRun else "handled"
        parts = [f"{n} {k}" for k, n in (
            ("redriven", self.redriven), ("parked", self.parked), ("archived", self.archived),
            ("dropped", self.dropped), ("held", self.held), ("rejected", self.rejected),
            ("failed", self.failed), ("refused (payload redacted)", self.refused)) if n]
        text = (f"reader ({self.action}{', dry run' if self.dryRun else ''}) over the {self.source} "
                f"topic: {verb} {self.messages} message(s)"
                + (f": {', '.join(parts)}" if parts else "")
                + f"; {self.skippedByFilter} left alone by the filter")
        if self.archivePath:
            text += f"; archive {self.archivePath}"
        if self.faultAt:
            text += f"; stopped (Fault) at {self.faultAt}"
        return text
