"""A Kafka sink's values encoded with the registry's latest schema (worker.encode,
Registry.latest): the wire format, what a schema refuses and how it says so, the executor's
verdicts (a refused value: non-retryable at once; a registry outage or a missing subject:
retried), with the registry's answers given in-process (its HTTP is the integration tests')."""

from __future__ import annotations

import io
import json
import socket

import fastavro
import pytest

from antidote_api.formats import SERIALIZATION_ERROR
from antidote_consumer.worker import decode as d
from antidote_consumer.worker import encode as e
from antidote_consumer.worker import registry as r
from antidote_consumer.worker.chosen import systemic_signal
from antidote_consumer.worker.executor import WorkerConfig, process

from .test_consumer_worker import batch
from .test_worker_decode import AVRO, JSON_SCHEMA, PROTO

SUBJECT = "orders-out-value"


class Latest(r.Registry):
    """A registry whose subject SUBJECT's latest schema is given (None: no such subject)."""

    def __init__(self, schema: r.Schema | None, url: str = "http://registry.test") -> None:
        super().__init__(url)
        self.given, self.asked = schema, 0

    def _get(self, path, what, schema_id, missing):
        self.asked += 1
        if self.given is None:
            raise missing()
        return self.given


AVRO_10 = r.Schema(10, "AVRO", AVRO)
PROTO_11 = r.Schema(11, "PROTOBUF", PROTO)
JSON_12 = r.Schema(12, "JSON", JSON_SCHEMA)


def encode(fmt: str, value, schema: r.Schema) -> bytes:
    return e.encode_registered(fmt, value, schema, SUBJECT)


# --- the wire format ----------------------------------------------------------------------

@pytest.mark.parametrize("indexes", [[0], [1], [0, 1], [3, 0, 2], [200]])
def test_message_indexes_read_back_as_written(indexes: list[int]) -> None:
    assert d.message_indexes(e.index_bytes(indexes) + b"rest") == (indexes, b"rest")


def test_the_first_message_is_written_as_a_single_zero_as_confluents_serializer_does() -> None:
    assert e.index_bytes([0]) == b"\x00"
    assert e.index_bytes([1]) == b"\x02\x02"  # a count of 1, index 1 (zigzag)


def test_avro_is_framed_with_the_schema_id_and_decodes_back() -> None:
    data = encode("Avro", {"id": "o-1", "qty": 3}, AVRO_10)
    assert data[:5] == b"\x00\x00\x00\x00\x0a"
    assert fastavro.schemaless_reader(io.BytesIO(data[5:]), fastavro.parse_schema(json.loads(AVRO)), None) == \
        {"id": "o-1", "qty": 3}


def test_protobuf_takes_a_dict_for_the_first_message_or_any_message_of_the_schema() -> None:
    data = encode("Protobuf", {"id": "o-1", "qty": 3}, PROTO_11)
    assert d.split(data) == (11, b"\x00" + d._proto_class(PROTO, (0,))(id="o-1", qty=3).SerializeToString())
    refund = d._proto_class(PROTO, (1,))(order_id="o-2")
    assert d.decode_registered("Protobuf", encode("Protobuf", refund, PROTO_11), _ById(PROTO_11), "value") == refund
    line = d._proto_class(PROTO, (0, 0))(sku="s")
    assert d.message_indexes(d.split(encode("Protobuf", line, PROTO_11))[1])[0] == [0, 0]


def test_json_schema_is_the_json_text_framed() -> None:
    assert encode("JsonSchema", {"id": "a"}, JSON_12) == b"\x00\x00\x00\x00\x0c" + b'{"id":"a"}'


class _ById(r.Registry):
    def __init__(self, schema: r.Schema) -> None:
        super().__init__("http://by-id.test")
        self._schemas = {schema.id: schema}


# --- what a schema refuses --------------------------------------------------------------------

@pytest.mark.parametrize("fmt, schema, value, says", [
    ("Avro", AVRO_10, {"id": "o-1", "qty": "three"}, "Order.qty: 'three' is not an int"),
    ("Avro", AVRO_10, {"qty": 1}, "Order.id: None (or missing) is not a string"),
    ("Avro", AVRO_10, [1, 2], "is not a record (Order)"),
    ("Avro", AVRO_10, b"\x02a\x02", "a bytes: a Avro sink takes the value to encode (a dict), not bytes or text"),
    ("Protobuf", PROTO_11, {"id": "o", "colour": "red"}, "not a shop.Order: "),
    ("Protobuf", PROTO_11, 42, "a int: expected a dict or a message of the schema"),
    ("JsonSchema", JSON_12, {"name": "no id"}, "does not match the JSON Schema at $: 'id' is a required property"),
    ("JsonSchema", JSON_12, {"id": "x", "n": float("nan")}, "not JSON: "),
    ("JsonSchema", JSON_12, "text", "a str: a JsonSchema sink takes the value to encode"),
])
def test_a_value_the_schema_refuses_names_the_subject_the_schema_id_and_why(fmt, schema, value, says) -> None:
    with pytest.raises(e.SerializationError) as err:
        encode(fmt, value, schema)
    text = str(err.value)
    assert text.startswith(f"the handler's return value does not fit {SUBJECT} (schema id {schema.id}): "), text
    assert says in text, text
    assert err.value.error_class == SERIALIZATION_ERROR


