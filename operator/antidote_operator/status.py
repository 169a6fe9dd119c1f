"""What a QueueConsumer's status, replicas and Events should be: one pure function.

`decide` takes everything the operator knows about one consumer (its spec and current
status, the policy, the Deployment, the last metrics sample, the last termination of its
driver) and returns the new status, the replicas, the effective settings and the Events
to post. Events are derived from condition transitions against the status stored in the
API server, so an operator restart (which re-reads that status) posts nothing twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from pydantic import ValidationError

from antidote_api.base import explain
from antidote_api.conditions import (Condition, ConditionType, ConfigReason, DriverReason, EnabledReason,
                                     EventReason, PausedReason, PoisonConditionReason, ReadyReason,
                                     condition, find_condition, set_condition)
from antidote_api.consumer import Counts, LastPoison, QueueConsumerSpec, QueueConsumerStatus
from antidote_api.policy import PoisonPolicySpec
from antidote_api.semantics import EffectiveSettings, resolve
from antidote_api.wire import (DISABLE_REASONS, OUTCOMES, POISON_CONDITION_REASONS,
                               PROBE_ANNOTATION, RESUME_ANNOTATION, ExitCode)

from .observations import DeploymentView, PoisonMemory, Sample, Termination, fresh
from .pod_problems import PodProblem
from .status_messages import disable_message, poison_summary


# Exit 2 (ExitCode.BAD_SETTINGS): the driver refused its settings before any Spark work (a
# handler that cannot be imported, an unreadable Secret); its one line is the container's
# termination message.
EXIT_BAD_SETTINGS = ExitCode.BAD_SETTINGS
SETTINGS_REJECTED = ConfigReason.SETTINGS_REJECTED.value

# While an object of a child's name is not the consumer's, it is looked at again this often:
# its deletion comes on no watch stream the operator holds (a foreign object has no labels of
# the consumer's), and the consumer starts soon after it is gone.
CONFLICT_RECHECK = timedelta(seconds=10)

DRIVER_REASONS = frozenset(r.value for r in DriverReason)
READY, PAUSED = ConditionType.READY.value, ConditionType.PAUSED.value
DISABLED, POISON = ConditionType.QUEUE_DISABLED.value, ConditionType.POISON_DETECTED.value


@dataclass(frozen=True)
class Inputs:
    name: str
    namespace: str
    generation: int
    spec: Mapping[str, Any]
    annotations: Mapping[str, str]
    status: Mapping[str, Any]
    policy: Mapping[str, Any] | None  # the PoisonPolicy's spec; None when it does not exist
    now: datetime
    deployment: DeploymentView | None = None
    sample: Sample | None = None
    termination: Termination | None = None
    poison: PoisonMemory = PoisonMemory()
    poison_event_interval: float = 60.0
    # An object of a child's name that is not the consumer's (its message); None: none met.
    conflict: str | None = None
    # Why the driver's pod does not run (pod_problems), as the Pod watch last saw it.
    pod_problem: PodProblem | None = None
    pods_listed: bool = True  # False until the Pod watch read its list (pod_problems.listed)


@dataclass(frozen=True)
class Event:
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass
class Decision:
    settings: EffectiveSettings | None  # None: leave the children as they are
    replicas: int | None  # None: leave the Deployment's replicas alone
    status: dict[str, Any]  # the whole new status, wire form
    events: list[Event]
    disabled: str | None  # the QueueDisabled reason while disabled
    newly_disabled: bool = False
    resumed: bool = False
    consume_resume: bool = False  # remove the resume annotation
    probe: str | None | Literal[False] = False  # False: leave the probe annotation; None: remove; str: set
    poison: PoisonMemory = PoisonMemory()
    recheck_at: datetime | None = None  # when to decide again without new observations


# --- helpers -----------------------------------------------------------------------------

def parse_status(raw: Mapping[str, Any] | None) -> QueueConsumerStatus:
    try:
        return QueueConsumerStatus.model_validate(dict(raw or {}))
    except ValidationError:
        # A status this version cannot read is rebuilt rather than blocking the consumer.
        return QueueConsumerStatus()


def status_wire(status: QueueConsumerStatus) -> dict[str, Any]:
    return status.wire()


def explain_lines(err: ValidationError, prefix: str) -> str:
    return "; ".join(f"{prefix}{line}" for line in explain(err))


def _counts(sample: Sample) -> Counts:
    c = {k: int(sample.counts.get(k, 0)) for k in OUTCOMES}
    return Counts(**c, poisoned=c["moved"] + c["rejected"] + c["dropped"])


# --- the decision ------------------------------------------------------------------------

@dataclass
class _Pass:
    """The state one `decide` pass builds up, condition by condition (in this order)."""

    i: Inputs
    now: datetime
    cur: QueueConsumerStatus
    conds: list[Condition]
    events: list[Event] = field(default_factory=list)
    problem: tuple[str, str] | None = None
    settings: EffectiveSettings | None = None
    policy: PoisonPolicySpec | None = None
    disabled: bool = False
    disabled_reason: str | None = None
    resumed_at: datetime | None = None
    resumed: bool = False
    newly_disabled: bool = False
    probe: str | None | Literal[False] = False
    recheck_at: datetime | None = None

    def put(self, type_: str, status: bool, reason: str, message: str = "") -> None:
        self.conds = set_condition(self.conds, condition(type_, status, reason, message, self.i.generation,
                                                         self.now), self.now)

    def was(self, type_: str) -> Condition | None:
        return find_condition(self.cur.conditions or [], type_)

    @property
    def paused(self) -> bool:
        return bool(self.i.spec.get("paused", False))

    @property
    def auto(self) -> Any:
        return self.policy.queue_disable.auto_resume if self.policy is not None else None

    def recheck(self, at: datetime) -> None:
        self.recheck_at = at if self.recheck_at is None else min(self.recheck_at, at)


def decide(i: Inputs) -> Decision:
    cur = parse_status(i.status)
    p = _Pass(i=i, now=i.now.replace(microsecond=0), cur=cur, conds=list(cur.conditions or []))
    _configuration(p)
    _resume(p)
    _disable(p)
    _probe(p)
    if p.settings is not None and p.resumed_at is not None:
        # The consumer's ledger remembers that its queue is disabled; this token (the
        # resume's time, stable across reconciles) is what lets the next driver start.
        p.settings = p.settings.model_copy(update={
            "resume_token": p.resumed_at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
    # Replicas: one driver, unless paused or disabled.
    replicas = 0 if p.paused or p.disabled else (1 if p.settings is not None else None)
    _paused(p)
    _ready(p)
    counts, consecutive, last = _observed(p)
    memory = _poison(p, counts, last)
    order = {READY: 0, PAUSED: 1, DISABLED: 2, POISON: 3}
    p.conds.sort(key=lambda c: order.get(c.type, 9))
    new = QueueConsumerStatus(
        observed_generation=i.generation, conditions=p.conds, counts=counts,
        consecutive_batch_failures=consecutive, last_poison=last, reader_jobs=cur.reader_jobs)
    return Decision(settings=p.settings, replicas=replicas, status=status_wire(new), events=p.events,
                    disabled=p.disabled_reason if p.disabled else None, newly_disabled=p.newly_disabled,
                    resumed=p.resumed, consume_resume=RESUME_ANNOTATION in i.annotations, probe=p.probe,
                    poison=memory, recheck_at=p.recheck_at)


def _configuration(p: _Pass) -> None:
    """The spec, the policy, and what they resolve to; `problem` is Ready's reason when not."""
    i = p.i
    ref = (i.spec.get("policyRef") or {}).get("name", "")
    spec: QueueConsumerSpec | None = None
    try:
        spec = QueueConsumerSpec.model_validate(dict(i.spec))
    except ValidationError as err:
        p.problem = (ConfigReason.INVALID_SPEC, f"The QueueConsumer is invalid: {explain_lines(err, 'spec.')}")
    if i.policy is None:
        p.problem = p.problem or (ConfigReason.POLICY_NOT_FOUND,
                                  f'PoisonPolicy "{ref}" does not exist in namespace "{i.namespace}"; '
                                  "the consumer starts once it does.")
    else:
        try:
            p.policy = PoisonPolicySpec.model_validate(dict(i.policy))
        except ValidationError as err:
            p.problem = p.problem or (ConfigReason.POLICY_INVALID,
                                      f'PoisonPolicy "{ref}" is invalid: {explain_lines(err, "spec.")}')
    if p.problem is None and spec is not None and p.policy is not None:
        try:
            p.settings = resolve(spec, p.policy, name=i.name, namespace=i.namespace)
        except (ValueError, ValidationError) as err:
            p.problem = (ConfigReason.INVALID_SPEC, f"The QueueConsumer cannot run under PoisonPolicy "
                                                    f'"{ref}": {err}')


