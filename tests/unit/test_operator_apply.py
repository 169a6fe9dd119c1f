"""`kube.apply`'s choice of requests (read first, or create first), against an in-memory
stand-in for the API server: which requests, in which order, and that the outcome is the
same either way."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

from antidote_operator import kube


class Server:
    """Objects by (plural, namespace, name); records each request; adds a server default."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.requests: list[str] = []

    async def get(self, kind: kube.Kind, ns: str, name: str) -> dict[str, Any] | None:
        self.requests.append("GET")
        obj = self.objects.get((kind.plural, ns, name))
        return copy.deepcopy(obj) if obj is not None else None

    async def create(self, kind: kube.Kind, ns: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.requests.append("POST")
        key = (kind.plural, ns, body["metadata"]["name"])
        if key in self.objects:
            raise kube.Conflict("already exists")
        stored = copy.deepcopy(dict(body))
        stored["data"]["defaulted"] = "by the server"
        self.objects[key] = stored
        return copy.deepcopy(stored)

    async def patch(self, kind: kube.Kind, ns: str, name: str, patch: Mapping[str, Any], **_: Any) -> dict[str, Any]:
        self.requests.append("PATCH")
        self.objects[(kind.plural, ns, name)]["data"].update(patch.get("data", {}))
        return {}


OWNER = {"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer", "name": "orders", "uid": "uid-orders",
         "controller": True, "blockOwnerDeletion": True}


def configmap(value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "orders-settings", "namespace": "shop",
            "labels": {"antidote.dev/consumer": "orders"}, "ownerReferences": [OWNER]},
            "data": {"settings.yaml": value}}


def apply(server: Server, desired: dict[str, Any], create_first: bool) -> str:
    server.requests.clear()
    return asyncio.run(kube.apply(server, desired, create_first=create_first))  # type: ignore[arg-type]


def test_create_first_makes_an_absent_child_in_one_request() -> None:
    server = Server()
    assert apply(server, configmap("a"), create_first=True) == "created"
    assert server.requests == ["POST"]


def test_read_first_makes_an_absent_child_in_two() -> None:
    server = Server()
    assert apply(server, configmap("a"), create_first=False) == "created"
    assert server.requests == ["GET", "POST"]


def test_create_first_on_an_existing_child_reads_and_compares_as_read_first_does() -> None:
    server = Server()
    apply(server, configmap("a"), create_first=False)
    # Already as desired (server defaults aside): nothing is written, either way.
    assert apply(server, configmap("a"), create_first=True) == "unchanged"
    assert server.requests == ["POST", "GET"]
    assert apply(server, configmap("a"), create_first=False) == "unchanged"
    assert server.requests == ["GET"]
    # Drifted: patched back, either way.
    assert apply(server, configmap("b"), create_first=True) == "updated"
    assert server.requests == ["POST", "GET", "PATCH"]
    assert server.objects[("configmaps", "shop", "orders-settings")]["data"]["settings.yaml"] == "b"
