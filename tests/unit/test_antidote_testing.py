"""antidote.testing: a handler's outcome under a policy, in-process, as the consumer decides it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from antidote import NonRetryable, Retry
from antidote.testing import message, policy, run, run_all
from antidote_api import headers as names

ROOT = Path(__file__).resolve().parents[2]


class Declined(Exception):
    pass


def handle(msg):
    """Fails as its value says: `fail-N` fails its first N calls (message.attempt counts
    every call, every cycle), `bad` always, `declined` with a class the policy may list."""
    value = msg.value.decode()
    if value.startswith("fail-") and msg.attempt <= int(value[5:]):
        raise ConnectionError(f"attempt {msg.attempt}")
    if value == "bad":
        raise ValueError("cannot process")
    if value == "declined":
        raise Declined("no")
    if value == "never":
        raise NonRetryable("unknown customer")
    if value == "later":
        raise Retry(after="90s")
    if value == "nothing":
        return None
    return {"seen": value, "attempt": msg.attempt, "trace": (msg.header("trace") or b"").decode()}


def test_a_message_that_succeeds_is_processed_with_its_output() -> None:
    out = run(handle, message("ok", key="k", headers={"trace": "t1"}))
    assert out.processed and out.outcome == "processed"
    assert out.output == b'{"seen":"ok","attempt":1,"trace":"t1"}'  # the sink's bytes (dict as JSON)
    assert (out.calls, out.attempts, out.topic, out.headers) == (1, 1, None, [])
    assert run(handle, message("nothing")).output is None


def test_immediate_reattempts_then_cycles_then_the_poison_topic() -> None:
    pol = {"retries": {"immediate": 1, "cycles": 2, "cycleDelay": "10s", "backoff": 3}}
    passes = run_all(handle, message("bad", key="k", headers={"trace": "t"}, topic="orders",
                                     partition=2, offset=41, timestamp=1000), pol)
    assert [p.outcome for p in passes] == ["retried", "retried", "moved"]
    assert [(p.cycle, p.calls, p.attempts) for p in passes] == [(0, 2, 2), (1, 2, 4), (2, 2, 6)]
    assert [p.topic for p in passes] == ["orders.retry-1", "orders.retry-2", "orders.poison"]
    assert [p.delay_ms for p in passes] == [10_000, 30_000, None]  # cycleDelay x backoff^(k-1)
    first, _, last = passes
    assert first.header(names.CYCLE) == "1" and int(first.header(names.DUE)) == first.due
    assert first.header(names.REASON) is None  # a retry record carries no reason
    assert last.header_dict() | {names.ERROR_STACK: None} == {
        "trace": "t", names.ORIGINAL_TOPIC: "orders", names.ORIGINAL_PARTITION: "2",
        names.ORIGINAL_OFFSET: "41", names.ORIGINAL_TIMESTAMP: "1000", names.ATTEMPTS: "6",
        names.CYCLE: "2", names.FIRST_FAILURE: first.header(names.FIRST_FAILURE),
        names.LAST_FAILURE: last.header(names.LAST_FAILURE), names.CONSUMER: "tests/handler",
        names.POLICY: "default", names.REASON: "max-attempts", names.DISPOSITION: "Move",
        names.ERROR_CLASS: "ValueError", names.ERROR_MESSAGE: "cannot process",
        names.ERROR_STACK: None}
    assert last.header(names.ERROR_STACK).endswith("ValueError: cannot process\n")
    assert last.systemic and last.quarantined and (last.key, last.value) == (b"k", b"bad")


def test_the_attempt_a_handler_sees_counts_every_call_of_every_cycle() -> None:
    pol = {"retries": {"immediate": 1, "cycles": 2}}
    passes = run_all(handle, message("fail-3"), pol)
    assert [p.outcome for p in passes] == ["retried", "processed"]
    assert passes[-1].output == b'{"seen":"fail-3","attempt":4,"trace":""}'
    assert passes[0].header(names.ERROR_MESSAGE) == "attempt 2"


def test_non_retryable_by_the_handler_or_the_policy_and_the_dead_letter_topic() -> None:
    never = run(handle, message("never"), {"disposition": "Reject"})
    assert (never.outcome, never.reason, never.chosen, never.calls) == ("rejected", "non-retryable", "non-retryable", 1)
    assert never.topic == "test.dlq" and never.header(names.ERROR_CLASS) == "antidote.NonRetryable"
    assert not never.systemic  # a verdict on the message, not a sign of an outage
    listed = run(handle, message("declined"), {"retries": {"nonRetryable": ["Declined"]}})
    assert (listed.outcome, listed.reason, listed.calls, listed.chosen) == ("moved", "non-retryable", 1, None)
    assert listed.systemic


def test_retry_after_is_bounded_as_the_consumer_bounds_it() -> None:
    later = run(handle, message("later"), {"retries": {"cycles": 1, "cycleDelay": "1m"}})
    assert (later.outcome, later.chosen, later.delay_ms, later.calls) == ("retried", "retry", 60_000, 1)
    within = run(handle, message("later"), {"retries": {"cycles": 1, "cycleDelay": "1m", "maxCycleDelay": "1h"}})
    assert within.delay_ms == 90_000
    none_left = run(handle, message("later"), {"retries": {"cycles": 0}})
    assert (none_left.outcome, none_left.reason) == ("moved", "max-attempts")


def test_validation_refuses_before_any_call_and_drop_and_fault_write_nothing() -> None:
    schema = {"validation": {"format": "json", "jsonSchema": {"type": "object", "required": ["id"]}}}
    out = run(handle, message('{"x": 1}'), schema)
    assert (out.outcome, out.reason, out.calls, out.error_class) == ("moved", "validation", 0, "antidote.ValidationError")
    dropped = run(handle, message("bad"), {"retries": {"immediate": 0, "cycles": 0}, "disposition": "Drop"})
    assert (dropped.outcome, dropped.topic, dropped.headers) == ("dropped", None, [])
    fault = run(handle, message("bad"), {"retries": {"immediate": 0, "cycles": 0}, "disposition": "Fault"})
    assert (fault.outcome, fault.topic, fault.reason) == ("fault", None, "max-attempts")


def test_native_headers_and_forged_antidote_headers() -> None:
    pol = {"retries": {"immediate": 0, "cycles": 0}, "nativeHeaders": ["Connect"]}
    out = run(handle, message("bad", headers=[("antidote.reason", "forged"), ("trace", "t")]), pol,
              consumer="shop/orders")
    assert out.header(names.CONNECT_CONNECTOR) == "shop/orders"
    assert out.header(names.CONNECT_CLASS) == f"{__name__}:handle"
    assert out.header(names.REASON) == "max-attempts"  # the source's forged one was dropped
    assert [k for k, _ in out.headers].count(names.REASON) == 1


def test_policies_as_yaml_files_manifests_and_specs() -> None:
    name, spec = policy(ROOT / "examples/poisonpolicy-full.yaml")
    assert name and spec.retries.cycles >= 1
    assert policy(str(ROOT / "examples/poisonpolicy-full.yaml")) == (name, spec)  # a path as text
    text = "apiVersion: antidote.dev/v1alpha1\nkind: PoisonPolicy\nmetadata: {name: strict}\n" \
           "spec: {retries: {immediate: 0, cycles: 0}, disposition: Reject}\n"
    out = run(handle, message("bad"), text)
    assert (out.outcome, out.header(names.POLICY)) == ("rejected", "strict")
    assert policy({"retries": {"immediate": 2}})[1].retries.immediate == 2
    with pytest.raises(ValidationError, match="immediate"):
        run(handle, message("ok"), {"retries": {"immediate": -1}})
    with pytest.raises(ValueError, match="one PoisonPolicy"):
        policy("kind: QueueConsumer\n")
    with pytest.raises(ValueError, match="no next cycle"):
        run(handle, run(handle, message("ok")))


def test_a_handler_by_reference_is_loaded_as_the_consumer_loads_it() -> None:
    out = run("tests.unit.test_antidote_testing:handle", message("bad"), {"retries": {"cycles": 0}})
    assert out.outcome == "moved"
    with pytest.raises(ValueError, match="has no callable"):
        run("tests.unit.test_antidote_testing:missing", message("ok"))


def test_importing_it_brings_in_no_spark_kafka_or_arrow() -> None:
    code = ("import sys, antidote.testing; "
            "print(sorted(m for m in ('pyspark', 'confluent_kafka', 'pyarrow', 'pandas', 'kubernetes') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