def _resume(p: _Pass) -> None:
    """QueueDisabled -> False by the resume annotation, or by autoResume after its delay."""
    qd = p.was(DISABLED)
    p.disabled = qd is not None and qd.status == "True"
    p.disabled_reason = qd.reason if p.disabled and qd is not None else None
    # Evidence older than the last resume belongs to the run that was disabled.
    p.resumed_at = qd.last_transition_time if qd is not None and qd.status != "True" \
        and qd.reason != EnabledReason.QUEUE_ENABLED else None
    if not p.disabled or qd is None:
        return
    if RESUME_ANNOTATION in p.i.annotations:
        p.put(DISABLED, False, EnabledReason.RESUMED, f"Re-enabled by the {RESUME_ANNOTATION} annotation.")
        p.events.append(Event("Normal", EventReason.RESUMED, f"Queue re-enabled by the {RESUME_ANNOTATION} "
                              "annotation" + (" (still paused: spec.paused is true)." if p.paused
                                              else "; the consumer starts again.")))
    elif (auto := p.auto) is not None:
        due = qd.last_transition_time + timedelta(seconds=auto.after.seconds)
        if p.now < due:
            p.recheck_at = due
            return
        p.put(DISABLED, False, EnabledReason.PROBING,
              f"Auto-resumed after {auto.after} (queueDisable.autoResume): probing with "
              f"{auto.probe_messages} message(s); the first failure disables it again.")
        p.events.append(Event("Normal", EventReason.RESUMED, f"Queue auto-resumed after {auto.after}: "
                              f"probing with {auto.probe_messages} message(s)."))
        p.probe = str(p.cur.counts.processed if p.cur.counts else 0)
    else:
        return
    p.disabled, p.disabled_reason, p.resumed, p.resumed_at = False, None, True, p.now


