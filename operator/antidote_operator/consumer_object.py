"""A QueueConsumer as reconciling reads it: a typed, read-only view built once where it
enters the operator (a handler's body, the watch stream's copy, a GET), so that the
reconcile reads `obj.uid` and `obj.spec` instead of looking through `qc["metadata"]` by hand.

The fields the API server always sets on a stored object (namespace, name, uid,
resourceVersion) are required: a body without one is not a QueueConsumer read from it, and
the status write, conditional on the resourceVersion, could not be made safely. The rest
default as the reconcile always read them (generation 1, empty mappings).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from antidote_api.times import parse_time

REQUIRED = ("namespace", "name", "uid", "resourceVersion")


@dataclass(frozen=True)
class ConsumerObject:
    namespace: str
    name: str
    uid: str
    generation: int
    resource_version: str
    deleting: bool  # metadata.deletionTimestamp is set: the delete handler removes the children
    created: datetime | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    spec: Mapping[str, Any]  # as stored: decide() validates it (a broken spec is a status, not an error)
    status: Mapping[str, Any]
    # The body itself, for what takes a Kubernetes object: the children's owner references
    # (builders), the Events' `regarding`.
    body: Mapping[str, Any]

    @property
    def policy_name(self) -> str:
        return str((self.spec.get("policyRef") or {}).get("name", ""))


def consumer_object(body: Mapping[str, Any]) -> ConsumerObject:
    """The view of a QueueConsumer's `body` (a shallow copy is kept: the caller's mapping,
    Kopf's or the watch stream's, may be replaced while a reconcile runs). Raises ValueError
    naming a missing required field."""
    raw = dict(body)
    meta = raw.get("metadata") or {}
    missing = [f"metadata.{field}" for field in REQUIRED if not meta.get(field)]
    if missing:
        who = f"{meta.get('namespace') or '?'}/{meta.get('name') or '?'}"
        raise ValueError(f"QueueConsumer {who} has no {', '.join(missing)}: not an object read "
                         "from the API server")
    return ConsumerObject(
        namespace=meta["namespace"], name=meta["name"], uid=meta["uid"],
        generation=int(meta.get("generation", 1)), resource_version=meta["resourceVersion"],
        deleting=bool(meta.get("deletionTimestamp")), created=parse_time(meta.get("creationTimestamp")),
        labels=meta.get("labels") or {}, annotations=meta.get("annotations") or {},
        spec=raw.get("spec") or {}, status=raw.get("status") or {}, body=raw)
