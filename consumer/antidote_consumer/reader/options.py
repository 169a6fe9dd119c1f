"""The reader's command-line options, shared by `antidote reader`, `antidote redrive` and the
reader Jobs (whose flags `antidote_api.drain.DrainRequest.args` writes): one parser."""

from __future__ import annotations


from antidote_api.times import parse_iso
from antidote_api.wire import POISON_REASONS, READER_ACTIONS, READER_SOURCES

from .rules import ReaderError, ReaderOptions


def add_option_args(p, action: bool = True) -> None:
    """The reader's flags; each overrides the policy's reader section when given."""
    if action:
        p.add_argument("--action", choices=list(READER_ACTIONS), default=None,
                       help="what to do with each message (default: the policy's reader.action)")
    p.add_argument("--from", dest="source", default="poison", metavar="|".join(READER_SOURCES) + "|TOPIC",
                   help="read the poison topic (default) or the dead-letter topic")
    p.add_argument("--dlq", dest="source", action="store_const", const="dlq",
                   help="alias of --from dlq (as in antidote inspect and drain)")
    p.add_argument("--rate", type=int, default=None, help="messages per second at most")
    p.add_argument("--error-class", dest="error_classes", action="append", default=None,
                   metavar="CLASS", help="only messages with this antidote.error.class (repeatable)")
    p.add_argument("--reason", dest="reasons", action="append", default=None,
                   choices=list(POISON_REASONS),
                   help="only messages quarantined for this reason (repeatable)")
    p.add_argument("--since", default=None, metavar="ISO",
                   help="only messages whose last failure is at or after this time")
    p.add_argument("--until", default=None, metavar="ISO",
                   help="only messages whose last failure is before this time")
    p.add_argument("--dry-run", action="store_true", help="report what would be done; change nothing")


def _iso(value, flag: str):
    from datetime import datetime

    if value is None or isinstance(value, datetime):
        return value
    try:
        return parse_iso(str(value))
    except ValueError:
        raise ReaderError(f"{flag} must be an ISO 8601 time, not {value!r}") from None


def options_from(args, action: str | None = None) -> ReaderOptions:
    """ReaderOptions from parsed flags (these, or the on-call commands' own dests)."""
    def first(*names):
        for n in names:
            v = getattr(args, n, None)
            if v is not None:
                return v
        return None

    classes, reasons = first("error_classes", "error_class"), first("reasons", "reason")
    rate = first("rate")
    if rate is not None and rate < 1:
        raise ReaderError(f"--rate must be at least 1 message per second, not {rate}")
    return ReaderOptions(
        source=first("source") or "poison", action=action or first("action"), rate=rate,
        error_classes=tuple(classes) if classes else None,
        reasons=tuple(reasons) if reasons else None,
        since=_iso(first("since"), "--since"), until=_iso(first("until"), "--until"),
        dry_run=bool(first("dry_run")))


def parse_options(argv: list[str]) -> ReaderOptions:
    """ReaderOptions from reader flags (`--action Redrive --rate 10 ...`); ReaderError when bad."""
    import argparse

    class _Parser(argparse.ArgumentParser):
        def error(self, message):
            raise ReaderError(message)

    p = _Parser(prog="antidote reader", add_help=False)
    add_option_args(p)
    return options_from(p.parse_args(argv))
