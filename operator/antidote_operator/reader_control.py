"""Reader Jobs in the reconcile loop: observe Jobs and their pods, start the Job a trigger
asks for, and fold what the Jobs say into status.readerJobs (decisions in reader_jobs).

Called from `_sync_once` with the QueueConsumer as read (a ConsumerObject): the new
readerJobs go into the same conditional status write as the conditions, and the Events
follow that write, so a retry or a restarted operator never posts them twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal

from antidote_api.conditions import EventReason
from antidote_api.names import reader_service_account
from antidote_api.semantics import EffectiveSettings

from . import kube, ownership
from . import reader_jobs as rj
from .builders import reader_job
from .builders.common import LABEL_CONSUMER
from .status import Event

if TYPE_CHECKING:
    from .consumer_object import ConsumerObject
    from .context import Context
    from .state import ConsumerState

log = logging.getLogger("antidote.operator.reader")

JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")


@dataclass
class Outcome:
    reader_jobs: list[dict[str, Any]] | None = None  # the new status.readerJobs; None: unchanged
    events: list[Event] = field(default_factory=list)
    transitions: list[rj.Transition] = field(default_factory=list)
    consume_drain: bool = False
    recheck_at: datetime | None = None  # when a schedule needs another look
    # An object of the reader's names that is not the consumer's (ownership), met starting a
    # Job; None: none met; False: no Job was started, nothing learnt (the last one stands).
    conflict: str | None | Literal[False] = False


# --- watch streams -------------------------------------------------------------------------------

def on_job(ctx: Context, body: Mapping[str, Any], deleted: bool) -> None:
    ns = (body.get("metadata") or {}).get("namespace")
    if not ns:
        return
    runner = ctx.runner
    report = runner.job_report((body.get("metadata") or {}).get("annotations") or {}) if runner else None
    view = ctx.reader_index.put(ns, body, deleted, report)
    if runner is not None and ownership.owned_by_a_consumer(body):
        runner.observe_job(body, deleted)  # it plays kubelet for consumers' children only
    if view is not None and ctx.registry.peek(ns, view.consumer) is not None:
        ctx.syncer.kick(ns, view.consumer)


def on_pod(ctx: Context, body: Mapping[str, Any]) -> None:
    """A reader pod that terminated: its message is the reader's report."""
    meta = body.get("metadata") or {}
    ns, lab = meta.get("namespace"), meta.get("labels") or {}
    job = next((lab[k] for k in JOB_NAME_LABELS if lab.get(k)), None)
    report = rj.pod_report(body)
    if not ns or not job or report is None or ctx.reader_index.reports.get((ns, job)) == report:
        return
    ctx.reader_index.reports[(ns, job)] = report
    consumer = lab.get(LABEL_CONSUMER)
    if consumer and ctx.registry.peek(ns, consumer) is not None:
        ctx.syncer.kick(ns, consumer)


# --- one reconcile step --------------------------------------------------------------------------

async def _ensure_listed(ctx: Context, ns: str) -> None:
    """One list of a namespace's reader Jobs after a start: the watch stream may not have
    delivered them yet when the first consumer there is reconciled."""
    idx = ctx.reader_index
    if ns in idx.listed:
        return

    async def list_once() -> None:
        # Concurrent first reconciles in `ns` share this one list (single flight); the look
        # at idx.listed above and the flight have no await between them.
        for body in await ctx.kube.list(kube.JOB, ns, f"{LABEL_CONSUMER},app.kubernetes.io/component={reader_job.COMPONENT}"):
            idx.put(ns, body)
        idx.listed.add(ns)

    await ctx.flight.run(("reader-jobs", ns), list_once)


async def _create_job(ctx: Context, qc: Mapping[str, Any], settings: EffectiveSettings,
                      spawn: rj.Spawn, depth: int | None) -> rj.JobView | str | None:
    """The Job started (or found, the consumer's own); a str: the conflict that kept it from
    starting (its ServiceAccount or a Job of its name is another's; nothing was written)."""
    ns, name = qc["metadata"]["namespace"], qc["metadata"]["name"]
    sa = reader_job.build_reader_service_account(name)
    job = reader_job.build_reader_job(settings, ctx.options.render, trigger=spawn.trigger, name=spawn.name,
                              request=spawn.request, depth=depth, job_opts=ctx.options.reader_jobs)
    reader_job.adopt(qc, sa, job)
    try:
        if await kube.apply(ctx.kube, sa) == "created":
            ctx.metrics.child_writes.labels("ServiceAccount", "created").inc()
    except kube.NotOwned as err:
        return str(err)  # the Job would run under another's ServiceAccount (logged with its Event)
    body: dict[str, Any] | None
    try:
        body = await ctx.kube.create(kube.JOB, ns, job)
        ctx.metrics.child_writes.labels("Job", "created").inc()
        log.info("created Job %s/%s: %s", ns, spawn.name, spawn.reason)
    except kube.Conflict:
        # Created before (a restart between creating it and recording it): adopt it, if it is
        # the consumer's own; another's Job of that name is neither adopted nor reported on.
        body = await ctx.kube.get(kube.JOB, ns, spawn.name)
        if body is None:
            return None
        conflict = ownership.conflict_of(job, body)
        if conflict is not None:
            return conflict
        log.info("Job %s/%s exists already; adopted", ns, spawn.name)
    return ctx.reader_index.put(ns, body)


