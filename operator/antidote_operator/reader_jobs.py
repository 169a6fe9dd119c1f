"""Poison-reader Jobs, as pure functions: names, manifests, trigger decisions, status.

A QueueConsumer's reader Job runs `antidote reader` (the consumer's image, its settings
ConfigMap) over the poison topic. Three triggers start one, all level-based:
- the annotation `antidote.dev/drain` (a request id, or a JSON request with an action and
  filters; `antidote drain` writes it), removed once its Job exists;
- `reader.trigger.schedule` (cron, UTC): the latest due slot, within a starting deadline;
- `reader.trigger.poisonDepth`: at least that many poison records arrived since the newest
  reader Job started (the poison topic's depth is end - start offsets, which a reader does
  not lower, so "depth >= N" alone would fire forever).
At most one Job per consumer is active. Names are derived from the trigger instance (the
request id, the slot, the newest Job before it), so an operator that restarts between
creating a Job and recording it creates the same name again: 409, adopted, never doubled.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any


from antidote_api.conditions import EventReason
from antidote_api.consumer import ReaderJob
from antidote_api.drain import DrainRequest, parse_drain
from antidote_api.names import drain_job_name, reader_job_name, schedule_job_name
from antidote_api.semantics import EffectiveSettings
from antidote_api.times import parse_time
from antidote_api.wire import DRAIN_ANNOTATION

from . import cron
from .builders.common import LABEL_CONSUMER
from .builders.reader_job import (ACTION_ANNOTATION, CONTAINER, DEPTH_ANNOTATION, TRIGGER_LABEL,
                                  JobOptions)
from .status import Event

MAX_STATUS_JOBS = 16

# Trigger name slug (antidote_api.names.READER_TRIGGER_SLUGS) -> status.readerJobs[].trigger.
TRIGGERS = {"drain": "Manual", "sched": "Schedule", "depth": "PoisonDepth"}


# --- what a Job says ---------------------------------------------------------------------------

def _zulu(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class JobView:
    """One reader Job as the operator sees it (from the watch stream)."""

    name: str
    consumer: str
    trigger: str  # drain | sched | depth
    action: str
    phase: str  # Pending | Running | Succeeded | Failed
    created: datetime | None
    start: datetime | None
    completion: datetime | None
    depth: int | None
    failure: str | None = None  # the Job's Failed condition, in words

    @property
    def active(self) -> bool:
        return self.phase in ("Pending", "Running")


def job_phase(status: Mapping[str, Any]) -> tuple[str, str | None]:
    """The phase from a Job's status (as the Job controller writes it) and, when it
    failed, why."""
    for c in status.get("conditions") or []:
        if c.get("status") != "True":
            continue
        if c.get("type") == "Complete":
            return "Succeeded", None
        if c.get("type") == "Failed":
            return "Failed", f"{c.get('reason') or 'Failed'}: {c.get('message') or ''}".rstrip(": ")
    if int(status.get("succeeded") or 0) >= 1:
        return "Succeeded", None
    if int(status.get("active") or 0) >= 1 or status.get("startTime"):
        return "Running", None
    return "Pending", None


def job_view(body: Mapping[str, Any]) -> JobView | None:
    meta = body.get("metadata") or {}
    lab = meta.get("labels") or {}
    consumer, trigger = lab.get(LABEL_CONSUMER), lab.get(TRIGGER_LABEL)
    if not consumer or trigger not in TRIGGERS:
        return None
    ann = meta.get("annotations") or {}
    status = body.get("status") or {}
    phase, failure = job_phase(status)
    try:
        depth = int(ann[DEPTH_ANNOTATION]) if DEPTH_ANNOTATION in ann else None
    except ValueError:
        depth = None
    return JobView(name=meta["name"], consumer=consumer, trigger=trigger,
                   action=ann.get(ACTION_ANNOTATION, "Hold"), phase=phase,
                   created=parse_time(meta.get("creationTimestamp")), start=parse_time(status.get("startTime")),
                   completion=parse_time(status.get("completionTime")), depth=depth, failure=failure)


def pod_report(pod: Mapping[str, Any]) -> str | None:
    """The reader container's termination message: its JSON report (or its logs' tail)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == CONTAINER:
            term = (cs.get("state") or {}).get("terminated") or {}
            if term.get("message"):
                return str(term["message"])
    return None


