"""Keys and values decoded before the handler sees them (spec.source.kafka.valueFormat,
keyFormat): `msg.data` (and `msg.key_data`) get the decoded form, `msg.value` and `msg.key`
stay the bytes as produced.

`Json` is plain JSON text. `Avro`, `Protobuf` and `JsonSchema` are in the Confluent wire
format: a magic byte 0, the schema's id (4 bytes, big-endian), for Protobuf the message
indexes (zigzag varints: which message of the .proto file), then the body, encoded with the
schema the registry has under that id (registry.py fetches it, once per id and process).

What cannot be decoded raises `DeserializationError` (the record is invalid: reason
`validation`, no handler call, its bytes kept); a registry that cannot be asked raises
registry.RegistryUnavailable (retried like a handler's error). The decoders are the libraries
Confluent's own Python serializers use: fastavro, protobuf (with grpcio-tools' protoc for
the schema text), jsonschema.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from functools import lru_cache, partial
from typing import Any

from antidote_api.formats import BYTES, DESERIALIZATION_ERROR, REGISTRY_FORMATS

from .registry import Registry, Schema, UnknownSchema, registry_for

MAGIC = 0
HEADER = 5  # the magic byte and the schema id
# What each format's schemas are called in the registry's schemaType.
SCHEMA_TYPES = {"Avro": "AVRO", "Protobuf": "PROTOBUF", "JsonSchema": "JSON"}


class DeserializationError(ValueError):
    """A key or value that cannot be decoded; its text names what was wrong and the schema id
    when there was one. Reported as `antidote.DeserializationError` (DESERIALIZATION_ERROR)."""

    error_class = DESERIALIZATION_ERROR

    def __init__(self, what: str, problem: str, schema_id: int | None = None):
        self.what, self.problem, self.schema_id = what, problem, schema_id
        where = what if schema_id is None else f"{what} (schema id {schema_id})"
        super().__init__(f"{where}: {problem}")


# --- the wire format (pure) ------------------------------------------------------------

def split(data: bytes, what: str = "value") -> tuple[int, bytes]:
    """(schema id, the rest) of a record in the Confluent wire format."""
    if len(data) < HEADER:
        raise DeserializationError(what, f"{len(data)} bytes, shorter than the wire format's "
                                         f"{HEADER}-byte header (magic byte 0, 4-byte schema id)")
    if data[0] != MAGIC:
        raise DeserializationError(what, f"magic byte is {data[0]}, not {MAGIC}: not in the "
                                         f"Confluent wire format (a producer without the registry?)")
    return int.from_bytes(data[1:HEADER], "big"), bytes(data[HEADER:])


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag-encoded varint at `pos`: (its value, the position after it)."""
    shift = result = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def message_indexes(body: bytes) -> tuple[list[int], bytes]:
    """Protobuf's message indexes after the schema id: a count then that many indexes, the
    path of the message in the .proto (a count of 0 is [0], the first message); and the rest."""
    count, pos = read_varint(body, 0)
    if count < 0 or count > len(body):
        raise ValueError(f"message index count {count} is not a count")
    if count == 0:
        return [0], body[pos:]
    indexes = []
    for _ in range(count):
        index, pos = read_varint(body, pos)
        if index < 0:
            raise ValueError(f"negative message index {index}")
        indexes.append(index)
    return indexes, body[pos:]


# --- the schemas, compiled once per schema id ---------------------------------------------

@lru_cache(maxsize=256)
def _avro(text: str):
    import fastavro

    return fastavro.parse_schema(json.loads(text))


@lru_cache(maxsize=256)
def _json_schema(text: str):
    import jsonschema

    schema = json.loads(text)
    return jsonschema.validators.validator_for(schema)(schema)


@lru_cache(maxsize=256)
def _proto_file(text: str):
    """The .proto text compiled (protoc, in-process) into a descriptor pool; its file."""
    import os
    import tempfile
    from importlib import resources

    from google.protobuf import descriptor_pb2, descriptor_pool
    from grpc_tools import protoc

    include = str(resources.files("grpc_tools") / "_proto")  # google/protobuf/*.proto
    with tempfile.TemporaryDirectory(prefix="antidote-proto-") as tmp:
        src, out = os.path.join(tmp, "schema.proto"), os.path.join(tmp, "schema.pb")
        with open(src, "w", encoding="utf-8") as f:
            f.write(text)
        rc = protoc.main(["protoc", f"-I{tmp}", f"-I{include}", "--include_imports",
                          f"--descriptor_set_out={out}", src])
        if rc != 0:
            raise ValueError("the registry's .proto does not compile")
        with open(out, "rb") as f:
            files = descriptor_pb2.FileDescriptorSet.FromString(f.read()).file
    pool = descriptor_pool.DescriptorPool()
    for fd in files:
        pool.Add(fd)
    return pool.FindFileByName(files[-1].name)


def _proto_class(text: str, indexes: tuple[int, ...]):
    from google.protobuf import message_factory

    file = _proto_file(text)
    types = list(file.message_types_by_name.values())
    desc = None
    for i in indexes:
        if i >= len(types):
            raise ValueError(f"message index {list(indexes)} names no message of the schema")
        desc = types[i]
        types = list(desc.nested_types)
    return message_factory.GetMessageClass(desc)


# --- one key or value -------------------------------------------------------------------

def decode_json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as err:
        raise DeserializationError(what, f"not JSON: {err}") from None


