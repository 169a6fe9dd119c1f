"""A small dict-in, dict-out client of the API server for the objects the operator writes.

Plain JSON dicts, as Kopf hands them to handlers, over aiohttp (which Kopf uses too) on
the event loop: no threads, and no `kubernetes` package (~38 MB of generated models the
operator never used). Credentials come from `kube_login`, shared with Kopf.
"""

from __future__ import annotations

import asyncio
import builtins
import json
from datetime import datetime, timezone
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from antidote_api.types import GROUP, POISON_POLICIES, QUEUE_CONSUMERS, VERSION
from antidote_api.wire import USER_ANNOTATIONS

from .ownership import conflict_of

MERGE_PATCH = "application/merge-patch+json"
TIMEOUT = aiohttp.ClientTimeout(total=30)


@dataclass(frozen=True)
class Kind:
    api: str  # "/api/v1" or "/apis/<group>/<version>"
    plural: str

    def path(self, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
        """The object's path; a collection's when `name` is None, across all namespaces when
        `namespace` is None too."""
        if namespace is None:
            assert name is None, "a named object needs its namespace"
            return f"{self.api}/{self.plural}"
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
QUEUE_CONSUMER = Kind(f"/apis/{GROUP}/{VERSION}", QUEUE_CONSUMERS)
POISON_POLICY = Kind(f"/apis/{GROUP}/{VERSION}", POISON_POLICIES)

BY_KIND = {"ConfigMap": CONFIGMAP, "Secret": SECRET, "ServiceAccount": SERVICE_ACCOUNT, "Service": SERVICE,
           "Role": ROLE, "RoleBinding": ROLE_BINDING, "Deployment": DEPLOYMENT, "Pod": POD,
           "Job": JOB}


class ApiError(Exception):
    """The API server answered with an error: its HTTP `status` and `reason` phrase, and
    the message of its Status object (`message`), if any."""

    def __init__(self, status: int, reason: str, message: str = ""):
        super().__init__(f"HTTP {status} {reason}" + (f": {message}" if message else ""))
        self.status, self.reason, self.message = status, reason, message


class Conflict(Exception):
    """The object changed since it was read (HTTP 409): read it again and recompute."""


class NotOwned(Exception):
    """An object of a child's name exists and is not that consumer's (ownership): nothing of
    it was written. The message says which, for Ready and the Warning Event."""


def status_message(data: bytes) -> str:
    """The `message` of the Status object the API server sends with an error."""
    try:
        out = json.loads(data)
    except (TypeError, ValueError):
        return ""
    return str(out.get("message", "")) if isinstance(out, dict) else ""


def outcome(method: str, status: int, reason: str, data: bytes) -> dict[str, Any] | None:
    """What a response means to the operator: the body, None for a GET or DELETE of
    something absent (404), `Conflict` for 409, `ApiError` for any other error."""
    if status < 400:
        return json.loads(data) if data else {}
    if status == 404 and method in ("GET", "DELETE"):
        return None
    message = status_message(data)
    if status == 409:
        raise Conflict(message or reason)
    raise ApiError(status, reason, message)


def watch_events(rest: bytes, chunk: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """A watch stream's events (one JSON object a line, of any length: aiohttp's readline
    stops at 128 KiB) completed by `chunk` after the unfinished line `rest`, and what is left."""
    *lines, rest = (rest + chunk).split(b"\n")
    return [json.loads(line) for line in lines if line.strip()], rest


class Kube:
    def __init__(self, login: Callable[[], Any], workers: int = 16):
        """`login()` returns a `kopf.ConnectionInfo`; it is called again after a 401 (a
        service-account token is rotated by the kubelet)."""
        self.login = login
        self.info = login()
        self.workers = workers
        self._session: aiohttp.ClientSession | None = None
        # At most `workers` calls in flight, and as many again for scaling to 0, which
        # protects a queue: it never waits behind status writes.
        self._slots = asyncio.Semaphore(workers)
        self._urgent_slots = asyncio.Semaphore(workers)
        self._urgent = 0
        self._calm = asyncio.Event()
        self._calm.set()

    @classmethod
    def from_environment(cls, workers: int = 16) -> Kube:
        """In a pod: its service account; elsewhere: $KUBECONFIG or ~/.kube/config."""
        from .kube_login import login

        return cls(login, workers)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def server(self) -> str:
        return str(self.info.server)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            ssl = self.info.as_ssl_context() if self.server.startswith("https:") else False
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=2 * self.workers, ssl=ssl), timeout=TIMEOUT,
                headers={"Accept": "application/json"}, trust_env=self.info.trust_env)
        return self._session

    # --- raw calls ----------------------------------------------------------------------
    async def _call(self, method: str, path: str, body: Any = None, *, query: Mapping[str, Any] | None = None,
                    content_type: str | None = None) -> dict[str, Any] | None:
        headers = {}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
            data = json.dumps(body).encode()
        params = {k: str(v) for k, v in (query or {}).items()} or None
        for attempt in (1, 2):
            session = self._open()
            try:
                async with session.request(method, self.server + path, params=params, data=data,
                                           headers={**headers, **self.info.as_http_headers()}) as resp:
                    status, reason, raw = resp.status, resp.reason or "", await resp.read()
            except aiohttp.ClientConnectorError:
                if attempt == 2:  # not connected: nothing was sent, so any request is retried
                    raise
                continue
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                # Mostly a kept-alive connection the server had closed (urllib3 retried these
                # for the `kubernetes` client). A create is not sent twice (an Event would be
                # doubled); the caller's retry covers it.
                if attempt == 2 or method == "POST":
                    raise
                continue
            if status == 401 and attempt == 1:
                self.info = self.login()  # a rotated token: read the credentials again
                continue
            return outcome(method, status, reason, raw)
        raise AssertionError("unreachable")

    async def call(self, method: str, path: str, body: Any = None, *, urgent: bool = False,
                   **kw: Any) -> dict[str, Any] | None:
        if not urgent:
            # While consumers are being scaled to 0 (a burst of disables), other calls wait:
            # the API server serves the protective writes first.
            while self._urgent:
                await self._calm.wait()
            async with self._slots:
                return await self._call(method, path, body, **kw)
        self._urgent += 1
        self._calm.clear()
        try:
            async with self._urgent_slots:
                return await self._call(method, path, body, **kw)
        finally:
            self._urgent -= 1
            if not self._urgent:
                self._calm.set()

    # --- verbs ----------------------------------------------------------------------------
    async def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        return await self.call("GET", kind.path(namespace, name))

    async def list(self, kind: Kind, namespace: str | None, label_selector: str | None = None, *,
                   page: int | None = None) -> list[dict[str, Any]]:
        """Every item; `page`: in pages of that many (bounds each response's size)."""
        return (await self.list_at(kind, namespace, label_selector, page=page))[0]

    async def list_at(self, kind: Kind, namespace: str | None, label_selector: str | None = None, *,
                      page: int | None = None) -> tuple[builtins.list[dict[str, Any]], str]:
        """Every item, and the list's resourceVersion (where a watch of it starts)."""
        # builtins.list: in the class's body, `list` is the method above.
        items: builtins.list[dict[str, Any]] = []
        query: dict[str, Any] = {"labelSelector": label_selector} if label_selector else {}
        if page:
            query["limit"] = page
        while True:
            out = await self.call("GET", kind.path(namespace), query=query) or {}
            items.extend(out.get("items") or [])
            meta = out.get("metadata") or {}
            more = meta.get("continue")
            if not page or not more:
                return items, str(meta.get("resourceVersion") or "")
            query["continue"] = more

    async def watch(self, kind: Kind, namespace: str | None, label_selector: str | None, *,
                    resource_version: str, timeout: int) -> AsyncGenerator[dict[str, Any], None]:
        """The watch events of a collection from `resource_version` (with bookmarks), one
        dict each ({"type", "object"}), until the server ends the stream after `timeout`
        seconds. Not counted against the call slots: it is held open."""
        query = {"watch": "true", "allowWatchBookmarks": "true", "resourceVersion": resource_version,
                 "timeoutSeconds": str(timeout)}
        if label_selector:
            query["labelSelector"] = label_selector
        # No total: the server ends the stream; a silent connection (no event, no bookmark,
        # which the server sends about once a minute) is dead after `timeout` and a margin.
        wait = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=timeout + 30)
        for attempt in (1, 2):
            session = self._open()
            async with session.get(self.server + kind.path(namespace), params=query, timeout=wait,
                                   headers=self.info.as_http_headers()) as resp:
                if resp.status == 401 and attempt == 1:
                    self.info = self.login()
                    continue
                if resp.status >= 400:  # a 404 too: a watch of nothing is an error, not an end
                    data = await resp.read()
                    raise ApiError(resp.status, resp.reason or "", status_message(data))
                rest = b""
                async for chunk in resp.content.iter_any():
                    events, rest = watch_events(rest, chunk)
                    for event in events:
                        yield event
                if rest.strip():
                    yield json.loads(rest)
                return

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
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    async def delete(self, kind: Kind, namespace: str, name: str, *, uid: str | None = None,
                     propagation: str | None = None) -> bool:
        """True when it was there; the server's default propagation (background) applies.
        `uid`: only that very object (a precondition; another of the same name is a 409)."""
        options: dict[str, Any] = {}
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        if propagation is not None:
            options["propagationPolicy"] = propagation
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **options} if options else None
        return await self.call("DELETE", kind.path(namespace, name), body) is not None

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


