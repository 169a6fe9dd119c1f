"""The Schema Registry as the workers see it: a schema by its id, over the Confluent REST API
(`GET /schemas/ids/{id}`), fetched once per id in each worker process; and the latest schema of
a subject (`GET /subjects/{subject}/versions/latest`), which a sink encodes with, kept for
LATEST_TTL seconds (a new version is used within that time).

Two kinds of failure, kept apart because they mean opposite things for the message:
- the registry answers that it has no schema with that id (404): the record names a schema
  that does not exist, so it can never be decoded (`UnknownSchema`, a validation failure);
- the registry cannot be asked (refused, timed out, 5xx, or it refuses our credentials):
  the message is not at fault (`RegistryUnavailable`, an ordinary failure that is retried and
  counts toward the systemic-failure breaker). Nothing is cached for it: the next attempt asks
  again.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from antidote_api.formats import REGISTRY_SECRET_KEYS

TIMEOUT = 10.0  # seconds for one request: a registry slower than that is treated as away
LATEST_TTL = 30.0  # seconds a subject's latest schema is kept (Confluent's latest.cache.ttl.sec)


@dataclass(frozen=True)
class Schema:
    id: int
    type: str  # the Confluent API's schemaType: AVRO (when absent), PROTOBUF or JSON
    text: str
    references: tuple[dict, ...] = ()


class UnknownSchema(LookupError):
    """The registry has no schema with this id."""

    def __init__(self, schema_id: int):
        self.schema_id = schema_id
        super().__init__(f"unknown schema id {schema_id}")


class UnknownSubject(LookupError):
    """The registry has no schema under this subject (a sink's schema never registered)."""

    def __init__(self, subject: str):
        self.subject = subject
        super().__init__(f"no schema under subject {subject}")


class RegistryUnavailable(Exception):
    """The registry could not be asked: not the message's fault, retried like a handler error."""


def auth_header(secret_dir: str | None) -> dict[str, str]:
    """The Authorization header from the mounted Secret: `token` (bearer) or `username` and
    `password` (basic); none without a Secret."""
    if not secret_dir:
        return {}
    path = Path(secret_dir)
    found = {k: (path / k).read_text(encoding="utf-8").strip() for k in REGISTRY_SECRET_KEYS
             if (path / k).is_file()}
    if found.get("token"):
        return {"Authorization": f"Bearer {found['token']}"}
    if "username" in found:
        pair = f"{found['username']}:{found.get('password', '')}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
    return {}


def parse_schema(schema_id: int | None, body: bytes) -> Schema:
    """A schema from the registry's answer: by id (`schema_id` given), or a subject's version
    (which carries its own `id`)."""
    doc = json.loads(body)
    return Schema(int(doc["id"]) if schema_id is None else schema_id, doc.get("schemaType") or "AVRO",
                  doc["schema"], tuple(doc.get("references") or ()))


class Registry:
    """One registry's schemas by id, cached for the life of the worker process (an id names
    one schema forever, so nothing expires)."""

    def __init__(self, url: str, secret_dir: str | None = None, timeout: float = TIMEOUT):
        self.url = url.rstrip("/")
        self.secret_dir = secret_dir
        self.timeout = timeout
        self._schemas: dict[int, Schema] = {}
        self._latest: dict[str, tuple[float, Schema]] = {}  # subject -> (when fetched, schema)
        self._lock = threading.Lock()  # a task's handler may run in threads of its own

    def schema(self, schema_id: int) -> Schema:
        found = self._schemas.get(schema_id)
        if found is None:
            found = self._fetch(schema_id)
            with self._lock:
                self._schemas[schema_id] = found
        return found

    def latest(self, subject: str, now: float | None = None) -> Schema:
        """The subject's latest schema, asked again once it is LATEST_TTL seconds old (a failed
        ask raises: a registry that is away is an outage, even with an older schema at hand)."""
        now = time.monotonic() if now is None else now
        found = self._latest.get(subject)
        if found is None or now - found[0] >= LATEST_TTL:
            schema = self._get(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/latest",
                               f"subject {subject}", None, lambda: UnknownSubject(subject))
            found = (now, schema)
            with self._lock:
                self._latest[subject] = found
                self._schemas.setdefault(schema.id, schema)
        return found[1]

    def _fetch(self, schema_id: int) -> Schema:
        return self._get(f"/schemas/ids/{schema_id}", f"schema id {schema_id}", schema_id,
                         lambda: UnknownSchema(schema_id))

    def _get(self, path: str, what: str, schema_id: int | None, missing: Callable[[], Exception]) -> Schema:
        where = f"schema registry {self.url}, {what}"
        req = urllib.request.Request(f"{self.url}{path}",
                                     headers={"Accept": "application/vnd.schemaregistry.v1+json, "
                                                        "application/json",
                                              **auth_header(self.secret_dir)})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = resp.read()
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise missing() from None
            # 5xx: the registry's trouble; 401/403: our credentials. Neither is the record's.
            raise RegistryUnavailable(f"{where}: HTTP {err.code} {err.reason}") from None
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise RegistryUnavailable(f"{where}: {reason}") from None
        try:
            return parse_schema(schema_id, body)
        except (ValueError, KeyError, TypeError) as err:
            raise RegistryUnavailable(f"{where}: not a schema registry's answer ({err})") from None


_registries: dict[tuple[str, str | None], Registry] = {}


def registry_for(url: str, secret_dir: str | None) -> Registry:
    """This process's client of the registry at `url` (one cache per process and registry)."""
    key = (url, secret_dir)
    if key not in _registries:
        _registries[key] = Registry(url, secret_dir)
    return _registries[key]


def secret_dir_of(name: str | None) -> str | None:
    """Where the registry's Secret is mounted (the Kafka Secrets' root), for the executors."""
    if name is None:
        return None
    from antidote_consumer.kafka.auth import secret_dir

    return os.path.abspath(secret_dir(name))
