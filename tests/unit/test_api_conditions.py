"""Conditions follow metav1: one per type, lastTransitionTime moves only when status flips."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from antidote_api.conditions import Condition, ConditionType, condition, find_condition, set_condition
from antidote_api.consumer import QueueConsumerStatus

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
T1 = T0 + timedelta(minutes=5)


def test_new_type_is_appended_with_now() -> None:
    ready = condition("Ready", True, "Consuming", now=T0)
    out = set_condition([ready], condition("Paused", False, "Running", now=T0 - timedelta(days=1)), now=T1)
    assert [c.type for c in out] == ["Ready", "Paused"]
    assert out[1].last_transition_time == T1


def test_same_status_keeps_the_transition_time_but_takes_the_new_reason() -> None:
    old = [condition("Ready", True, "Consuming", "all good", now=T0)]
    out = set_condition(old, condition("Ready", "True", "CaughtUp", "lag 0", observed_generation=3), now=T1)
    assert out[0].last_transition_time == T0
    assert (out[0].reason, out[0].message, out[0].observed_generation) == ("CaughtUp", "lag 0", 3)


def test_flip_moves_the_transition_time() -> None:
    old = [condition("Paused", False, "Running", now=T0), condition("Ready", True, "Consuming", now=T0)]
    out = set_condition(old, condition(ConditionType.READY, False, "QueueDisabled"), now=T1)
    assert [c.type for c in out] == ["Paused", "Ready"]  # order kept
    assert find_condition(out, "Ready").last_transition_time == T1
    assert find_condition(out, "Paused").last_transition_time == T0
    assert old[1].status == "True"  # pure: the input is untouched


def test_unknown_to_true_is_a_flip() -> None:
    out = set_condition([condition("Ready", "Unknown", "Starting", now=T0)],
                        condition("Ready", True, "Consuming"), now=T1)
    assert out[0].last_transition_time == T1


@pytest.mark.parametrize(("field", "value"), [
    ("status", "Yes"), ("reason", "not camel case"), ("reason", ""), ("observedGeneration", -1)])
def test_condition_shape_is_checked(field: str, value: object) -> None:
    good = {"type": "Ready", "status": "True", "reason": "Consuming",
            "lastTransitionTime": "2025-01-01T00:00:00Z"}
    Condition.model_validate(good)
    with pytest.raises(ValidationError, match=field):
        Condition.model_validate({**good, field: value})


def test_one_condition_per_type_in_status() -> None:
    c = condition("Ready", True, "Consuming", now=T0).wire()
    with pytest.raises(ValidationError, match="one condition per type"):
        QueueConsumerStatus.model_validate({"conditions": [c, c]})


def test_wire_form_is_camel_case_rfc3339() -> None:
    assert condition("QueueDisabled", True, "ConsecutiveBatchFailures", "5 batches failed",
                     observed_generation=2, now=T0).wire() == {
        "type": "QueueDisabled", "status": "True", "reason": "ConsecutiveBatchFailures",
        "message": "5 batches failed", "observedGeneration": 2,
        "lastTransitionTime": "2025-01-01T00:00:00Z"}
