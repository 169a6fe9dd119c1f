"""The payload of a record written to the poison or dead-letter topic, as the PoisonPolicy's
`quarantine` says (docs/consumer.md, "Redaction"): kept, dropped, or with the listed fields
masked or hashed and the value re-encoded as it came (JSON text, or the Confluent wire
format with the same schema id and Protobuf message indexes, so it stays decodable).

Nothing here leaks what it cannot read: a value that does not parse (not JSON, an unknown
schema id, a body its schema does not read) or that does not encode again after masking (an
Avro enum or fixed field, a JSON Schema a masked text breaks) is dropped whole, and
`antidote.redacted.reason` says why. A registry that cannot be asked is an outage
(registry.RegistryUnavailable propagates: the batch fails and is retried, nothing is written).

The walk over a decoded record and the replacements are pure functions, tested as such; the
Redactor binds them to a policy, a value format, a registry and the HMAC key."""

from __future__ import annotations

import copy
import datetime
import decimal
import hashlib
import hmac
import io
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from antidote_api import headers as hn
from antidote_api.redaction import DROP, HASH, HASH_PREFIX, KEEP, MARKER, Step, parse_path

from .decode import (HEADER, SCHEMA_TYPES, DeserializationError, _avro, _json_schema, decode_json,
                     decode_registered, message_indexes)
from .registry import Registry

Headers = list[tuple[str, bytes]]
Field = tuple[str, tuple[Step, ...], str]  # (the path as written, its steps, Mask or Hash)
Replace = Callable[[Any, str], Any]


class CannotRedact(ValueError):
    """The value cannot be redacted field by field; it is dropped whole, with this reason."""


@dataclass(frozen=True)
class Redacted:
    value: bytes | None
    headers: Headers  # the antidote.redacted* headers to add to the record's own
    changed: bool  # whether the value is no longer the one produced


# --- the walk (pure) ------------------------------------------------------------------------

def _children(node: Any, step: Step) -> Iterable[tuple[Any, Any]]:
    """(container, key) pairs the step names in `node` (none when it names nothing there)."""
    if step[0] == "any":
        if isinstance(node, dict):
            return [(node, k) for k in node]
        if isinstance(node, list):
            return [(node, i) for i in range(len(node))]
        return []
    if step[0] == "key":
        return [(node, step[1])] if isinstance(node, dict) and step[1] in node else []
    i = step[1]
    return [(node, i)] if isinstance(node, list) and i < len(node) else []


def redact_tree(doc: Any, fields: Iterable[Field], replace: Replace) -> tuple[Any, list[str]]:
    """`doc` (dicts and lists) with every field the paths name replaced by `replace(value,
    mode)`, and the paths that named at least one field. `doc` itself is not changed."""
    doc = copy.deepcopy(doc)
    matched = []
    for path, steps, mode in fields:
        nodes: list[tuple[Any, Any, Any]] = [(None, None, doc)]
        for step in steps:
            nodes = [(c, k, c[k]) for _, _, node in nodes for c, k in _children(node, step)]
        for container, key, value in nodes:
            container[key] = replace(value, mode)
        if nodes:
            matched.append(path)
    return doc, matched


def digest(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def json_replacement(key: bytes | None) -> Replace:
    """For JSON without a schema: any value becomes the marker text, or `hmac-sha256:<hex>`
    of its text (a string's own text, so one email hashes alike in every field; others their
    compact JSON)."""
    def replace(value: Any, mode: str) -> Any:
        if mode != HASH:
            return MARKER
        assert key is not None  # the API requires hashKeyRef with Hash
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), sort_keys=True)
        return HASH_PREFIX + digest(key, text.encode("utf-8")).hex()
    return replace


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def zero(value: Any) -> Any:
    """The zero of a typed field's value: what a masked (or hashed) field that cannot hold a
    text becomes, so the record still fits its schema. Records (dicts) keep their fields, each
    zeroed; lists and maps become empty; a null stays null."""
    if value is None or isinstance(value, bool):
        return None if value is None else False
    if isinstance(value, int):
        return 0
    if isinstance(value, float):
        return 0.0
    if isinstance(value, str):
        return MARKER
    if isinstance(value, bytes | bytearray):
        return MARKER.encode()
    if isinstance(value, decimal.Decimal):
        return decimal.Decimal(0)
    if isinstance(value, datetime.datetime):
        return _EPOCH if value.tzinfo is not None else _EPOCH.replace(tzinfo=None)
    if isinstance(value, datetime.date):
        return datetime.date(1970, 1, 1)
    if isinstance(value, datetime.time):
        return datetime.time(0)
    if isinstance(value, uuid.UUID):
        return uuid.UUID(int=0)
    if isinstance(value, dict):
        return {k: zero(v) for k, v in value.items()}
    if isinstance(value, list):
        return []
    raise CannotRedact(f"a field of type {type(value).__name__} cannot be masked")