def _disable(p: _Pass) -> None:
    """QueueDisabled -> True: the consumer stops itself; its metrics or its exit code say why."""
    if not p.disabled:
        evidence: tuple[str, str] | None = None
        s, t = p.i.sample, p.i.termination
        if s is not None and s.disabled in DISABLE_REASONS and fresh(s.at, p.resumed_at):
            evidence = (s.disabled, "the consumer's metrics report it (antidote_queue_disabled)")
        elif t is not None and t.reason is not None and t.after(p.resumed_at):
            where = "its pod" if t.source == "pod" else "the dev runner's process"
            evidence = (t.reason, f"the consumer exited with code {t.exit_code} ({where})")
        if evidence is not None:
            reason, how = evidence
            message = disable_message(reason, how, p.i.name, p.policy, s)
            p.put(DISABLED, True, reason, message)
            p.events.append(Event("Warning", EventReason.QUEUE_DISABLED, message))
            p.disabled, p.disabled_reason, p.newly_disabled = True, reason, True
            if PROBE_ANNOTATION in p.i.annotations:
                p.probe = None
            if p.auto is not None:
                p.recheck_at = p.now + timedelta(seconds=p.auto.after.seconds)
    if find_condition(p.conds, DISABLED) is None:
        p.put(DISABLED, False, EnabledReason.QUEUE_ENABLED, "The queue is enabled.")


