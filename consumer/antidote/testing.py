"""Testing a handler without Kafka or Spark: what the consumer would do with one message.

    from antidote.testing import message, run, run_all

    def test_a_bad_amount_is_quarantined():
        out = run(handle, message(b'{"amount": -1}'), policy={"retries": {"immediate": 1}})
        assert out.outcome == "moved" and out.reason == "non-retryable"
        assert out.header("antidote.error.class") == "orders.handlers.BadAmount"

`run` makes one pass (the first delivery, or one retry cycle) of a message through the
handler, in this process, under a PoisonPolicy (the manifest as YAML text, a dict, a file, or
the model), with the consumer's own code: the pass (`worker.attempts.run_pass`: validation,
immediate re-attempts, `nonRetryable`, `antidote.Retry` and `antidote.NonRetryable`) under the
configuration the driver ships to its workers (`driver.worker_config`), then the record the
settle would write for its outcome (`worker.outcome_records`: the retry topic, its due time
and headers; the poison or dead-letter topic and headers, with the policy's native header
sets; the value as `quarantine.payload` leaves it, with its `antidote.redacted*` headers:
`Hash` uses the Secret's key when it is mounted as in the driver, else `TEST_HASH_KEY`).
`run(handler, previous_result, policy)` runs the next retry cycle by reading the retry
record back as the workers do (`kafka.headers.retry_state`); `run_all` follows a message
through every cycle to its outcome. Header names are `antidote_api.headers`'.

Formats: `run(..., source={"valueFormat": "Avro", "schemaRegistry": {"url": ...}})` (the
fields of spec.source.kafka) decodes the message as the workers do (`msg.data`, and a value
that does not decode is `validation` without a handler call); `sink={"kafka": {"topic":
"out", "valueFormat": "Avro"}}` (spec.sink) encodes the handler's return value with the
registry's latest schema of `out-value` (`output` is then the bytes the sink would get; a
value the schema refuses is `non-retryable`, `antidote.SerializationError`). Both ask the
registry named, over HTTP, as the workers do.

What it does not do: Kafka (no topic is written, so no record is fitted to a topic's
`max.message.bytes`), the attempt time limit (`retries.attemptTimeout` is not enforced
in-process), ordering by key, batches (isolation, the systemic-failure breaker: `systemic`
says whether the failure would count toward `queueDisable.failureRatio`), and waiting: a
retry's delay is reported, not slept.

Light on purpose: no Spark, no Kafka client, no Arrow is imported (teams run it in their
own CI with only Antidote installed).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from antidote_api.consumer import QueueConsumerSpec
from antidote_api.policy import PoisonPolicy, PoisonPolicySpec
from antidote_api.semantics import EffectiveSettings, resolve
from antidote_api.names import ledger_names
from antidote_consumer.worker.outcome_records import (OUTCOME_OF, disposition_of, disposition_record, retry_bound_ms,
                                                      retry_record)
from antidote_consumer.driver.worker_config import worker_config
from antidote_consumer.kafka import headers as h
from antidote_consumer.kafka.native_headers import with_native
from antidote_consumer.worker.attempts import plan_of, run_pass
from antidote_consumer.worker.chosen import systemic_signal
from antidote_consumer.worker.encode import with_formats
from antidote_consumer.worker.handler import load_handler
from antidote_consumer.worker.message import Message
from antidote_consumer.worker.verdict import Verdict

__all__ = ["Message", "Result", "message", "policy", "run", "run_all"]

PolicyLike = PoisonPolicySpec | PoisonPolicy | Mapping | str | Path | None
HeadersLike = Mapping[str, bytes | str | None] | Iterable[tuple[str, bytes | str | None]] | None

# The consumer under test (`namespace/name`): `antidote.consumer` on its records.
DEFAULT_CONSUMER = "tests/handler"
_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


def _bytes(value: bytes | str | None, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"{what}: expected bytes, str or None, got {type(value).__name__}")


def message(value: bytes | str | None = None, *, key: bytes | str | None = None,
            headers: HeadersLike = None, topic: str = "test", partition: int = 0,
            offset: int = 0, timestamp: int | None = None) -> Message:
    """A `Message` as a handler receives it on its first delivery (`attempt` 1). `str` values
    are encoded as UTF-8; `headers` is a dict or (name, value) pairs; `timestamp` is epoch
    milliseconds (now when not given)."""
    pairs = headers.items() if isinstance(headers, Mapping) else (headers or ())
    hdrs = tuple((str(k), _bytes(v, f"header {k!r}")) for k, v in pairs)
    return Message(_bytes(key, "key"), _bytes(value, "value"), hdrs, topic, partition, offset,
                   int(time.time() * 1000) if timestamp is None else timestamp)


def policy(source: PolicyLike = None) -> tuple[str, PoisonPolicySpec]:
    """(name, spec) of a PoisonPolicy given as the model, a dict (the whole manifest or its
    `spec`), YAML text (a manifest, or a stream of them holding one PoisonPolicy), a path to
    such a file (a `Path`, or text naming an existing file), or None (the defaults). A bad policy raises pydantic's error naming the field,
    as the API server would refuse it."""
    if source is None:
        return "default", PoisonPolicySpec()
    if isinstance(source, PoisonPolicySpec):
        return "default", source
    if isinstance(source, PoisonPolicy):
        return (source.metadata or {}).get("name") or "default", source.spec
    if isinstance(source, str) and "\n" not in source and Path(source).is_file():
        source = Path(source)  # a path given as text
    if isinstance(source, Path):
        source = source.read_text()
    if isinstance(source, str):
        import yaml

        docs = [d for d in yaml.safe_load_all(source) if d]
        found = [d for d in docs if isinstance(d, dict) and d.get("kind") == "PoisonPolicy"]
        if len(found) != 1:
            raise ValueError(f"expected one PoisonPolicy in the YAML, found {len(found)} "
                             f"(kinds: {[d.get('kind') for d in docs if isinstance(d, dict)]})")
        source = found[0]
    if isinstance(source, Mapping):
        if "kind" in source or "apiVersion" in source or "metadata" in source:
            return policy(PoisonPolicy.model_validate(dict(source)))
        return "default", PoisonPolicySpec.model_validate(dict(source))
    raise TypeError(f"policy: expected a PoisonPolicy (model, dict, YAML text or path), got "
                    f"{type(source).__name__}")


def _handler(handler: Callable[..., Any] | str) -> tuple[Callable[..., Any], str]:
    """(the callable, its `package.module:function`): a reference is loaded as the consumer
    loads it; a callable's reference is its module and name (used in native headers)."""
    if isinstance(handler, str):
        return load_handler(handler), handler
    if not callable(handler):
        raise TypeError(f"handler: expected a callable or 'package.module:function', got "
                        f"{type(handler).__name__}")
    ref = f"{getattr(handler, '__module__', '')}:{getattr(handler, '__qualname__', '')}"
    return handler, ref if _REF.match(ref) else "antidote.testing:handler"