COUNT_KEYS = ("redriven", "parked", "archived", "dropped", "held", "rejected", "skippedByFilter", "failed",
              "refused")


def summarize(view: JobView, report: str | None) -> tuple[int, str]:
    """(messages handled, the result in words) from the reader's report."""
    doc: dict[str, Any] | None = None
    if report:
        try:
            parsed = json.loads(report)
            doc = parsed if isinstance(parsed, dict) else None
        except ValueError:
            doc = None
    if doc is None:
        if view.phase == "Failed":
            tail = (report or "").strip().splitlines()[-1:] if report else []
            text = f"Failed: {view.failure or 'the reader did not finish'}"
            return 0, (text + (f"; last log line: {tail[0]}" if tail else ""))[:1024]
        if view.phase == "Succeeded":
            return 0, "Succeeded; no report was found"
        return 0, {"Pending": "Waiting to start.", "Running": "Reading the poison topic."}[view.phase]
    messages = int(doc.get("messages") or 0)
    counts = ", ".join(f"{int(doc[k])} {k}" for k in COUNT_KEYS if doc.get(k))
    dry = bool(doc.get("dryRun"))
    text = (f"{doc.get('action', view.action)}{' (dry run)' if dry else ''} of "
            f"{doc.get('from') or 'poison'}: {messages} message(s)"
            + (f"{', would be' if dry else ':'} {counts}" if counts else ""))
    if doc.get("archivePath"):
        text += f"; archive {doc['archivePath']}"
    if doc.get("faultAt"):
        text += f"; Fault at {doc['faultAt']}"
    if view.phase == "Failed":
        text = f"Failed ({view.failure or 'reader error'}): " + text
    return messages, text[:1024]


# --- deciding -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Spawn:
    name: str
    trigger: str
    request: DrainRequest | None = None
    reason: str = ""  # for the log and the Started Event


@dataclass
class Plan:
    spawn: Spawn | None = None
    consume_drain: bool = False  # remove the annotation: its Job exists (or now will)
    invalid_drain: str | None = None  # the annotation cannot be read: why
    waiting: str | None = None  # a trigger fired but a Job is active


def newest(entries: Iterable[tuple[datetime | None, str, int | None]]) -> tuple[str, int | None] | None:
    best = None
    for when, name, depth in entries:
        key = (when or datetime.min.replace(tzinfo=timezone.utc), name)
        if best is None or key > best[0]:
            best = (key, (name, depth))
    return None if best is None else best[1]