def _probe(p: _Pass) -> None:
    """A half-open probe passes once it processed its messages without disabling again; while
    it runs, the settings are the consumer's with a hair trigger."""
    i, auto = p.i, p.auto
    probing = PROBE_ANNOTATION in i.annotations or isinstance(p.probe, str)
    if probing and not p.disabled and auto is not None and p.settings is not None:
        start = p.probe if isinstance(p.probe, str) else i.annotations.get(PROBE_ANNOTATION, "0")
        try:
            base = int(start)
        except ValueError:
            base = 0
        processed = int(i.sample.counts.get("processed", 0)) if i.sample else 0
        if i.sample is not None and not isinstance(p.probe, str) and processed >= base + auto.probe_messages:
            p.put(DISABLED, False, EnabledReason.PROBE_SUCCEEDED,
                  f"The probe processed {processed - base} message(s); consuming normally again.")
            p.events.append(Event("Normal", EventReason.PROBE_SUCCEEDED, "The auto-resume probe passed; "
                                  "consuming normally again."))
            p.probe, probing = None, False
    if probing and p.settings is not None and auto is not None and not p.disabled:
        # The probe is the normal consumer with a hair trigger: small batches, and the
        # first failed batch or failing window disables the queue again.
        s = p.settings
        qd_probe = s.queue_disable.model_copy(update={
            "consecutive_batch_failures": 1,
            "failure_ratio": s.queue_disable.failure_ratio.model_copy(
                update={"min_messages": auto.probe_messages})})
        p.settings = s.model_copy(update={
            "queue_disable": qd_probe,
            "source": s.source.model_copy(
                update={"max_messages_per_batch": min(s.source.max_messages_per_batch,
                                                      auto.probe_messages)})})


def _paused(p: _Pass) -> None:
    before = p.was(PAUSED)
    user = (before.status, before.reason) == ("True", PausedReason.USER_REQUESTED) if before else False
    if p.paused:
        p.put(PAUSED, True, PausedReason.USER_REQUESTED, "spec.paused is true: the Deployment is scaled to 0.")
        if not user:
            p.events.append(Event("Normal", EventReason.PAUSED, "Paused by spec.paused: the Deployment is "
                                                      "scaled to 0."))
    elif p.disabled:
        p.put(PAUSED, True, PausedReason.QUEUE_DISABLED, f"The queue is disabled ({p.disabled_reason}).")
    else:
        p.put(PAUSED, False, PausedReason.NOT_PAUSED, "")
        if user and not p.resumed:
            p.events.append(Event("Normal", EventReason.RESUMED, "spec.paused is false: consuming again."))


def _ready(p: _Pass) -> None:
    i = p.i
    before = p.was(READY)
    running = i.deployment is not None and i.deployment.available >= 1
    rejected = i.termination.rejected_settings() if i.termination is not None else None
    if p.problem is None and i.conflict is not None:
        # After a broken spec or policy (which builds no children at all), before the rest.
        p.problem = (ReadyReason.CHILD_CONFLICT, i.conflict)
        p.recheck(p.now + CONFLICT_RECHECK)
    if p.problem is None and rejected is not None and not running and not (p.paused or p.disabled):
        # Until a driver runs again (a fixed spec or image): the driver's line says what to fix.
        p.problem = (SETTINGS_REJECTED, f"The driver refused its settings and exited with code "
                                        f"{EXIT_BAD_SETTINGS}: {rejected}")
    if p.problem is not None:
        p.put(READY, False, *p.problem)
        if before is None or (before.reason, before.message) != p.problem:
            p.events.append(Event("Warning", p.problem[0], p.problem[1]))
    elif (pod := _pod_problem(p, before)) is not None and not running and not (p.paused or p.disabled):
        # The pod's own reason (ImagePullBackOff, CrashLoopBackOff, Unschedulable...): one
        # Event when it appears or changes, not one per change of the scheduler's text.
        p.put(READY, False, pod.reason, pod.message)
        if before is None or before.reason != pod.reason:
            p.events.append(Event("Warning", pod.reason, pod.message))
    elif p.paused:
        p.put(READY, False, ReadyReason.PAUSED, "Paused by spec.paused.")
    elif p.disabled:
        p.put(READY, False, p.disabled_reason or ReadyReason.QUEUE_DISABLED,
              f"The queue is disabled ({p.disabled_reason}); see the QueueDisabled condition.")
    elif running:
        p.put(READY, True, ReadyReason.RUNNING, "The driver is running.")
    else:
        p.put(READY, False, ReadyReason.STARTING, "Waiting for the driver Deployment to become available.")


