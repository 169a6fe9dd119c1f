"""`spec.spark.autoscale` in a reconcile: reads what the operator knows (the last metrics
sample, the stored `status.executors`), asks `executor_scale.decide_executors`, and puts the
count into the driver's settings (so into `spark.executor.instances` of spark-defaults.conf
and the settings hash on the pod template: a change restarts the driver), `status.executors`
and an Event. The state that must survive a restart (the count, when it changed) is in
status; only the partitions' progress between readings is in memory."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from antidote_api import autoscale as reasons
from antidote_api.autoscale import ExecutorScale

from .executor_scale import ScaleDecision, ScaleInputs, blocked_partitions, decide_executors, track
from .state import ConsumerState
from .status import Decision, Event


def _stored(status: Mapping[str, Any] | None) -> ExecutorScale | None:
    raw = (status or {}).get("executors")
    try:
        return ExecutorScale.model_validate(raw) if raw else None
    except ValidationError:
        return None  # unreadable: start again from min


def step(st: ConsumerState, d: Decision, status: Mapping[str, Any] | None, now: datetime) -> ScaleDecision | None:
    """Fold the executor count into `d` (settings, status, Events); None without autoscale."""
    stored = _stored(status)
    spec = d.settings.spark.autoscale if d.settings is not None else None
    if d.settings is None:
        if stored is not None:  # the configuration is broken: keep what is known, decide nothing
            d.status["executors"] = stored.wire()
        return None
    if spec is None:
        st.progress = {}
        return None
    now = now.replace(microsecond=0)
    last = stored.last_scale_time if stored is not None else None
    # The driver's own restart is not a stall: partitions count as blocked until they are seen
    # moving after the last change and after the driver last became available, and while it
    # is not available at all (a restart's old driver may still move them in its last batch,
    # and the new one's start-up outlasts stall windows measured from the old one's batches).
    restarted_at = max((t for t in (last, st.driver_ready_at) if t is not None), default=None)
    if d.replicas and st.deployment is not None and st.deployment.available == 0:
        restarted_at = now
    s = st.sample
    partitions = None
    if s is not None and s.partitions is not None:
        positions = {p: (pos, lag) for p, pos, lag in s.partitions}
        st.progress = track(st.progress, positions, s.at)
        lp = s.last_poison
        fault = (lp.partition, lp.offset) if lp is not None and lp.disposition == "Fault" else None
        # Now, not the reading's time: an unchanged page brings no new reading, and a
        # partition that stopped moving must count as stopped when a cool-down ends later.
        partitions = blocked_partitions(positions, st.progress, now=now,
                                        failing=bool(s.consecutive), fault=fault, restarted_at=restarted_at)
    current = stored.current if stored is not None else spec.min
    x = decide_executors(ScaleInputs(
        spec=spec, current=current, last_change=last, now=now, partitions=partitions,
        cores=d.settings.spark.executor.cores, running=bool(d.replicas)))
    spark = d.settings.spark
    d.settings = d.settings.model_copy(update={"spark": spark.model_copy(update={
        "executor": spark.executor.model_copy(update={"instances": x.executors})})})
    changed = x.executors != current
    d.status["executors"] = ExecutorScale(
        current=x.executors, desired=x.desired, reason=x.reason, message=x.message,
        last_scale_time=now if changed else last).wire()
    if x.reason in (reasons.UP_COOLING, reasons.DOWN_COOLING) and last is not None:
        # Decide again when the cool-down ends, even if no new reading arrives by then.
        wait = spec.scale_up_cooldown if x.reason == reasons.UP_COOLING else spec.scale_down_cooldown
        due = last + timedelta(milliseconds=wait.ms)
        d.recheck_at = due if d.recheck_at is None else min(d.recheck_at, due)
    if changed:
        d.events.append(Event("Normal", x.reason, f"{x.message} {x.detail}".strip()
                              + " The driver restarts with the new count."))
    return x
