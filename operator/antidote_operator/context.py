"""What the operator's handlers share: the options it was started with (`Options`), the
shared state and clients (`Context`, reached through Kopf's `memo.ctx`), and the `Syncer`
that runs reconciliations in the background. Reconciling itself is `reconcile.sync_consumer`,
handed to the Context by `main`, so this module does not import it."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from . import kube
from .builders.common import RenderOptions
from .metrics import OperatorMetrics
from .handled_specs import HandledSpecs
from .listed_children import ListedChildren
from .peering import PeeringGate, own_identity
from .pod_problems import PodProblems
from .single_flight import SingleFlight
from .builders.reader_job import JobOptions
from .state import JobIndex, Registry

if TYPE_CHECKING:
    from .child_runner import ChildRunner

log = logging.getLogger("antidote.operator")


class SyncFn(Protocol):
    def __call__(self, ctx: Context, namespace: str, name: str, *,
                 verify: bool = False) -> Awaitable[None]: ...


def brief(err: BaseException) -> str:
    if isinstance(err, kube.ApiError):
        return f"HTTP {err.status} {err.reason}"
    return f"{type(err).__name__}: {err}"


@dataclass
class Options:
    namespaces: list[str] = field(default_factory=list)  # empty: all namespaces
    # Hold antidote.dev/finalizer and delete a deleted consumer's children itself: for an API
    # server without a garbage collector (the local stack). A cluster's collector deletes
    # them through their owner references.
    finalizer: bool = False
    metrics_port: int | None = 8080
    peering: str | None = None
    priority: int = 0
    scrape_interval: float = 2.0
    metrics_url_template: str = "http://{name}.{namespace}.svc:{port}/metrics"
    prometheus_url: str | None = None
    resync_interval: float = 300.0
    poison_event_interval: float = 60.0
    liveness: str | None = None
    render: RenderOptions = field(default_factory=RenderOptions)
    reader_jobs: JobOptions = field(default_factory=JobOptions)


class Context:
    """What every handler shares (reached through Kopf's `memo.ctx`)."""

    def __init__(self, options: Options, kube_client: kube.Kube, sync: SyncFn):
        self.options = options
        self.kube = kube_client
        self.registry = Registry()
        self.metrics = OperatorMetrics(self.registry)
        self.syncer = Syncer(self, sync)
        # Runs consumers' children where no kubelet does (child_runner.py): None on a cluster.
        self.runner: ChildRunner | None = None
        self.reader_index = JobIndex()  # reader Jobs per consumer, from the watch stream
        self.pod_problems = PodProblems()  # why driver pods do not run, from the Pod watch
        self.listed_children = ListedChildren(kube_client)  # a restart's reads (once)
        self.flight = SingleFlight()  # reads that concurrent reconciles share
        self.handled_specs = HandledSpecs()  # Kopf's record of what it handled (in memory)
        # PoisonPolicy specs and which consumers use each policy, from the watch streams.
        self.policies: dict[tuple[str, str], dict[str, Any]] = {}
        self.users: dict[tuple[str, str], set[str]] = {}
        self._uses: dict[tuple[str, str], str] = {}  # (namespace, consumer) -> policy
        # Who posts Events (reportingInstance): the pod name in a cluster.
        self.instance = os.environ.get("POD_NAME") or socket.gethostname()
        self.identity = own_identity()
        self.peering = PeeringGate(kube_client, name=options.peering, namespaces=options.namespaces,
                                   identity=self.identity, priority=options.priority)


    def note_user(self, namespace: str, consumer: str, policy: str | None) -> None:
        old = self._uses.pop((namespace, consumer), None)
        if old is not None:
            self.users.get((namespace, old), set()).discard(consumer)
        if policy is not None:
            self._uses[(namespace, consumer)] = policy
            self.users.setdefault((namespace, policy), set()).add(consumer)

    async def policy(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The policy's spec from the watch cache; one GET when the cache has not seen it
        (yet), so a consumer reconciled before its policy's event never reads "missing"."""
        key = (namespace, name)
        if key in self.policies:
            return self.policies[key]
        if not name:
            return None
        body = await self.flight.run(("policy", namespace, name),
                                     lambda: self.kube.get(kube.POISON_POLICY, namespace, name))
        if body is None:
            return None
        self.policies.setdefault(key, body.get("spec") or {})
        return self.policies[key]


class Syncer:
    """Runs `sync_consumer` in the background, coalescing triggers: while one sync of a
    consumer runs, further kicks collapse into one more run after it."""

    def __init__(self, ctx: Context, sync: SyncFn):
        self.ctx = ctx
        self.sync = sync
        self.running: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.again: dict[tuple[str, str], bool] = {}  # key -> verify

    def kick(self, namespace: str, name: str, *, verify: bool = False, delay: float = 0.0) -> None:
        key = (namespace, name)
        if key in self.running:
            self.again[key] = self.again.get(key, False) or verify
            return
        self.running[key] = asyncio.create_task(self._run(key, verify, delay), name=f"sync {key}")

    async def _run(self, key: tuple[str, str], verify: bool, delay: float) -> None:
        failures = 0
        try:
            if delay:
                await asyncio.sleep(delay)
            while True:
                try:
                    await self.sync(self.ctx, *key, verify=verify)
                    failures = 0
                except asyncio.CancelledError:
                    raise
                except Exception as err:  # noqa: BLE001 - retried with backoff, level-based
                    failures += 1
                    self.ctx.metrics.errors.labels("sync").inc()
                    log.warning("sync of %s/%s failed (%s); retrying", *key, brief(err))
                    await asyncio.sleep(min(2 ** failures, 60))
                    self.again[key] = True
                if key not in self.again:
                    return
                verify = self.again.pop(key)
        finally:
            self.running.pop(key, None)
            self.again.pop(key, None)

    async def close(self) -> None:
        tasks = list(self.running.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