def _pod_problem(p: _Pass, before: Condition | None) -> PodProblem | None:
    """The driver pod's problem; before the Pod watch's first list, the one Ready has. A
    crash loop whose last exit came before a resume is the disabled run's (its pod goes)."""
    i = p.i
    if i.pod_problem is not None:
        since = i.pod_problem.since
        return None if since is not None and not fresh(since, p.resumed_at) else i.pod_problem
    if i.pods_listed or before is None or before.status != "False":
        return None
    return PodProblem(before.reason, before.message) if before.reason in DRIVER_REASONS else None


def _observed(p: _Pass) -> tuple[Counts | None, int | None, LastPoison | None]:
    """What the metrics say: counts, consecutive batch failures, the last poison message."""
    cur, sample, policy = p.cur, p.i.sample, p.policy
    counts, consecutive, last = cur.counts, cur.consecutive_batch_failures, cur.last_poison
    if sample is None:
        return counts, consecutive, last
    counts = _counts(sample)
    consecutive = sample.consecutive if sample.consecutive is not None else consecutive
    lp = sample.last_poison
    if lp is not None:
        disposition = lp.disposition or (policy.disposition if policy else None) or (
            last.disposition if last else "Move")
        try:
            last = LastPoison(time=lp.time.replace(microsecond=0), reason=lp.reason,
                              error_class=lp.error_class or None, disposition=disposition,
                              topic=lp.topic, partition=lp.partition, offset=lp.offset)
        except ValidationError:
            pass  # keep the previous one rather than write a malformed one
    return counts, consecutive, last


def _poison(p: _Pass, counts: Counts | None, last: LastPoison | None) -> PoisonMemory:
    """PoisonDetected, and its aggregated, rate-limited Event."""
    i, policy = p.i, p.policy
    poisoned = counts.poisoned if counts else 0
    memory = i.poison
    baseline = memory.baseline if memory.baseline is not None else (
        p.cur.counts.poisoned if p.cur.counts else 0)
    if poisoned == 0:
        p.put(POISON, False, PoisonConditionReason.NO_POISON, "No message has got a disposition.")
    else:
        assert counts is not None
        kinds = i.sample.depths if i.sample is not None else {}
        waiting = [kinds[k] for k in ("poison", "dlq") if k in kinds]
        disposition = last.disposition if last else (policy.disposition if policy else "Move")
        if waiting and sum(waiting) == 0 and disposition in ("Move", "Reject"):
            p.put(POISON, False, PoisonConditionReason.DRAINED, poison_summary(counts, last)
                  + "; the poison and dead-letter topics are empty now.")
        else:
            reason = POISON_CONDITION_REASONS.get(last.reason, PoisonConditionReason.POISON_MESSAGES) \
                if last else PoisonConditionReason.POISON_MESSAGES
            p.put(POISON, True, reason, poison_summary(counts, last) + ".")
    if poisoned <= baseline:
        return PoisonMemory(baseline=poisoned, last_event=memory.last_event)
    interval = timedelta(seconds=i.poison_event_interval)
    if memory.last_event is None or p.now >= memory.last_event + interval:
        assert counts is not None
        p.events.append(Event("Warning", EventReason.POISON_DETECTED, f"{poisoned - baseline} new poison message(s): "
                              + poison_summary(counts, last) + "."))
        return PoisonMemory(baseline=poisoned, last_event=p.now)
    p.recheck(memory.last_event + interval)
    return PoisonMemory(baseline=baseline, last_event=memory.last_event)


def status_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch turning status `old` into `new` (lists replaced whole); {} if equal."""
    old_norm = status_wire(parse_status(old))
    patch: dict[str, Any] = {k: v for k, v in new.items() if old_norm.get(k) != v}
    patch.update({k: None for k in old_norm if k not in new})
    return patch
