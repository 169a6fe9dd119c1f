"""A small dict-in, dict-out client of the API server for the objects the operator writes.

Built on the `kubernetes` package's ApiClient (kubeconfig, in-cluster, exec plugins) but
without its generated models: bodies stay plain JSON dicts, as Kopf hands them to handlers.
Calls run in a bounded thread pool so the Kopf event loop never blocks on the network.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from antidote_api.types import GROUP, VERSION

MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Kind:
    api: str  # "/api/v1" or "/apis/<group>/<version>"
    plural: str

    def path(self, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
        out = f"{self.api}/namespaces/{namespace}/{self.plural}"
        if name is not None:
            out += f"/{name}"
        if subresource is not None:
            out += f"/{subresource}"
        return out


CONFIGMAP = Kind("/api/v1", "configmaps")
SECRET = Kind("/api/v1", "secrets")
SERVICE_ACCOUNT = Kind("/api/v1", "serviceaccounts")
SERVICE = Kind("/api/v1", "services")
POD = Kind("/api/v1", "pods")
EVENT = Kind("/api/v1", "events")
ROLE = Kind("/apis/rbac.authorization.k8s.io/v1", "roles")
ROLE_BINDING = Kind("/apis/rbac.authorization.k8s.io/v1", "rolebindings")
DEPLOYMENT = Kind("/apis/apps/v1", "deployments")
JOB = Kind("/apis/batch/v1", "jobs")
QUEUE_CONSUMER = Kind(f"/apis/{GROUP}/{VERSION}", "queueconsumers")
POISON_POLICY = Kind(f"/apis/{GROUP}/{VERSION}", "poisonpolicies")

BY_KIND = {"ConfigMap": CONFIGMAP, "Secret": SECRET, "ServiceAccount": SERVICE_ACCOUNT, "Service": SERVICE,
           "Role": ROLE, "RoleBinding": ROLE_BINDING, "Deployment": DEPLOYMENT, "Pod": POD,
           "Job": JOB}


class Conflict(Exception):
    """The object changed since it was read (HTTP 409): read it again and recompute."""


class Kube:
    def __init__(self, api_client: client.ApiClient, workers: int = 16):
        self.api = api_client
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube")
        # Scaling a consumer to 0 protects its queue: it never waits behind status writes.
        self.urgent_pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube-urgent")
        self._urgent = 0
        self._calm = asyncio.Event()
        self._calm.set()

    @classmethod
    def from_environment(cls, workers: int = 16) -> Kube:
        """In a pod: its service account; elsewhere: $KUBECONFIG or ~/.kube/config."""
        cfg = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException:
            config.load_kube_config(client_configuration=cfg)
        cfg.connection_pool_maxsize = 2 * workers
        return cls(client.ApiClient(cfg), workers)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.urgent_pool.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    @property
    def server(self) -> str:
        return self.api.configuration.host

    # --- raw calls ----------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any = None, *, query: Mapping[str, Any] | None = None,
              content_type: str | None = None) -> dict[str, Any] | None:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        method_, url, headers, body, _post = self.api.param_serialize(
            method, path, query_params=list((query or {}).items()) or None, header_params=headers,
            body=body, auth_settings=["BearerToken"])
        resp = self.api.call_api(method_, url, header_params=headers, body=body, _request_timeout=30)
        data = resp.read()
        if resp.status >= 400:
            err = ApiException(status=resp.status, reason=resp.reason)
            err.body = data
            if resp.status == 404 and method in ("GET", "DELETE"):
                return None
            if resp.status == 409:
                raise Conflict(_reason(err))
            raise err
        return json.loads(data) if data else {}

    async def call(self, method: str, path: str, body: Any = None, *, urgent: bool = False,
                   **kw: Any) -> dict[str, Any] | None:
        loop = asyncio.get_running_loop()
        if not urgent:
            # While consumers are being scaled to 0 (a burst of disables), other calls wait:
            # the API server serves the protective writes first.
            while self._urgent:
                await self._calm.wait()
            return await loop.run_in_executor(self.pool, lambda: self._call(method, path, body, **kw))
        self._urgent += 1
        self._calm.clear()
        try:
            return await loop.run_in_executor(self.urgent_pool, lambda: self._call(method, path, body, **kw))
        finally:
            self._urgent -= 1
            if not self._urgent:
                self._calm.set()

    # --- verbs ----------------------------------------------------------------------------
    async def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        return await self.call("GET", kind.path(namespace, name))

    async def list(self, kind: Kind, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        query = {"labelSelector": label_selector} if label_selector else None
        out = await self.call("GET", kind.path(namespace), query=query)
        return list((out or {}).get("items", []))

    async def create(self, kind: Kind, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        out = await self.call("POST", kind.path(namespace), dict(body))
        assert out is not None
        return out

    async def patch(self, kind: Kind, namespace: str, name: str, patch: Mapping[str, Any], *,
                    subresource: str | None = None, urgent: bool = False) -> dict[str, Any] | None:
        """JSON merge patch; put metadata.resourceVersion in `patch` to make it conditional."""
        try:
            return await self.call("PATCH", kind.path(namespace, name, subresource), dict(patch),
                                   content_type=MERGE_PATCH, urgent=urgent)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    async def delete(self, kind: Kind, namespace: str, name: str) -> bool:
        """True when it was there; the server's default propagation (background) applies."""
        return await self.call("DELETE", kind.path(namespace, name)) is not None

    async def post_event(self, regarding: Mapping[str, Any], *, type: str, reason: str, message: str,
                         component: str, instance: str) -> None:
        """A core/v1 Event about `regarding` (kubectl describe and get events show it)."""
        meta = regarding["metadata"]
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": regarding["apiVersion"], "kind": regarding["kind"],
                               "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "type": type, "reason": reason, "message": message[:1024],
            "source": {"component": component}, "reportingComponent": component,
            "reportingInstance": instance, "action": reason,
            "firstTimestamp": now[:19] + "Z", "lastTimestamp": now[:19] + "Z", "eventTime": now, "count": 1,
        }
        await self.create(EVENT, meta["namespace"], body)

    async def nodes_exist(self) -> bool:
        out = await self.call("GET", "/api/v1/nodes", query={"limit": 1})
        return bool((out or {}).get("items"))