def settings(handler_ref: str, source_topic: str, policy_source: PolicyLike = None, *,
             consumer: str = DEFAULT_CONSUMER, source: Mapping | None = None,
             sink: Mapping | None = None) -> EffectiveSettings:
    """The effective settings of consumer `consumer` (`namespace/name`) of `source_topic`
    with this handler and policy, as the operator resolves them
    (`antidote_api.semantics.resolve`): derived topic names, cycle delays, every default.
    `source`: more fields of spec.source.kafka (valueFormat, keyFormat, schemaRegistry);
    `sink`: spec.sink. A bad one raises pydantic's error naming the field."""
    namespace, slash, name = consumer.partition("/")
    if not slash or not namespace or not name:
        raise ValueError(f"consumer {consumer!r}: expected 'namespace/name'")
    policy_name, spec = policy(policy_source)
    qc = QueueConsumerSpec.model_validate({
        "policyRef": {"name": policy_name}, "handler": handler_ref,
        "source": {"kafka": {**(source or {}), "bootstrapServers": "in-process:9092", "topic": source_topic}},
        "checkpoint": {"location": "/tmp/antidote-testing"}, **({"sink": dict(sink)} if sink else {})})
    return resolve(qc, spec, name=name, namespace=namespace)


@dataclass(frozen=True)
class Result:
    """One pass's outcome and, for a failure, the record the consumer would write.

    `outcome`: `processed` (the handler returned; `output` is what goes to the sink),
    `retried` (parked in `topic`, retry cycle `cycle + 1`, after `delay_ms`), `moved` (to the
    poison topic), `rejected` (to the dead-letter topic), `dropped` (discarded, counted) or
    `fault` (the consumer would stop at the message, which stays unconsumed). The names are
    the consumer's outcome counts (`antidote_messages_total{outcome}`)."""

    outcome: str
    cycle: int  # the pass's retry cycle: 0 for the first delivery
    calls: int  # handler calls in this pass (0 when validation refused the message)
    attempts: int  # handler calls of this message so far, every cycle (antidote.attempts)
    output: bytes | None = None
    reason: str | None = None  # antidote.reason: max-attempts, non-retryable, validation
    error_class: str | None = None
    error_message: str | None = None
    stack: str | None = None
    chosen: str | None = None  # "retry" / "non-retryable": the handler raised antidote.Retry / NonRetryable
    delay_ms: int | None = None  # retried: the wait before the next cycle
    due: int | None = None  # retried: epoch ms, antidote.due
    topic: str | None = None  # where the record goes: a retry, poison or dead-letter topic
    key: bytes | None = None
    value: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)  # the record's, all of them
    systemic: bool = False  # counts toward queueDisable.failureRatio
    settings: EffectiveSettings | None = field(default=None, repr=False, compare=False)

    @property
    def processed(self) -> bool:
        return self.outcome == "processed"

    @property
    def retried(self) -> bool:
        return self.outcome == "retried"

    @property
    def quarantined(self) -> bool:
        """Given the policy's disposition (moved, rejected, dropped or fault)."""
        return self.outcome in ("moved", "rejected", "dropped", "fault")

    def header(self, name: str) -> str | None:
        """The record's last header `name` as text, or None (names: antidote_api.headers)."""
        found = None
        for k, v in self.headers:
            if k == name:
                found = None if v is None else v.decode("utf-8", "replace")
        return found

    def header_dict(self) -> dict[str, str | None]:
        """Every header of the record as text, the last value of each name."""
        return {k: self.header(k) for k, _ in self.headers}


