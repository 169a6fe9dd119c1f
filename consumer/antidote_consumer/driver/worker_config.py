"""The `WorkerConfig` a consumer ships with its tasks, from its effective settings: pure and
light (no Spark), so `antidote.testing` runs a handler under the very configuration the
workers get."""

from __future__ import annotations

from antidote_api.formats import needs_registry, sink_subject
from antidote_api.names import ledger_names, transactional_id
from antidote_api.redaction import KEEP
from antidote_api.semantics import EffectiveSettings, retry_after_bound
from antidote_api.spark_conf import tunable
from antidote_consumer.kafka import auth as kafka_auth
from antidote_consumer.worker.executor import WorkerConfig
from antidote_consumer.worker.governance import Governance
from antidote_consumer.worker.outcome_records import retry_bound_ms
from antidote_consumer.worker.registry import secret_dir_of
from antidote_consumer.worker.sink_txn import ExactlyOnce
from antidote_consumer.worker.task_settle import TaskSettle


def formats(s: EffectiveSettings) -> dict | None:
    """WorkerConfig.formats: what the workers decode, and the registry they ask (its Secret
    read from where it is mounted, as the sink's: no credential travels with a task)."""
    src = s.source
    if src.value_format in (None, "Bytes") and src.key_format in (None, "Bytes"):
        return None
    reg = src.schema_registry
    registry = None if reg is None else {
        "url": reg.url,
        "secret_dir": secret_dir_of(reg.secret_ref.name if reg.secret_ref is not None else None)}
    return {"value": src.value_format, "key": src.key_format, "registry": registry}


def sink_format(s: EffectiveSettings) -> dict | None:
    """WorkerConfig.sink_format: how the handler's outputs are encoded for a Kafka sink with a
    registry format (spec.sink.kafka.valueFormat), the subject of its schema and the registry."""
    kafka = s.sink.kafka if s.sink is not None else None
    if kafka is None or not needs_registry(kafka.value_format):
        return None
    reg = kafka.schema_registry
    registry = None if reg is None else {
        "url": reg.url,
        "secret_dir": secret_dir_of(reg.secret_ref.name if reg.secret_ref is not None else None)}
    return {"value": kafka.value_format, "subject": sink_subject(kafka.topic), "registry": registry}


def governance(s: EffectiveSettings) -> Governance | None:
    """WorkerConfig.governance: the policy's routes and age limits; None without any (the
    passes run as before)."""
    stale = s.validation.max_age if s.validation is not None else None
    if not s.routes and s.retries.max_age is None and stale is None:
        return None
    bound = retry_after_bound(s.retries)
    return Governance(
        routes=tuple(frozenset(r.errors) for r in s.routes or ()),
        max_age_ms=s.retries.max_age.ms if s.retries.max_age is not None else None,
        stale_ms=stale.ms if stale is not None else None,
        delays=tuple(d.ms for d in s.retries.cycle_delays),
        retry_bound_ms=bound.ms if bound is not None else None)


def worker_config(s: EffectiveSettings) -> WorkerConfig:
    sink_kafka = exactly_once = None
    if s.sink is not None and s.sink.kafka is not None:
        sink_kafka = {"bootstrap.servers": s.sink.kafka.bootstrap_servers, "topic": s.sink.kafka.topic,
                      "secret_dir": kafka_auth.sink_secret_dir(s)}  # read there by the executors
        if s.sink.kafka.delivery == "ExactlyOnce":
            exactly_once = ExactlyOnce(ledger_names(s).topic, transactional_id(s.namespace, s.consumer))
    return WorkerConfig(
        handler=s.handler, source_topic=s.source.topic, immediate=s.retries.immediate,
        cycles=s.retries.cycles, non_retryable=frozenset(s.retries.non_retryable),
        validation=s.validation.wire() if s.validation is not None else None,
        sink_kafka=sink_kafka, emit_outputs=s.sink is not None and s.sink.path is not None,
        fault_stops=s.disposition == "Fault", attempt_timeout=s.retries.attempt_timeout.seconds,
        max_held=s.max_held_per_key if s.ordering == "Key" else 0,
        delays=tuple(d.ms for d in s.retries.cycle_delays), owner=ledger_names(s).consumer_id,
        exactly_once=exactly_once, formats=formats(s), sink_format=sink_format(s),
        governance=governance(s))


def task_settle(s: EffectiveSettings, partitions: int, max_bytes: dict[str, int], live) -> TaskSettle | None:
    """WorkerConfig.settle: what the tasks of an exactly-once Kafka sink need to write their
    failures' records with their chunks (worker.task_settle), from the settings the driver's
    own settle uses (worker.outcome_records). None (every failure goes to the driver, as
    before): another sink, ordering Key (a key's chains are the driver's), or a breaker that
    is on but has no endpoint to ask (`live`: driver.live_breaker.LiveBreaker). Final
    failures stay the driver's when their records are reshaped (quarantine redaction, native
    headers)."""
    kafka = s.sink.kafka if s.sink is not None else None
    breaker = live.rule.enabled
    if kafka is None or kafka.delivery != "ExactlyOnce" or s.ordering == "Key" or (breaker and live.url is None):
        return None
    if not tunable(s.spark.conf, "spark.antidote.taskSettle"):
        return None
    derived = {*s.topics.retry, s.topics.poison, s.topics.dlq, *(r.topic for r in s.routes or () if r.topic)}
    return TaskSettle(
        retry_topics=tuple(s.topics.retry), delays_ms=tuple(d.ms for d in s.retries.cycle_delays),
        bound_ms=retry_bound_ms(s), partitions=partitions,
        max_bytes=tuple((t, n) for t, n in sorted(max_bytes.items()) if t in derived),
        consumer=ledger_names(s).consumer_id, policy=s.policy, ask=breaker,
        finals=(s.quarantine is None or s.quarantine.payload == KEEP) and not s.native_headers,
        disposition=s.disposition, poison_topic=s.topics.poison, dlq_topic=s.topics.dlq,
        routes=tuple((r.disposition, r.topic) for r in s.routes or ()))
