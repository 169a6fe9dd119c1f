"""Status conditions in the shape of metav1.Condition, and the one way to update them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from .base import ApiModel

# metav1.Condition's own validation, so kubectl users see the same rules as for built-ins.
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
TYPE_PATTERN = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"


class ConditionType(StrEnum):
    READY = "Ready"
    PAUSED = "Paused"
    QUEUE_DISABLED = "QueueDisabled"
    POISON_DETECTED = "PoisonDetected"


class DisableReason(StrEnum):
    """Why a consumer disabled its queue: the QueueDisabled (and Ready) reason, the
    `reason` label of `antidote_queue_disabled`, and (wire.DISABLE_EXIT) its exit code."""

    CONSECUTIVE_BATCH_FAILURES = "ConsecutiveBatchFailures"
    SYSTEMIC_FAILURE = "SystemicFailure"
    FAULT = "Fault"


class ConfigReason(StrEnum):
    """Ready=False: the spec or the policy cannot run (and the driver's own refusal)."""

    INVALID_SPEC = "InvalidSpec"
    POLICY_NOT_FOUND = "PolicyNotFound"
    POLICY_INVALID = "PolicyInvalid"
    SETTINGS_REJECTED = "SettingsRejected"


class ReadyReason(StrEnum):
    RUNNING = "Running"
    STARTING = "Starting"
    PAUSED = "Paused"
    QUEUE_DISABLED = "QueueDisabled"  # while the disabling reason is unknown
    VALID = "Valid"  # a PoisonPolicy's Ready
    # An object of a child's name exists and is not this consumer's: left unchanged, and the
    # driver (or the reader Job) that would need it is not started (also the Warning Event's).
    CHILD_CONFLICT = "ChildConflict"


class DriverReason(StrEnum):
    """Ready=False: the driver's pod exists but does not run, as its status says (the
    kubelet's and the scheduler's reasons, under their own names). The kubelet alternates
    ErrImagePull and ImagePullBackOff (and reports InvalidImageName for a malformed name):
    all three are ImagePullBackOff here, so Ready (and the alert's `for:`) does not flap
    between them."""

    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
    # Restarted and not ready again (waiting in back-off, or started again and not yet up).
    CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
    # A Secret or ConfigMap (key) the container's env refers to does not exist.
    CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
    UNSCHEDULABLE = "Unschedulable"  # Pending, PodScheduled=False (reason Unschedulable)


class PausedReason(StrEnum):
    USER_REQUESTED = "UserRequested"
    QUEUE_DISABLED = "QueueDisabled"
    NOT_PAUSED = "NotPaused"


class EnabledReason(StrEnum):
    """QueueDisabled=False: why the queue runs."""

    QUEUE_ENABLED = "QueueEnabled"
    RESUMED = "Resumed"
    PROBING = "Probing"
    PROBE_SUCCEEDED = "ProbeSucceeded"


class PoisonConditionReason(StrEnum):
    """PoisonDetected: the last poison message's reason (wire.POISON_CONDITION_REASONS), or
    one of these."""

    NO_POISON = "NoPoison"
    DRAINED = "Drained"
    POISON_MESSAGES = "PoisonMessages"
    MAX_ATTEMPTS = "MaxAttempts"
    NON_RETRYABLE = "NonRetryable"
    VALIDATION = "Validation"
    BATCH_ISOLATION = "BatchIsolation"
    HELD_OVERFLOW = "HeldOverflow"
    EXPIRED = "Expired"



class EventReason(StrEnum):
    """Reasons of the Events the operator posts that are no condition's reason (those post
    their condition's: ConfigReason, DriverReason, ChildConflict; the autoscaler its own,
    autoscale.EVENT_REASONS). Each is posted on a transition only (docs/operator.md)."""

    QUEUE_DISABLED = "QueueDisabled"
    RESUMED = "Resumed"
    PAUSED = "Paused"
    PROBE_SUCCEEDED = "ProbeSucceeded"
    POISON_DETECTED = "PoisonDetected"
    DRAIN_INVALID = "DrainInvalid"
    READER_JOB_STARTED = "ReaderJobStarted"
    READER_JOB_SUCCEEDED = "ReaderJobSucceeded"
    READER_JOB_FAILED = "ReaderJobFailed"

# Every reason a QueueConsumer's Ready condition can have: the closed set of the `reason`
# label of antidote_operator_consumer_ready (anything else is exported as "Unknown").
CONSUMER_READY_REASONS = frozenset(
    [r.value for r in ConfigReason] + [r.value for r in DisableReason] + [r.value for r in DriverReason]
    + [r.value for r in ReadyReason if r is not ReadyReason.VALID])


class Condition(ApiModel):
    type: str = Field(
        pattern=TYPE_PATTERN, max_length=316,
        description="Condition type: Ready, Paused, QueueDisabled or PoisonDetected.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(
        pattern=REASON_PATTERN, min_length=1, max_length=1024,
        description="CamelCase reason for the last transition, for machines (alerts, `kubectl wait`).")
    message: str = Field(default="", max_length=32768,
                         description="Human-readable details; never contains message payloads.")
    observed_generation: int | None = Field(
        default=None, ge=0,
        description="The `.metadata.generation` the condition was computed from.")
    last_transition_time: datetime = Field(
        description="When `status` last changed (not when the condition was last written).")


def _one_per_type(conditions: list[Condition]) -> list[Condition]:
    types = [c.type for c in conditions]
    if len(types) != len(set(types)):
        raise ValueError(f"one condition per type, got {types}")
    return conditions


# A list-map keyed by type: server-side apply merges conditions by type, like built-ins.
Conditions = Annotated[list[Condition], AfterValidator(_one_per_type), Field(
    max_length=16,
    json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})]


def utc_now() -> datetime:
    # metav1.Time has second precision; keeping it avoids spurious diffs on round trips.
    return datetime.now(timezone.utc).replace(microsecond=0)


def find_condition(conditions: Iterable[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def set_condition(conditions: Iterable[Condition], new: Condition, now: datetime | None = None) -> list[Condition]:
    """Return `conditions` with `new` merged in by type (order kept, new types appended).

    `lastTransitionTime` moves to `now` only when the status flips (or the type is new);
    a changed reason or message alone keeps the old time, as metav1 prescribes.
    """
    now = now or utc_now()
    result: list[Condition] = []
    placed = False
    for old in conditions:
        if old.type != new.type:
            result.append(old)
            continue
        when = old.last_transition_time if old.status == new.status else now
        result.append(new.model_copy(update={"last_transition_time": when}))
        placed = True
    if not placed:
        result.append(new.model_copy(update={"last_transition_time": now}))
    return result


def condition(type_: str, status: bool | str, reason: str, message: str = "",
              observed_generation: int | None = None, now: datetime | None = None) -> Condition:
    """Build a condition; a bool status becomes "True"/"False"."""
    if isinstance(status, bool):
        status = "True" if status else "False"
    return Condition(type=type_, status=status, reason=reason, message=message,
                     observed_generation=observed_generation,
                     last_transition_time=now or utc_now())
