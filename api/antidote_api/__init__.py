"""The Antidote API (`antidote.dev/v1alpha1`): pydantic models of PoisonPolicy and
QueueConsumer, the single source of the CRDs, docs/api.md and the policy semantics; and the
one home of the other contracts between the consumer, the reader, the operator and the CLI:
`wire` (exit codes, reasons, metric names, annotations, the settings key), `headers` (the
`antidote.*` header names), `names` (topics, Kafka ids, child objects, reader Jobs), `drain`
(the drain request and its parser), `times` (the one ISO time parser), and condition reasons
beside `ConditionType` in `conditions`."""

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
