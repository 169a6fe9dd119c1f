"""The operator's own API client (`kube`, `kube_login`, `single_flight`,
`listed_children`, `no_kubernetes`): the pure parts. Against the real API server it runs in
every operator integration test (tests/integration/test_operator_*.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from antidote_operator import kube, kube_login, listed_children
from antidote_operator.single_flight import SingleFlight


# --- what a response means ----------------------------------------------------------------

def status_body(message: str, code: int) -> bytes:
    return json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": code}).encode()


def test_a_success_is_its_body() -> None:
    assert kube.outcome("GET", 200, "OK", b'{"a": 1}') == {"a": 1}
    assert kube.outcome("DELETE", 200, "OK", b"") == {}


def test_a_404_of_a_get_or_delete_is_absent_and_of_a_write_an_error() -> None:
    assert kube.outcome("GET", 404, "Not Found", status_body("x not found", 404)) is None
    assert kube.outcome("DELETE", 404, "Not Found", b"") is None
    with pytest.raises(kube.ApiError) as err:
        kube.outcome("POST", 404, "Not Found", status_body('namespaces "nope" not found', 404))
    assert (err.value.status, err.value.reason) == (404, "Not Found")
    assert err.value.message == 'namespaces "nope" not found'


def test_a_409_is_a_conflict_with_the_servers_message() -> None:
    with pytest.raises(kube.Conflict, match="the object has been modified"):
        kube.outcome("PATCH", 409, "Conflict", status_body("the object has been modified", 409))
    with pytest.raises(kube.Conflict, match="Conflict"):
        kube.outcome("POST", 409, "Conflict", b"not json")


def test_other_errors_carry_status_reason_and_message() -> None:
    with pytest.raises(kube.ApiError) as err:
        kube.outcome("PATCH", 422, "Unprocessable Entity", status_body("spec.replicas: Invalid value", 422))
    assert err.value.status == 422 and err.value.reason == "Unprocessable Entity"
    assert str(err.value) == "HTTP 422 Unprocessable Entity: spec.replicas: Invalid value"
    with pytest.raises(kube.ApiError) as err:
        kube.outcome("GET", 503, "Service Unavailable", b"<html>busy</html>")
    assert str(err.value) == "HTTP 503 Service Unavailable" and err.value.message == ""


# --- logging in ----------------------------------------------------------------------------

def kubeconfig(tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "eks-admin"}}],
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://10.0.0.1:6443"}}],
        "users": [{"name": "eks-admin", "user": user}]}))
    return path


@pytest.fixture
def outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def test_an_exec_plugin_kubeconfig_is_refused_naming_the_user_and_the_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outside_a_pod: None) -> None:
    path = kubeconfig(tmp_path, {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                          "command": "aws", "args": ["eks", "get-token"]}})
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(kube_login.LoginRefused) as err:
        kube_login.login()
    text = str(err.value)
    assert "'eks-admin'" in text and "users[].user.exec" in text and "'aws'" in text and str(path) in text


def test_a_token_kubeconfig_logs_in_and_relative_files_are_relative_to_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outside_a_pod: None) -> None:
    path = kubeconfig(tmp_path, {"token": "s3cret"},
                      {"server": "https://10.0.0.1:6443", "certificate-authority": "pki/ca.crt"})
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.chdir("/")
    info = kube_login.login()
    assert info.server == "https://10.0.0.1:6443"
    assert info.as_http_headers() == {"Authorization": "Bearer s3cret"}
    assert info.ca_path == str(tmp_path / "pki" / "ca.crt")


def test_no_credentials_at_all_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          outside_a_pod: None) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(kube_login.LoginRefused, match="no credentials"):
        kube_login.login()


# --- single flight -------------------------------------------------------------------------

def test_concurrent_callers_share_one_call_and_a_later_caller_calls_again() -> None:
    calls = []

    async def fetch() -> list[str]:
        calls.append(1)
        await asyncio.sleep(0.01)
        return ["job"]

    async def main() -> None:
        flight = SingleFlight()
        got = await asyncio.gather(*(flight.run("ns", fetch) for _ in range(50)))
        assert got == [["job"]] * 50 and len(calls) == 1
        await flight.run("ns", fetch)
        assert len(calls) == 2
        await asyncio.gather(flight.run("a", fetch), flight.run("b", fetch))
        assert len(calls) == 4  # one per key

    asyncio.run(main())


def test_a_failure_reaches_every_waiter_and_one_cancelled_waiter_stops_no_other() -> None:
    async def fail() -> None:
        await asyncio.sleep(0.01)
        raise kube.ApiError(503, "Service Unavailable")

    async def slow() -> str:
        await asyncio.sleep(0.02)
        return "listed"

    async def main() -> None:
        flight = SingleFlight()
        got = await asyncio.gather(*(flight.run("ns", fail) for _ in range(3)), return_exceptions=True)
        assert all(isinstance(g, kube.ApiError) for g in got)
        first = asyncio.ensure_future(flight.run("ns", slow))
        second = asyncio.ensure_future(flight.run("ns", slow))
        await asyncio.sleep(0)
        first.cancel()
        assert await second == "listed"

    asyncio.run(main())


# --- a restart's children from one list per kind ---------------------------------------------

class Lister:
    """Lists children by kind; records requests."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]]):
        self.objects, self.requests = objects, []  # type: ignore[var-annotated]

    async def list(self, kind: kube.Kind, ns: str, selector: str | None = None, **_: Any) -> list[dict[str, Any]]:
        self.requests.append(f"LIST {kind.plural}")
        await asyncio.sleep(0.01)
        return [dict(o) for o in self.objects.get(kind.plural, [])]

    async def get(self, kind: kube.Kind, ns: str, name: str) -> dict[str, Any] | None:
        self.requests.append(f"GET {kind.plural}/{name}")
        return None

    async def create(self, kind: kube.Kind, ns: str, body: Any) -> dict[str, Any]:
        self.requests.append(f"POST {kind.plural}")
        return dict(body)

    async def patch(self, kind: kube.Kind, ns: str, name: str, patch: Any, **_: Any) -> dict[str, Any]:
        self.requests.append(f"PATCH {kind.plural}/{name}")
        return {}