def test_a_message_of_another_schema_is_refused() -> None:
    from google.protobuf import struct_pb2

    with pytest.raises(e.SerializationError, match="the schema has no message google.protobuf.Value"):
        encode("Protobuf", struct_pb2.Value(string_value="x"), PROTO_11)


def test_a_latest_schema_of_another_type_is_the_sinks_configuration_not_the_values() -> None:
    with pytest.raises(e.SinkSchemaError, match=f"latest schema of subject {SUBJECT} \\(id 11\\) is a PROTOBUF "
                                                 "schema, not Avro"):
        encode("Avro", {"id": "a", "qty": 1}, PROTO_11)


# --- the registry's latest schema -------------------------------------------------------------

def test_the_latest_schema_is_kept_for_the_ttl_then_asked_again() -> None:
    reg = Latest(AVRO_10)
    assert reg.latest(SUBJECT, now=100.0) == AVRO_10
    assert reg.latest(SUBJECT, now=100.0 + r.LATEST_TTL - 1) == AVRO_10
    assert reg.asked == 1
    reg.given = r.Schema(13, "AVRO", AVRO)  # a new version registered
    assert reg.latest(SUBJECT, now=100.0 + r.LATEST_TTL).id == 13
    assert reg.asked == 2
    assert reg.schema(13).id == 13  # and known by its id too


def test_a_subject_without_a_schema_says_to_register_it() -> None:
    with pytest.raises(e.SinkSchemaError, match=f"has no schema under subject {SUBJECT}: register"):
        e.encode_with("Avro", {"id": "a", "qty": 1}, Latest(None), SUBJECT)


def test_a_registry_that_cannot_be_reached_while_encoding_is_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reg = r.Registry(f"http://127.0.0.1:{port}", timeout=2)
    with pytest.raises(r.RegistryUnavailable, match=f"subject {SUBJECT}: "):
        e.encode_with("Avro", {"id": "a", "qty": 1}, reg, SUBJECT)


def test_the_latest_answer_is_parsed_with_its_own_id() -> None:
    body = json.dumps({"subject": SUBJECT, "version": 3, "id": 21, "schema": AVRO}).encode()
    assert r.parse_schema(None, body) == r.Schema(21, "AVRO", AVRO)


def test_bytes_sinks_leave_the_handler_as_it_is_and_none_is_never_encoded() -> None:
    def h(msg):
        return msg

    assert e.encoding(h, None) is h
    r._registries[("http://none.test", None)] = Latest(None, "http://none.test")
    encoded = e.encoding(h, {"value": "Avro", "subject": SUBJECT, "registry": {"url": "http://none.test"}})
    assert encoded(None) is None  # nothing to write: the registry is not even asked
    with pytest.raises(ValueError, match="needs a schema registry"):
        e.output_encoder({"value": "Avro", "subject": SUBJECT, "registry": None})


# --- in the executor ----------------------------------------------------------------------------

def returns(msg):
    """The value's JSON, to be encoded for the sink."""
    return json.loads(msg.value)


def run(values: list[bytes], registry: r.Registry, fmt: str = "Avro") -> list[dict]:
    r._registries[(registry.url, None)] = registry
    cfg = WorkerConfig(handler=f"{__name__}:returns", source_topic="src", immediate=2, cycles=1,
                       non_retryable=frozenset(), validation=None, sink_kafka=None, emit_outputs=True,
                       sink_format={"value": fmt, "subject": SUBJECT,
                                    "registry": {"url": registry.url, "secret_dir": None}})
    return [row for b in process(cfg, iter([batch(values)])) for row in b.to_pylist()
            if row["kind"] not in ("summary", "end")]


def test_outputs_are_encoded_and_a_refused_one_fails_at_once_as_non_retryable_counted_by_the_breaker() -> None:
    rows = run([b'{"id": "a", "qty": 1}', b'{"id": "b", "qty": "x"}', b'{"id": "c", "qty": 3}'],
               Latest(AVRO_10, "http://registry.encode"))
    assert [x["kind"] for x in rows] == ["ok", "final", "ok"]
    ok = [x["output"] for x in rows if x["kind"] == "ok"]
    assert [d.decode_registered("Avro", o, _ById(AVRO_10), "value") for o in ok] == \
        [{"id": "a", "qty": 1}, {"id": "c", "qty": 3}]
    bad = rows[1]
    assert (bad["reason"], bad["error_class"], bad["attempts"], bad["chosen"]) == \
        ("non-retryable", SERIALIZATION_ERROR, 1, None)  # one call: no immediate retry
    assert bad["value"] == b'{"id": "b", "qty": "x"}'  # the input's bytes, untouched
    assert "Order.qty: 'x' is not an int" in bad["error_message"]
    assert systemic_signal(type("Row", (), bad)) is True


def test_a_registry_outage_or_a_missing_subject_while_encoding_is_retried_not_quarantined() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for reg, cls in [(r.Registry(f"http://127.0.0.1:{port}", timeout=2), "RegistryUnavailable"),
                     (Latest(None, "http://registry.nosubject"), "SinkSchemaError")]:
        (row,) = run([b'{"id": "a", "qty": 1}'], reg)
        assert (row["kind"], row["reason"], row["attempts"]) == ("retry", None, 3), cls  # immediate 2
        assert row["error_class"].endswith(f".{cls}")
