"""The drain request: what `antidote drain` asks of a consumer's poison-queue reader.

One model on its whole way: `antidote drain` builds it from its flags and writes
`annotation()` on the QueueConsumer (`antidote.dev/drain`); the operator reads it back with
`parse_drain` and starts a reader Job with `args()`, which the reader parses as its own
flags (`antidote_consumer.reader.options.parse_options`, the same names and checks).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .times import parse_iso
from .types import TOPIC_PATTERN
from .wire import POISON_REASONS, READER_ACTIONS, READER_SOURCES


@dataclass(frozen=True)
class DrainRequest:
    """What `antidote.dev/drain` asks for: a plain id (the policy's reader settings), or
    JSON `{"id", "action", "errorClasses", "reasons", "since", "until", "rate", "dryRun",
    "from"}`."""

    id: str
    action: str | None = None
    error_classes: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None
    rate: int | None = None
    dry_run: bool = False
    source: str | None = None  # poison | dlq | a route's topic (spec.routes), by name

    def annotation(self) -> str:
        doc: dict[str, Any] = {"id": self.id}
        for key, value in (("action", self.action), ("errorClasses", list(self.error_classes)),
                           ("reasons", list(self.reasons)), ("since", self.since),
                           ("until", self.until), ("rate", self.rate), ("dryRun", self.dry_run),
                           ("from", self.source)):
            if value:
                doc[key] = value
        return self.id if len(doc) == 1 and not self.id.startswith("{") else json.dumps(doc, sort_keys=True)

    def args(self) -> list[str]:
        out: list[str] = []
        if self.source:
            out += ["--from", self.source]
        if self.action:
            out += ["--action", self.action]
        if self.rate:
            out += ["--rate", str(self.rate)]
        for c in self.error_classes:
            out += ["--error-class", c]
        for r in self.reasons:
            out += ["--reason", r]
        if self.since:
            out += ["--since", self.since]
        if self.until:
            out += ["--until", self.until]
        if self.dry_run:
            out.append("--dry-run")
        return out


def _iso(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be an ISO 8601 time")
    try:
        parse_iso(value)
    except ValueError:
        raise ValueError(f"{name} must be an ISO 8601 time, not {value!r}") from None
    return value


def parse_drain(value: str) -> DrainRequest:
    """The request in the annotation; ValueError naming the field that is wrong."""
    text = value.strip()
    if not text:
        raise ValueError("the value is empty; set a request id (any text) or a JSON request")
    if not text.startswith("{"):
        return DrainRequest(id=text)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON: {err.msg} at column {err.colno}") from None
    known = {"id", "action", "errorClasses", "reasons", "since", "until", "rate", "dryRun", "from"}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    rid = doc.get("id")
    if not isinstance(rid, str) or not rid:
        raise ValueError("id must be a non-empty string")
    action = doc.get("action")
    if action is not None and action not in READER_ACTIONS:
        raise ValueError(f"action must be one of {', '.join(READER_ACTIONS)}, not {action!r}")
    classes = doc.get("errorClasses") or []
    if not isinstance(classes, list) or not all(isinstance(c, str) and c for c in classes):
        raise ValueError("errorClasses must be a list of class names")
    reasons = doc.get("reasons") or []
    if not isinstance(reasons, list) or any(r not in POISON_REASONS for r in reasons):
        raise ValueError(f"reasons must be a list of {', '.join(POISON_REASONS)}")
    rate = doc.get("rate")
    if rate is not None and (not isinstance(rate, int) or isinstance(rate, bool) or rate < 1):
        raise ValueError("rate must be a positive integer (messages per second)")
    dry = doc.get("dryRun", False)
    if not isinstance(dry, bool):
        raise ValueError("dryRun must be true or false")
    source = doc.get("from")
    if source is not None and source not in READER_SOURCES and not (
            isinstance(source, str) and re.fullmatch(TOPIC_PATTERN, source)):
        # A route's topic by name: the reader Job checks that the policy has such a route.
        raise ValueError("from must be poison, dlq or a route's topic")
    since = _iso(doc["since"], "since") if doc.get("since") is not None else None
    until = _iso(doc["until"], "until") if doc.get("until") is not None else None
    return DrainRequest(id=rid, action=action, error_classes=tuple(classes), reasons=tuple(reasons),
                        since=since, until=until, rate=rate, dry_run=dry, source=source)
