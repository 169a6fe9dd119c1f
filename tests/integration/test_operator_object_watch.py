"""The operator's plain watch (object_watch) against the stack's API server: what a LIST then
WATCH hands over, a stream the server ends resumed without a new list, and a list read again
handing over what vanished meanwhile as deleted."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from antidote_operator import kube
from antidote_operator.builders.common import LABEL_CONSUMER
from antidote_operator.handlers import DRIVER_SELECTOR
from antidote_operator.object_watch import ObjectWatch, Relist
from antidote_operator.peering import PeeringGate

from antidote_testkit.operators import ANTIDOTE

TIMEOUT = 30.0


def deployment(name: str, component: str | None = "driver", consumer: str | None = None) -> dict[str, Any]:
    labels = {LABEL_CONSUMER: consumer or name, "app": name}
    if component:
        labels["app.kubernetes.io/component"] = component
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "none"}]}}}}


class Seen:
    """What the watch handed over, in order, with a wait for a condition on it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, bool, Any]] = []
        self._changed = asyncio.Event()

    def __call__(self, obj: dict[str, Any], deleted: bool) -> None:
        meta = obj["metadata"]
        self.events.append((meta["name"], deleted, (obj.get("spec") or {}).get("replicas")))
        self._changed.set()

    async def until(self, check: Callable[[], bool], what: str) -> None:
        async def loop() -> None:
            while not check():
                self._changed.clear()
                await self._changed.wait()
        try:
            await asyncio.wait_for(loop(), TIMEOUT)
        except asyncio.TimeoutError:
            raise AssertionError(f"not seen within {TIMEOUT}s: {what}; seen {self.events}") from None


