"""A Kafka sink's values encoded for the registry (spec.sink.kafka.valueFormat `Avro`,
`Protobuf`, `JsonSchema`): the handler's return value, encoded with the latest schema of the
subject `<sink topic>-value` (TopicNameStrategy), in the Confluent wire format (a magic byte
0, the schema's id, for Protobuf the message indexes, then the body), as Confluent's own
serializers write it.

Three kinds of failure, kept apart:
- the schema refuses the value (a missing field, a wrong type, a dict for a Protobuf message
  that has no such field): `SerializationError`, the message's failure with no retry (the
  handler would return the same value again, and its side effects would be repeated): reason
  `non-retryable`, error class `antidote.SerializationError` (attempts.py). It counts toward
  the systemic-failure breaker: a handler or a schema that refuses every output is not a
  burst of bad messages, and must stop the queue rather than quarantine it;
- the registry cannot be asked (registry.RegistryUnavailable): an outage, retried;
- the registry has no usable schema for the sink (no subject, a schema of another type):
  `SinkSchemaError`, the consumer's configuration, retried like an outage (nothing is the
  message's fault).
The schemas are compiled once per schema text (decode.py's caches), the subject's latest
schema is kept LATEST_TTL seconds in each worker (registry.py).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

from antidote_api.formats import REGISTRY_FORMATS, SERIALIZATION_ERROR

from .decode import (MAGIC, SCHEMA_TYPES, _avro, _json_schema, _proto_class, _proto_file, decoding,
                     message_decoder)
from .registry import Registry, Schema, UnknownSubject, registry_for


class SerializationError(ValueError):
    """A return value the sink's schema refuses; its text names the subject, the schema id and
    what was refused. Reported as `antidote.SerializationError` (SERIALIZATION_ERROR)."""

    error_class = SERIALIZATION_ERROR

    def __init__(self, subject: str, schema_id: int | None, problem: str):
        self.subject, self.schema_id, self.problem = subject, schema_id, problem
        where = subject if schema_id is None else f"{subject} (schema id {schema_id})"
        super().__init__(f"the handler's return value does not fit {where}: {problem}")


class SinkSchemaError(Exception):
    """The registry has no schema the sink can encode with: not the message's fault."""


# --- the wire format (pure) ------------------------------------------------------------

def framed(schema_id: int, body: bytes) -> bytes:
    return bytes((MAGIC,)) + schema_id.to_bytes(4, "big") + body


