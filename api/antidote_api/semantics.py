"""What a PoisonPolicy means, as pure functions: attempt counts, cycle delays, derived
topic names, content validation, and the effective settings a consumer runs with."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal

import jsonschema
from pydantic import Field

from .base import ApiModel
from .handler_env import EnvFromSource, EnvVar
from .consumer import (Checkpoint, ClaimVolume, KafkaSource, LocalObjectReference, QueueConsumerSpec, SchemaRegistry,
                       Spark)
from .formats import needs_registry
from .duration import Duration
from .policy import Payload, PoisonPolicySpec, Quarantine, QueueDisable, Reader, Retries, Validation
from .redaction import KEEP
from .types import Disposition, NativeHeaderSet, RouteDisposition
from .names import ledger_topic, parking_topic
from .wire import READER_SOURCES

MAX_TOPIC_LENGTH = 249


def _retries(policy: PoisonPolicySpec | Retries) -> Retries:
    return policy.retries if isinstance(policy, PoisonPolicySpec) else policy


def max_attempts(policy: PoisonPolicySpec | Retries) -> int:
    """Attempts of a message that always fails, before it gets its disposition."""
    r = _retries(policy)
    return (r.immediate + 1) * (r.cycles + 1)


def cycle_delay(policy: PoisonPolicySpec | Retries, k: int) -> Duration:
    """The wait before retry cycle k (1-based): cycleDelay x backoff^(k-1), capped by maxCycleDelay."""
    r = _retries(policy)
    if not 1 <= k <= r.cycles:
        raise ValueError(f"retry cycle {k} does not exist: the policy has cycles 1..{r.cycles}")
    delay = r.cycle_delay * (r.backoff ** (k - 1))
    if r.max_cycle_delay is not None and delay > r.max_cycle_delay:
        return r.max_cycle_delay
    return delay


class EffectiveTopics(ApiModel):
    source: str
    retry: list[str] = Field(description="Topic of retry cycle k at index k-1.")
    poison: str
    dlq: str


def _derived(source: str, suffix: str) -> str:
    name = f"{source}.{suffix}"
    if len(name) > MAX_TOPIC_LENGTH:
        raise ValueError(f"derived topic {name[:40]}... is longer than {MAX_TOPIC_LENGTH} "
                         f"characters; name it in the policy's spec.topics")
    return name


def topics(policy: PoisonPolicySpec, source: str) -> EffectiveTopics:
    """`<source>.retry-<n>`, `<source>.poison`, `<source>.dlq`, unless spec.topics names them."""
    over = policy.topics
    retry = over.retry if over and over.retry is not None else [
        _derived(source, f"retry-{n}") for n in range(1, policy.retries.cycles + 1)]
    return EffectiveTopics(
        source=source, retry=list(retry),
        poison=(over.poison if over and over.poison else _derived(source, "poison")),
        dlq=(over.dlq if over and over.dlq else _derived(source, "dlq")))


# --- content validation ----------------------------------------------------------------
# Reasons name the check and where it failed, never the payload (it may be secret).

def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


@lru_cache(maxsize=64)
def _schema_validator(schema_json: str) -> jsonschema.protocols.Validator:
    schema = json.loads(schema_json)
    return jsonschema.validators.validator_for(schema)(schema)


def message_checker(validation: Validation | None) -> Callable[[bytes | None], str | None]:
    """Compile `validation` once into check(value) -> reason, or None when the value passes."""
    if validation is None:
        return lambda value: None
    schema = (_schema_validator(json.dumps(validation.json_schema, sort_keys=True))
              if validation.json_schema is not None else None)

    def check(value: bytes | None) -> str | None:
        size = 0 if value is None else len(value)
        if validation.max_bytes is not None and size > validation.max_bytes:
            return f"value is {size} bytes, above maxBytes {validation.max_bytes}"
        if validation.format == "bytes":
            return None
        if value is None:
            return f"value is null (a tombstone), not {validation.format}"
        try:
            text = bytes(value).decode("utf-8")
        except UnicodeDecodeError as err:
            return f"value is not UTF-8: {err.reason} at byte {err.start}"
        if validation.format == "utf8":
            return None
        try:
            doc = json.loads(text, parse_constant=_reject_constant)
        except json.JSONDecodeError as err:
            return f"value is not JSON: {err.msg} at line {err.lineno} column {err.colno}"
        except ValueError as err:
            return f"value is not JSON: {err}"
        except RecursionError:  # "[[[[..." deeper than the parser goes: not a crash of the task
            return "value is not JSON: nested too deeply"
        if schema is not None:
            error = jsonschema.exceptions.best_match(schema.iter_errors(doc))
            if error is not None:
                expected = json.dumps(error.validator_value, sort_keys=True)
                if len(expected) > 120:
                    expected = expected[:117] + "..."
                return f"value does not match jsonSchema at {error.json_path}: {error.validator} {expected}"
        return None

    return check


def check_message(validation: Validation | None, value: bytes | None) -> str | None:
    """Why `value` fails the policy's content checks, or None when it passes."""
    return message_checker(validation)(value)