def run(handler: Callable[..., Any] | str, msg: Message | Result, policy: PolicyLike = None, *,
        consumer: str = DEFAULT_CONSUMER, now: int | None = None, source: Mapping | None = None,
        sink: Mapping | None = None) -> Result:
    """One pass of `msg` through `handler` under `policy`: the first delivery of a Message
    (its topic is the consumer's source topic), or, given a `retried` Result, its next retry
    cycle (the retry record read back as the workers read it; `policy`, `consumer`, `source`
    and `sink` are then the first pass's). `consumer`: its `namespace/name`, in
    `antidote.consumer`. `now`: epoch ms of the pass (the failure times and the due time), the
    clock's when not given. `source`, `sink`: formats (see the module's text)."""
    fn, ref = _handler(handler)
    now = int(time.time() * 1000) if now is None else now
    if isinstance(msg, Result):
        if not msg.retried or msg.settings is None:
            raise ValueError(f"run: a {msg.outcome!r} result has no next cycle; only a 'retried' one does")
        s = msg.settings.model_copy(update={"handler": ref})
        state = h.retry_state(msg.headers)  # the consumer's parser of its retry records
        o = state.origin
        user = h.user_headers(msg.headers)
        current = Message(msg.key, msg.value, tuple(user), o.topic, o.partition, o.offset,
                          o.timestamp, attempt=state.attempts + 1)
        cycle, before, first = state.cycle, state.attempts, state.first_failure
    elif isinstance(msg, Message):
        s = settings(ref, msg.topic, policy, consumer=consumer, source=source, sink=sink)
        user = h.source_headers(msg.headers)  # a source record's antidote.* headers never reach the handler
        current = Message(msg.key, msg.value, tuple(user), msg.topic, msg.partition, msg.offset,
                          msg.timestamp, attempt=1)
        cycle, before, first = 0, 0, None
    else:
        raise TypeError(f"run: expected a Message (antidote.testing.message) or a retried Result, "
                        f"got {type(msg).__name__}")
    cfg = worker_config(s)
    out = run_pass(current, with_formats(fn, cfg.formats, cfg.sink_format), plan_of(cfg), cycle)
    base: dict[str, Any] = dict(cycle=cycle, calls=out.attempts, attempts=before + out.attempts,
                                key=current.key, value=current.value, settings=s)
    if out.verdict is Verdict.OK:
        return Result("processed", output=out.output, **base)
    row = SimpleNamespace(reason=out.reason.value if out.reason else None, chosen=out.chosen)
    failed = dict(reason=row.reason, error_class=out.error_class, error_message=out.error_message,
                  stack=out.stack, chosen=out.chosen, systemic=systemic_signal(row), **base)
    common = dict(origin=h.Origin(current.topic, current.partition, current.offset, current.timestamp),
                  attempts=before + out.attempts, first_failure=first if first is not None else now,
                  last_failure=now, error_class=out.error_class, error_message=out.error_message,
                  stack=out.stack, consumer=ledger_names(s).consumer_id, policy=s.policy)
    if out.verdict is Verdict.RETRY:
        rec = retry_record(s, cycle=cycle, retry_after=out.retry_after, now=now,
                           bound=retry_bound_ms(s), user=list(user), common=common)
        return Result("retried", delay_ms=rec.delay_ms, due=rec.due, topic=rec.topic,
                      headers=rec.headers, **failed)
    disposition = disposition_of(s, out.route)  # the policy's, or its route's (spec.routes)
    if disposition == "Fault":
        return Result("fault", **failed)
    written = disposition_record(s, cycle=cycle, reason=row.reason, user=list(user), common=common,
                                 route=out.route)
    if written is None:
        return Result(OUTCOME_OF[disposition], **failed)
    topic, hdrs = written
    value = current.value
    if s.quarantine is not None:  # the policy's quarantine.payload, as the settle applies it
        done = _redactor(s)(value)
        value, hdrs = done.value, hdrs + done.headers
    if s.native_headers:
        hdrs = with_native(current.key, value, hdrs, s.native_headers, s.handler, None)
    return Result(OUTCOME_OF[disposition], topic=topic, headers=hdrs, **{**failed, "value": value})


# The HMAC key of quarantine `Hash` where a handler's tests run without its Secret mounted:
# hashes are then this key's, not the consumer's (equal values still hash alike).
TEST_HASH_KEY = b"antidote.testing: not a real key"


def _redactor(s: EffectiveSettings):
    from antidote_consumer.worker.redact import RedactionKeyError, redactor_for

    try:
        return redactor_for(s)
    except RedactionKeyError:
        return redactor_for(s, key=TEST_HASH_KEY)


def run_all(handler: Callable[..., Any] | str, msg: Message, policy: PolicyLike = None, *,
            consumer: str = DEFAULT_CONSUMER, source: Mapping | None = None,
            sink: Mapping | None = None) -> list[Result]:
    """Every pass of `msg` until its outcome: the first delivery, then each retry cycle (with no
    wait: each `delay_ms` is reported), ending with the pass that processed it or gave it the
    disposition. `run_all(...)[-1]` is the outcome."""
    passes = [run(handler, msg, policy, consumer=consumer, source=source, sink=sink)]
    while passes[-1].retried:
        passes.append(run(handler, passes[-1], policy))
    return passes
