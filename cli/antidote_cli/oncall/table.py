"""Rendering for the on-call commands: the status header line and the quarantine table
(fits 100 columns)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from .decoded import decoded_text
from .quarantine import Quarantined

WIDTH = 100


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def say(text: str) -> None:
    print("\n".join(textwrap.wrap(text, WIDTH, subsequent_indent="  ", break_on_hyphens=False)))


def header_line(qc: Mapping[str, Any]) -> str:
    meta, status = qc.get("metadata") or {}, qc.get("status") or {}
    conds = " ".join(f"{c['type']}={c['status']}" + (f"({c['reason']})" if c.get("reason") else "")
                     for c in status.get("conditions") or [])
    counts = status.get("counts") or {}
    nums = ", ".join(f"{k} {counts[k]}" for k in ("processed", "moved", "rejected", "dropped", "retried")
                     if counts.get(k))
    line = f"{meta.get('namespace')}/{meta.get('name')}: {conds or 'no status yet'}"
    return line + (f"; {nums}" if nums else "")


COLUMNS = (("ORIGIN", 24), ("REASON", 15), ("ERROR CLASS", 20), ("ATT", 3), ("FIRST FAILURE", 14),
           ("LAST FAILURE", 14), ("RDR", 3))


def render_table(rows: Sequence[Quarantined], *, show_payload: bool = False, width: int = WIDTH,
                 source: str | None = None) -> list[str]:
    """The message table: every line at most `width` columns; times in UTC (MM-DD hh:mm:ss).
    Origins from `source` (the consumer's topic) show as partition/offset only. A record's
    decoded form (--decode) on the line under it."""
    def t(s: str | None) -> str:
        return s[5:19].replace("T", " ") if s else "-"

    lines = []
    head = [name.ljust(w) for name, w in COLUMNS]
    lines.append(" ".join(head).rstrip())
    for q in rows:
        origin = q.origin.removeprefix(f"{source}/") if source else q.origin
        cells = [_cut(origin, 23) + "*" if q.handled else _cut(origin, 24), _cut(q.reason, 15), _cut(q.error_class or "-", 20),
                 str(q.attempts if q.attempts is not None else "-"), t(q.first_failure), t(q.last_failure),
                 str(q.redrives)]
        lines.append(" ".join(c.ljust(w) for c, (_, w) in zip(cells, COLUMNS)).rstrip())
        if show_payload:
            text = ("null (a tombstone)" if q.payload_bytes is None else
                    f"({q.payload_bytes} bytes): {json.dumps(q.payload, ensure_ascii=False)}")
            lines.append(_cut(f"    payload {text}", width))
        if q.redacted is not None:  # what spec.quarantine removed: a Redrive refuses it
            lines.append(_cut(f"    redacted: {q.redacted}", width))
        if q.decoded is not None:
            lines.append(_cut(f"    {decoded_text(q.decoded)}", width))
    return [_cut(line, width) for line in lines]
