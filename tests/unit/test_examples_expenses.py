"""The demo's handler and stream: each report's fate is what the handler and policy make of it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import jsonschema
import pytest

from antidote_consumer.examples import accounts
from antidote_consumer.examples import expenses as ex
from antidote_consumer.worker.message import Message


def msg(value: bytes) -> Message:
    return Message(b"k", value, (), "expenses", 0, 0, 0)


@pytest.fixture
def service(monkeypatch) -> Iterator[accounts.ThreadingHTTPServer]:
    """The accounts service on a loopback port, named to the handler as the demo does."""
    server = accounts.serve("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(ex.ACCOUNTS_URL_ENV, f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_every_fate_is_what_the_handler_and_schema_do(service) -> None:
    stream = ex.reports(300)
    fates = {r.fate for r in stream}
    assert fates == {"processed", "invalid", "unknown-cost-center"}
    for r in stream:
        doc = json.loads(r.value)
        if r.fate == "invalid":
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(doc, ex.POLICY_SCHEMA)
            continue
        jsonschema.validate(doc, ex.POLICY_SCHEMA)
        if r.fate == "unknown-cost-center":
            with pytest.raises(LookupError):
                ex.approve(msg(r.value))
        else:
            out = json.loads(ex.approve(msg(r.value)))
            assert out["reportId"] == doc["reportId"] and out["decision"] in {"approved", "needs-review"}


def test_the_accounts_service_outage_fails_every_report(service) -> None:
    good = next(r for r in ex.reports(10) if r.fate == "processed")
    assert ex.approve(msg(good.value))
    url = f"http://127.0.0.1:{service.server_address[1]}"
    accounts.set_outage(url, True)  # what the demo does: its database is down
    with pytest.raises(ConnectionError, match="answered HTTP 503"):
        ex.approve(msg(good.value))
    accounts.set_outage(url, False)
    assert ex.approve(msg(good.value))


def test_an_unreachable_accounts_service_is_a_connection_error(service) -> None:
    good = next(r for r in ex.reports(10) if r.fate == "processed")
    service.shutdown()
    service.server_close()  # the port now refuses connections
    with pytest.raises(ConnectionError, match="accounts service unavailable"):
        ex.approve(msg(good.value))


def test_streams_from_different_starts_do_not_share_keys() -> None:
    a, b = ex.reports(100), ex.reports(50, start=100)
    assert not {r.key for r in a} & {r.key for r in b}