def write_varint(value: int) -> bytes:
    """A zigzag-encoded varint (decode.read_varint's inverse)."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def index_bytes(indexes: list[int]) -> bytes:
    """Protobuf's message indexes as the serializers write them: [0] (the file's first message)
    as a single 0, else the count then each index."""
    if indexes == [0]:
        return b"\x00"
    return write_varint(len(indexes)) + b"".join(write_varint(i) for i in indexes)


# --- one value ----------------------------------------------------------------------------

def encode_avro(schema: Schema, value: Any) -> bytes:
    """As Confluent's AvroSerializer (fastavro): a field the dict lacks takes its default,
    a key the schema does not have is left out."""
    import fastavro
    from fastavro.validation import ValidationError, validate

    parsed = _avro(schema.text)
    try:
        validate(value, parsed, raise_errors=True)
    except ValidationError as err:
        problems = [f"{e.field or 'the value'}: {'None (or missing)' if e.datum is None else repr(e.datum)} "
                    f"is not {_avro_type(e.schema)}" for e in err.errors]
        raise ValueError("; ".join(problems) or str(err)) from None
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, value)
    return out.getvalue()


def _avro_type(schema: Any) -> str:
    if isinstance(schema, list):
        return "any of " + ", ".join(_avro_type(s) for s in schema)
    if schema == "null":
        return "null"
    name = schema.get("type") if isinstance(schema, dict) else str(schema)
    text = f"{name} ({schema['name']})" if isinstance(schema, dict) and schema.get("name") else str(name)
    return ("an " if text[:1] in "aeiou" else "a ") + text


def encode_json_schema(schema: Schema, value: Any) -> bytes:
    import jsonschema

    error = jsonschema.exceptions.best_match(_json_schema(schema.text).iter_errors(value))
    if error is not None:
        raise ValueError(f"does not match the JSON Schema at {error.json_path}: {error.message}")
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as err:
        raise ValueError(f"not JSON: {err}") from None


def encode_protobuf(schema: Schema, value: Any) -> bytes:
    """A message of the schema (found by its full name), or a dict for the file's first message
    (protobuf's JSON mapping, as json_format.ParseDict reads it)."""
    from google.protobuf import json_format

    if hasattr(value, "DESCRIPTOR") and hasattr(value, "SerializeToString"):
        name = value.DESCRIPTOR.full_name
        indexes = _indexes_of(_proto_file(schema.text), name)
        if indexes is None:
            raise ValueError(f"the schema has no message {name}")
        return index_bytes(indexes) + value.SerializeToString()
    if not isinstance(value, dict):
        raise ValueError(f"a {type(value).__name__}: expected a dict or a message of the schema")
    cls = _proto_class(schema.text, (0,))
    try:
        msg = json_format.ParseDict(value, cls())
    except json_format.ParseError as err:
        raise ValueError(f"not a {cls.DESCRIPTOR.full_name}: {err}") from None
    return b"\x00" + msg.SerializeToString()


def _indexes_of(file: Any, full_name: str) -> list[int] | None:
    def walk(types: list, path: list[int]) -> list[int] | None:
        for i, desc in enumerate(types):
            if desc.full_name == full_name:
                return [*path, i]
            found = walk(list(desc.nested_types), [*path, i])
            if found is not None:
                return found
        return None

    return walk(list(file.message_types_by_name.values()), [])


_ENCODERS: dict[str, Callable[[Schema, Any], bytes]] = {
    "Avro": encode_avro, "Protobuf": encode_protobuf, "JsonSchema": encode_json_schema}


def encode_registered(fmt: str, value: Any, schema: Schema, subject: str) -> bytes:
    """`value` encoded with `schema` in the wire format, or SerializationError (pure)."""
    if schema.type != SCHEMA_TYPES[fmt]:
        raise SinkSchemaError(f"the latest schema of subject {subject} (id {schema.id}) is a "
                              f"{schema.type} schema, not {fmt} (spec.sink.kafka.valueFormat)")
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        raise SerializationError(subject, schema.id, f"a {type(value).__name__}: a {fmt} sink takes "
                                 "the value to encode (a dict), not bytes or text")
    try:
        return framed(schema.id, _ENCODERS[fmt](schema, value))
    except Exception as err:  # noqa: BLE001 - any refusal of the encoder is the value's
        cause = " ".join(str(err).split()) or type(err).__name__  # one line (protobuf's has two)
        raise SerializationError(subject, schema.id, cause) from None


def output_encoder(sink_format: dict | None) -> Callable[[Any], bytes | None] | None:
    """From WorkerConfig.sink_format ({"value", "subject", "registry": {"url", "secret_dir"}}):
    encode(return value) -> bytes (None stays None: nothing is written); None for Bytes."""
    if not sink_format:
        return None
    fmt, subject, reg = sink_format["value"], sink_format["subject"], sink_format.get("registry")
    if fmt not in REGISTRY_FORMATS:
        raise ValueError(f"unknown sink value format {fmt!r}")
    if not reg:  # the API refuses it; settings written by hand may not
        raise ValueError(f"sink value format {fmt} needs a schema registry")
    registry = registry_for(reg["url"], reg.get("secret_dir"))
    return lambda value: None if value is None else encode_with(fmt, value, registry, subject)


def encode_with(fmt: str, value: Any, registry: Registry, subject: str) -> bytes:
    try:
        schema = registry.latest(subject)
    except UnknownSubject:
        raise SinkSchemaError(f"schema registry {registry.url} has no schema under subject "
                              f"{subject}: register the sink's schema there") from None
    return encode_registered(fmt, value, schema, subject)


def encoding(handler: Callable[[Any], Any], sink_format: dict | None) -> Callable[[Any], Any]:
    """`handler` whose return value is encoded for the sink (within the attempt: a refusal or
    an outage is the attempt's failure); `handler` itself when the sink takes bytes."""
    encode = output_encoder(sink_format)
    if encode is None:
        return handler

    def encoded(msg: Any) -> Any:
        return encode(handler(msg))

    encoded.__name__ = getattr(handler, "__name__", "handler")
    encoded.__qualname__ = getattr(handler, "__qualname__", "handler")
    encoded.__module__ = getattr(handler, "__module__", __name__)
    return encoded


def with_formats(handler: Callable[[Any], Any], formats: dict | None,
                 sink_format: dict | None) -> Callable[[Any], Any]:
    """The handler as the workers call it (WorkerConfig.formats, .sink_format): its message
    decoded first, its return value encoded for the sink after."""
    handler, decode = encoding(handler, sink_format), message_decoder(formats)
    return decoding(handler, decode) if decode is not None else handler
