"""Constrained scalar and list types shared by both kinds.

Patterns are RE2-compatible because the API server enforces the same ones.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, Field, GetJsonSchemaHandler, StringConstraints, WithJsonSchema
from pydantic.config import JsonDict
from pydantic_core import core_schema

from .headers import NATIVE_SETS
from .wire import POISON_REASONS

T = TypeVar("T", bound=Hashable)

GROUP = "antidote.dev"
VERSION = "v1alpha1"
API_VERSION: Literal["antidote.dev/v1alpha1"] = "antidote.dev/v1alpha1"  # the Literal the models check
assert API_VERSION == f"{GROUP}/{VERSION}"
# The two kinds' resource names (plurals), as the CRDs declare them and every client asks.
QUEUE_CONSUMERS = "queueconsumers"
POISON_POLICIES = "poisonpolicies"

@dataclass(frozen=True)
class Named:
    """Names a string format for docs/api.md (`x-antidote-type`), which lists its pattern once."""

    name: str

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> dict[str, Any]:
        out = handler(schema)
        out["x-antidote-type"] = self.name
        return out


Disposition = Literal["Move", "Reject", "Drop", "Fault"]
# A PoisonPolicy route's: Fault stops the whole consumer, so only the policy itself sets it.
RouteDisposition = Literal["Move", "Reject", "Drop"]
# Why a message was quarantined; also the `antidote.reason` header of quarantined records.
PoisonReason = Literal[POISON_REASONS]  # type: ignore[valid-type]  # wire.PoisonReason's values
# Kafka-native error header sets written beside `antidote.*` (PoisonPolicy spec.nativeHeaders):
# Kafka Connect's dead-letter headers, and the share-group dead-letter queue's of KIP-1191.
NativeHeaderSet = Literal[tuple(NATIVE_SETS)]  # type: ignore[valid-type]  # headers.NATIVE_SETS' keys

TOPIC_PATTERN = r"^[a-zA-Z0-9._-]+$"
TopicName = Annotated[str, StringConstraints(pattern=TOPIC_PATTERN, min_length=1, max_length=249),
                      Named("topic name")]

# A Python exception class, bare (`ValueError`) or qualified (`json.JSONDecodeError`).
CLASS_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
ClassName = Annotated[str, StringConstraints(pattern=CLASS_NAME_PATTERN, min_length=1, max_length=256),
                      Named("class name")]

# `package.module:function`, as in setuptools entry points.
HANDLER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
Handler = Annotated[str, StringConstraints(pattern=HANDLER_PATTERN, max_length=512), Named("handler")]

BOOTSTRAP_PATTERN = r"^[^\s,]+:[0-9]+(,[^\s,]+:[0-9]+)*$"
Bootstrap = Annotated[str, StringConstraints(pattern=BOOTSTRAP_PATTERN, max_length=2048),
                      Named("host:port list")]

DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ObjectName = Annotated[str, StringConstraints(pattern=DNS_SUBDOMAIN_PATTERN, min_length=1, max_length=253),
                       Named("object name")]

# Spark's byte strings (JavaUtils.byteStringAs): 512m, 2g, 1024k, 4gb.
MEMORY_PATTERN = r"^[0-9]+([kKmMgGtTpP][bB]?)?$"
Memory = Annotated[str, StringConstraints(pattern=MEMORY_PATTERN, min_length=1, max_length=32),
                   Named("Spark memory")]

# Standard 5-field cron, or a @macro.
CRON_PATTERN = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|[^ ]+( +[^ ]+){4})$"
Cron = Annotated[str, StringConstraints(pattern=CRON_PATTERN, max_length=128), Named("cron")]

Int64 = Annotated[int, Field(ge=0, json_schema_extra={"format": "int64"})]

# Free-form JSON kept as written (a JSON Schema document, for one).
FreeObject = Annotated[dict[str, Any], WithJsonSchema(
    {"type": "object", "x-kubernetes-preserve-unknown-fields": True})]

StringMap = Annotated[dict[str, Annotated[str, StringConstraints(max_length=4096)]],
                      Field(json_schema_extra={"maxProperties": 128})]


def _no_duplicates(items: Sequence[T]) -> Sequence[T]:
    seen: set[T] = set()
    for item in items:
        if item in seen:
            raise ValueError(f"duplicate value {item!r}")
        seen.add(item)
    return items


def SetOf(item: Any, max_items: int = 64) -> Any:  # noqa: N802 - reads like a type
    """A list without duplicates (`x-kubernetes-list-type: set` on the server)."""
    return Annotated[list[item], AfterValidator(_no_duplicates),
                     Field(max_length=max_items, json_schema_extra={"x-kubernetes-list-type": "set"})]


def seed(text: str) -> JsonDict:
    """The analogue in the seed playbooks (or a well-known system), for docs/api.md only."""
    return {"x-antidote-seed": text}

# Root fields of a custom resource: the API server owns their schema beyond the type.
_PlainString = WithJsonSchema({"type": "string"})
ApiVersionField = Annotated[Literal["antidote.dev/v1alpha1"], _PlainString]
KindField = Annotated[T, _PlainString]  # KindField[Literal["PoisonPolicy"]]
Metadata = Annotated[dict[str, Any], WithJsonSchema({"type": "object"})]