async def step(ctx: Context, st: ConsumerState, obj: ConsumerObject,
               settings: EffectiveSettings | None) -> Outcome:
    ns, name = obj.namespace, obj.name
    await _ensure_listed(ctx, ns)
    stored = list(obj.status.get("readerJobs") or [])
    jobs = ctx.reader_index.of(ns, name)
    out = Outcome()
    depth = st.sample.depths.get("poison") if st.sample is not None else None
    if settings is not None:
        now = datetime.now(timezone.utc)
        p = rj.plan(consumer=name, settings=settings, annotations=obj.annotations,
                    depth=depth, now=now, created=obj.created, jobs=jobs,
                    stored=stored, job_opts=ctx.options.reader_jobs)
        if p.invalid_drain is not None:
            out.events.append(Event("Warning", EventReason.DRAIN_INVALID,
                                    f"The {rj.DRAIN_ANNOTATION} annotation cannot be read: "
                                    f"{p.invalid_drain}. It was removed; nothing was started."))
        out.conflict = None
        if p.spawn is not None:
            view = await _create_job(ctx, obj.body, settings, p.spawn, depth)
            if isinstance(view, str):
                out.conflict = view
            elif view is not None:
                jobs = ctx.reader_index.of(ns, name)
        elif p.waiting and p.waiting != st.reader_waiting:
            log.info("%s/%s: %s", ns, name, p.waiting)
        st.reader_waiting = p.waiting
        # A drain that could not start is kept: asked again once the conflict is gone.
        out.consume_drain = p.consume_drain and out.conflict is None
        if settings.reader.trigger.schedule:
            # Cron has minute resolution: look again just after the next minute starts.
            out.recheck_at = now.replace(second=1, microsecond=0) + timedelta(minutes=1)
    if not jobs and not stored:
        return out
    entries = [rj.status_entry(j, ctx.reader_index.reports.get((ns, j.name))) for j in jobs]
    new = rj.merge_status(stored, entries)
    if new != stored:
        out.reader_jobs = new
        out.transitions = rj.transitions(stored, new)
    return out


def count(ctx: Context, ns: str, name: str, t: rj.Transition) -> None:
    if t.result == "started":
        ctx.metrics.reader_started.labels(ns, name, t.trigger).inc()
    elif t.result == "failed":
        ctx.metrics.reader_failed.labels(ns, name, t.trigger).inc()


# --- deletion (the local stack has no garbage collector) ------------------------------------------

async def delete_reader_objects(ctx: Context, namespace: str, name: str, uid: str) -> list[str]:
    deleted: list[str] = []
    for job in await ctx.kube.list(kube.JOB, namespace, f"{LABEL_CONSUMER}={name},app.kubernetes.io/component={reader_job.COMPONENT}"):
        if ownership.owned_by(job, uid):
            # Background: the Job's pods go too (the API's default for Jobs orphans them). That
            # very Job (its uid): one replaced under its name since the list is another's.
            try:
                if await ctx.kube.delete(kube.JOB, namespace, job["metadata"]["name"],
                                         uid=job["metadata"]["uid"], propagation="Background"):
                    deleted.append(f"Job/{job['metadata']['name']}")
            except kube.Conflict:
                pass
    sa = await ctx.kube.get(kube.SERVICE_ACCOUNT, namespace, reader_service_account(name))
    if sa is not None and ownership.owned_by(sa, uid):
        try:
            if await ctx.kube.delete(kube.SERVICE_ACCOUNT, namespace, reader_service_account(name),
                                     uid=sa["metadata"]["uid"]):
                deleted.append(f"ServiceAccount/{reader_service_account(name)}")
        except kube.Conflict:
            pass
    ctx.reader_index.forget(namespace, name)
    return deleted
