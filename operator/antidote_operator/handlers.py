"""Kopf handlers: thin adapters from Kubernetes events to `reconcile`.

QueueConsumers are reconciled on create/update/resume; a PoisonPolicy change re-renders
its users, found in a map kept from the watch streams (no list call per event);
the drivers' Deployment and Pod events (a plain watch, object_watch) tell what the driver is
doing; a background watcher reads the consumers' metrics and does the time-based (level)
reconciliation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import kopf

from antidote_api.types import GROUP, POISON_POLICIES, QUEUE_CONSUMERS, VERSION

from .builders.common import LABEL_CONSUMER
from . import kube, kube_login, object_watch, reader_control
from .kube import ApiError
from .object_watch import ObjectWatch
from .consumer_object import consumer_object
from .context import Context
from .handled_specs import KOPF_PREFIX
from .reconcile import delete_children, on_deployment, on_pod, post_event, sync_consumer
from .policy_status import policy_status
from .watcher import Watcher

if TYPE_CHECKING:  # Kopf's type of a label filter, which it does not export
    from kopf._core.intents.filters import MetaFilter

QC = (GROUP, VERSION, QUEUE_CONSUMERS)
PP = (GROUP, VERSION, POISON_POLICIES)
# Drivers only: Spark's executor pods carry the consumer label too, but their exits are
# Spark's business (it replaces executors), not the queue's.
DRIVER_SELECTOR = f"{LABEL_CONSUMER},app.kubernetes.io/component=driver"
WATCH_SERVER_TIMEOUT = 300  # seconds: the server ends a watch stream, which is resumed
READER: MetaFilter = {LABEL_CONSUMER: kopf.PRESENT, "app.kubernetes.io/component": "reader"}

log = logging.getLogger("antidote.operator")


# --- lifecycle ---------------------------------------------------------------------------

@kopf.on.login()
async def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo:
    # Kopf's watches and patches use the credentials the operator's own client uses
    # (kube_login); without this Kopf would pick its own login by what is installed.
    # A coroutine: Kopf runs plain functions in threads, and the operator has none.
    return kube_login.login(settings)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    ctx: Context = memo.ctx
    # Kopf's progress while a handler retries goes in annotations (the CRDs' status schema,
    # generated from antidote_api, keeps no place for it); its record of the handled spec
    # stays in memory (handled_specs: one PATCH and one watch event fewer per change).
    settings.persistence.finalizer = "antidote.dev/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = ctx.handled_specs
    # The operator posts its Events itself (on condition transitions); none from Kopf.
    settings.posting.enabled = False
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT
    settings.watching.client_timeout = 330
    # Bounded concurrency: each busy object worker may hold an API connection (Kopf's
    # client pool is unbounded), and idle workers give their slot back quickly.
    settings.queueing.worker_limit = 64
    settings.queueing.idle_timeout = 0.5
    if ctx.options.metrics_port:
        ctx.metrics.serve(ctx.options.metrics_port)
        log.info("operator metrics on :%d/metrics", ctx.options.metrics_port)
    memo.watcher = asyncio.create_task(Watcher(ctx).run(), name="metrics watcher")
    watches = driver_watches(ctx)
    ctx.pod_problems.watches = [w for w in watches if w.kind is kube.POD]
    memo.watches = [asyncio.create_task(w.run(), name=f"watch {w.where}") for w in watches]
    if ctx.runner is not None:
        ctx.runner.started(ctx.options.metrics_port)


@kopf.on.cleanup()
async def shutdown(memo: kopf.Memo, **_: Any) -> None:
    ctx: Context = memo.ctx
    tasks = [t for t in [getattr(memo, "watcher", None), *getattr(memo, "watches", [])] if t is not None]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await ctx.syncer.close()
    if ctx.runner is not None:
        await ctx.runner.close()
    # The API client is closed by `main.operate`, which made it, once Kopf has returned.


# --- caches of what the watch streams say ---------------------------------------------------
# Kopf indices would do this, but they hold every handler until all objects are indexed and
# then release them at once: with 1,000 consumers that is 1,000 concurrent API calls (some
# 300 MB of TLS buffers), and with a worker limit it never starts. These two maps are fed
# by the same watch events, and a lookup that misses falls back to one GET.

@kopf.on.event(*PP)
async def policy_event(event: kopf.RawEvent, namespace: str | None, name: str, spec: kopf.Spec,
                       memo: kopf.Memo, **_: Any) -> None:
    ctx: Context = memo.ctx
    if namespace is None:
        return  # Kopf's type allows cluster-scoped kinds; the CRDs are namespaced
    if event["type"] == "DELETED":
        ctx.handled_specs.forget(event["object"].get("metadata", {}).get("uid"))
        ctx.policies.pop((namespace, name), None)
        # Its users now lack a policy: say so on each (they keep running as they were).
        for consumer in ctx.users.get((namespace, name), ()):
            ctx.syncer.kick(namespace, consumer)
    else:
        ctx.policies[(namespace, name)] = dict(spec)


@kopf.on.event(*QC)
async def consumer_event(event: kopf.RawEvent, namespace: str | None, name: str, spec: kopf.Spec,
                         memo: kopf.Memo, **_: Any) -> None:
    ctx: Context = memo.ctx
    if namespace is None:
        return  # as in policy_event
    if event["type"] == "DELETED":
        ctx.handled_specs.forget(event["object"].get("metadata", {}).get("uid"))
        ctx.note_user(namespace, name, None)
        ctx.registry.forget(namespace, name)
        ctx.reader_index.forget(namespace, name)
        ctx.pod_problems.forget(namespace, name)
        return
    ctx.note_user(namespace, name, (spec.get("policyRef") or {}).get("name", ""))
    st = ctx.registry.peek(namespace, name)
    if st is not None:
        st.body = slim(event["object"])


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """What reconciling needs of a QueueConsumer, without managedFields and Kopf's copy of
    the spec (a quarter of the operator's memory with 1,000 consumers otherwise)."""
    meta = body.get("metadata", {})
    keep = ("name", "namespace", "uid", "generation", "resourceVersion", "labels", "deletionTimestamp")
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if not k.startswith(f"{KOPF_PREFIX}/") and k != "kubectl.kubernetes.io/last-applied-configuration"}
    return {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
            "metadata": {**{k: meta[k] for k in keep if k in meta}, "annotations": annotations},
            "spec": body.get("spec") or {}, "status": body.get("status") or {}}


