"""`antidote inspect --decode`: quarantined values (and keys) decoded as the consumer's workers
decode them (spec.source.kafka.valueFormat, keyFormat, its schemaRegistry), with the workers'
own decoders, shown beside the reason. A record that does not decode says why (that is often
why it was quarantined: reason `validation`, `antidote.DeserializationError`); a registry that
cannot be asked from here stops the command, naming it."""

from __future__ import annotations

import base64
import json
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

from antidote_api.formats import BYTES
from antidote_consumer.worker.decode import DeserializationError, decoder
from antidote_consumer.worker.registry import Registry, RegistryUnavailable

from .cluster import CliError

Decode = Callable[[bytes | None, bytes | None], dict[str, Any]]


def jsonable(value: Any) -> Any:
    """A decoded value as JSON can show it: a Protobuf message as protobuf's JSON mapping (with
    its type), bytes as base64 (`b64:`), dates, decimals and UUIDs as text."""
    if hasattr(value, "DESCRIPTOR") and hasattr(value, "ListFields"):
        from google.protobuf.json_format import MessageToDict

        return {"@type": value.DESCRIPTOR.full_name, **MessageToDict(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "b64:" + base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, (Decimal, UUID)):
        return str(value)
    return value


def record_decoder(value_format: str | None, key_format: str | None, registry: Registry | None) -> Decode:
    """decode(key, value) -> {"value": ..., "key": ...} for the formats that decode (Bytes keys
    and values are left out), or {"error": why} for a record that does not decode."""
    value = decoder(value_format, registry, "value")
    key = decoder(key_format, registry, "key")

    def decode(k: bytes | None, v: bytes | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        try:
            if value is not None:
                out["value"] = jsonable(value(v))
            if key is not None:
                out["key"] = jsonable(key(k))
        except DeserializationError as err:
            return {"error": str(err)}
        except RegistryUnavailable as err:
            url = registry.url if registry is not None else "?"
            raise CliError(f"--decode: cannot ask the schema registry: {err}; pass --schema-registry "
                           f"URL when {url} is not reachable from here") from None
        return out

    return decode


@contextmanager
def decoding(settings: Any, *, registry_url: str | None,
             secret: Callable[[str], Mapping[str, bytes]] | None) -> Iterator[Decode]:
    """The decoder of the consumer whose effective settings are `settings`. `registry_url`
    replaces its registry's URL (to reach it from here); `secret(name)` reads the registry's
    Secret (its keys, as bytes), written to a private directory while the command runs."""
    src = settings.source
    if src.value_format in (None, BYTES) and src.key_format in (None, BYTES):
        raise CliError(f"--decode: consumer {settings.namespace}/{settings.consumer} reads its values and "
                       "keys as Bytes (spec.source.kafka.valueFormat, keyFormat): nothing to decode; "
                       "--show-payload shows them")
    _check_decoders({src.value_format, src.key_format})
    reg = src.schema_registry
    if reg is None and registry_url is None:  # Json: no registry to ask
        yield record_decoder(src.value_format, src.key_format, None)
        return
    url = registry_url or reg.url
    with tempfile.TemporaryDirectory(prefix="antidote-registry-") as tmp:
        secret_dir = None
        if reg is not None and reg.secret_ref is not None and secret is not None:
            for key, data in secret(reg.secret_ref.name).items():
                (Path(tmp) / key).write_bytes(data)
            secret_dir = tmp
        yield record_decoder(src.value_format, src.key_format, Registry(url, secret_dir))


# What each format's decoder imports (the consumer extra's: not in the operator's image).
_MODULES = {"Avro": ("fastavro",), "Protobuf": ("google.protobuf", "grpc_tools"), "JsonSchema": ("jsonschema",)}


def _check_decoders(formats: set[str | None]) -> None:
    """Up front: a decoder missing here would read as every record undecodable."""
    import importlib

    for fmt in sorted(f for f in formats if f in _MODULES):
        for module in _MODULES[fmt]:
            try:
                importlib.import_module(module)
            except ImportError:
                raise CliError(f"--decode: {fmt} needs the Python package of {module}, not installed "
                               "here: install antidote with its consumer extra "
                               "(pip install 'antidote[consumer]')") from None


def decoded_text(decoded: Mapping[str, Any]) -> str:
    """One line of a record's decoded form for the table."""
    if "error" in decoded:
        return f"undecodable: {decoded['error']}"
    parts = [f"{k} {json.dumps(decoded[k], ensure_ascii=False, separators=(',', ':'))}"
             for k in ("key", "value") if k in decoded]
    return "decoded " + ", ".join(parts)
