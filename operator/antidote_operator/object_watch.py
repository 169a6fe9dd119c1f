"""A plain LIST + WATCH of objects the operator only reads: the drivers' Deployments and Pods.

Kopf runs every watch event through its per-object machinery (a worker task per object, the
cause detection, the handler's invocation), which is built for objects it reconciles. For
these objects the operator only notes what happened and kicks a sync: when 1,000 consumers
are scaled to 0 at once, each scale-down comes back as a Deployment event while the others
are still being sent, and Kopf's handling of those events was a large part of the operator's
event loop (docs/performance.md). Here an event is decoded and handed to a plain function.

What a watch promises, the Kubernetes way: a LIST gives the current objects and a
resourceVersion; the WATCH from there gives every later change, bookmarks keep the version
fresh, and a stream the server ends is resumed from the last version seen. When that version
is too old (410 Gone), the list is read again, and objects that vanished meanwhile are
handed over as deleted. A replica that may not act (Kopf peering) does not watch: it lists
again once it may, as Kopf's frozen streams resume.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from contextlib import aclosing
from typing import Any

from kopf._cogs.structs.references import NamespaceName, match_namespace, select_specific_namespaces

from . import kube
from .context import brief
from .peering import PeeringGate

log = logging.getLogger("antidote.operator.watch")

OnEvent = Callable[[Mapping[str, Any], bool], None]  # (object, deleted)
PAGE = 500
GONE = 410


class Relist(Exception):
    """The watch cannot go on from where it is: read the list again."""


def scopes(patterns: list[str]) -> list[tuple[str | None, Callable[[str], bool] | None]]:
    """Where to watch for the operator's `--namespace` values, as Kopf reads them: each plain
    name on its own; with any glob (`team-*`, `!*-pr-*`, comma lists) or none at all, one
    cluster-wide watch, kept to the namespaces the patterns match (Kopf's own matcher)."""
    if not patterns:
        return [(None, None)]
    if not namespace_patterns(patterns):
        return [(ns, None) for ns in sorted(set(patterns))]
    return [(None, lambda ns: any(match_namespace(NamespaceName(ns), p) for p in patterns))]


def namespace_patterns(values: list[str]) -> list[str]:
    """The `--namespace` values Kopf reads as patterns (globs, negations, comma lists), not
    as one namespace's name."""
    names = select_specific_namespaces(values)
    return [v for v in values if v not in names]


class ObjectWatch:
    def __init__(self, client: kube.Kube, kind: kube.Kind, namespace: str | None, label_selector: str,
                 on_event: OnEvent, *, gate: PeeringGate | None = None, timeout: int = 300,
                 accept: Callable[[str], bool] | None = None):
        """`accept`: which namespaces' objects a cluster-wide watch hands over (default: all)."""
        self.kube, self.kind, self.namespace = client, kind, namespace
        self.label_selector, self.on_event, self.accept = label_selector, on_event, accept
        self.gate, self.timeout = gate, timeout
        # (namespace, name) -> the object's identity only, to hand over as deleted if it is
        # gone at the next list: the operator's handlers read nothing else of a deleted object.
        self.known: dict[tuple[str, str], dict[str, Any]] = {}
        self.lists = 0  # LISTs read: one at the start, and one after each 410 or pause
        self.where = f"{kind.plural} ({label_selector}{f' in {namespace}' if namespace else ''})"

    async def run(self) -> None:
        """Watches until cancelled; an error waits (1, 2, 4 ... 30 s) and goes on."""
        version: str | None = None
        failures = 0
        while True:
            try:
                if not self._allowed():
                    version = None
                    assert self.gate is not None
                    await self.gate.until_allows(self.namespace)
                if version is None:
                    version = await self.relist()
                version = await self.follow(version)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Relist:
                version = None
            except Exception as err:  # noqa: BLE001 - a watch keeps going; the resync covers gaps
                if isinstance(err, kube.ApiError) and err.status == GONE:
                    version = None  # older than the server keeps: list again, at once
                    continue
                failures += 1
                log.warning("watching %s: %s; again in %ds", self.where, brief(err),
                            min(2 ** (failures - 1), 30))
                await asyncio.sleep(min(2 ** (failures - 1), 30))

    def _allowed(self) -> bool:
        return self.gate is None or self.gate.allows(self.namespace)

    async def relist(self) -> str:
        """Hand over every current object, and the vanished ones as deleted; the version the
        watch goes on from."""
        items, version = await self.kube.list_at(self.kind, self.namespace, self.label_selector, page=PAGE)
        self.lists += 1
        before, self.known = self.known, {}
        for obj in items:
            self._note(obj)
            self._hand_over(obj, False)
        for key, stub in before.items():
            if key not in self.known:
                self._hand_over(stub, True)
        return version

    async def follow(self, version: str) -> str:
        """The events from `version` until the server ends the stream (its timeout) or the
        replica must pause: the version to go on from. Raises Relist on 410 Gone."""
        # aclosing: a stream left early (410, a pause) gives its connection back at once.
        async with aclosing(self.kube.watch(self.kind, self.namespace, self.label_selector,
                                            resource_version=version, timeout=self.timeout)) as events:
            async for event in events:
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == GONE:
                        raise Relist()
                    raise kube.ApiError(int(obj.get("code") or 500), str(obj.get("reason") or "Error"),
                                        str(obj.get("message") or ""))
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind == "BOOKMARK":
                    continue
                if not self._allowed():
                    raise Relist()  # paused: the next list, once allowed, says what happened since
                deleted = kind == "DELETED"
                if deleted:
                    self.known.pop(_key(obj), None)
                else:
                    self._note(obj)
                self._hand_over(obj, deleted)
        return version

    def _hand_over(self, obj: Mapping[str, Any], deleted: bool) -> None:
        if self.accept is not None and not self.accept(_key(obj)[0]):
            return
        try:
            self.on_event(obj, deleted)
        except Exception:  # noqa: BLE001 - one object's bug must not stop the others' events
            log.exception("watching %s: the handler failed on %s", self.where, "/".join(_key(obj)))

    def _note(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        self.known[_key(obj)] = {
            "apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": {"namespace": meta.get("namespace"), "name": meta.get("name"),
                         "uid": meta.get("uid"), "labels": dict(meta.get("labels") or {})}}


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