def _retryable(err: ApiError) -> Exception:
    if err.status in (400, 403, 422):
        return kopf.PermanentError(f"the API server refused a write: HTTP {err.status} {err.reason}")
    return kopf.TemporaryError(f"API server: HTTP {err.status} {err.reason}", delay=5)


# --- QueueConsumer ----------------------------------------------------------------------------

# A failed reconcile is retried in 5 s (Kopf's default is 60): most failures are a busy or
# restarting API server, and the next attempt recomputes everything anyway.
@kopf.on.resume(*QC, backoff=5)
@kopf.on.create(*QC, backoff=5)
@kopf.on.update(*QC, backoff=5)
async def reconcile_consumer(body: kopf.Body, reason: str, diff: kopf.Diff, memo: kopf.Memo,
                             **_: Any) -> None:
    ctx: Context = memo.ctx
    obj = consumer_object(body)
    try:
        await sync_consumer(ctx, obj.namespace, obj.name, seen=obj, verify=renders_children(reason, diff))
    except ApiError as err:
        ctx.metrics.reconciles.labels("QueueConsumer", "error").inc()
        raise _retryable(err) from None


def renders_children(reason: str, diff: kopf.Diff) -> bool:
    """Whether the children are read back and compared (verify): on create and resume, and on
    an update of what they are built from (spec, labels). An update of annotations alone
    (`antidote resume`, `antidote drain`, a probe) changes no child: comparing each against
    the API server was 7 GETs per consumer, for 1,000 consumers resumed at once 7,000 reads.
    Drift is still put back by the periodic full reconcile (--resync-interval)."""
    if reason != kopf.Reason.UPDATE:
        return True
    return any(tuple(item.field)[:2] != ("metadata", "annotations") for item in diff)


