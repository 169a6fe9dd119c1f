"""The field paths of a PoisonPolicy's `quarantine.redact` (a small JSONPath subset), parsed
once for the API's check and the consumer's redactor, and the fixed texts the redaction
writes. Pure; docs/consumer.md, "Redaction", is the reference."""

from __future__ import annotations

import re
from typing import Any, Literal, TypeAlias

# `quarantine.payload`: what a record written to the poison or dead-letter topic carries.
PayloadHandling = Literal["Keep", "Drop", "Redact"]
# How a listed field is hidden: replaced by MARKER, or by its keyed hash (HMAC-SHA256).
RedactMode = Literal["Mask", "Hash"]

KEEP, DROP, REDACT = "Keep", "Drop", "Redact"
MASK, HASH = "Mask", "Hash"
MARKER = "[redacted]"  # what a masked text field holds (bytes fields: its UTF-8)
HASH_PREFIX = "hmac-sha256:"  # a hashed text field: this, then the hex digest

# `$` then steps: `.name`, `['any name']` (or with double quotes), `[3]`, `[*]`, `.*`. The
# API server checks the same pattern (RE2), so a path it admits is one the consumer parses.
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_STEP = rf"\.{_NAME}|\.\*|\[[0-9]+\]|\[\*\]|\['[^'\[\]]+'\]|\[\"[^\"\[\]]+\"\]"
PATH_PATTERN = rf"^\$({_STEP})+$"
_STEP_RE = re.compile(_STEP)

Step: TypeAlias = tuple[Any, ...]  # ("key", name) | ("index", n) | ("any",)
ANY: Step = ("any",)


def parse_path(path: str) -> tuple[Step, ...]:
    """The steps of a field path; ValueError saying where it stops making sense."""
    if not path.startswith("$"):
        raise ValueError(f"{path!r} does not start with $ (the record's root)")
    steps: list[Step] = []
    pos = 1
    while pos < len(path):
        m = _STEP_RE.match(path, pos)
        if m is None:
            raise ValueError(f"{path!r} is not a field path at character {pos + 1} ({path[pos:pos + 12]!r}): "
                             "use $.name, $['a name'], $.list[0], $.list[*], $.map.*")
        text = m.group(0)
        if text in (".*", "[*]"):
            steps.append(ANY)
        elif text.startswith("."):
            steps.append(("key", text[1:]))
        elif text[1] in "'\"":
            steps.append(("key", text[2:-2]))
        else:
            steps.append(("index", int(text[1:-1])))
        pos = m.end()
    if not steps:
        raise ValueError(f"{path!r} names the whole record: use payload: Drop for that")
    return tuple(steps)