def decode_registered(fmt: str, data: bytes, registry: Registry, what: str,
                      bodies: dict[int, Callable[[bytes], Any]] | None = None) -> Any:
    """A record of a registry format: its schema by id, then the body decoded with it.
    `bodies`: the body decoders of the schema ids met so far, kept by the caller (decoder()):
    an id names one schema forever, so the schema's lookup, its type check and its compiled
    form are found once per id, not once per record (a third of an Avro record's decoding
    time, docs/performance.md). Only a usable schema is kept: an unknown id or one of another
    type is asked about again, a registry that is away is asked again."""
    schema_id, body = split(data, what)
    decode_body = None if bodies is None else bodies.get(schema_id)
    if decode_body is None:
        try:
            schema = registry.schema(schema_id)
        except UnknownSchema:
            raise DeserializationError(what, f"unknown schema id {schema_id}: the registry has no "
                                             "schema with that id", schema_id) from None
        if schema.type != SCHEMA_TYPES[fmt]:
            raise DeserializationError(what, f"schema id {schema_id} is a {schema.type} schema, "
                                             f"not {fmt}", schema_id)
    try:
        if decode_body is None:  # compiled within the try: a schema that does not compile is the record's
            decode_body = _BODY_DECODERS[fmt](schema)
            if bodies is not None:
                bodies[schema_id] = decode_body
        return decode_body(body)
    except DeserializationError:
        raise
    except Exception as err:  # noqa: BLE001 - any failure of the decoder is the record's
        text = str(err)
        if isinstance(err, EOFError) and not text:
            text = "the body ends before the record does"
        cause = f"{type(err).__name__}: {text}" if text else type(err).__name__
        raise DeserializationError(what, f"{fmt} body does not decode: {cause}", schema_id) from None


def _avro_body(schema: Schema) -> Callable[[bytes], Any]:
    """decode(body) with the schema compiled now (names bound here: this runs per record)."""
    from fastavro import schemaless_reader

    parsed = _avro(schema.text)

    def decode(body: bytes) -> Any:
        buf = io.BytesIO(body)
        out = schemaless_reader(buf, parsed, None)
        if buf.tell() != len(body):
            raise ValueError(f"{len(body) - buf.tell()} bytes left after the record")
        return out

    return decode


def _decode_protobuf(schema: Schema, body: bytes) -> Any:
    indexes, rest = message_indexes(body)
    return _proto_class(schema.text, tuple(indexes)).FromString(rest)


def _decode_json_schema(schema: Schema, body: bytes) -> Any:
    import jsonschema

    doc = json.loads(body)
    error = jsonschema.exceptions.best_match(_json_schema(schema.text).iter_errors(doc))
    if error is not None:
        raise ValueError(f"does not match its JSON Schema at {error.json_path}: {error.message}")
    return doc


# Each format's body decoder for a schema (decode_registered keeps one per schema id).
_BODY_DECODERS: dict[str, Callable[[Schema], Callable[[bytes], Any]]] = {
    "Avro": _avro_body, "Protobuf": lambda schema: partial(_decode_protobuf, schema),
    "JsonSchema": lambda schema: partial(_decode_json_schema, schema)}


def decoder(fmt: str | None, registry: Registry | None, what: str) -> Callable[[bytes | None], Any] | None:
    """decode(bytes) -> the decoded form for `fmt`, or None for Bytes (nothing to do). A null
    (a tombstone) decodes to None in every format, as Confluent's deserializers do."""
    if fmt in (None, BYTES):
        return None
    if fmt == "Json":
        return lambda data: None if data is None else decode_json(data, what)
    if fmt in REGISTRY_FORMATS:
        if registry is None:  # the API refuses it; settings written by hand may not
            raise ValueError(f"{what} format {fmt} needs spec.source.kafka.schemaRegistry")
        bodies: dict[int, Callable[[bytes], Any]] = {}  # this decoder's, by schema id
        return lambda data: None if data is None else decode_registered(fmt, data, registry, what, bodies)
    raise ValueError(f"unknown {what} format {fmt!r}")


def message_decoder(formats: dict | None) -> Callable[[Any], None] | None:
    """From WorkerConfig.formats ({"value", "key", "registry": {"url", "secret_dir"}}): a
    function that sets a Message's `data` and `key_data`, raising DeserializationError or
    RegistryUnavailable; None when neither is decoded."""
    if not formats:
        return None
    reg = formats.get("registry")
    registry = registry_for(reg["url"], reg.get("secret_dir")) if reg else None
    value = decoder(formats.get("value"), registry, "value")
    key = decoder(formats.get("key"), registry, "key")
    if value is None and key is None:
        return None

    def decode(msg: Any) -> None:
        if key is not None:
            msg.key_data = key(msg.key)
        if value is not None:
            msg.data = value(msg.value)

    return decode


def decoding(handler: Callable[[Any], Any], decode: Callable[[Any], None]) -> Callable[[Any], Any]:
    """`handler` with the message decoded first, at every attempt: a DeserializationError
    stops the pass before the handler is called (attempts.py turns it into a validation
    failure); a RegistryUnavailable fails the attempt as the handler's own error would."""
    def decoded(msg: Any) -> Any:
        decode(msg)
        return handler(msg)

    decoded.__name__ = getattr(handler, "__name__", "handler")
    decoded.__qualname__ = getattr(handler, "__qualname__", "handler")
    decoded.__module__ = getattr(handler, "__module__", __name__)
    return decoded