def typed_replacement(key: bytes | None) -> Replace:
    """For records with a schema (Avro, JSON Schema): a text field becomes the marker or
    `hmac-sha256:<hex>`, a bytes field the marker's bytes or the 32 bytes of the HMAC; any
    other field its type's zero (`zero`), whichever the mode: a number's hash would not be
    a number of its type, and its zero hides it as well."""
    def replace(value: Any, mode: str) -> Any:
        if mode == HASH and isinstance(value, str):
            assert key is not None
            return HASH_PREFIX + digest(key, value.encode("utf-8")).hex()
        if mode == HASH and isinstance(value, bytes | bytearray):
            assert key is not None
            return digest(key, bytes(value))
        return zero(value)
    return replace


# --- Protobuf: the walk over a message (pure) ------------------------------------------------

def redact_proto(msg: Any, fields: Iterable[Field], key: bytes | None) -> list[str]:
    """Mask or hash, in place, the fields of protobuf message `msg` the paths name (by the
    fields' names in the .proto): text and bytes fields as `typed_replacement` does, any other
    field cleared to its zero (a message field: unset). The paths that named a field."""
    from google.protobuf.descriptor import FieldDescriptor

    matched = []
    for path, steps, mode in fields:
        # (parent message, field descriptor, index in a repeated field or None)
        found: list[tuple[Any, Any, int | None]] = []
        nodes: list[Any] = [msg]
        for n, step in enumerate(steps):
            last = n == len(steps) - 1
            nxt: list[Any] = []
            for node in nodes:
                if isinstance(node, tuple):  # a repeated field reached by the step before
                    parent, fd = node
                    seq = getattr(parent, fd.name)
                    idx = range(len(seq)) if step[0] == "any" else (
                        [step[1]] if step[0] == "index" and step[1] < len(seq) else [])
                    for i in idx:
                        if last:
                            found.append((parent, fd, i))
                        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
                            nxt.append(seq[i])
                    continue
                if not hasattr(node, "DESCRIPTOR") or step[0] == "index":
                    continue
                fds = node.DESCRIPTOR.fields if step[0] == "any" else [
                    f for f in node.DESCRIPTOR.fields if f.name == step[1]]
                for fd in fds:
                    repeated = _repeated(fd)
                    if last:
                        found.append((node, fd, None))
                    elif repeated:
                        nxt.append((node, fd))
                    elif fd.type == FieldDescriptor.TYPE_MESSAGE and node.HasField(fd.name):
                        nxt.append(getattr(node, fd.name))
            nodes = nxt
        for parent, fd, i in found:
            _proto_replace(parent, fd, i, mode, key)
        if found:
            matched.append(path)
    return matched


def _repeated(fd: Any) -> bool:
    # protobuf 6 has is_repeated and deprecates label; older releases have only label
    if hasattr(fd, "is_repeated"):
        return bool(fd.is_repeated)
    return fd.label == fd.LABEL_REPEATED


def _proto_replace(parent: Any, fd: Any, i: int | None, mode: str, key: bytes | None) -> None:
    from google.protobuf.descriptor import FieldDescriptor

    text = fd.type == FieldDescriptor.TYPE_STRING
    raw = fd.type == FieldDescriptor.TYPE_BYTES
    repeated = _repeated(fd)
    if (text or raw) and (i is not None or not repeated):
        seq = getattr(parent, fd.name) if i is not None else None
        old = seq[i] if seq is not None else getattr(parent, fd.name)
        new = typed_replacement(key)(old, mode)
        if seq is not None:
            seq[i] = new
        else:
            setattr(parent, fd.name, new)
        return
    if i is not None:  # one element of a repeated number or message field
        seq = getattr(parent, fd.name)
        if fd.type == FieldDescriptor.TYPE_MESSAGE:
            seq[i].Clear()
        else:
            seq[i] = False if fd.type == FieldDescriptor.TYPE_BOOL else type(seq[i])(0)
        return
    parent.ClearField(fd.name)  # a number, an enum, a message, a repeated or map field: its zero


# --- one value --------------------------------------------------------------------------------

def fields_of(q: Any) -> list[Field]:
    """(path, steps, mode) of a Quarantine's redact list, each with its mode resolved."""
    return [(f.path, parse_path(f.path), f.mode or q.mode) for f in q.redact or ()]


def redacted_headers(action: str, matched: list[str] | None = None, reason: str | None = None) -> Headers:
    out = [(hn.REDACTED, action.encode())]
    if matched is not None:
        out.append((hn.REDACTED_PATHS, json.dumps(matched, separators=(",", ":")).encode("utf-8")))
    if reason is not None:
        out.append((hn.REDACTED_REASON, reason.encode("utf-8", "replace")[:1024]))
    return out


def was_redacted(headers: Iterable[tuple[str, bytes | None]] | None) -> bool:
    return any(k == hn.REDACTED for k, _ in headers or ())


