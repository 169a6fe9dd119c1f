"""Models -> CustomResourceDefinitions with structural schemas.

pydantic writes JSON Schema 2020-12 ($ref, anyOf-with-null, numeric exclusiveMinimum,
additionalProperties: false); the API server wants OpenAPI v3 *structural* schemas (every
node typed, no $ref, boolean exclusiveMinimum). `flatten` bridges the two; everything a
user sees (types, defaults, enums, patterns, CEL rules, descriptions) still comes from the
models.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, NoDefault

from .consumer import QueueConsumer
from .policy import PoisonPolicy
from .types import GROUP, POISON_POLICIES, QUEUE_CONSUMERS, VERSION

HEADER = "# Generated from api/antidote_api by `antidote crds --write`; do not edit.\n"
CATEGORY = "antidote"

# Keys only docs/api.md reads; the API server rejects unknown schema keys.
DOC_KEYS = ("x-antidote-seed", "x-antidote-type")
_DROP = {"title", "examples", "$defs"}
_ORDER = ("type", "format", "description", "enum", "default", "pattern", "minLength", "maxLength",
          "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "minItems", "maxItems",
          "maxProperties", "items", "additionalProperties", "properties", "required")


@dataclass(frozen=True)
class Kind:
    model: type[BaseModel]
    plural: str
    short_names: tuple[str, ...]
    description: str
    printer_columns: tuple[dict[str, Any], ...]
    spec_required: bool
    kind: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", self.model.model_fields["kind"].default)

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"

    @property
    def filename(self) -> str:
        return f"{GROUP}_{self.plural}.yaml"


def _condition(type_: str, part: str) -> str:
    return f'.status.conditions[?(@.type=="{type_}")].{part}'


KINDS = (
    Kind(
        model=PoisonPolicy, plural=POISON_POLICIES, short_names=("ppol",), spec_required=False,
        description="How a QueueConsumer treats messages that keep failing: retries, the "
                    "disposition after the last attempt, queue disabling and poison-queue readers.",
        printer_columns=(
            {"name": "Disposition", "type": "string", "jsonPath": ".spec.disposition",
             "description": "What happens after the last attempt."},
            {"name": "Immediate", "type": "integer", "jsonPath": ".spec.retries.immediate",
             "description": "Immediate re-attempts."},
            {"name": "Cycles", "type": "integer", "jsonPath": ".spec.retries.cycles",
             "description": "Retry-topic cycles."},
            {"name": "Delay", "type": "string", "jsonPath": ".spec.retries.cycleDelay",
             "description": "Delay before the first retry cycle."},
            {"name": "Attempts", "type": "integer", "jsonPath": ".status.maxAttempts",
             "description": "Attempts before the disposition (written by the operator)."},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        )),
    Kind(
        model=QueueConsumer, plural=QUEUE_CONSUMERS, short_names=("qc",), spec_required=True,
        description="A Kafka topic consumed by a Python handler on Spark Structured Streaming, "
                    "with poison messages handled by a PoisonPolicy.",
        printer_columns=(
            {"name": "Ready", "type": "string", "jsonPath": _condition("Ready", "status"),
             "description": "Consuming normally."},
            {"name": "Paused", "type": "string", "jsonPath": _condition("Paused", "status"),
             "description": "Paused by spec.paused or by queue disabling."},
            {"name": "Reason", "type": "string", "jsonPath": _condition("Ready", "reason"),
             "description": "Reason of the Ready condition."},
            {"name": "Processed", "type": "integer", "jsonPath": ".status.counts.processed",
             "description": "Messages the handler succeeded on."},
            {"name": "Poisoned", "type": "integer", "jsonPath": ".status.counts.poisoned",
             "description": "Messages moved, rejected or dropped."},
            {"name": "Policy", "type": "string", "jsonPath": ".spec.policyRef.name", "priority": 1,
             "description": "The PoisonPolicy."},
            {"name": "Topic", "type": "string", "jsonPath": ".spec.source.kafka.topic", "priority": 1,
             "description": "The source topic."},
            {"name": "Executors", "type": "integer", "jsonPath": ".status.executors.current", "priority": 1,
             "description": "Executors, with spec.spark.autoscale."},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        )),
)


class _Generator(GenerateJsonSchema):
    """Renders `default_factory` defaults: an object that defaults to a model becomes `{}`, and
    the API server then applies the nested defaults itself (it only defaults into parents that
    exist, hence `{}` rather than nothing)."""

    def get_default_value(self, schema: Any) -> Any:
        factory = schema.get("default_factory")
        if factory is None:
            return super().get_default_value(schema)
        if schema.get("default_factory_takes_data"):
            return NoDefault
        value = factory()
        return {} if isinstance(value, BaseModel) else value


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema, flattened, with doc-only keys (for docs/api.md)."""
    raw = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_Generator)
    return flatten(raw, raw.get("$defs", {}), where=model.__name__)


