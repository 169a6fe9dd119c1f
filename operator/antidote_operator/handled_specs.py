"""Kopf's record of the last handled spec, kept in the operator's memory instead of an
annotation on each object.

Kopf compares each event's object with that record to tell a create, an update (and of
which fields) and nothing at all. Kept in an annotation it costs one PATCH per handled
change, and the watch event that PATCH brings back: for 1,000 new QueueConsumers, 1,000
requests of a first reconcile's ~12,000 and 1,000 events, none of them the operator's own
work. Nothing here needs the record to outlive the process: after a start every object is
reconciled in full anyway (a missing record reads as a create, which the handlers treat as
a resume: children read back and compared, status recomputed), so what a restart loses is
only the knowledge of which fields changed while no operator ran, and that is the case the
full reconcile covers.

The record is the compact JSON Kopf would have written (about 0.5 KB a consumer), decoded
on each event as Kopf's annotation storage does. It is forgotten when the object's DELETED
event arrives.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any, cast

import kopf

# Kopf's bookkeeping annotations (its progress while a handler retries, its finalizer's
# name aside) go under a prefix of the operator's own: Kopf ignores changes to annotations
# with its prefix, and users' antidote.dev/resume must not be ignored.
KOPF_PREFIX = "kopf.antidote.dev"

_NOT_ESSENCE = frozenset({"apiVersion", "kind", "metadata", "status"})
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class HandledSpecs(kopf.DiffBaseStorage):
    def __init__(self, own_prefix: str = KOPF_PREFIX) -> None:
        super().__init__()
        # Kopf's progress annotations, and the record an older operator kept in an
        # annotation, must not read as a change of the object.
        self._own = f"{own_prefix}/"
        self._records: dict[str, str] = {}

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        """What Kopf's own `build` gives, without deep-copying the whole body first: Kopf
        copies metadata (managedFields included) and status, then drops them, on every watch
        event of a QueueConsumer (each status write comes back as one)."""
        if extra_fields:  # handlers on status fields (none here): Kopf's way, exactly
            return self.kopf_build(body=body, extra_fields=extra_fields)
        essence = {k: copy.deepcopy(v) for k, v in body.items() if k not in _NOT_ESSENCE}
        meta = body.get("metadata") or {}
        picked: dict[str, Any] = {}
        if "labels" in meta:
            picked["labels"] = copy.deepcopy(meta["labels"])
        if "annotations" in meta:
            annotations = meta["annotations"] or {}
            others = tuple(f"{p}/" for p in self._detect_marked_prefixes(annotations))
            picked["annotations"] = {k: v for k, v in annotations.items()
                                     if k != _LAST_APPLIED and not k.startswith(self._own)
                                     and not (others and k.startswith(others))}
        if picked:
            essence["metadata"] = picked
        self.remove_empty_stanzas(cast(kopf.BodyEssence, essence))
        return cast(kopf.BodyEssence, essence)

    def kopf_build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        essence = super().build(body=body, extra_fields=extra_fields)
        annotations = cast(dict[str, Any], essence).get("metadata", {}).get("annotations")
        if annotations:
            for key in [k for k in annotations if k.startswith(self._own)]:
                del annotations[key]
        self.remove_empty_stanzas(essence)
        return essence

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        record = self._records.get(body.metadata.uid or "")
        return None if record is None else cast(kopf.BodyEssence, json.loads(record))

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        # Nothing goes into `patch`: that is the point.
        uid = body.metadata.uid
        if uid:
            self._records[uid] = json.dumps(essence, separators=(",", ":"))

    def forget(self, uid: str | None) -> None:
        if uid:
            self._records.pop(uid, None)

    def __len__(self) -> int:
        return len(self._records)
