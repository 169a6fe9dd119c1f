"""Policy semantics as pure functions: attempts, delays, topic names, content checks, resolution."""

from __future__ import annotations

import json

import pytest

from antidote_api import PoisonPolicySpec, QueueConsumerSpec, check_message, cycle_delay, max_attempts, resolve
from antidote_api.duration import Duration
from antidote_api.policy import Validation
from antidote_api.semantics import EffectiveSettings, message_checker, topics

from ..api_cases import example_documents, valid_consumer


def policy(**spec) -> PoisonPolicySpec:
    return PoisonPolicySpec.model_validate(spec)


@pytest.mark.parametrize(("immediate", "cycles", "attempts"), [(5, 2, 18), (0, 0, 1), (0, 3, 4), (2, 0, 3), (100, 20, 2121)])
def test_max_attempts(immediate: int, cycles: int, attempts: int) -> None:
    assert max_attempts(policy(retries={"immediate": immediate, "cycles": cycles})) == attempts


def test_default_policy_attempts_and_delays() -> None:
    p = policy()
    assert max_attempts(p) == 18
    assert [str(cycle_delay(p, k)) for k in (1, 2)] == ["30m", "30m"]


def test_backoff_grows_the_delay_until_the_cap() -> None:
    p = policy(retries={"cycles": 4, "cycleDelay": "1m", "backoff": 3.0, "maxCycleDelay": "10m"})
    assert [str(cycle_delay(p, k)) for k in range(1, 5)] == ["1m", "3m", "9m", "10m"]
    assert cycle_delay(p.retries, 2) == Duration.parse("3m")  # Retries alone works too
    fractional = policy(retries={"cycles": 2, "cycleDelay": "1s", "backoff": 1.5})
    assert cycle_delay(fractional, 2) == Duration.parse("1s500ms")


@pytest.mark.parametrize("k", [0, 3, -1])
def test_no_such_cycle(k: int) -> None:
    with pytest.raises(ValueError, match="cycles 1..2"):
        cycle_delay(policy(), k)


def test_derived_topics_and_overrides() -> None:
    t = topics(policy(), "orders")
    assert (t.retry, t.poison, t.dlq) == (["orders.retry-1", "orders.retry-2"], "orders.poison", "orders.dlq")
    assert topics(policy(retries={"cycles": 0}), "orders").retry == []
    t = topics(policy(topics={"retry": ["r-a", "r-b"], "dlq": "dead"}), "orders")
    assert (t.retry, t.poison, t.dlq) == (["r-a", "r-b"], "orders.poison", "dead")


def test_derived_topic_too_long_asks_for_an_override() -> None:
    with pytest.raises(ValueError, match="spec.topics"):
        topics(policy(), "t" * 245)


SCHEMA = {"type": "object", "required": ["id"],
          "properties": {"id": {"type": "string"}, "amount": {"type": "number", "minimum": 0}}}


