"""antidote.testing with formats: a pass decodes the message (spec.source.kafka's valueFormat)
and encodes the handler's return value for the sink (spec.sink.kafka.valueFormat) as the
workers do, with the registry's answers given in-process."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from antidote.testing import message, run
from antidote_api.formats import DESERIALIZATION_ERROR, SERIALIZATION_ERROR
from antidote_consumer.worker import decode as d
from antidote_consumer.worker import registry as r

from .test_worker_decode import AVRO, avro
from .test_worker_encode import Latest

URL = "http://testing-registry.test"


@pytest.fixture(autouse=True)
def _registry():
    r._registries[(URL, None)] = Latest(r.Schema(10, "AVRO", AVRO), URL)
    yield
    r._registries.pop((URL, None), None)


def double(msg):
    return {"id": msg.data["id"], "qty": msg.data["qty"] * 2}


def test_a_json_value_is_decoded_for_the_handler_and_one_that_is_not_json_is_invalid() -> None:
    out = run(double, message(b'{"id": "a", "qty": 2}'), source={"valueFormat": "Json"})
    assert out.processed and out.output == b'{"id":"a","qty":4}'
    bad = run(double, message(b"{not json"), source={"valueFormat": "Json"})
    assert (bad.outcome, bad.reason, bad.calls, bad.error_class) == ("moved", "validation", 0, DESERIALIZATION_ERROR)
    assert bad.value == b"{not json" and not bad.systemic


def test_avro_in_and_out_through_the_registry() -> None:
    r._registries[(URL, None)]._schemas[1] = r.Schema(1, "AVRO", AVRO)  # the source's schema, by id
    registry = {"schemaRegistry": {"url": URL}}
    sink = {"kafka": {"topic": "out", "valueFormat": "Avro"}}
    out = run(double, message(avro({"id": "a", "qty": 2})), source={"valueFormat": "Avro", **registry}, sink=sink)
    assert out.processed
    assert d.split(out.output)[0] == 10  # the latest schema of out-value
    assert d.decode_registered("Avro", out.output, r._registries[(URL, None)], "value") == {"id": "a", "qty": 4}


def test_a_return_value_the_sink_schema_refuses_is_non_retryable_and_counts_toward_the_breaker() -> None:
    sink = {"kafka": {"topic": "out", "valueFormat": "Avro", "schemaRegistry": {"url": URL}}}
    out = run(lambda msg: {"id": "a", "qty": "many"}, message(b"x"), {"retries": {"immediate": 3}}, sink=sink)
    assert (out.outcome, out.reason, out.calls, out.error_class) == ("moved", "non-retryable", 1, SERIALIZATION_ERROR)
    assert out.header("antidote.error.class") == SERIALIZATION_ERROR
    assert "does not fit out-value (schema id 10): Order.qty: 'many' is not an int" in (out.error_message or "")
    assert out.systemic


def test_an_encoded_sink_without_a_registry_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="schemaRegistry"):
        run(double, message(b"{}"), sink={"kafka": {"topic": "out", "valueFormat": "Avro"}})
