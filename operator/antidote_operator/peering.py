"""Which replica may act when several run with Kopf peering (`--peering NAME`).

Kopf pauses the watch streams of a replica that is not the highest-priority live peer, so
its handlers stop; the metrics watcher is the operator's own loop, so it asks here first.
The rule is Kopf's: a replica acts when no other live peer has the same or a higher
priority, read from the same (Cluster)KopfPeering object Kopf keeps alive.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import random
import socket
import string
import time
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from antidote_api.times import parse_iso

from . import kube

log = logging.getLogger("antidote.operator.peering")

PEERING_GROUP = "/apis/kopf.dev/v1"

# Kopf's peering CRDs (`antidote operator --print-peering-crds | kubectl apply -f -`); then
# create a KopfPeering NAME in each watched namespace, or a ClusterKopfPeering NAME.
_PEERING_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.kopf.dev
spec:
  scope: {scope}
  group: kopf.dev
  names: {{kind: {kind}, plural: {plural}, singular: {singular}}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          status: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"""
PEERING_CRDS = "---\n".join(
    _PEERING_CRD.format(scope=scope, kind=kind, plural=kind.lower() + "s", singular=kind.lower())
    for scope, kind in (("Cluster", "ClusterKopfPeering"), ("Namespaced", "KopfPeering")))
REFRESH_SECONDS = 5.0


def own_identity() -> str:
    """This replica's peer id (the pod's name in a cluster), given to Kopf as well."""
    pod = os.environ.get("POD_ID") or os.environ.get("POD_NAME")
    if pod:
        return pod
    now = datetime.now(timezone.utc).strftime("%Y%m%d%H%M%S")
    rnd = "".join(random.choices(string.ascii_lowercase + string.digits, k=3))
    return f"{getpass.getuser()}@{socket.gethostname()}/{now}/{rnd}"


def may_act(status: Mapping[str, Any], identity: str, priority: int, now: datetime | None = None) -> bool:
    """Kopf's rule: pause while another live peer has a higher or the same priority."""
    now = now or datetime.now(timezone.utc)
    for peer_id, info in status.items():
        if peer_id == identity or not isinstance(info, Mapping):
            continue
        try:
            seen = parse_iso(str(info["lastseen"]))
            alive = seen + timedelta(seconds=int(info.get("lifetime", 60))) > now
        except (KeyError, ValueError):
            continue
        if alive and int(info.get("priority", 0)) >= priority:
            return False
    return True


class PeeringGate:
    def __init__(self, k: kube.Kube, *, name: str | None, namespaces: list[str], identity: str,
                 priority: int):
        self.kube, self.name, self.namespaces = k, name, namespaces
        self.identity, self.priority = identity, priority
        self.active: dict[str | None, bool] = {}
        self.checked = 0.0
        self._refreshed = asyncio.Event()  # set, and replaced, at every read of the peering

    async def refresh(self) -> None:
        if self.name is None or time.monotonic() - self.checked < REFRESH_SECONDS:
            return
        self.checked = time.monotonic()
        scopes: list[str | None] = list(self.namespaces) or [None]
        for ns in scopes:
            path = (f"{PEERING_GROUP}/namespaces/{ns}/kopfpeerings/{self.name}" if ns
                    else f"{PEERING_GROUP}/clusterkopfpeerings/{self.name}")
            try:
                body = await self.kube.call("GET", path)
            except Exception as err:  # noqa: BLE001 - unknown means "do not act"
                log.warning("peering %s: %s", self.name, err)
                body = None
            was = self.active.get(ns)
            now = body is not None and may_act(body.get("status") or {}, self.identity, self.priority)
            self.active[ns] = now
            if was is not None and was != now:
                log.info("peering %s%s: this replica %s", self.name, f" in {ns}" if ns else "",
                         "acts now" if now else "pauses (another replica acts)")
        refreshed, self._refreshed = self._refreshed, asyncio.Event()
        refreshed.set()

    def allows(self, namespace: str | None) -> bool:
        if self.name is None:
            return True
        return self.active.get(namespace if self.namespaces else None, False)

    async def until_allows(self, namespace: str | None) -> None:
        """Returns once this replica may act in `namespace` (None: cluster-wide), as the
        metrics watcher's reads of the peering say (every REFRESH_SECONDS)."""
        while not self.allows(namespace):
            await self._refreshed.wait()