def cm(consumer: str, value: str) -> dict[str, Any]:
    owner = {"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer", "name": consumer, "uid": f"uid-{consumer}"}
    return {"metadata": {"name": f"{consumer}-settings", "namespace": "shop", "managedFields": [{"big": 1}],
                         "labels": {"antidote.dev/consumer": consumer}, "ownerReferences": [owner]},
            "data": {"settings.yaml": value}}


def test_children_are_listed_once_per_kind_and_handed_out_once() -> None:
    lister = Lister({"configmaps": [cm("orders", "a"), cm("billing", "b")]})
    children = listed_children.ListedChildren(lister)  # type: ignore[arg-type]

    async def main() -> None:
        got = await asyncio.gather(*(children.take("shop", n) for n in ("orders", "billing", "ghost")))
        assert len(lister.requests) == len(listed_children.KINDS)  # concurrent takes, one list
        orders = got[0]
        assert orders is not None and got[2] is None
        assert orders[("ConfigMap", "orders-settings")] == {
            "kind": "ConfigMap", "metadata": {"name": "orders-settings",
                                              "labels": {"antidote.dev/consumer": "orders"},
                                              "ownerReferences": cm("orders", "a")["metadata"]["ownerReferences"]},
            "data": {"settings.yaml": "a"}}  # slim: no managedFields
        assert await children.take("shop", "orders") is None  # once; then GETs as before
        # The outcome is the one of GETs: as desired -> nothing; differs -> patched; absent -> created.
        lister.requests.clear()
        desired = {**cm("orders", "a"), "kind": "ConfigMap"}
        desired["metadata"] = {k: v for k, v in desired["metadata"].items() if k != "managedFields"}
        assert await kube.apply(lister, desired, listed=orders) == "unchanged"  # type: ignore[arg-type]
        assert await kube.apply(lister, {**desired, "data": {"settings.yaml": "new"}},
                                listed=orders) == "updated"  # type: ignore[arg-type]
        other = {**desired, "metadata": {**desired["metadata"], "name": "orders-other"}}
        assert await kube.apply(lister, other, listed=orders) == "created"  # type: ignore[arg-type]
        assert lister.requests == ["PATCH configmaps/orders-settings", "POST configmaps"]

    asyncio.run(main())