# --- effective settings ----------------------------------------------------------------

class EffectiveRetries(ApiModel):
    immediate: int
    cycles: int
    max_attempts: int
    cycle_delays: list[Duration] = Field(description="Wait before retry cycle k at index k-1.")
    non_retryable: list[str]
    attempt_timeout: Duration = Field(Duration.parse("60s"),
                                      description="Longest one handler call may run.")
    max_cycle_delay: Duration | None = Field(
        None, description="The policy's maxCycleDelay: also the cap of a handler's Retry(after=...).")
    max_age: Duration | None = Field(None, description="The policy's retries.maxAge.")


def retry_after_bound(r: EffectiveRetries) -> Duration | None:
    """The longest wait a handler's `Retry(after=...)` gets: maxCycleDelay, or without one
    the longest cycle delay (retry topics keep records that long plus 7 days, so a longer
    wait could outlive them). None when the policy has no cycles."""
    if r.max_cycle_delay is not None:
        return r.max_cycle_delay
    return max(r.cycle_delays, default=None)


def longest_retry_delay(r: EffectiveRetries) -> Duration:
    """The longest a record waits in a retry topic, its own cycle's delay or a Retry(after=...):
    what the retry topics' retention is sized by."""
    return max([*r.cycle_delays, *([r.max_cycle_delay] if r.cycle_delays and r.max_cycle_delay else [])],
               default=Duration(0))


class EffectiveRoute(ApiModel):
    """A PoisonPolicy route with its topic resolved: the policy's poison topic for Move and
    dead-letter topic for Reject when it names none; None for Drop (nothing is written)."""

    errors: list[str]
    disposition: RouteDisposition
    topic: str | None


def routes(policy: PoisonPolicySpec, t: EffectiveTopics, sink_topic: str | None = None
           ) -> list[EffectiveRoute]:
    """The policy's routes, their topics resolved; ValueError naming `spec.routes[i].topic`
    when one is the source, the sink, a retry topic, the parking topic or a ledger topic of the
    source (a route's record would be read again as a new message, or land where only
    Antidote's own records belong)."""
    out = []
    taken = {t.source: "the source topic", parking_topic(t.source): "the reader's parking topic",
             **{name: "a retry topic" for name in t.retry}}
    if sink_topic is not None:
        taken[sink_topic] = "the sink's topic"
    for i, r in enumerate(policy.routes or ()):
        topic = None if r.disposition == "Drop" else r.topic or (t.poison if r.disposition == "Move" else t.dlq)
        if topic is not None and topic.startswith(ledger_topic(t.source, "", "")):
            raise ValueError(f"spec.routes[{i}].topic: {topic} is named like a ledger topic of "
                             f"{t.source} ({ledger_topic(t.source, '', '')}-...); a route needs a topic of its own")
        if topic in taken:
            raise ValueError(f"spec.routes[{i}].topic: {topic} is {taken[topic]}; a route needs a "
                             "topic of its own (or the poison or dead-letter topic)")
        out.append(EffectiveRoute(errors=list(r.errors), disposition=r.disposition, topic=topic))
    return out


def route_topics(s: EffectiveSettings) -> list[str]:
    """The routes' own topics, beyond the poison and dead-letter topics, each once: created
    and checked at start like the derived topics (kafka.topics.ensure_topics)."""
    out: list[str] = []
    for r in s.routes or ():
        if r.topic is not None and r.topic not in (s.topics.poison, s.topics.dlq, *out):
            out.append(r.topic)
    return out


def reader_topic(s: EffectiveSettings, source: str) -> str:
    """The topic a reader job (or `antidote inspect`) reads for `--from`: `poison`, `dlq`, or
    the topic of one of the policy's routes, by name. ValueError naming the choices."""
    if source == "poison":
        return s.topics.poison
    if source == "dlq":
        return s.topics.dlq
    own = sorted({r.topic for r in s.routes or () if r.topic is not None})
    if source in own:
        return source
    raise ValueError(f"--from {source}: not {', '.join(READER_SOURCES)} or a route's topic"
                     + (f" ({', '.join(own)})" if own else " (the policy has no route with a topic)"))


class EffectiveKafkaSink(ApiModel):
    """spec.sink.kafka with its brokers and credentials resolved (the source's by default)."""

    topic: str
    bootstrap_servers: str
    secret_ref: LocalObjectReference | None = None
    delivery: Literal["ExactlyOnce", "AtLeastOnce"] = "ExactlyOnce"
    # spec.sink.kafka.valueFormat, and the registry its schema comes from (the sink's own or the
    # source's), only with a registry format; None otherwise (left out of the settings document).
    value_format: str | None = None
    schema_registry: SchemaRegistry | None = None


class EffectiveSink(ApiModel):
    kafka: EffectiveKafkaSink | None = None
    path: str | None = None
    format: str | None = None