@pytest.mark.parametrize(("validation", "value", "reason"), [
    (None, b"\xff anything", None),
    ({}, None, None),
    ({"maxBytes": 4}, b"12345", "value is 5 bytes, above maxBytes 4"),
    ({"maxBytes": 5}, b"12345", None),
    ({"format": "utf8"}, "héllo".encode(), None),
    ({"format": "utf8"}, b"ok \xff", "value is not UTF-8: invalid start byte at byte 3"),
    ({"format": "utf8"}, None, "value is null (a tombstone), not utf8"),
    ({"format": "json"}, b'{"a": 1}', None),
    ({"format": "json"}, b"{not json", "value is not JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
    ({"format": "json"}, b"NaN", "value is not JSON: NaN is not JSON"),
    ({"format": "json"}, None, "value is null (a tombstone), not json"),
    ({"format": "json"}, b"[" * 100_000, "value is not JSON: nested too deeply"),
    ({"format": "json"}, b'{"id": 1' + b"0" * 5000 + b"}",
     "value is not JSON: Exceeds the limit (4300 digits) for integer string conversion: value has "
     "5001 digits; use sys.set_int_max_str_digits() to increase the limit"),
    ({"format": "json", "jsonSchema": SCHEMA}, b'{"id": "o-1", "amount": 3.5}', None),
    ({"format": "json", "jsonSchema": SCHEMA}, b'{"amount": 3}',
     'value does not match jsonSchema at $: required ["id"]'),
    ({"format": "json", "jsonSchema": SCHEMA}, b'{"id": "o-1", "amount": -7}',
     "value does not match jsonSchema at $.amount: minimum 0"),
])
def test_check_message(validation, value, reason) -> None:
    v = None if validation is None else Validation.model_validate(validation)
    assert check_message(v, value) == reason


def test_reasons_never_carry_the_payload() -> None:
    secret = "s3cr3t-card-4111111111111111"
    v = Validation.model_validate({"format": "json", "maxBytes": 1000, "jsonSchema": {
        "type": "object", "properties": {"card": {"type": "integer", "enum": [1, 2]}},
        "additionalProperties": False}})
    for payload in ({"card": secret}, {secret: 1}, f"[{secret}", secret):
        raw = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        reason = check_message(v, raw)
        assert reason and secret not in reason and "4111" not in reason, reason


def test_checker_compiles_once_and_is_reusable() -> None:
    check = message_checker(Validation.model_validate({"format": "json", "jsonSchema": SCHEMA}))
    assert [check(b'{"id": "x"}'), check(b"{}")] == [None, 'value does not match jsonSchema at $: required ["id"]']


def test_resolve_applies_every_default() -> None:
    consumer = QueueConsumerSpec.model_validate(valid_consumer()["spec"])
    eff = resolve(consumer, policy(), name="c", namespace="shop")
    assert (eff.namespace, eff.consumer, eff.policy) == ("shop", "c", "p")
    assert eff.retries.max_attempts == 18
    assert [str(d) for d in eff.retries.cycle_delays] == ["30m", "30m"]
    assert eff.topics.retry == ["orders.retry-1", "orders.retry-2"]
    assert eff.source.starting_offsets == "earliest" and eff.source.max_messages_per_batch == 1000
    assert eff.sink is None and eff.disposition == "Move" and eff.payload.redact
    assert (eff.spark.executor.instances, eff.spark.driver.memory) == (1, "1g")
    # what the operator writes to the ConfigMap reads back identically
    text = eff.model_dump_json(by_alias=True)
    assert EffectiveSettings.model_validate_json(text) == eff
    assert '"maxAttempts":18' in text and '"cycleDelays":["30m","30m"]' in text


def test_resolve_sinks() -> None:
    base = valid_consumer()["spec"]
    secret = {"secretRef": {"name": "creds"}}
    spec = {**base, "source": {"kafka": {**base["source"]["kafka"], **secret}}}
    same_cluster = resolve(QueueConsumerSpec.model_validate({**spec, "sink": {"kafka": {"topic": "out"}}}), policy())
    assert same_cluster.sink.kafka.bootstrap_servers == "localhost:9092"
    assert same_cluster.sink.kafka.secret_ref.name == "creds"
    other = resolve(QueueConsumerSpec.model_validate(
        {**spec, "sink": {"kafka": {"topic": "out", "bootstrapServers": "other:9092", "delivery": "AtLeastOnce"}}}), policy())
    assert other.sink.kafka.bootstrap_servers == "other:9092" and other.sink.kafka.secret_ref is None
    assert (same_cluster.sink.kafka.delivery, other.sink.kafka.delivery) == ("ExactlyOnce", "AtLeastOnce")
    files = resolve(QueueConsumerSpec.model_validate({**spec, "sink": {"path": "/lake"}}), policy())
    assert (files.sink.path, files.sink.format) == ("/lake", "parquet")


def test_resolve_the_full_examples() -> None:
    docs = {p.name: d for p, d in example_documents()}
    eff = resolve(QueueConsumerSpec.model_validate(docs["queueconsumer-full.yaml"]["spec"]),
                  PoisonPolicySpec.model_validate(docs["poisonpolicy-full.yaml"]["spec"]), name="orders")
    assert eff.retries.max_attempts == 12
    assert [str(d) for d in eff.retries.cycle_delays] == ["1m", "5m", "20m"]
    assert eff.topics.retry == ["orders.retry-1m", "orders.retry-5m", "orders.retry-20m"]
    assert eff.disposition == "Reject" and eff.reader.disposition == "Fault"
    assert eff.validation.format == "json"