def _reason(err: ApiException) -> str:
    try:
        return json.loads(err.body).get("message", str(err.reason))
    except (TypeError, ValueError):
        return str(err.reason)


def is_subset(want: Any, have: Any) -> bool:
    """Whether every field of `want` is in `have` with the same value.

    Lists must match item by item (dict items as subsets): the server adds defaults to
    objects and list items (a container's terminationMessagePath), never list items.
    """
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(
            k in have and is_subset(v, have[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(
            is_subset(w, h) for w, h in zip(want, have))
    if isinstance(want, (int, float)) and isinstance(have, str) or isinstance(want, str) and isinstance(have, (int, float)):
        return str(want) == str(have)  # intOrString fields (ports, quantities)
    return want == have


# The fields of each child the operator owns; the rest (status, server defaults, fields
# written by other controllers, the dev runner's annotations) is left alone.
OWNED_FIELDS = {"ConfigMap": ("data",), "ServiceAccount": ("automountServiceAccountToken",),
                "Role": ("rules",),
                # roleRef is immutable: a binding whose roleRef differs is replaced (apply).
                "RoleBinding": ("subjects",), "Service": ("spec",), "Deployment": ("spec",),
                # A Job's spec is immutable: reader Jobs are created, never updated.
                "Job": ()}


def owned_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata", {})
    out: dict[str, Any] = {"metadata": {k: meta[k] for k in ("labels", "ownerReferences") if k in meta}}
    for field in OWNED_FIELDS[obj["kind"]]:
        if field in obj:
            out[field] = obj[field]
    return out


async def apply(kube: Kube, desired: Mapping[str, Any], *, create_first: bool = False) -> str:
    """Create `desired`, or patch the fields the operator owns when they differ.

    Returns "created", "updated" or "unchanged"; writes nothing when nothing differs.
    `create_first`: the object is most likely absent (its owner was never reconciled), so
    try the create without reading first; if it exists after all (409), read and compare
    as usual. The outcome is the same either way, one request fewer when it was absent.
    """
    kind = BY_KIND[desired["kind"]]
    ns, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
    want = owned_part(desired)
    have = None if create_first else await kube.get(kind, ns, name)
    if have is None:
        try:
            await kube.create(kind, ns, desired)
            return "created"
        except Conflict:  # created meanwhile (another reconcile); compare with it instead
            have = await kube.get(kind, ns, name)
            if have is None:
                raise
    if desired["kind"] == "RoleBinding" and have.get("roleRef") != desired["roleRef"]:
        # An older operator bound a Role of its own; the server refuses to change a roleRef.
        await kube.delete(kind, ns, name)
        await kube.create(kind, ns, desired)
        return "updated"
    if is_subset(want, have):
        return "unchanged"
    await kube.patch(kind, ns, name, want)
    return "updated"


async def create_once(kube: Kube, desired: Mapping[str, Any]) -> str:
    """Create `desired` unless an object of its name exists; never reads it. For the Spark
    auth Secret: the operator may create and delete Secrets but not read any."""
    kind = BY_KIND[desired["kind"]]
    try:
        await kube.create(kind, desired["metadata"]["namespace"], desired)
        return "created"
    except Conflict:
        return "unchanged"
