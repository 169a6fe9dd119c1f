"""Where a consumer's pods run and who they are (spec.spark: imagePullSecrets, nodeSelector,
tolerations, affinity, priorityClassName; the ServiceAccounts' annotations), in Kubernetes'
own shapes (core/v1 Toleration, Affinity)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from .base import ApiModel, Rule
from .types import ObjectName

# Label keys and values (apimachinery's qualified names, kept loose: the server checks again
# when the operator creates the pods).
# Keys unconstrained: a structural schema has no propertyNames.
_LabelKey = str
_LabelValue = Annotated[str, StringConstraints(max_length=63)]
NodeSelector = Annotated[dict[_LabelKey, _LabelValue], Field(json_schema_extra={"maxProperties": 64})]
Values = Annotated[list[Annotated[str, StringConstraints(max_length=317)]], Field(max_length=64)]

# The operator's own annotations on the driver's ServiceAccount (builders/common.py) are what
# the chart's admission policy trusts: a user's annotations may not be in their prefix.
OWN_ANNOTATION_PREFIX = "antidote.dev/"
Annotations = Annotated[dict[str, Annotated[str, StringConstraints(max_length=4096)]],
                        Field(json_schema_extra={"maxProperties": 64})]


class Toleration(ApiModel):
    key: str | None = Field(None, max_length=317, description="The taint's key; empty with `Exists`: every taint.")
    operator: Literal["Exists", "Equal"] | None = Field(None, description="Default: `Equal`.")
    value: str | None = Field(None, max_length=63, description="The taint's value (with `Equal`).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="The taint's effect; empty: every effect.")
    toleration_seconds: int | None = Field(
        None, ge=0, description="With `NoExecute`: how long the pod stays after the taint appears.")


class Requirement(ApiModel):
    key: str = Field(min_length=1, max_length=317, description="Label (or field) key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(
        description="`In`, `NotIn`, `Exists`, `DoesNotExist` (and `Gt`, `Lt` for nodes).")
    values: Values | None = Field(None, description="The values, for `In`, `NotIn`, `Gt`, `Lt`.")


class NodeSelectorTerm(ApiModel):
    match_expressions: list[Requirement] | None = Field(None, max_length=32, description="By node labels.")
    match_fields: list[Requirement] | None = Field(None, max_length=32, description="By node fields.")


class RequiredNodeSelector(ApiModel):
    node_selector_terms: list[NodeSelectorTerm] = Field(
        min_length=1, max_length=32, description="Any of these terms (ORed).")


class PreferredSchedulingTerm(ApiModel):
    weight: int = Field(ge=1, le=100, description="1-100.")
    preference: NodeSelectorTerm = Field(description="The nodes preferred.")


class NodeAffinity(ApiModel):
    required_during_scheduling_ignored_during_execution: RequiredNodeSelector | None = Field(
        None, description="Nodes the pod must run on.")
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] | None = Field(
        None, max_length=32, description="Nodes the pod prefers.")


class LabelSelector(ApiModel):
    match_labels: NodeSelector | None = Field(None, description="Labels that must all match.")
    match_expressions: list[Requirement] | None = Field(None, max_length=32, description="Requirements (ANDed).")


class PodAffinityTerm(ApiModel):
    label_selector: LabelSelector | None = Field(None, description="The pods.")
    namespaces: list[ObjectName] | None = Field(
        None, max_length=32, description="Their namespaces. Default: the consumer's.")
    namespace_selector: LabelSelector | None = Field(None, description="Their namespaces, by label.")
    topology_key: str = Field(min_length=1, max_length=317, description="Node label of the topology domain.")


class WeightedPodAffinityTerm(ApiModel):
    weight: int = Field(ge=1, le=100, description="1-100.")
    pod_affinity_term: PodAffinityTerm = Field(description="The term.")


class PodAffinity(ApiModel):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] | None = Field(
        None, max_length=32, description="Terms that must hold.")
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] | None = Field(
        None, max_length=32, description="Terms preferred.")


class Affinity(ApiModel):
    node_affinity: NodeAffinity | None = Field(None, description="Node affinity.")
    pod_affinity: PodAffinity | None = Field(None, description="Pod affinity.")
    pod_anti_affinity: PodAffinity | None = Field(None, description="Pod anti-affinity.")


PriorityClassName = Annotated[str, StringConstraints(
    min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")]


class Placement(ApiModel):
    """Fields shared by spec.spark (both) and spec.spark.driver / .executor (one, overriding)."""

    node_selector: NodeSelector | None = Field(None, description="Node labels the pods must match.")
    tolerations: list[Toleration] | None = Field(None, max_length=32, description="Taints the pods tolerate.")
    affinity: Affinity | None = Field(None, description="Node and pod affinity.")
    priority_class_name: PriorityClassName | None = Field(None, description="The pods' PriorityClass.")


def annotations_rule(field: str) -> Rule:
    """Refuses the operator's own annotation prefix in a user's ServiceAccount annotations."""
    return Rule(f"!has(self.{field}) || self.{field}.all(k, !k.startsWith('{OWN_ANNOTATION_PREFIX}'))",
                f"keys may not start with {OWN_ANNOTATION_PREFIX} (the operator's own)",
                lambda s: not any(k.startswith(OWN_ANNOTATION_PREFIX) for k in getattr(s, _snake(field)) or {}),
                field=field)


def _snake(camel: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)


def effective(common: Placement, own: Placement) -> Placement:
    """The placement of the driver or the executors: each field of `own` (spec.spark.driver or
    .executor) replaces the same field of spec.spark when set."""
    return Placement(**{f: getattr(own, f) if getattr(own, f) is not None else getattr(common, f)
                        for f in Placement.model_fields})