def flatten(node: dict[str, Any], defs: dict[str, Any], where: str = "") -> dict[str, Any]:
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").split("/")[-1]]
        node = {**copy.deepcopy(target), **node}  # siblings (description, default) win
        return flatten(node, defs, where)
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**node.pop("allOf")[0], **node}
        return flatten(node, defs, where)
    for union in ("anyOf", "oneOf"):
        if union in node:
            branches = [b for b in node.pop(union) if b != {"type": "null"}]
            if len(branches) != 1:
                raise ValueError(f"{where}: a union of several types is not structural: {branches}")
            if node.get("default", NoDefault) is None:
                del node["default"]
            node = {**branches[0], **node}
            return flatten(node, defs, where)

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "propertyNames":  # a constrained dict key: the API server refuses the CRD
            raise ValueError(f"{where}: a structural schema has no propertyNames (constrain the values only)")
        if key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = flatten(value, defs, f"{where}{{}}")
            continue  # false: unknown fields are rejected with fieldValidation=Strict instead
        if key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
            continue
        if key == "const":
            out["enum"] = [value]
            continue
        if key == "properties":
            out[key] = {name: flatten(sub, defs, f"{where}.{name}") for name, sub in value.items()}
        elif key == "items":
            out[key] = flatten(value, defs, f"{where}[]")
        elif key == "x-kubernetes-validations":
            out[key] = [{k: r[k] for k in ("rule", "message", "messageExpression", "fieldPath")
                        if k in r} for r in value]
        else:
            out[key] = value
    if "type" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        raise ValueError(f"{where}: every schema node needs a type (structural schema): {out}")
    return _ordered(out)


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    head = {k: node[k] for k in _ORDER if k in node}
    return {**head, **{k: v for k, v in node.items() if k not in head}}


def strip_doc_keys(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: strip_doc_keys(v) for k, v in node.items() if k not in DOC_KEYS}
    if isinstance(node, list):
        return [strip_doc_keys(v) for v in node]
    return node


def openapi_schema(kind: Kind) -> dict[str, Any]:
    schema = strip_doc_keys(json_schema(kind.model))
    props = schema["properties"]
    for root in ("apiVersion", "kind"):
        props[root].pop("default", None)  # owned by the API server
    props["metadata"] = {"type": "object"}  # the server allows nothing more here
    props["status"].pop("default", None)
    schema["description"] = kind.description
    schema["required"] = ["spec"] if kind.spec_required else []
    if not schema["required"]:
        del schema["required"]
    return _ordered(schema)


def crd(kind: Kind) -> dict[str, Any]:
    singular = kind.kind.lower()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.name, "labels": {"app.kubernetes.io/part-of": "antidote"}},
        "spec": {
            "group": GROUP,
            "names": {"kind": kind.kind, "listKind": f"{kind.kind}List", "plural": kind.plural,
                      "singular": singular, "shortNames": list(kind.short_names),
                      "categories": [CATEGORY]},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [dict(c) for c in kind.printer_columns],
                "schema": {"openAPIV3Schema": openapi_schema(kind)},
            }],
        },
    }


def to_yaml(obj: dict[str, Any]) -> str:
    return str(yaml.safe_dump(obj, sort_keys=False, width=100, allow_unicode=True))


def render(kind: Kind) -> str:
    return HEADER + to_yaml(crd(kind))


def render_all() -> str:
    """Both CRDs as one multi-document stream (what `antidote crds` prints)."""
    return "---\n".join(render(k) for k in KINDS)
