"""The Antidote API (`antidote.dev/v1alpha1`): pydantic models of PoisonPolicy and
QueueConsumer, the single source of the CRDs, docs/api.md and the policy semantics."""

from .conditions import Condition, ConditionType, set_condition
from .consumer import QueueConsumer, QueueConsumerSpec, QueueConsumerStatus
from .duration import Duration
from .policy import PoisonPolicy, PoisonPolicySpec, PoisonPolicyStatus
from .semantics import EffectiveSettings, check_message, cycle_delay, max_attempts, resolve, topics
from .types import API_VERSION, GROUP, VERSION

__all__ = [
    "API_VERSION", "GROUP", "VERSION", "Condition", "ConditionType", "Duration", "EffectiveSettings",
    "PoisonPolicy", "PoisonPolicySpec", "PoisonPolicyStatus", "QueueConsumer", "QueueConsumerSpec",
    "QueueConsumerStatus", "check_message", "cycle_delay", "max_attempts", "resolve", "set_condition",
    "topics",
]