class Redactor:
    """`redactor(value, headers)` -> Redacted, for a consumer's records: `value_format`
    (spec.source.kafka.valueFormat) says how a value is read; `registry` reads the schemas of
    the registry formats; `key` is the HMAC key of Hash (None when nothing is hashed)."""

    def __init__(self, quarantine: Any, value_format: str | None, registry: Registry | None,
                 key: bytes | None):
        self.payload, self.format = quarantine.payload, value_format or "Bytes"
        self.fields, self.registry, self.key = fields_of(quarantine), registry, key

    def __call__(self, value: bytes | None, headers: Iterable[tuple[str, bytes | None]] | None = ()
                 ) -> Redacted:
        if self.payload == KEEP or was_redacted(headers):  # done once, where it was first written
            return Redacted(value, [], False)
        if self.payload == DROP:
            return Redacted(None, redacted_headers(DROP), value is not None)
        if value is None:  # a tombstone: nothing to hide
            return Redacted(None, redacted_headers("Redact", []), False)
        try:
            new, matched = self.redact(value)
        except DeserializationError as err:  # its text names the value and the schema id
            return Redacted(None, redacted_headers(DROP, reason=str(err)), True)
        except CannotRedact as err:
            return Redacted(None, redacted_headers(DROP, reason=f"value: {err}"), True)
        if not matched:
            return Redacted(value, redacted_headers("Redact", []), False)
        return Redacted(new, redacted_headers("Redact", matched), True)

    def redact(self, value: bytes) -> tuple[bytes, list[str]]:
        """(the value re-encoded with its listed fields hidden, the paths that matched);
        CannotRedact or DeserializationError when it cannot be read or written back."""
        fmt = self.format
        if fmt in ("Bytes", "Json"):  # Bytes: JSON text is what a path can name
            doc = decode_json(value, "value")
            new, matched = redact_tree(doc, self.fields, json_replacement(self.key))
            if not matched:
                return value, []
            return json.dumps(new, separators=(",", ":"), ensure_ascii=False).encode("utf-8"), matched
        if fmt not in SCHEMA_TYPES:
            raise CannotRedact(f"unknown value format {fmt}")
        if self.registry is None:
            raise CannotRedact(f"{fmt} needs spec.source.kafka.schemaRegistry")
        decoded = decode_registered(fmt, value, self.registry, "value")
        schema = self.registry.schema(int.from_bytes(value[1:HEADER], "big"))  # cached by decode
        if fmt == "Protobuf":
            indexes_len = len(value) - HEADER - len(message_indexes(value[HEADER:])[1])
            matched = redact_proto(decoded, self.fields, self.key)
            if not matched:
                return value, []
            return value[:HEADER + indexes_len] + decoded.SerializeToString(), matched
        new, matched = redact_tree(decoded, self.fields, typed_replacement(self.key))
        if not matched:
            return value, []
        try:
            if fmt == "Avro":
                import fastavro

                buf = io.BytesIO()
                fastavro.schemaless_writer(buf, _avro(schema.text), new)
                body = buf.getvalue()
            else:  # JsonSchema: the masked document must still be one its schema accepts
                import jsonschema

                error = jsonschema.exceptions.best_match(_json_schema(schema.text).iter_errors(new))
                if error is not None:
                    raise ValueError(f"breaks its JSON Schema at {error.json_path}: {error.message}")
                body = json.dumps(new, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except Exception as err:  # noqa: BLE001 - any refusal of the encoder: drop, never leak
            raise CannotRedact(f"the masked record does not encode with schema id {schema.id} "
                               f"({type(err).__name__}: {str(err)[:300]})") from None
        return value[:HEADER] + body, matched


class RedactionKeyError(ValueError):
    """The HMAC key of quarantine.hashKeyRef cannot be read; names the Secret and key."""


def hmac_key(ref: Any, root: str | None = None) -> bytes:
    """The HMAC key from the Secret mounted where the Kafka Secrets are (the operator mounts
    quarantine.hashKeyRef's Secret in the driver and the reader Jobs)."""
    from antidote_consumer.kafka.auth import secret_dir

    path = secret_dir(ref.name, root) / ref.key
    try:
        key = path.read_bytes()
    except OSError as err:
        raise RedactionKeyError(f"spec.quarantine.hashKeyRef: key {ref.key!r} of Secret {ref.name} "
                                f"cannot be read ({err.strerror}): Hash needs it") from None
    if len(key) < 16:
        raise RedactionKeyError(f"spec.quarantine.hashKeyRef: key {ref.key!r} of Secret {ref.name} "
                                f"holds {len(key)} bytes; an HMAC key needs at least 16 (32 random "
                                "bytes are best)")
    return key


def redactor_for(s: Any, key: bytes | None = None) -> Redactor | None:
    """The Redactor of a consumer's effective settings; None when payloads are kept. The HMAC
    key is read from its Secret unless `key` is given (antidote.testing's, without one)."""
    q = s.quarantine
    if q is None or q.payload == KEEP:
        return None
    fields = fields_of(q)
    if key is None and any(m == HASH for _, _, m in fields):
        key = hmac_key(q.hash_key_ref)
    registry = None
    reg = s.source.schema_registry
    if reg is not None and q.payload != DROP:
        from .registry import registry_for, secret_dir_of

        registry = registry_for(reg.url, secret_dir_of(reg.secret_ref.name if reg.secret_ref else None))
    return Redactor(q, s.source.value_format, registry, key)
