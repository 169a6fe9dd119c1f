"""Reconciling one QueueConsumer: observe, `decide`, then act (children, replicas, status,
Events), serialised per consumer and retried on write conflicts.

Every trigger (a spec or policy change, a Deployment or Pod event, a new metrics sample, a
timer) ends in `sync_consumer`, which re-reads the QueueConsumer and recomputes everything:
reconciliation is level-based, so a missed or repeated trigger is harmless.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import kopf

from antidote_api.conditions import EventReason
from antidote_api.names import child_names
from antidote_api.times import parse_time
from antidote_api.types import API_VERSION
from antidote_api.wire import DRAIN_ANNOTATION

from . import autoscaler, kube, ownership, reader_control
from .builders import driver
from .builders.common import LABEL_CONSUMER, RenderOptions
from .consumer_object import ConsumerObject, consumer_object
from .context import Context, brief
from .observations import DeploymentView, Termination
from .pod_problems import driver_pod_problem
from .state import ConsumerState
from .status import PROBE_ANNOTATION, RESUME_ANNOTATION, Event, Inputs, decide, status_patch

log = logging.getLogger("antidote.operator")


def object_ref(obj: ConsumerObject) -> dict[str, Any]:
    """What an Event is about: the consumer (its uid: this one, not a later one of its name)."""
    return {"apiVersion": obj.body.get("apiVersion", API_VERSION), "kind": obj.body.get("kind", "QueueConsumer"),
            "metadata": {"name": obj.name, "namespace": obj.namespace, "uid": obj.uid}}


async def post_event(ctx: Context, regarding: Mapping[str, Any], e: Event) -> None:
    """Best effort, like every Kubernetes Event: a failure is logged, never retried into
    a duplicate."""
    try:
        await ctx.kube.post_event(regarding, type=e.type, reason=e.reason, message=e.message,
                                  component="antidote-operator", instance=ctx.instance)
        ctx.metrics.events.labels(e.reason).inc()
    except Exception as err:  # noqa: BLE001
        ctx.metrics.errors.labels("event").inc()
        log.warning("could not post Event %s about %s: %s", e.reason, regarding["metadata"]["name"], brief(err))


def render_key(obj: ConsumerObject, settings: Any, opts: RenderOptions) -> str:
    """Everything the children are built from, replicas aside (scaling alone takes the
    one-patch path)."""
    text = json.dumps([obj.uid, dict(obj.labels), repr(opts)], sort_keys=True)
    return hashlib.sha256(text.encode() + settings.model_dump_json().encode()).hexdigest()


async def sync_consumer(ctx: Context, namespace: str, name: str, *,
                        seen: ConsumerObject | None = None, verify: bool = False) -> None:
    st = ctx.registry.get(namespace, name)
    async with st.lock:
        for attempt in range(8):
            # First the freshest body at hand (the handler's, or the watch stream's): the
            # status write is conditional on its resourceVersion, so a stale one only costs
            # a retry with a GET.
            if attempt == 0 and seen is not None:
                obj = seen
            elif attempt == 0 and st.body is not None:
                obj = consumer_object(st.body)
            else:
                got = await ctx.kube.get(kube.QUEUE_CONSUMER, namespace, name)
                if got is None:
                    ctx.registry.forget(namespace, name)
                    return
                obj = consumer_object(got)
            if obj.deleting:
                return  # the delete handler removes the children
            if await _sync_once(ctx, st, obj, verify):
                ctx.metrics.reconciles.labels("QueueConsumer", "ok").inc()
                return
            ctx.metrics.reconciles.labels("QueueConsumer", "conflict").inc()
        raise kopf.TemporaryError(f"{namespace}/{name} kept changing while being reconciled", delay=1)


async def _sync_once(ctx: Context, st: ConsumerState, obj: ConsumerObject, verify: bool,
                     again: bool = False) -> bool:
    """One observe-decide-act pass; False when the status write lost a race (re-read).
    A child found not to be the consumer's (or no longer) is an observation made while
    acting: the pass is done `again` with it, before anything is stored or posted."""
    # Long on purpose: the writes (children, replicas, annotations, status, Events) are in the
    # order that keeps a crash between two of them harmless; one function keeps that order visible.
    ns, name = obj.namespace, obj.name
    st.uid = obj.uid
    policy = await ctx.policy(ns, obj.policy_name)
    # No conditions: no operator has reconciled this consumer yet, so its children are most
    # likely not there: create them without reading first (a 409 falls back to the read),
    # and there is no Ready to flap. Half the requests of a first reconcile.
    fresh = not obj.status.get("conditions")
    listed = None
    if not fresh and st.rendered is None:
        # Reconciled before, but not by this process (a restart): its children as listed
        # once per kind for the whole namespace, instead of a GET each (listed_children).
        listed = await ctx.listed_children.take(ns, name)
    if st.deployment is None and not fresh:
        # Not seen on the watch yet (a restart): read it, or Ready would flap to Starting.
        dep_name = child_names(name).deployment
        dep = (listed.get(("Deployment", dep_name)) if listed is not None
               else await ctx.kube.get(kube.DEPLOYMENT, ns, dep_name))
        if dep is not None and ownership.owned_by(dep, st.uid):
            st.deployment = deployment_view(dep)
    d = decide(Inputs(
        name=name, namespace=ns, generation=obj.generation, spec=obj.spec,
        annotations=obj.annotations, status=obj.status, policy=policy,
        now=datetime.now(timezone.utc), deployment=st.deployment, sample=st.sample,
        termination=st.termination, poison=st.poison,
        poison_event_interval=ctx.options.poison_event_interval, conflict=st.conflict,
        pod_problem=ctx.pod_problems.of(ns, name), pods_listed=ctx.pod_problems.listed))
    conflict = st.conflict
    # spec.spark.autoscale: the executor count joins the settings, status and Events.
    autoscaler.step(st, d, obj.status, datetime.now(timezone.utc))

    # Act on the Deployment first: scaling to 0 is what protects the queue.
    opts = ctx.options.render
    rendered = False
    child_conflict = st.child_conflict
    if d.settings is not None and d.replicas is not None:
        # Building the children is the costly part of a sync; the inputs' key says whether
        # they can differ from what this process last applied.
        key = render_key(obj, d.settings, opts)
        if verify or key != st.rendered:
            children = driver.build_children(obj.body, d.settings, replicas=d.replicas, opts=opts)
            await _ensure_spark_auth_secret(ctx, obj)
            child_conflict = await _apply_children(ctx, children, fresh=fresh, listed=listed)
            if child_conflict is None:
                st.rendered, rendered = key, True
                _observe_scale(ctx, st, d.replicas)
    # Scaling alone: the consumer's own Deployment only (st.deployment is never another's; its
    # uid, once seen, a precondition), and while a child is in conflict only down, to 0: a
    # driver that would run under a foreign ServiceAccount is not started.
    if not rendered and d.replicas is not None and st.deployment is not None and (
            st.deployment.replicas != d.replicas) and (child_conflict is None or d.replicas == 0):
        # Only the replicas differ (pause, disable, resume), or the configuration is broken
        # but scaling needs none of it: one small patch, the fast path of a disable. On the
        # scale subresource: the API server answers with a small Scale instead of encoding
        # the whole Deployment, which took 1,000 disables at once from a p99 of 1.6-2.1 s
        # to 1.0-1.1 s on the API server alone (docs/performance.md).
        scale: dict[str, Any] = {"spec": {"replicas": d.replicas}}
        if st.deployment.uid:
            scale["metadata"] = {"uid": st.deployment.uid}
        scaled = await ctx.kube.patch(kube.DEPLOYMENT, ns, child_names(name).deployment, scale,
                                      subresource="scale", urgent=d.replicas == 0)
        if scaled is not None:
            _observe_scale(ctx, st, d.replicas)
    st.desired_replicas = d.replicas

    # Reader Jobs: start what a trigger asks for; their results join this status write.
    reader = await reader_control.step(ctx, st, obj, d.settings)
    st.child_conflict = child_conflict
    if reader.conflict is not False:
        st.reader_conflict = reader.conflict
    if st.conflict != conflict and not again:
        return await _sync_once(ctx, st, obj, verify, again=True)
    if reader.reader_jobs is not None:
        d.status["readerJobs"] = reader.reader_jobs
    patch = status_patch(obj.status, d.status)
    if patch:
        try:
            await ctx.kube.patch(kube.QUEUE_CONSUMER, ns, name,
                                 {"metadata": {"resourceVersion": obj.resource_version}, "status": patch},
                                 subresource="status")
        except kube.Conflict:
            return False
    # What the operator's own metrics say (antidote_operator_queue_disabled and the condition
    # counts) is the status as written: set it now, before the Events, so that whoever sees an
    # Event also sees the gauge of the same transition.
    if reader.recheck_at is not None and (d.recheck_at is None or reader.recheck_at < d.recheck_at):
        d.recheck_at = reader.recheck_at
    st.poison, st.recheck_at = d.poison, d.recheck_at
    st.conditions = {c["type"]: c["status"] for c in d.status.get("conditions", [])}
    st.ready = next(((c["status"], c["reason"]) for c in d.status.get("conditions", [])
                     if c["type"] == "Ready"), None)
    ex = d.status.get("executors")
    st.executors = (ex["current"], ex["desired"]) if ex else None
    st.disabled_reason = d.disabled
    if d.resumed:
        # What the stopped driver last reported belongs to the disabled run.
        st.sample, st.termination = None, None
    # Events only after the status that records their transition is stored: a retry or a
    # restarted operator compares against it and does not post them again.
    ref = object_ref(obj)
    for t in reader.transitions:
        await post_event(ctx, ref, t.event)
        reader_control.count(ctx, ns, name, t)
        log.log(logging.WARNING if t.event.type == "Warning" else logging.INFO, "%s/%s %s: %s",
                ns, name, t.event.reason, t.event.message)
    for e in d.events + reader.events:
        await post_event(ctx, ref, e)
        log.log(logging.WARNING if e.type == "Warning" else logging.INFO, "%s/%s %s: %s",
                ns, name, e.reason, e.message)
        if e.reason == EventReason.QUEUE_DISABLED:
            ctx.metrics.pauses.labels(d.disabled or "Unknown").inc()
        elif e.reason == EventReason.PAUSED:
            ctx.metrics.pauses.labels("UserRequested").inc()
        elif e.reason == EventReason.RESUMED and d.resumed:
            ctx.metrics.resumes.labels("Probing" if isinstance(d.probe, str) else "Resumed").inc()

    annotations: dict[str, str | None] = {}
    if d.consume_resume:
        annotations[RESUME_ANNOTATION] = None
    if reader.consume_drain:
        annotations[DRAIN_ANNOTATION] = None
    if d.probe is not False:
        annotations[PROBE_ANNOTATION] = d.probe
    if annotations:
        await ctx.kube.patch(kube.QUEUE_CONSUMER, ns, name, {"metadata": {"annotations": annotations}})
    return True


async def _apply_children(ctx: Context, children: list[dict[str, Any]], *, fresh: bool,
                          listed: Mapping[tuple[str, str], Mapping[str, Any]] | None) -> str | None:
    """Apply the children in order (the Deployment last); at the first object of a child's
    name that is not the consumer's, stop and return why: what follows it (the Deployment
    runs under the ServiceAccounts) is neither created nor changed."""
    for child in children:
        try:
            action = await kube.apply(ctx.kube, child, create_first=fresh, listed=listed)
        except kube.NotOwned as err:
            return str(err)  # logged with its Event, once, not at each look every 10 s
        if action != "unchanged":
            ctx.metrics.child_writes.labels(child["kind"], action).inc()
            log.info("%s %s %s/%s", action, child["kind"], child["metadata"]["namespace"],
                     child["metadata"]["name"])
    return None


def _observe_scale(ctx: Context, st: ConsumerState, replicas: int) -> None:
    available = st.deployment.available if st.deployment else 0
    uid = st.deployment.uid if st.deployment else None
    st.deployment = DeploymentView(replicas=replicas, available=min(available, replicas), uid=uid)
    if replicas == 0 and st.disabled_seen_at is not None:
        ctx.metrics.disable_seconds.observe(time.monotonic() - st.disabled_seen_at)
        st.disabled_seen_at = None


async def _ensure_spark_auth_secret(ctx: Context, obj: ConsumerObject) -> None:
    """The consumer's Spark RPC secret: created once with fresh random bytes, owned by the
    QueueConsumer, never read back nor rotated by the operator (it may not read Secrets).
    Deleting the Secret makes the next reconcile create a new one; the driver reads it at
    start, so roll the driver after that."""
    secret = driver.build_spark_auth_secret(obj.name, secrets.token_bytes(32))
    kopf.adopt(secret, owner=dict(obj.body))  # type: ignore[arg-type]  # Kopf's Body: see builders.driver
    if await kube.create_once(ctx.kube, secret) == "created":
        ctx.metrics.child_writes.labels("Secret", "created").inc()
        log.info("created Secret %s/%s", secret["metadata"]["namespace"], secret["metadata"]["name"])


# --- children, deleted explicitly --------------------------------------------------------

DELETE_ORDER = (("Deployment", "deployment"), ("Service", "service"), ("RoleBinding", "role_binding"),
                ("ServiceAccount", "service_account"), ("ServiceAccount", "executor_service_account"),
                ("ConfigMap", "configmap"))


async def delete_children(ctx: Context, namespace: str, name: str, uid: str) -> list[str]:
    """Delete the children owned by consumer `uid`; returns what was deleted.

    A real cluster's garbage collector would do this through the owner references; the
    local stack runs no kube-controller-manager, so the operator does it itself (on a real
    cluster this only comes first). Objects of the same name owned by others are left.
    """
    n = child_names(name)
    deleted = []
    for kind_name, attr in DELETE_ORDER:
        kind = kube.BY_KIND[kind_name]
        child_name = getattr(n, attr)
        obj = await ctx.kube.get(kind, namespace, child_name)
        if obj is None:
            continue
        if not ownership.owned_by(obj, uid):
            continue
        # That very object: one replaced under its name since the read is another's (a 409).
        try:
            gone = await ctx.kube.delete(kind, namespace, child_name, uid=obj["metadata"]["uid"])
        except kube.Conflict:
            continue
        if gone:
            deleted.append(f"{kind_name}/{child_name}")
    # The Secret cannot be read to check its owner (no `get` on Secrets): its name is
    # reserved for the consumer's (docs/operator.md).
    if await ctx.kube.delete(kube.SECRET, namespace, n.spark_auth_secret):
        deleted.append(f"Secret/{n.spark_auth_secret}")
    return deleted + await reader_control.delete_reader_objects(ctx, namespace, name, uid)


# --- Deployments and Pods: what the consumer's driver is doing ----------------------------

def pod_termination(pod: Mapping[str, Any]) -> Termination | None:
    """The driver container's latest termination (state or lastState), as the kubelet reports it."""
    best: Termination | None = None
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") != driver.CONTAINER:
            continue
        for where in ("state", "lastState"):
            term = (cs.get(where) or {}).get("terminated")
            at = parse_time((term or {}).get("finishedAt"))
            if term and at and "exitCode" in term and (best is None or at > best.finished_at):
                best = Termination(int(term["exitCode"]), at, "pod", parse_time(term.get("startedAt")),
                                   term.get("message"))
    return best