class EffectiveSettings(ApiModel):
    """What a consumer (and its reader jobs) run with: the QueueConsumer spec with its
    PoisonPolicy resolved, every default applied. The operator puts it in a ConfigMap."""

    namespace: str
    consumer: str
    policy: str
    paused: bool
    handler: str
    source: KafkaSource
    sink: EffectiveSink | None
    spark: Spark
    checkpoint: Checkpoint
    retries: EffectiveRetries
    validation: Validation | None
    disposition: Disposition
    topics: EffectiveTopics
    queue_disable: QueueDisable
    payload: Payload
    reader: Reader
    ordering: Literal["None", "Key"] = "None"  # QueueConsumer spec.ordering
    max_held_per_key: int = 1000
    # None when unset, so the settings (and their hash) of consumers without volumes are
    # what they were before the field existed: an operator upgrade restarts no driver.
    volumes: list[ClaimVolume] | None = Field(
        None, description="PersistentVolumeClaims mounted in the driver and reader pods "
                          "(QueueConsumer spec.volumes).")
    # The handler's environment (QueueConsumer spec.env, spec.envFrom); None when unset, as volumes.
    env: list[EnvVar] | None = Field(None, description="QueueConsumer spec.env.")
    env_from: list[EnvFromSource] | None = Field(None, description="QueueConsumer spec.envFrom.")
    native_headers: list[NativeHeaderSet] = Field(  # type: ignore[valid-type]  # a Literal built from NATIVE_SETS
        default_factory=list, description="Kafka-native error header sets also written on "
                                          "quarantined records (the policy's nativeHeaders).")
    # The policy's quarantine block, only when it changes a payload (Drop, Redact): None for
    # Keep, so the settings (and their hash) of consumers that keep payloads are unchanged.
    quarantine: Quarantine | None = Field(
        None, description="What poison and dead-letter records keep of a value (the policy's quarantine).")
    # The policy's routes (spec.routes), topics resolved; None without any, as volumes.
    routes: list[EffectiveRoute] | None = Field(None, description="The policy's routes.")
    resume_token: str | None = Field(
        None, description="Set by the operator when it re-enables a disabled queue (the time of "
                          "that resume). A consumer whose ledger says its queue is disabled starts "
                          "only with a token it has not honored before: a restart alone (a "
                          "kubelet restarting the container) keeps the queue disabled.")


def _sink(spec: QueueConsumerSpec) -> EffectiveSink | None:
    sink, source = spec.sink, spec.source.kafka
    if sink is None:
        return None
    if sink.kafka is not None:
        kafka = sink.kafka
        encoded = needs_registry(kafka.value_format)
        fmt = dict(value_format=kafka.value_format if encoded else None,
                   schema_registry=(kafka.schema_registry or source.schema_registry) if encoded else None)
        if kafka.bootstrap_servers is None:  # same cluster as the source, same credentials
            return EffectiveSink(kafka=EffectiveKafkaSink(
                topic=kafka.topic, bootstrap_servers=source.bootstrap_servers,
                secret_ref=kafka.secret_ref or source.secret_ref, delivery=kafka.delivery, **fmt))
        return EffectiveSink(kafka=EffectiveKafkaSink(
            topic=kafka.topic, bootstrap_servers=kafka.bootstrap_servers, secret_ref=kafka.secret_ref,
            delivery=kafka.delivery, **fmt))
    return EffectiveSink(path=sink.path, format=sink.format or "parquet")


def resolve(consumer: QueueConsumerSpec, policy: PoisonPolicySpec, *, name: str = "",
            namespace: str = "") -> EffectiveSettings:
    """The effective settings of consumer `namespace/name` under `policy`."""
    r = policy.retries
    sink = _sink(consumer)
    derived = topics(policy, consumer.source.kafka.topic)
    return EffectiveSettings(
        namespace=namespace, consumer=name, policy=consumer.policy_ref.name,
        paused=consumer.paused, handler=consumer.handler,
        source=consumer.source.kafka, sink=sink,
        spark=consumer.spark, checkpoint=consumer.checkpoint,
        retries=EffectiveRetries(
            immediate=r.immediate, cycles=r.cycles, max_attempts=max_attempts(policy),
            cycle_delays=[cycle_delay(policy, k) for k in range(1, r.cycles + 1)],
            non_retryable=list(r.non_retryable), attempt_timeout=r.attempt_timeout,
            max_cycle_delay=r.max_cycle_delay, max_age=r.max_age),
        validation=policy.validation, disposition=policy.disposition,
        topics=derived,
        queue_disable=policy.queue_disable, payload=policy.payload, reader=policy.reader,
        ordering=consumer.ordering, max_held_per_key=consumer.max_held_per_key,
        volumes=consumer.volumes, env=consumer.env, env_from=consumer.env_from,
        native_headers=list(policy.native_headers),
        quarantine=policy.quarantine if policy.quarantine is not None and policy.quarantine.payload != KEEP else None,
        routes=routes(policy, derived, sink.kafka.topic if sink is not None and sink.kafka is not None
                      else None) or None)
