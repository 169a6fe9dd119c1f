"""The drain request: one model and one parser from `antidote drain` to the reader Job."""

import pytest

from antidote_api.drain import DrainRequest, parse_drain


def test_drain_request_round_trips_through_the_annotation() -> None:
    req = DrainRequest(id="r1", action="Archive", reasons=("validation",), since="2026-11-22T00:00:00+00:00",
                          dry_run=True, source="dlq")
    assert parse_drain(req.annotation()) == req
    assert DrainRequest(id="plain").annotation() == "plain"
    assert parse_drain("  plain ") == DrainRequest(id="plain")


@pytest.mark.parametrize("value,message", [
    ("", "empty"), ("{bad", "not valid JSON"), ('{"id": "x", "action": "Move"}', "action must be one of"),
    ('{"action": "Drop"}', "id must be"), ('{"id": "x", "rate": 0}', "rate must be"),
    ('{"id": "x", "colour": 1}', "unknown field(s) colour"), ('{"id": "x", "since": "yesterday"}', "since must be"),
    ('{"id": "x", "reasons": ["oops"]}', "reasons must be"), ('{"id": "x", "from": "retry 1"}', "from must be"),
])
def test_bad_drain_requests_name_the_field(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_drain(value)
