"""Decoding keys and values before the handler (worker.decode, worker.registry): the Confluent
wire format, the error messages of what cannot be decoded, and the executor's verdicts for
them, with the registry's schemas given in-process (its HTTP is the integration tests')."""

from __future__ import annotations

import io
import json
import socket
import struct

import fastavro
import pytest

from antidote_api.formats import DESERIALIZATION_ERROR
from antidote_consumer.worker import decode as d
from antidote_consumer.worker import registry as r
from antidote_consumer.worker.executor import WorkerConfig, process
from antidote_consumer.worker.message import Message

from .test_consumer_worker import batch

AVRO = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]})
PROTO = """syntax = "proto3";
package shop;
message Order { string id = 1; int32 qty = 2; message Line { string sku = 1; } }
message Refund { string order_id = 1; }
"""
JSON_SCHEMA = json.dumps({"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}})


class Schemas(r.Registry):
    """The registry's answers, given: ids 1 (Avro), 2 (Protobuf), 3 (JSON Schema)."""

    def __init__(self, url: str = "http://registry.test") -> None:
        super().__init__(url)
        self._schemas = {1: r.Schema(1, "AVRO", AVRO), 2: r.Schema(2, "PROTOBUF", PROTO),
                         3: r.Schema(3, "JSON", JSON_SCHEMA)}

    def _fetch(self, schema_id: int) -> r.Schema:
        raise r.UnknownSchema(schema_id)


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\0" + struct.pack(">I", schema_id) + body


def avro(record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(AVRO)), record)
    return framed(1, out.getvalue())


def proto(indexes: bytes, **fields) -> bytes:
    cls = d._proto_class(PROTO, (0,))
    return framed(2, indexes + cls(**fields).SerializeToString())


def decode(fmt: str, data: bytes, what: str = "value"):
    return d.decode_registered(fmt, data, Schemas(), what)


# --- the wire format --------------------------------------------------------------------

def test_split_reads_the_magic_byte_and_the_big_endian_schema_id() -> None:
    assert d.split(b"\0\x00\x01\x02\x03rest") == (0x010203, b"rest")


@pytest.mark.parametrize("data, says", [
    (b"", "0 bytes, shorter than the wire format's 5-byte header"),
    (b"\0\0\0", "3 bytes, shorter than the wire format's 5-byte header"),
    (b'{"id": 1}', "magic byte is 123, not 0: not in the Confluent wire format"),
    (b"\x01\0\0\0\x01body", "magic byte is 1, not 0"),
])
def test_a_record_outside_the_wire_format_says_why(data: bytes, says: str) -> None:
    with pytest.raises(d.DeserializationError) as err:
        d.split(data, "key")
    assert str(err.value).startswith("key: ") and says in str(err.value)
    assert err.value.schema_id is None


@pytest.mark.parametrize("raw, indexes", [
    (b"\x00", [0]),              # the first message, Confluent's one-byte shorthand
    (b"\x02\x02", [1]),          # count 1, index 1 (zigzag: 2 -> 1)
    (b"\x04\x00\x02", [0, 1]),   # count 2: the first message's second nested message
])
def test_protobuf_message_indexes_are_zigzag_varints(raw: bytes, indexes: list[int]) -> None:
    assert d.message_indexes(raw + b"BODY") == (indexes, b"BODY")


def test_a_varint_that_never_ends_is_refused() -> None:
    with pytest.raises(ValueError, match="truncated varint"):
        d.read_varint(b"\x80\x80", 0)


# --- decoding ---------------------------------------------------------------------------

def test_avro_decodes_to_a_dict() -> None:
    assert decode("Avro", avro({"id": "o-1", "qty": 3})) == {"id": "o-1", "qty": 3}


def test_protobuf_decodes_to_the_message_its_indexes_name() -> None:
    msg = decode("Protobuf", proto(b"\x00", id="o-1", qty=3))
    assert (type(msg).DESCRIPTOR.full_name, msg.id, msg.qty) == ("shop.Order", "o-1", 3)
    refund = d._proto_class(PROTO, (1,))(order_id="o-9").SerializeToString()
    assert decode("Protobuf", framed(2, b"\x02\x02" + refund)).order_id == "o-9"
    line = d._proto_class(PROTO, (0, 0))(sku="s-1").SerializeToString()
    assert decode("Protobuf", framed(2, b"\x04\x00\x00" + line)).sku == "s-1"


def test_json_schema_decodes_to_a_dict_that_matches_its_schema() -> None:
    assert decode("JsonSchema", framed(3, b'{"id": "o-1"}')) == {"id": "o-1"}


@pytest.mark.parametrize("fmt, data, says", [
    ("Avro", framed(99, b"x"), "value (schema id 99): unknown schema id 99"),
    ("Avro", avro({"id": "o-1", "qty": 3})[:-1],
     "value (schema id 1): Avro body does not decode: EOFError: the body ends before the record does"),
    ("Avro", avro({"id": "o-truncated", "qty": 3})[:-4], "Avro body does not decode: EOFError: Expected 11 bytes, read 8"),
    ("Avro", avro({"id": "o-1", "qty": 3}) + b"\x02", "1 bytes left after the record"),
    ("Avro", framed(2, b"\0"), "value (schema id 2): schema id 2 is a PROTOBUF schema, not Avro"),
    ("Protobuf", framed(2, b"\x02\x0a"), "message index [5] names no message of the schema"),
    ("Protobuf", proto(b"\x00", id="o-1", qty=3)[:-3], "value (schema id 2): Protobuf body does not decode"),
    ("JsonSchema", framed(3, b'{"qty": 1}'), "does not match its JSON Schema at $: 'id' is a required property"),
    ("JsonSchema", framed(3, b"{"), "value (schema id 3): JsonSchema body does not decode"),
    ("JsonSchema", b"\x07abcd", "value: magic byte is 7"),
])
def test_what_cannot_be_decoded_names_why_and_the_schema_id(fmt: str, data: bytes, says: str) -> None:
    with pytest.raises(d.DeserializationError) as err:
        decode(fmt, data)
    assert says in str(err.value), str(err.value)


def test_json_is_plain_json_and_a_null_is_none_in_every_format() -> None:
    assert d.decoder("Json", None, "key")(b'{"a": 1}') == {"a": 1}
    with pytest.raises(d.DeserializationError, match="^key: not JSON: "):
        d.decoder("Json", None, "key")(b"{")
    for fmt in ("Json", "Avro", "Protobuf", "JsonSchema"):
        assert d.decoder(fmt, Schemas(), "value")(None) is None
    assert d.decoder("Bytes", None, "value") is None and d.decoder(None, None, "value") is None


def test_the_schema_is_fetched_once_per_id_per_process() -> None:
    asked: list[int] = []

    class Counting(Schemas):
        def _fetch(self, schema_id: int) -> r.Schema:
            asked.append(schema_id)
            return r.Schema(schema_id, "AVRO", AVRO)

    reg = Counting()
    reg._schemas.clear()
    for _ in range(3):
        assert d.decode_registered("Avro", avro({"id": "a", "qty": 1}), reg, "value")["id"] == "a"
    assert asked == [1]


# --- the registry client ----------------------------------------------------------------

def test_credentials_come_from_the_mounted_secret(tmp_path) -> None:
    assert r.auth_header(None) == {}
    (tmp_path / "username").write_text("alice\n")
    (tmp_path / "password").write_text("s3cret")
    assert r.auth_header(str(tmp_path)) == {"Authorization": "Basic YWxpY2U6czNjcmV0"}
    (tmp_path / "token").write_text("tok")
    assert r.auth_header(str(tmp_path)) == {"Authorization": "Bearer tok"}


def test_a_registry_that_cannot_be_reached_is_unavailable_not_unknown() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reg = r.Registry(f"http://127.0.0.1:{port}", timeout=2)
    with pytest.raises(r.RegistryUnavailable, match=f"schema registry http://127.0.0.1:{port}, schema id 7"):
        reg.schema(7)
    with pytest.raises(r.RegistryUnavailable):  # not cached: the next attempt asks again
        d.decode_registered("Avro", framed(7, b""), reg, "value")


def test_the_registrys_answer_is_parsed_with_avro_as_the_default_type() -> None:
    assert r.parse_schema(4, b'{"schema": "\\"int\\""}') == r.Schema(4, "AVRO", '"int"')
    assert r.parse_schema(5, b'{"schema": "x", "schemaType": "PROTOBUF", "references": []}').type == "PROTOBUF"


# --- in the executor ----------------------------------------------------------------------

seen: list[Message] = []


def keeps(msg: Message):
    seen.append(msg)
    return None


def run(values: list[bytes], registry: r.Registry, fmt: str = "Avro", cycles: int = 1) -> list[dict]:
    seen.clear()
    r._registries[(registry.url, None)] = registry
    cfg = WorkerConfig(handler=f"{__name__}:keeps", source_topic="src", immediate=1, cycles=cycles,
                       non_retryable=frozenset(), validation=None, sink_kafka=None, emit_outputs=False,
                       formats={"value": fmt, "key": None, "registry": {"url": registry.url, "secret_dir": None}})
    return [row for b in process(cfg, iter([batch(values)])) for row in b.to_pylist()]


def test_the_handler_gets_the_decoded_value_and_the_bytes_as_produced() -> None:
    value = avro({"id": "o-1", "qty": 3})
    rows = run([value], Schemas("http://registry.ok"))
    assert [(m.data, m.value) for m in seen] == [({"id": "o-1", "qty": 3}, value)]
    assert next(x for x in rows if x["kind"] == "summary")["n_ok"] == 1


def test_an_undecodable_value_is_invalid_without_a_handler_call_or_a_retry() -> None:
    bad = [b"plain text", framed(42, b"\x02"), avro({"id": "o", "qty": 1})[:-1]]
    rows = [x for x in run(bad, Schemas("http://registry.bad")) if x["kind"] not in ("summary", "end")]
    assert seen == []
    assert [(x["kind"], x["reason"], x["error_class"], x["attempts"]) for x in rows] == [
        ("final", "validation", DESERIALIZATION_ERROR, 0)] * 3
    assert [x["value"] for x in rows] == bad  # the bytes untouched
    assert "magic byte is 112" in rows[0]["error_message"]
    assert rows[1]["error_message"].startswith("value (schema id 42): unknown schema id 42")
    assert "Avro body does not decode" in rows[2]["error_message"]


def test_a_registry_outage_fails_the_attempts_and_retries_instead_of_quarantining() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rows = [x for x in run([framed(1, b"")], r.Registry(f"http://127.0.0.1:{port}", timeout=2))
            if x["kind"] not in ("summary", "end")]
    assert seen == []
    (row,) = rows
    assert (row["kind"], row["reason"], row["attempts"]) == ("retry", None, 2)  # immediate 1: 2 attempts
    assert row["error_class"] == "antidote_consumer.worker.registry.RegistryUnavailable"
