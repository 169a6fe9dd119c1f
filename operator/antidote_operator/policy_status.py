"""A PoisonPolicy's status (maxAttempts feeds its Attempts column) and its Ready condition."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from antidote_api.conditions import ConditionType, ConfigReason, ReadyReason, condition, find_condition, set_condition
from antidote_api.policy import PoisonPolicySpec, PoisonPolicyStatus
from antidote_api.semantics import max_attempts

from .status import Event, explain_lines

READY = ConditionType.READY.value


def policy_status(spec: Mapping[str, Any], status: Mapping[str, Any] | None, generation: int,
                  now: datetime | None = None) -> tuple[dict[str, Any], Event | None]:
    """The PoisonPolicy's status (maxAttempts feeds its Attempts column) and a Warning
    Event when it turns invalid."""
    now = (now or datetime.now(timezone.utc)).replace(microsecond=0)
    try:
        cur = PoisonPolicyStatus.model_validate(dict(status or {}))
    except ValidationError:
        cur = PoisonPolicyStatus()
    conds = list(cur.conditions or [])
    before = find_condition(conds, READY)
    event = None
    try:
        policy = PoisonPolicySpec.model_validate(dict(spec))
    except ValidationError as err:
        message = f"The PoisonPolicy is invalid: {explain_lines(err, 'spec.')}"
        invalid = ConfigReason.POLICY_INVALID.value
        conds = set_condition(conds, condition(READY, False, invalid, message, generation, now), now)
        if before is None or (before.reason, before.message) != (invalid, message):
            event = Event("Warning", invalid, message)
        attempts = cur.max_attempts
    else:
        attempts = max_attempts(policy)
        message = (f"Valid; a failing message is attempted {attempts} time(s), then "
                   f"{policy.disposition}.")
        conds = set_condition(conds, condition(READY, True, ReadyReason.VALID, message, generation, now), now)
    new = PoisonPolicyStatus(observed_generation=generation, max_attempts=attempts, conditions=conds)
    return new.wire(), event