@asynccontextmanager
async def running(w: ObjectWatch) -> AsyncIterator[None]:
    """`w.run()` in the background for the block, cancelled after it."""
    task = asyncio.create_task(w.run())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def run(coro_fn: Callable[[kube.Kube], Any], kubeconfig: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The operator's client logs in from $KUBECONFIG; set for this test only (a later test's
    # subprocess must not inherit it: Spark's Kubernetes client would read it too).
    monkeypatch.setenv("KUBECONFIG", kubeconfig)

    async def main() -> None:
        client = kube.Kube.from_environment()
        try:
            await coro_fn(client)
        finally:
            await client.close()
    asyncio.run(main())


def test_a_watch_hands_over_the_list_then_every_change_of_its_objects_only(kubeconfig: str, namespace: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(k: kube.Kube) -> None:
        await k.create(kube.DEPLOYMENT, namespace, deployment("before"))
        seen = Seen()
        w = ObjectWatch(k, kube.DEPLOYMENT, namespace, DRIVER_SELECTOR, seen)
        async with running(w):
            await seen.until(lambda: ("before", False, 0) in seen.events, "the listed Deployment")
            await k.create(kube.DEPLOYMENT, namespace, deployment("reader", component="reader"))
            await k.create(kube.DEPLOYMENT, namespace, deployment("after"))
            await k.patch(kube.DEPLOYMENT, namespace, "after", {"spec": {"replicas": 2}})
            await k.delete(kube.DEPLOYMENT, namespace, "before")
            await seen.until(lambda: ("before", True, 0) in seen.events, "the deletion")
            assert [e for e in seen.events if e[0] == "after"][-1] == ("after", False, 2)
            assert not [e for e in seen.events if e[0] == "reader"]  # not a driver: not selected
            assert w.lists == 1
    run(scenario, kubeconfig, monkeypatch)


def test_a_stream_the_server_ends_is_resumed_without_reading_the_list_again(kubeconfig: str, namespace: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(k: kube.Kube) -> None:
        seen = Seen()
        w = ObjectWatch(k, kube.DEPLOYMENT, namespace, DRIVER_SELECTOR, seen, timeout=1)
        version = await w.relist()
        # The server ends each stream after 1 s; every event after one ended must come.
        version = await w.follow(version)
        await k.create(kube.DEPLOYMENT, namespace, deployment("later"))
        version = await w.follow(version)
        await k.patch(kube.DEPLOYMENT, namespace, "later", {"spec": {"replicas": 3}})
        while ("later", False, 3) not in seen.events:
            version = await w.follow(version)
        assert seen.events[0] == ("later", False, 0)
        assert w.lists == 1
    run(scenario, kubeconfig, monkeypatch)


@pytest.mark.parametrize("cluster_wide", [False, True])
def test_a_list_read_again_hands_over_what_vanished_as_deleted(
        kubeconfig: str, namespace: str, cluster_wide: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(k: kube.Kube) -> None:
        seen = Seen()
        token = uuid.uuid4().hex[:8]  # a cluster-wide list sees only this test's Deployments
        selector = f"{DRIVER_SELECTOR},{LABEL_CONSUMER} in (gone-{token},stays-{token})"
        w = ObjectWatch(k, kube.DEPLOYMENT, None if cluster_wide else namespace, selector, seen)
        for name in ("gone", "stays"):
            await k.create(kube.DEPLOYMENT, namespace, deployment(name, consumer=f"{name}-{token}"))
        await w.relist()
        await k.delete(kube.DEPLOYMENT, namespace, "gone")
        seen.events.clear()
        await w.relist()
        assert sorted(seen.events) == [("gone", True, None), ("stays", False, 0)]
        assert w.known.keys() == {(namespace, "stays")}
    run(scenario, kubeconfig, monkeypatch)


def test_a_paused_replica_hands_over_nothing_and_lists_again_once_it_acts(kubeconfig: str, namespace: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = subprocess.run([ANTIDOTE, "operator", "--print-peering-crds"], capture_output=True, text=True, check=True)
    subprocess.run([str(Path(sys.executable).with_name("kubectl")), "apply", "-f", "-"], input=out.stdout,
                   env={**os.environ, "KUBECONFIG": kubeconfig}, capture_output=True, text=True, check=True)
    peering = kube.Kind("/apis/kopf.dev/v1", "kopfpeerings")

    def peers(priority: int | None) -> dict[str, Any]:
        now = datetime.now(timezone.utc).isoformat()
        return {} if priority is None else {"other": {"priority": priority, "lastseen": now, "lifetime": 600}}

    async def scenario(k: kube.Kube) -> None:
        for attempt in range(300):  # the CRD is served a moment after it is applied
            try:
                await k.create(peering, namespace, {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering",
                                                    "metadata": {"name": "w"}, "status": peers(5)})
                break
            except kube.ApiError:
                if attempt == 299:
                    raise
                await asyncio.sleep(0.1)
        gate = PeeringGate(k, name="w", namespaces=[namespace], identity="me", priority=10)

        async def read_peering(priority: int | None) -> None:
            body = await k.get(peering, namespace, "w")
            await k.call("PUT", peering.path(namespace, "w"), {**body, "status": peers(priority)})
            gate.checked = 0.0  # read it now, not at the next 5-s mark
            await gate.refresh()

        await gate.refresh()
        assert gate.allows(namespace)  # the other peer's priority is lower
        seen = Seen()
        w = ObjectWatch(k, kube.DEPLOYMENT, namespace, DRIVER_SELECTOR, seen, gate=gate)
        await k.create(kube.DEPLOYMENT, namespace, deployment("a"))
        version = await w.relist()
        assert seen.events == [("a", False, 0)]
        await read_peering(20)  # a higher-priority peer acts: this replica pauses
        assert not gate.allows(namespace)
        await k.create(kube.DEPLOYMENT, namespace, deployment("b"))
        with pytest.raises(Relist):
            await w.follow(version)  # b's event comes, and is not handed over
        assert seen.events == [("a", False, 0)]
        async with running(w):
            await read_peering(None)  # the other peer is gone: this replica acts again
            await seen.until(lambda: ("b", False, 0) in seen.events, "b, from the list read again")
            assert w.lists == 2
    run(scenario, kubeconfig, monkeypatch)


def test_a_watch_of_what_the_server_does_not_serve_is_an_error_not_an_end(kubeconfig: str, namespace: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(k: kube.Kube) -> None:
        missing = kube.Kind("/apis/apps/v1", "nosuchthings")
        with pytest.raises(kube.ApiError) as err:
            async for _ in k.watch(missing, namespace, None, resource_version="0", timeout=5):
                pass
        assert err.value.status == 404
    run(scenario, kubeconfig, monkeypatch)
