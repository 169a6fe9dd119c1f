"""After a start, the children of already-reconciled consumers are read with one labelled
LIST per kind and namespace instead of a GET per child per consumer.

A restarted operator verifies every consumer it finds (Kopf's resume), and each reads its
Deployment and then each child before comparing (7 GETs per consumer: 7,000 requests for
1,000 consumers). The lists answer the same question in 5 requests per namespace (in
pages). The outcome is the one of the GETs: a child that differs is patched, one that is
missing is created (a 409, when it was created after the list, falls back to read and
compare, as `kube.apply` does).

Each consumer's part is handed out once (its first reconcile in this process) and the lot
is dropped `MAX_AGE` seconds after it was listed: a later reconcile, the periodic resync
among them, reads with GETs as before, so a list is never older than that when it decides
that a child is as it should be.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from . import kube
from .builders.common import LABEL_CONSUMER
from .single_flight import SingleFlight

KINDS = ("ConfigMap", "ServiceAccount", "RoleBinding", "Service", "Deployment")
MAX_AGE = 60.0
PAGE = 250  # items per LIST response: bounds the size of one body in memory

Children = dict[tuple[str, str], dict[str, Any]]  # (kind, name) -> the slim object


def slim(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """What `kube.apply` compares and `deployment_view` reads; not managedFields, status
    and the rest, which would be most of the memory of 1,000 listed Deployments."""
    out = kube.owned_part({**obj, "kind": kind})
    out["kind"] = kind
    out["metadata"]["name"] = obj["metadata"]["name"]
    if kind == "RoleBinding":
        out["roleRef"] = obj.get("roleRef")
    if kind == "Deployment":
        out["status"] = {"availableReplicas": (obj.get("status") or {}).get("availableReplicas", 0)}
    return out


class ListedChildren:
    def __init__(self, k: kube.Kube):
        self.kube = k
        self.flight = SingleFlight()
        self.listed: dict[str, tuple[float, dict[str, Children]]] = {}  # ns -> (when, consumer -> children)
        self.given: set[tuple[str, str]] = set()  # (ns, consumer) handed out once already

    async def take(self, namespace: str, consumer: str) -> Children | None:
        """The consumer's children as listed, once; None when they were handed out already,
        when none were listed, or when the list is older than MAX_AGE (read them one by
        one then: the same outcome, more requests)."""
        entry = self.listed.get(namespace)
        if entry is None:
            entry = await self.flight.run(namespace, lambda: self._list(namespace))
        elif time.monotonic() - entry[0] > MAX_AGE:
            entry[1].clear()  # never listed again: later reconciles read their own
            return None
        return entry[1].pop(consumer, None)

    async def _list(self, namespace: str) -> tuple[float, dict[str, Children]]:
        # Only `take` starts it, when nothing is listed for `namespace`, with no await between
        # its look and the flight: one list per namespace.
        at = time.monotonic()
        by_consumer: dict[str, Children] = {}
        for kind in KINDS:
            for obj in await self.kube.list(kube.BY_KIND[kind], namespace, LABEL_CONSUMER, page=PAGE):
                owner = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_CONSUMER)
                if owner:
                    by_consumer.setdefault(owner, {})[(kind, obj["metadata"]["name"])] = slim(kind, obj)
        self.listed[namespace] = (at, by_consumer)
        return self.listed[namespace]