def plan(*, consumer: str, settings: EffectiveSettings, annotations: Mapping[str, str],
         depth: int | None, now: datetime, created: datetime | None, jobs: Sequence[JobView],
         stored: Sequence[Mapping[str, Any]], job_opts: JobOptions = JobOptions()) -> Plan:
    """Which reader Job to start now, if any (pure; `jobs` are the consumer's Jobs that
    exist, `stored` its status.readerJobs)."""
    out = Plan()
    known = {j.name for j in jobs} | {str(s.get("name")) for s in stored}
    active = [j for j in jobs if j.active]

    # 1. A drain request.
    raw = annotations.get(DRAIN_ANNOTATION)
    if raw is not None:
        try:
            req = parse_drain(raw)
        except ValueError as err:
            out.invalid_drain, out.consume_drain = str(err), True
        else:
            name = drain_job_name(consumer, req.id)
            if name in known:
                out.consume_drain = True
            elif active:
                out.waiting = f"drain {req.id!r} waits for Job {active[0].name}"
            else:
                out.spawn = Spawn(name, "drain", req, f"requested by {DRAIN_ANNOTATION}={req.id}")
                out.consume_drain = True
                return out
    if active:
        return out

    trig = settings.reader.trigger
    # 2. Poison depth: new poison since the newest reader Job.
    if trig.poison_depth is not None and depth is not None:
        last = newest([(j.created or j.start, j.name, j.depth) for j in jobs]
                      + [(parse_time(s.get("startTime")), str(s.get("name")), s.get("poisonDepth")) for s in stored])
        mark = (last[1] or 0) if last else 0
        if depth - mark >= trig.poison_depth and depth >= trig.poison_depth:
            instance = f"depth:{mark}:{last[0] if last else ''}"
            name = reader_job_name(consumer, "depth", instance)
            if name not in known:
                out.spawn = Spawn(name, "depth", None, f"{depth - mark} new poison message(s) "
                                  f"(reader.trigger.poisonDepth {trig.poison_depth})")
                return out
    # 3. The latest due schedule slot.
    if trig.schedule:
        try:
            slot = cron.parse(trig.schedule).previous(now)
        except cron.CronError:
            slot = None  # the API rejects most bad expressions; the rest never fire
        if slot is not None and (created is None or slot >= created) \
                and now - slot <= timedelta(seconds=job_opts.schedule_deadline_seconds):
            name = schedule_job_name(consumer, slot)
            if name not in known:
                out.spawn = Spawn(name, "sched", None,
                                  f"schedule {trig.schedule!r}, slot {_zulu(slot)}")
    return out


def status_entry(view: JobView, report: str | None) -> dict[str, Any]:
    messages, text = summarize(view, report)
    entry = {"name": view.name, "action": view.action, "trigger": TRIGGERS[view.trigger],
             "phase": view.phase, "startTime": _zulu(view.start or view.created),
             "completionTime": _zulu(view.completion), "messages": messages, "message": text,
             "poisonDepth": view.depth}
    # The API model's wire form, so it compares equal to the stored one when unchanged.
    return ReaderJob.model_validate({k: v for k, v in entry.items() if v is not None}).wire()


def merge_status(stored: Sequence[Mapping[str, Any]], entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """status.readerJobs: stored entries updated from the Jobs that exist (merge by name),
    newest first, at most 16. Entries of Jobs gone (TTL) keep their last word."""
    by_name: dict[str, dict[str, Any]] = {str(s.get("name")): dict(s) for s in stored}
    for e in entries:
        by_name[e["name"]] = dict(e)
    items = sorted(by_name.values(), key=lambda e: (e.get("startTime") or "", e["name"]), reverse=True)
    return items[:MAX_STATUS_JOBS]


@dataclass(frozen=True)
class Transition:
    event: Event
    trigger: str
    result: str  # started | succeeded | failed


def transitions(stored: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> list[Transition]:
    """Events for what changed against the stored status (so restarts repeat none)."""
    before = {str(s.get("name")): s for s in stored}
    out: list[Transition] = []
    for e in reversed(new):  # oldest first
        old = before.get(e["name"])
        trig = e["trigger"]
        if old is None:
            out.append(Transition(Event("Normal", EventReason.READER_JOB_STARTED,
                                        f"Reader Job {e['name']} started ({e['action']}, trigger "
                                        f"{trig})."), trig, "started"))
        if e["phase"] in ("Succeeded", "Failed") and (old is None or old.get("phase") != e["phase"]):
            ok = e["phase"] == "Succeeded"
            out.append(Transition(Event("Normal" if ok else "Warning",
                                        EventReason.READER_JOB_SUCCEEDED if ok else EventReason.READER_JOB_FAILED,
                                        f"Reader Job {e['name']}: {e['message']}"), trig,
                                  "succeeded" if ok else "failed"))
    return out
