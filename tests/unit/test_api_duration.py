"""Durations: the forms users write, the canonical text, and the schema the server checks."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from pydantic import BaseModel, ValidationError

from antidote_api.duration import PATTERN, Duration


@pytest.mark.parametrize(("text", "ms", "canonical"), [
    ("30s", 30_000, "30s"),
    ("10m", 600_000, "10m"),
    ("1h30m", 5_400_000, "1h30m"),
    ("250ms", 250, "250ms"),
    ("1h0m5s", 3_605_000, "1h5s"),
    ("90m", 5_400_000, "1h30m"),
    ("0s", 0, "0s"),
    ("2h15m30s500ms", 8_130_500, "2h15m30s500ms"),
])
def test_parses_and_prints_canonically(text: str, ms: int, canonical: str) -> None:
    d = Duration.parse(text)
    assert d.ms == ms
    assert str(d) == canonical
    assert Duration.parse(str(d)) == d  # the text form round-trips


@pytest.mark.parametrize("text", ["", "30", "30 s", "1d", "m", "1.5h", "30m1h", "-5s", "5sec", "1H"])
def test_rejects_what_the_server_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        Duration.parse(text)
    # The schema pattern (plus minLength 2) refuses the same text.
    assert not (len(text) >= 2 and re.match(PATTERN, text))


def test_arithmetic_and_conversions() -> None:
    d = Duration.parse("30m")
    assert d * 2 == Duration.parse("1h") and 1.5 * d == Duration.parse("45m")
    assert d.seconds == 1800 and d.timedelta == timedelta(minutes=30)
    assert Duration.of(timedelta(seconds=90)) == Duration.parse("1m30s") == Duration.of(90)
    assert Duration.parse("59s") < d < Duration.parse("1h")
    assert len({Duration.parse("60m"), Duration.parse("1h")}) == 1
    with pytest.raises(ValueError):
        Duration(-1)


class _M(BaseModel):
    d: Duration


def test_pydantic_validates_text_and_dumps_text() -> None:
    m = _M.model_validate({"d": "1h30m"})
    assert m.d == Duration.parse("90m")
    assert m.model_dump(mode="json") == {"d": "1h30m"}
    assert m.model_dump()["d"] == Duration.parse("90m")
    with pytest.raises(ValidationError, match="not a duration"):
        _M.model_validate({"d": "soon"})
    with pytest.raises(ValidationError, match="is a string"):
        _M.model_validate({"d": 30})
    assert _M.model_json_schema()["properties"]["d"]["pattern"] == PATTERN
