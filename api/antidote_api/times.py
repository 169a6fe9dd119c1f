"""The one ISO 8601 time parser of Antidote's wire forms (annotations, flags, headers' texts,
Kubernetes timestamps). A time without a zone is UTC; `Z` is accepted, as Kubernetes writes it."""

from __future__ import annotations

from datetime import datetime, timezone


def parse_iso(text: str) -> datetime:
    """An aware datetime; ValueError (naming the text) when it is not an ISO 8601 time."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not an ISO 8601 time")
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time (e.g. 2026-11-22T10:00:00Z)") from None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def parse_time(text: str | None) -> datetime | None:
    """A Kubernetes timestamp (`2026-01-02T03:04:05Z`), or None when absent or malformed."""
    if not text:
        return None
    try:
        return parse_iso(text)
    except ValueError:
        return None


def format_ms(text: str | None) -> str | None:
    """An epoch-milliseconds header value (`antidote.failure.first`) as `...Z`, else None."""
    if not text:
        return None
    try:
        return datetime.fromtimestamp(int(text) / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):
        return None
