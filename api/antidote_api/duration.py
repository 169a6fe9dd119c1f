"""Durations as users write them in manifests: `30s`, `10m`, `1h30m`, `250ms`.

The accepted form is the integer subset of Go's time.ParseDuration (units in the order
h, m, s, ms), so the API server's CEL `duration()` reads the same strings as Python does.
"""

from __future__ import annotations

import re
from datetime import timedelta
from functools import total_ordering
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import core_schema

# RE2-compatible (the API server's regexp flavour): no look-arounds. minLength 2 keeps out "".
PATTERN = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?$"
_RE = re.compile(PATTERN)
_UNITS_MS = (("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1))


@total_ordering
class Duration:
    """A non-negative span of whole milliseconds; `str()` gives the canonical form."""

    __slots__ = ("ms",)

    def __init__(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("a duration cannot be negative")
        self.ms = int(ms)

    @classmethod
    def parse(cls, text: str) -> Duration:
        match = _RE.match(text) if isinstance(text, str) and len(text) >= 2 else None
        if match is None:
            raise ValueError(
                f"{text!r} is not a duration: write whole numbers with units h, m, s, ms in "
                "that order, e.g. 30s, 10m, 1h30m, 250ms")
        ms = 0
        for group, (_, factor) in zip(match.groups(), _UNITS_MS):
            if group:
                ms += int(group.rstrip("hms")) * factor
        return cls(ms)

    @classmethod
    def of(cls, value: Duration | str | timedelta | int | float) -> Duration:
        """From a Duration, its text, a timedelta, or seconds."""
        if isinstance(value, Duration):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        if isinstance(value, timedelta):
            return cls(round(value.total_seconds() * 1000))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return cls(round(value * 1000))
        raise TypeError(f"cannot make a duration of {type(value).__name__}")

    @property
    def seconds(self) -> float:
        return self.ms / 1000

    @property
    def timedelta(self) -> timedelta:
        return timedelta(milliseconds=self.ms)

    def __mul__(self, factor: float) -> Duration:
        return Duration(round(self.ms * factor))

    __rmul__ = __mul__

    def __str__(self) -> str:
        if self.ms == 0:
            return "0s"
        parts, rest = [], self.ms
        for unit, factor in _UNITS_MS:
            count, rest = divmod(rest, factor)
            if count:
                parts.append(f"{count}{unit}")
        return "".join(parts)

    def __repr__(self) -> str:
        return f"Duration({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Duration) and other.ms == self.ms

    def __lt__(self, other: Duration) -> bool:
        if not isinstance(other, Duration):
            return NotImplemented
        return self.ms < other.ms

    def __hash__(self) -> int:
        return hash(self.ms)

    # pydantic: validated from text (or an existing Duration), serialized to canonical text.
    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        def validate(value: Any) -> Duration:
            if isinstance(value, Duration):
                return value
            if not isinstance(value, str):
                raise ValueError(f"a duration is a string like 30s or 1h30m, not {type(value).__name__}")
            return cls.parse(value)

        return core_schema.no_info_plain_validator_function(
            validate, serialization=core_schema.plain_serializer_function_ser_schema(str, when_used="json"))

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> dict[str, Any]:
        return {"type": "string", "pattern": PATTERN, "minLength": 2, "maxLength": 32,
                "x-antidote-type": "duration"}