def holds_finalizer(memo: kopf.Memo, **_: Any) -> bool:
    """Whether the delete handler needs Kopf's finalizer (`--finalizer`). Without it Kopf adds
    none (and takes off one an earlier operator added), so a first reconcile is one patch
    and one watch round trip shorter, and a consumer can be deleted while no operator runs."""
    return bool(memo.ctx.options.finalizer)


@kopf.on.delete(*QC, backoff=5, when=holds_finalizer)
async def delete_consumer(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    ctx: Context = memo.ctx
    obj = consumer_object(body)
    try:
        deleted = await delete_children(ctx, obj.namespace, obj.name, obj.uid)
    except ApiError as err:
        raise _retryable(err) from None
    ctx.registry.forget(obj.namespace, obj.name)
    if deleted:
        log.info("%s/%s deleted: removed %s", obj.namespace, obj.name, ", ".join(deleted))


# --- PoisonPolicy ----------------------------------------------------------------------------

@kopf.on.resume(*PP, backoff=5)
@kopf.on.create(*PP, backoff=5)
@kopf.on.update(*PP, backoff=5)
async def reconcile_policy(body: kopf.Body, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta,
                           namespace: str | None, name: str, patch: kopf.Patch, memo: kopf.Memo,
                           reason: str, **_: Any) -> None:
    ctx: Context = memo.ctx
    if namespace is None:
        return  # as in policy_event
    generation = int(meta.get("generation", 1))
    new, event = policy_status(dict(spec), dict(status), generation)
    if new != dict(status):
        patch.status.update(new)
    if event is not None:
        await post_event(ctx, body, event)
    ctx.metrics.reconciles.labels("PoisonPolicy", "ok").inc()
    if reason != kopf.Reason.UPDATE and int(status.get("observedGeneration") or 0) == generation:
        # An operator's start: Kopf's record of the handled spec is in memory (handled_specs),
        # so every policy reads as created then. This generation was handled before, and each
        # consumer resumes by itself, reading the policy then.
        return
    ctx.policies[(namespace, name)] = dict(spec)
    for consumer in ctx.users.get((namespace, name), ()):
        ctx.syncer.kick(namespace, consumer)


# --- what the driver is doing -------------------------------------------------------------------

# The drivers' Deployments and Pods are read, never reconciled: a plain watch each
# (object_watch), not Kopf's per-object handling, started with the operator (`configure`).

def driver_watches(ctx: Context) -> list[ObjectWatch]:
    def pod_event(body: Mapping[str, Any], deleted: bool) -> None:
        # On a real cluster the kubelet reports the driver's exit code here (3, 4, 5: the
        # consumer disabled its queue); the operator scales to 0 before a restart resumes it.
        # Its status also says why a driver does not run (pod_problems: ImagePullBackOff...).
        on_pod(ctx, body, deleted)

    def deployment_event(body: Mapping[str, Any], deleted: bool) -> None:
        on_deployment(ctx, body, deleted)

    return [ObjectWatch(ctx.kube, kind, ns, DRIVER_SELECTOR, handler, gate=ctx.peering,
                        timeout=WATCH_SERVER_TIMEOUT, accept=accept)
            for ns, accept in object_watch.scopes(ctx.options.namespaces)
            for kind, handler in ((kube.DEPLOYMENT, deployment_event), (kube.POD, pod_event))]


# --- poison-reader Jobs ------------------------------------------------------------------------

@kopf.on.event("batch", "v1", "jobs", labels=READER)
async def reader_job_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    # Kept in memory.ctx.reader_index (a map fed by this stream, for the reason above);
    # the consumer is reconciled again, which records the Job's phase in status.
    reader_control.on_job(memo.ctx, body, deleted=event["type"] == "DELETED")


@kopf.on.event("v1", "pods", labels=READER)
async def reader_pod_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    # The reader writes its JSON report to the termination log; the kubelet puts it here.
    if event["type"] != "DELETED":
        reader_control.on_pod(memo.ctx, body)