def note_termination(ctx: Context, st: ConsumerState, term: Termination | None) -> bool:
    if term is None or (st.termination is not None and term.finished_at <= st.termination.finished_at):
        return False
    st.termination = term
    if term.reason is not None:
        st.disabled_seen_at = time.monotonic()
    return True


def deployment_view(body: Mapping[str, Any]) -> DeploymentView:
    spec, status = body.get("spec") or {}, body.get("status") or {}
    return DeploymentView(replicas=int(spec.get("replicas", 1)),
                          available=int(status.get("availableReplicas", 0) or 0),
                          uid=(body.get("metadata") or {}).get("uid"))


def on_deployment(ctx: Context, body: Mapping[str, Any], deleted: bool) -> None:
    meta = body.get("metadata", {})
    ns = meta.get("namespace")
    consumer = (meta.get("labels") or {}).get(LABEL_CONSUMER)
    if not ns or not consumer:
        return
    runner = ctx.runner
    if runner is not None and ownership.owned_by_a_consumer(body):
        runner.observe(body, deleted)  # it plays kubelet for consumers' children only
    st = ctx.registry.peek(ns, consumer)
    if st is None:
        return  # not a consumer this operator knows (yet): its handlers will sync it
    if st.uid is not None and not ownership.owned_by(body, st.uid):
        return  # another's Deployment of the consumer's name: neither its driver nor its state
    if deleted:
        st.deployment, st.rendered = None, None
        ctx.syncer.kick(ns, consumer, verify=True)  # recreated unless the consumer is going
        return
    view = deployment_view(body)
    annotations = meta.get("annotations") or {}
    changed = st.deployment is None or (view.replicas, view.available) != (
        st.deployment.replicas, st.deployment.available)
    # First seen while a sync of the consumer runs: most often the Deployment that sync has
    # just created (its watch event can come before the create's answer), and the sync
    # records it as it ends. A kick would run the whole sync again, for ~1 in 4 consumers of
    # a first reconcile of 1,000 (a GET and a pass each). The metrics watcher's rounds sync
    # running consumers anyway. (A sync, from a handler or the syncer, holds the lock.)
    syncing_first_sight = st.deployment is None and st.lock.locked()
    if view.available > 0 and (st.deployment is None or st.deployment.available == 0):
        st.driver_ready_at = datetime.now(timezone.utc)
    st.deployment = view
    # Where no kubelet runs the driver, its runner says where its /metrics are and how it
    # ended; on a cluster, metrics_url_template and the pod's status do.
    url = runner.metrics_url(annotations) if runner is not None else None
    if url != st.metrics_url:
        st.metrics_url = url
    terminated = note_termination(ctx, st, runner.termination(annotations) if runner is not None else None)
    if syncing_first_sight and not terminated:
        return
    if changed or terminated or (st.desired_replicas is not None and view.replicas != st.desired_replicas):
        ctx.syncer.kick(ns, consumer)


def on_pod(ctx: Context, body: Mapping[str, Any], deleted: bool = False) -> None:
    meta = body.get("metadata", {})
    ns, consumer = meta.get("namespace"), (meta.get("labels") or {}).get(LABEL_CONSUMER)
    if not ns or not consumer:
        return
    problem = None if deleted else driver_pod_problem(body)
    changed = ctx.pod_problems.put(ns, consumer, meta.get("name", ""), problem)
    st = ctx.registry.peek(ns, consumer)
    if st is None:
        return
    terminated = not deleted and note_termination(ctx, st, pod_termination(body))
    if terminated or changed:
        ctx.syncer.kick(ns, consumer)