def test_a_list_older_than_max_age_is_dropped_and_not_listed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    lister = Lister({"configmaps": [cm("orders", "a"), cm("billing", "b")]})
    children = listed_children.ListedChildren(lister)  # type: ignore[arg-type]

    async def main() -> None:
        assert await children.take("shop", "orders") is not None
        monkeypatch.setattr(listed_children, "MAX_AGE", -1.0)
        assert await children.take("shop", "billing") is None
        assert await children.take("shop", "billing") is None
        assert len(lister.requests) == len(listed_children.KINDS)

    asyncio.run(main())


# --- the operator's process does not import `kubernetes` ------------------------------------

def test_the_operator_process_imports_no_kubernetes_package() -> None:
    code = ("import sys\n"
            "from antidote_operator import no_kubernetes\n"
            "assert no_kubernetes.keep_out()\n"
            "import antidote_operator.main, antidote_operator.handlers, antidote_devrunner.runner\n"
            "import kopf\n"
            "loaded = [m for m, v in sys.modules.items() if m.split('.')[0] == 'kubernetes' and v is not None]\n"
            "assert not loaded, loaded\n"
            "assert 'urllib3' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})


# --- the client over HTTP (a local aiohttp server standing in for the API server) ----------

def serve(routes: list[Any]) -> Any:
    """Start an aiohttp app on a free loopback port; returns (runner, base URL)."""
    from aiohttp import web

    async def start() -> tuple[Any, str]:
        app = web.Application()
        app.add_routes(routes)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return runner, f"http://127.0.0.1:{port}"

    return start()


def test_a_401_reads_the_credentials_again_and_retries_once() -> None:
    import kopf
    from aiohttp import web

    tokens = iter(["expired", "rotated", "never"])
    logins: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer rotated":
            return web.json_response({"kind": "Status", "message": "Unauthorized"}, status=401)
        return web.json_response({"metadata": {"name": "orders"}})

    async def main() -> None:
        runner, url = await serve([web.get("/api/v1/namespaces/shop/configmaps/orders", handler)])

        def login() -> kopf.ConnectionInfo:
            logins.append(token := next(tokens))
            return kopf.ConnectionInfo(server=url, token=token)

        k = kube.Kube(login)
        try:
            got = await k.get(kube.CONFIGMAP, "shop", "orders")
            assert got == {"metadata": {"name": "orders"}} and logins == ["expired", "rotated"]
        finally:
            await k.close()
            await runner.cleanup()

    asyncio.run(main())


def test_scaling_to_zero_does_not_wait_behind_other_calls() -> None:
    import kopf
    from aiohttp import web

    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({})

    async def fast(request: web.Request) -> web.Response:
        return web.json_response({"spec": {"replicas": 0}})

    async def main() -> None:
        runner, url = await serve([web.patch("/apis/antidote.dev/v1alpha1/namespaces/shop/queueconsumers/a/status", slow),
                                   web.patch("/apis/apps/v1/namespaces/shop/deployments/b", fast)])
        k = kube.Kube(lambda: kopf.ConnectionInfo(server=url), workers=1)
        try:
            status = asyncio.ensure_future(k.patch(kube.QUEUE_CONSUMER, "shop", "a", {"status": {}},
                                                   subresource="status"))
            await asyncio.sleep(0.05)  # the one ordinary slot is taken by the status write
            scaled = await asyncio.wait_for(k.patch(kube.DEPLOYMENT, "shop", "b", {"spec": {"replicas": 0}},
                                                    urgent=True), 5)
            assert scaled == {"spec": {"replicas": 0}} and not status.done()
            release.set()
            assert await status == {}
        finally:
            await k.close()
            await runner.cleanup()

    asyncio.run(main())


def test_tls_read_buffers_are_made_smaller_never_larger() -> None:
    code = ("import asyncio.sslproto as s\n"
            "from antidote_operator import heap\n"
            "default = s.SSLProtocol.max_size\n"
            "heap.small_tls_buffers()\n"
            "assert s.SSLProtocol.max_size == min(default, heap.TLS_READ_BUFFER)\n"
            "heap.small_tls_buffers(1 << 30)\n"
            "assert s.SSLProtocol.max_size == min(default, heap.TLS_READ_BUFFER)\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_dropped_connection_is_retried_once_except_for_a_create() -> None:
    import aiohttp
    import kopf
    from aiohttp import web

    calls = {"GET": 0, "POST": 0}

    async def drop_first(request: web.Request) -> web.StreamResponse:
        calls[request.method] += 1
        if calls[request.method] == 1:
            assert request.transport is not None
            request.transport.close()  # as a server closing a kept-alive connection
            return web.Response()
        return web.json_response({"metadata": {"name": "orders"}})

    async def main() -> None:
        runner, url = await serve([web.get("/api/v1/namespaces/shop/configmaps/orders", drop_first),
                                   web.post("/api/v1/namespaces/shop/events", drop_first)])
        k = kube.Kube(lambda: kopf.ConnectionInfo(server=url))
        try:
            assert await k.get(kube.CONFIGMAP, "shop", "orders") == {"metadata": {"name": "orders"}}
            assert calls["GET"] == 2
            with pytest.raises((aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
                await k.create(kube.EVENT, "shop", {"metadata": {"generateName": "orders."}})
            assert calls["POST"] == 1  # an Event is never posted twice
        finally:
            await k.close()
            await runner.cleanup()

    asyncio.run(main())


# --- a watch stream's lines ------------------------------------------------------------------

def test_a_watch_event_split_across_chunks_comes_whole_and_a_long_one_too() -> None:
    big = {"type": "MODIFIED", "object": {"metadata": {"name": "d"}, "data": "x" * 300_000}}
    stream = (json.dumps({"type": "ADDED", "object": {"a": 1}}) + "\n" + json.dumps(big) + "\n\n"
              + json.dumps({"type": "BOOKMARK", "object": {}})).encode()
    events, rest = [], b""
    for i in range(0, len(stream), 7_001):  # chunks that cut lines anywhere
        got, rest = kube.watch_events(rest, stream[i:i + 7_001])
        events += got
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED"]
    assert events[1] == big
    assert json.loads(rest) == {"type": "BOOKMARK", "object": {}}  # the last line, unfinished


def test_a_collection_path_across_all_namespaces() -> None:
    assert kube.DEPLOYMENT.path(None) == "/apis/apps/v1/deployments"
    assert kube.POD.path("ns") == "/api/v1/namespaces/ns/pods"
    with pytest.raises(AssertionError):
        kube.POD.path(None, "p")


def test_the_drivers_are_watched_where_kopf_watches() -> None:
    from antidote_operator.object_watch import scopes

    assert scopes([]) == [(None, None)]
    assert scopes(["b", "a", "a"]) == [("a", None), ("b", None)]
    ((ns, accept),) = scopes(["team-*, !*-pr-*", "ops"])
    assert ns is None and accept is not None
    assert [x for x in ("team-a", "team-pr-1", "ops", "other") if accept(x)] == ["team-a", "ops"]


def test_peering_with_namespace_patterns_is_refused_by_name() -> None:
    out = subprocess.run([sys.executable, "-m", "antidote_cli.main", "operator", "--peering", "ha",
                          "--namespace", "team-*", "--namespace", "ops"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "--peering with --namespace patterns (team-*)" in out.stderr