# Kinds whose annotations the operator owns too: the driver ServiceAccount's describe its
# executors to the chart's admission policy, and must follow a changed image or secretRef.
OWNED_ANNOTATIONS = {"ServiceAccount"}




def stale_annotations(desired: Mapping[str, Any], have: Mapping[str, Any]) -> dict[str, None]:
    """The annotations to remove from `have`: keys the operator wrote from the spec before
    (listed in USER_ANNOTATIONS) that `desired` no longer has, and that list itself when
    `desired` has none. Other annotations on the server are never removed."""
    want = (desired.get("metadata") or {}).get("annotations") or {}
    had = (have.get("metadata") or {}).get("annotations") or {}
    listed = [k for k in (had.get(USER_ANNOTATIONS) or "").split(",") if k]
    stale = {k: None for k in listed if k in had and k not in want}
    if USER_ANNOTATIONS in had and USER_ANNOTATIONS not in want:
        stale[USER_ANNOTATIONS] = None
    return stale


def owned_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The fields `apply` compares and writes (and, for `listed_children`, the uid)."""
    meta = obj.get("metadata", {})
    keys = ("labels", "ownerReferences", "uid") + (("annotations",) if obj["kind"] in OWNED_ANNOTATIONS else ())
    out: dict[str, Any] = {"metadata": {k: meta[k] for k in keys if k in meta}}
    for field in OWNED_FIELDS[obj["kind"]]:
        if field in obj:
            out[field] = obj[field]
    return out


async def apply(kube: Kube, desired: Mapping[str, Any], *, create_first: bool = False,
                listed: Mapping[tuple[str, str], Mapping[str, Any]] | None = None) -> str:
    """Create `desired`, or patch the fields the operator owns when they differ.

    Returns "created", "updated" or "unchanged"; writes nothing when nothing differs.
    Raises `NotOwned`, having written nothing, when an object of its name exists without an
    ownerReference to `desired`'s owner (ownership): a name is no proof of ownership.
    `create_first`: the object is most likely absent (its owner was never reconciled), so
    try the create without reading first; if it exists after all (409), read and compare
    as usual. The outcome is the same either way, one request fewer when it was absent.
    `listed`: the owner's children as a LIST returned them (`listed_children`), (kind,
    name) -> object, read instead of a GET; one absent from it is created first.
    """
    kind = BY_KIND[desired["kind"]]
    ns, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
    want = owned_part(desired)
    if listed is not None:
        have = listed.get((desired["kind"], name))
        have = dict(have) if have is not None else None
    else:
        have = None if create_first else await kube.get(kind, ns, name)
    if have is None:
        try:
            await kube.create(kind, ns, desired)
            return "created"
        except Conflict:  # created meanwhile (another reconcile); compare with it instead
            have = await kube.get(kind, ns, name)
            if have is None:
                raise
    conflict = conflict_of(desired, have)
    if conflict is not None:
        raise NotOwned(conflict)
    # The object as checked, and no other: an object replaced under the same name since it was
    # read fails the write (a uid precondition) instead of being taken over.
    uid = (have.get("metadata") or {}).get("uid")
    if desired["kind"] == "RoleBinding" and have.get("roleRef") != desired["roleRef"]:
        # An older operator bound a Role of its own; the server refuses to change a roleRef.
        await kube.delete(kind, ns, name, uid=uid)
        await kube.create(kind, ns, desired)
        return "updated"
    stale = stale_annotations(desired, have) if desired["kind"] in OWNED_ANNOTATIONS else {}
    if not stale and is_subset(want, have):
        return "unchanged"
    if stale:  # a merge patch's null removes the key
        want["metadata"]["annotations"] = {**want["metadata"].get("annotations", {}), **stale}
    if uid:
        want["metadata"]["uid"] = uid
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
