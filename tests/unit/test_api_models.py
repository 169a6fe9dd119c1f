"""The models hold the design's defaults and reject what the API server rejects, naming the field."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from antidote_api import PoisonPolicy, PoisonPolicySpec, QueueConsumer
from antidote_api.base import explain
from antidote_api.duration import Duration

from ..api_cases import BAD_SPECS, BadSpec, example_documents, valid_consumer

MODELS = {"PoisonPolicy": PoisonPolicy, "QueueConsumer": QueueConsumer}


def test_empty_policy_is_the_design_default() -> None:
    spec = PoisonPolicySpec()
    r = spec.retries
    assert (r.immediate, r.cycles, r.cycle_delay, r.backoff, r.non_retryable) == (
        5, 2, Duration.parse("30m"), 1.0, [])
    assert r.max_cycle_delay is None
    assert spec.validation is None and spec.topics is None
    assert spec.disposition == "Move"
    q = spec.queue_disable
    assert (q.enabled, q.consecutive_batch_failures) == (True, 5)
    assert (q.failure_ratio.threshold, q.failure_ratio.window, q.failure_ratio.min_messages) == (
        0.5, Duration.parse("5m"), 100)
    assert q.auto_resume is None  # off
    assert spec.payload.redact is True
    assert spec.reader.action == "Hold"
    assert spec.reader.trigger.poison_depth is None and spec.reader.trigger.schedule is None  # manual
    assert spec.reader.disposition != "Move"


def test_wire_form_is_camel_case_and_python_is_snake_case() -> None:
    spec = PoisonPolicySpec.model_validate({"retries": {"cycleDelay": "10m", "nonRetryable": ["KeyError"]},
                                            "queueDisable": {"consecutiveBatchFailures": 3}})
    assert spec.retries.cycle_delay == Duration.parse("10m")
    assert spec.queue_disable.consecutive_batch_failures == 3
    wire = spec.wire()
    assert wire["retries"]["cycleDelay"] == "10m" and wire["retries"]["nonRetryable"] == ["KeyError"]
    assert wire["queueDisable"]["failureRatio"] == {"threshold": 0.5, "window": "5m", "minMessages": 100}
    assert PoisonPolicySpec.model_validate(wire) == spec  # round trip
    # snake_case is accepted from Python callers too
    assert PoisonPolicySpec(disposition="Drop").disposition == "Drop"


@pytest.mark.parametrize(("path", "doc"), example_documents(), ids=lambda v: getattr(v, "name", ""))
def test_examples_are_valid(path, doc) -> None:
    model = MODELS[doc["kind"]].model_validate(doc)
    assert model.api_version == "antidote.dev/v1alpha1"


def test_examples_cover_both_kinds_minimal_and_full() -> None:
    names = {p.name for p, _ in example_documents()}
    kinds = {d["kind"] for _, d in example_documents()}
    assert kinds == set(MODELS)
    assert {"poisonpolicy-minimal.yaml", "poisonpolicy-full.yaml"} <= names


def test_full_policy_example_sets_every_spec_field() -> None:
    doc = next(d for p, d in example_documents() if p.name == "poisonpolicy-full.yaml")
    spec = PoisonPolicySpec.model_validate(doc["spec"])

    def unset(model, prefix=""):
        for name, field in type(model).model_fields.items():
            key = f"{prefix}{field.alias}"
            value = getattr(model, name)
            if name not in model.model_fields_set:
                yield key
            elif isinstance(value, BaseModel):
                yield from unset(value, key + ".")
    assert list(unset(spec)) == []


@pytest.mark.parametrize("case", BAD_SPECS, ids=lambda c: c.id)
def test_bad_spec_is_rejected_naming_the_field(case: BadSpec) -> None:
    doc = case.manifest()
    with pytest.raises(ValidationError) as err:
        MODELS[doc["kind"]].model_validate(doc)
    lines = explain(err.value)
    assert any(line.startswith(case.field) and all(m in line for m in case.mentions) for line in lines), lines


def test_valid_bases_of_the_bad_specs_are_valid() -> None:
    QueueConsumer.model_validate(valid_consumer())
    PoisonPolicy.model_validate({"metadata": {"name": "p"}})


def test_json_schema_must_itself_be_a_schema() -> None:
    with pytest.raises(ValidationError, match="not a valid JSON Schema"):
        PoisonPolicySpec.model_validate({"validation": {"format": "json", "jsonSchema": {"type": "thing"}}})


def test_unknown_fields_are_rejected_everywhere() -> None:
    for doc in ({"spec": {"payload": {"redact": True, "mask": True}}},
                {"spec": {}, "extra": 1}):
        with pytest.raises(ValidationError, match="Extra inputs"):
            PoisonPolicy.model_validate({"metadata": {"name": "p"}, **doc})
