"""PoisonPolicy: how often a failing message is retried, what becomes of it after the last
attempt, when a whole queue is disabled instead, and how quarantined messages are read back."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import jsonschema
from pydantic import Field, StringConstraints, field_validator

from .base import ApiModel, Rule
from .conditions import Conditions
from .duration import Duration
from .redaction import HASH, PATH_PATTERN, REDACT, PayloadHandling, RedactMode, parse_path
from .wire import POISON_REASONS, READER_ACTIONS
from .types import (API_VERSION, ApiVersionField, ClassName, Cron, Disposition, FreeObject,
                    KindField, Metadata, NativeHeaderSet, Named, ObjectName, PoisonReason,
                    RouteDisposition, SetOf, TopicName, seed)

# The word a route lists (beside exception class names) for records `validation` refused.
VALIDATION_ERRORS = "validation"


class Retries(ApiModel):
    immediate: int = Field(
        5, ge=0, le=100,
        description="Re-attempts right after a failure, within the same batch.",
        json_schema_extra=seed("WCF ReceiveRetryCount; RabbitMQ delivery-limit"))
    cycles: int = Field(
        2, ge=0, le=20,
        description="Passes through retry topics after the immediate attempts are used up; "
                    "each cycle starts with `immediate + 1` fresh attempts. A message that always "
                    "fails is attempted exactly `(immediate + 1) x (cycles + 1)` times.",
        json_schema_extra=seed("WCF MaxRetryCycles; Spring Kafka retry topics"))
    cycle_delay: Duration = Field(
        Duration.parse("30m"),
        description="Wait before the first retry cycle (e.g. `30s`, `10m`, `1h30m`).",
        json_schema_extra=seed("WCF RetryCycleDelay; SQS visibility timeout"))
    backoff: float = Field(
        1.0, ge=1.0, le=100.0,
        description="Multiplier of the delay for each further cycle: cycle k waits "
                    "`cycleDelay x backoff^(k-1)`.",
        json_schema_extra=seed("Spring Kafka BackOff multiplier; NATS JetStream BackOff"))
    max_cycle_delay: Duration | None = Field(
        None,
        description="Upper bound of a cycle's delay once backoff has grown it, and of the delay a "
                    "handler asks for with `raise antidote.Retry(after=...)` (without it, that "
                    "delay is capped at the longest cycle delay). Default: unbounded.",
        json_schema_extra=seed("Spring Kafka maxDelay"))
    non_retryable: SetOf(ClassName) = Field(  # type: ignore[valid-type]  # SetOf builds an Annotated list
        default_factory=list,
        description="Exception class names (`ValueError`, `json.JSONDecodeError`) that skip all "
                    "retries: the message gets its disposition at once, reason `non-retryable`. A "
                    "handler can decide the same for one message with `raise "
                    "antidote.NonRetryable(why)`.",
        json_schema_extra=seed("Spring Kafka notRetryOn / addNotRetryableExceptions"))
    attempt_timeout: Duration = Field(
        Duration.parse("60s"),
        description="Longest one handler call may run. An attempt past it fails with error class "
                    "`antidote.AttemptTimeout` and counts like any failure; a handler that does not "
                    "unwind gets its Python worker killed and replaced. The default, 1m, is "
                    "long for one call to a downstream service and short enough that a stopping "
                    "driver cuts a hung batch well within its pod's grace period.",
        json_schema_extra=seed("SQS visibility timeout; Lambda function timeout"))
    max_age: Duration | None = Field(
        None,
        description="Oldest a failing message may be when its next retry cycle would start, "
                    "counted from its record's Kafka timestamp (CreateTime, or the broker's "
                    "LogAppendTime when the source topic is set so) to that cycle's due time: an "
                    "older one gets its disposition at once, reason `expired`, instead of another "
                    "cycle. A timestamp in the future (a producer's clock ahead) counts as age 0. "
                    "Default: no limit.",
        json_schema_extra=seed("Spring Kafka retry topics' timeout; Lambda MaximumRecordAgeInSeconds"))

    rules = (
        Rule("!has(self.maxAge) || duration(self.maxAge) > duration('0s')",
             "must be longer than 0s", lambda r: r.max_age is None or r.max_age.ms > 0, field="maxAge"),
        Rule("!has(self.attemptTimeout) || duration(self.attemptTimeout) >= duration('100ms')",
             "must be at least 100ms", lambda r: r.attempt_timeout.ms >= 100, field="attemptTimeout"),
        Rule("!has(self.maxCycleDelay) || duration(self.maxCycleDelay) >= duration(self.cycleDelay)",
             "must not be shorter than cycleDelay",
             lambda r: r.max_cycle_delay is None or r.max_cycle_delay >= r.cycle_delay,
             field="maxCycleDelay"),
    )


class Validation(ApiModel):
    max_bytes: int | None = Field(
        None, ge=1,
        description="Largest accepted message value, in bytes. Default: no limit.")
    format: Literal["bytes", "utf8", "json"] = Field(
        "bytes",
        description="What the value must be: `bytes` (anything), `utf8` (text) or `json` (a JSON "
                    "document). With `utf8` and `json` a null value (a tombstone) is invalid.")
    json_schema: FreeObject | None = Field(
        None,
        description="JSON Schema (draft 2020-12 unless `$schema` says otherwise) the decoded value "
                    "must match; needs `format: json`.")
    max_age: Duration | None = Field(
        None,
        description="Oldest a record may be when it is first read from the source topic, from its "
                    "Kafka timestamp (CreateTime, or LogAppendTime when the topic is set so): an "
                    "older one is refused at once like invalid content (reason `validation`, no "
                    "handler call; the error message names `validation.maxAge`). A timestamp in "
                    "the future counts as age 0. Default: no limit.",
        json_schema_extra=seed("Lambda MaximumRecordAgeInSeconds; Service Bus TimeToLive"))

    rules = (
        Rule("!has(self.maxAge) || duration(self.maxAge) > duration('0s')",
             "must be longer than 0s", lambda v: v.max_age is None or v.max_age.ms > 0, field="maxAge"),
        Rule("!has(self.jsonSchema) || (has(self.format) && self.format == 'json')",
             "needs format: json",
             lambda v: v.json_schema is None or v.format == "json", field="jsonSchema"),
    )

    @field_validator("json_schema")
    @classmethod
    def _is_a_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # The API server cannot check this; the operator reports it on the policy.
        if value is not None:
            try:
                jsonschema.validators.validator_for(value).check_schema(value)
            except jsonschema.SchemaError as err:
                raise ValueError(f"not a valid JSON Schema: {err.message}") from None
        return value


class Topics(ApiModel):
    retry: list[TopicName] | None = Field(
        None, max_length=20,
        description="One topic per retry cycle, in order. Default: `<source>.retry-1` ... "
                    "`<source>.retry-<cycles>`.",
        json_schema_extra=seed("Spring Kafka retry topic suffixes; Uber retry queues"))
    poison: TopicName | None = Field(
        None, description="Where `Move` sends a message. Default: `<source>.poison`.",
        json_schema_extra=seed("WCF poison subqueue"))
    dlq: TopicName | None = Field(
        None, description="Where `Reject` sends a message. Default: `<source>.dlq`.",
        json_schema_extra=seed("Kafka Connect errors.deadletterqueue.topic.name; SQS deadLetterTargetArn"))


class Route(ApiModel):
    errors: SetOf(ClassName) = Field(  # type: ignore[valid-type]  # SetOf builds an Annotated list
        min_length=1,
        description="What the route takes: exception classes by their fully qualified name, as "
                    "the `antidote.error.class` header writes them (`payments.CardDeclined`, "
                    "`ValueError`), subclasses included; and the word `validation` for records "
                    "the policy's `validation` (or a format's decoding) refused.",
        json_schema_extra=seed("Spring Kafka DLT routing by exception (dltRoutingRules)"))
    disposition: RouteDisposition = Field(
        description="What becomes of a message the route takes, after its last attempt: `Move`, "
                    "`Reject` or `Drop` (`Fault` is the policy's own disposition only).")
    topic: TopicName | None = Field(
        None,
        description="Where the route writes (`Move`, `Reject`). Default: the policy's poison "
                    "topic for `Move`, its dead-letter topic for `Reject`. Created like the "
                    "derived topics; it may not be the source, the sink or a retry topic.")

    rules = (
        Rule("!has(self.topic) || self.disposition != 'Drop'",
             "a Drop route writes no record: leave topic out",
             lambda r: r.topic is None or r.disposition != "Drop", field="topic"),
    )


class FailureRatio(ApiModel):
    threshold: float = Field(
        0.5, gt=0.0, le=1.0,
        description="Fraction of failed messages in the window, in (0, 1], above which the "
                    "fault is taken as systemic (a downstream outage): pause, do not quarantine. "
                    "Messages refused by `validation` and those a handler declared "
                    "`antidote.NonRetryable` are not counted as failed; messages held behind "
                    "their key's failure (`ordering: Key`) are not counted at all.")
    window: Duration = Field(Duration.parse("5m"), description="Sliding window the ratio is computed over.")
    min_messages: int = Field(
        100, ge=1, description="Messages the window must hold before the ratio counts.")


class AutoResume(ApiModel):
    after: Duration = Field(description="How long a disabled consumer stays paused before it is probed.")
    probe_messages: int = Field(
        10, ge=1, le=100000,
        description="Messages processed in the half-open probe; if they fail, the consumer is "
                    "disabled again.",
        json_schema_extra=seed("circuit breaker half-open state"))

    rules = (
        Rule("duration(self.after) > duration('0s')", "must be longer than 0s",
             lambda a: a.after.ms > 0, field="after"),
    )


class QueueDisable(ApiModel):
    enabled: bool = Field(True, description="Whether the consumer is ever disabled automatically.")
    consecutive_batch_failures: int = Field(
        5, ge=1, le=1000,
        description="Whole-batch failures (rollbacks) in a row before the consumer is disabled.",
        json_schema_extra=seed("Service Broker: 5 rollbacks set the queue OFF"))
    failure_ratio: FailureRatio = Field(
        default_factory=FailureRatio,
        description="When most messages fail, pause the consumer instead of quarantining everything.",
        json_schema_extra=seed("Service Broker: a failure count is not always reliable"))
    auto_resume: AutoResume | None = Field(
        None,
        description="Resume a disabled consumer by itself, with a small probe first. "
                    "Default: off (resume with `antidote resume`).",
        json_schema_extra=seed("circuit breaker; KEDA pause annotations"))

    rules = (
        Rule("!has(self.autoResume) || !has(self.enabled) || self.enabled",
             "needs queueDisable.enabled: true (nothing is disabled, so nothing resumes)",
             lambda q: q.enabled or q.auto_resume is None, field="autoResume"),
    )


class Payload(ApiModel):
    redact: bool = Field(
        True,
        description="Keep message payloads out of logs, Events and status. Quarantined records "
                    "keep key and value byte-identical unless `quarantine.payload` says otherwise.")


RedactPath = Annotated[str, StringConstraints(pattern=PATH_PATTERN, min_length=2, max_length=256),
                      Named("field path")]


class RedactField(ApiModel):
    path: RedactPath = Field(
        description="The field, as a JSON path from the record's root: `$.card.number`, "
                    "`$['first name']`, `$.lines[0].iban`, `$.lines[*].iban`, `$.tags.*`. For "
                    "`Json` (and `Bytes`) values, a path into the JSON document; for `Avro`, "
                    "`Protobuf` and `JsonSchema` values, into the record decoded with its schema.")
    mode: RedactMode | None = Field(
        None, description="`Mask` or `Hash` for this field. Default: `quarantine.mode`.")

    @field_validator("path")
    @classmethod
    def _parses(cls, value: str) -> str:
        parse_path(value)  # the pattern admits only what parses; this names what is wrong
        return value


class SecretKeyRef(ApiModel):
    name: ObjectName = Field(description="A Secret in the consumer's namespace.")
    key: str = Field("key", min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$",
                     description="The key of the Secret that holds the HMAC key.")


class Quarantine(ApiModel):
    payload: PayloadHandling = Field(
        "Keep",
        description="What the records written to the poison and dead-letter topics carry of "
                    "the message's value: `Keep` (byte-identical), `Drop` (no value; key and "
                    "headers kept) or `Redact` (the fields listed in `redact` masked or hashed, "
                    "the rest intact, re-encoded with the same schema id). Retry records always "
                    "keep the value (it is processed again). A redacted or dropped record cannot "
                    "be redriven. Default: `Keep`.",
        json_schema_extra=seed("Kafka Connect ReplaceField / MaskField SMTs"))
    redact: list[RedactField] | None = Field(
        None, max_length=64,
        description="The fields `Redact` hides; required with it. A listed field a record lacks "
                    "is skipped.")
    mode: RedactMode = Field(
        "Mask",
        description="How a listed field is hidden unless it says otherwise: `Mask` (replaced by "
                    "`[redacted]`, or its type's zero) or `Hash` (its HMAC-SHA256 under "
                    "`hashKeyRef`'s key, so equal values stay equal without being readable).")
    hash_key_ref: SecretKeyRef | None = Field(
        None,
        description="The Secret key that holds the HMAC key of `Hash`; required when a field is "
                    "hashed. A plain SHA-256 of a card number or an email is reversed by trying "
                    "every candidate, so only a keyed hash is offered.")

    rules = (
        Rule("!has(self.payload) || self.payload != 'Redact' || (has(self.redact) && size(self.redact) > 0)",
             "is required when payload is Redact: the field paths to mask or hash",
             lambda q: q.payload != REDACT or bool(q.redact), field="redact"),
        Rule("!has(self.redact) || size(self.redact) == 0 || (has(self.payload) && self.payload == 'Redact')",
             "needs payload: Redact", lambda q: not q.redact or q.payload == REDACT, field="redact"),
        Rule("has(self.hashKeyRef) || !((has(self.mode) && self.mode == 'Hash') || "
             "(has(self.redact) && self.redact.exists(r, (has(r.mode) && r.mode == 'Hash') || "
             "(!has(r.mode) && has(self.mode) && self.mode == 'Hash'))))",
             "is required when a field is hashed (mode: Hash): the Secret key of the HMAC key",
             lambda q: q.hash_key_ref is not None or not (
                 q.mode == HASH or any(f.mode == HASH for f in q.redact or ())),
             field="hashKeyRef"),
    )


class ReaderTrigger(ApiModel):
    poison_depth: int | None = Field(
        None, ge=1,
        description="Start a reader job when the poison topic holds at least this many messages.")
    schedule: Cron | None = Field(
        None, description="Start a reader job on this cron schedule (5 fields or `@hourly`...), UTC.",
        json_schema_extra=seed("SQS redrive tasks; Kubernetes CronJob"))


class ReaderFilter(ApiModel):
    error_classes: SetOf(ClassName) | None = Field(  # type: ignore[valid-type]  # SetOf builds an Annotated list
        None, description="Only messages whose `antidote.error.class` header is one of these.")
    reasons: SetOf(PoisonReason, max_items=len(POISON_REASONS)) | None = Field(  # type: ignore[valid-type]  # SetOf builds an Annotated list
        None, description="Only messages quarantined for one of these reasons.")
    since: datetime | None = Field(None, description="Only messages quarantined at or after this time.")
    until: datetime | None = Field(None, description="Only messages quarantined before this time.")

    rules = (
        Rule("!has(self.since) || !has(self.until) || timestamp(self.since) < timestamp(self.until)",
             "must be later than since",
             lambda f: f.since is None or f.until is None or f.since < f.until, field="until"),
    )


class Archive(ApiModel):
    path: str = Field(
        min_length=1, max_length=1024,
        description="Directory the archive is written to (`s3a://`, `hdfs://`, `file://` or a mounted path).")
    format: Literal["parquet", "json"] = Field("parquet", description="File format of the archive.")


class ReaderRetries(ApiModel):
    immediate: int = Field(
        3, ge=0, le=100, description="Re-attempts of the reader's action on one message.",
        json_schema_extra=seed("WCF ReceiveRetryCount on the poison queue"))


class Reader(ApiModel):
    trigger: ReaderTrigger = Field(
        default_factory=ReaderTrigger,
        description="When reader jobs start by themselves. Manual runs (`antidote redrive`) are "
                    "always possible; with no trigger set they are the only runs.")
    action: Literal[READER_ACTIONS] = Field(  # type: ignore[valid-type]
        "Hold",
        description="What a reader job does with each poison message: `Redrive` (back to the "
                    "source topic), `Archive` (to files, then remove), `Drop` (discard, counted), "
                    "`Hold` (leave it; count and report only).",
        json_schema_extra=seed("WCF poison-queue service; SQS StartMessageMoveTask"))
    rate_limit: int | None = Field(
        None, ge=1, description="Messages per second a reader job handles at most. Default: unlimited.",
        json_schema_extra=seed("SQS MaxNumberOfMessagesPerSecond"))
    max_redrives: int = Field(
        3, ge=1, le=100,
        description="Times one message may be redriven; after that a Redrive sends it to the "
                    "parking topic `<source>.parking` instead (loop guard).",
        json_schema_extra=seed("SQS maxReceiveCount"))
    filter: ReaderFilter | None = Field(
        None, description="Which poison messages a job touches. Default: all.")
    archive: Archive | None = Field(None, description="Where `Archive` writes; required for that action.")
    retries: ReaderRetries = Field(default_factory=ReaderRetries,
                                   description="Retries of the reader's own action.")
    disposition: Disposition = Field(
        "Reject",
        description="What becomes of a message the reader cannot handle: `Reject`, `Drop` or "
                    "`Fault`. Never `Move`: the poison topic does not quarantine into itself.",
        json_schema_extra=seed("WCF: ReceiveErrorHandling Move is refused on the poison subqueue"))

    rules = (
        Rule("!has(self.disposition) || self.disposition != 'Move'",
             "Move is refused on the poison queue; use Reject, Drop or Fault",
             lambda r: r.disposition != "Move", field="disposition"),
        Rule("!has(self.action) || self.action != 'Archive' || has(self.archive)",
             "is required when action is Archive",
             lambda r: r.action != "Archive" or r.archive is not None, field="archive"),
    )


class PoisonPolicySpec(ApiModel):
    retries: Retries = Field(default_factory=Retries, description="How a failing message is retried.")
    validation: Validation | None = Field(
        None,
        description="Fast-fail content checks: an invalid message gets its disposition at once, "
                    "reason `validation`, no retries. Default: none.",
        json_schema_extra=seed("Service Broker: check the content before counting failures"))
    disposition: Disposition = Field(
        "Move",
        description="After the last attempt: `Move` (to the poison topic), `Reject` (to the "
                    "dead-letter topic), `Drop` (discard, counted) or `Fault` (stop the consumer "
                    "at the message, which stays unconsumed).",
        json_schema_extra=seed("WCF ReceiveErrorHandling (Move, Reject, Drop, Fault)"))
    topics: Topics | None = Field(None, description="Overrides of the derived topic names.")
    queue_disable: QueueDisable = Field(
        default_factory=QueueDisable,
        description="When the whole consumer is disabled (paused) instead of quarantining.",
        json_schema_extra=seed("Service Broker poison-message detection; BROKER_QUEUE_DISABLED"))
    payload: Payload = Field(default_factory=Payload, description="Payload handling.")
    quarantine: Quarantine | None = Field(
        None,
        description="What records written to the poison and dead-letter topics keep of the "
                    "message's value (`payload: Keep | Drop | Redact`). Default: all of it.",
        json_schema_extra=seed("GDPR data minimisation; Kafka Connect MaskField"))
    native_headers: SetOf(NativeHeaderSet, max_items=2) = Field(  # type: ignore[valid-type]  # SetOf builds an Annotated list
        default_factory=list,
        description="Kafka-native error header sets to write as well on quarantined records (the "
                    "poison and dead-letter topics), with the same facts as the `antidote.*` "
                    "headers, so Kafka's own dead-letter tooling reads them: `Connect` (Kafka "
                    "Connect's `__connect.errors.*`), `ShareGroup` (the share-group dead-letter "
                    "queue's `__dlq.errors.*`, KIP-1191, Kafka 4.4). Default: none.",
        json_schema_extra=seed("Kafka Connect errors.deadletterqueue.context.headers.enable; KIP-1191"))
    reader: Reader = Field(default_factory=Reader, description="Poison-queue reader jobs.",
                           json_schema_extra=seed("WCF poison-message service; SQS redrive"))
    routes: list[Route] | None = Field(
        None, max_length=16,
        description="Dispositions by error: a message whose final failure a route lists gets the "
                    "route's disposition and topic instead of the policy's; the first route that "
                    "matches wins, and a message no route matches gets `disposition`. Retries are "
                    "the same whatever the route. Default: none.",
        json_schema_extra=seed("Spring Kafka DLT routing by exception"))

    rules = (
        Rule("!has(self.topics) || !has(self.topics.retry) || size(self.topics.retry) == self.retries.cycles",
             "must name exactly one topic per retry cycle (retries.cycles)",
             lambda s: s.topics is None or s.topics.retry is None or len(s.topics.retry) == s.retries.cycles,
             field="topics.retry"),
    )


class PoisonPolicyStatus(ApiModel):
    observed_generation: int | None = Field(None, ge=0, description="Generation the operator last acted on.")
    max_attempts: int | None = Field(
        None, ge=1, description="`(immediate + 1) x (cycles + 1)`: attempts before the disposition.")
    conditions: Conditions | None = Field(None, description="Ready when the policy is valid and in use.")


class PoisonPolicy(ApiModel):
    """A whole PoisonPolicy manifest."""

    api_version: ApiVersionField = Field(API_VERSION, description="`antidote.dev/v1alpha1`.")
    kind: KindField[Literal["PoisonPolicy"]] = Field("PoisonPolicy", description="`PoisonPolicy`.")
    metadata: Metadata = Field(default_factory=dict, description="Standard object metadata.")
    spec: PoisonPolicySpec = Field(
        default_factory=PoisonPolicySpec,
        description="The policy; every field has a default, so an empty spec is the design's policy.")
    status: PoisonPolicyStatus | None = Field(None, description="Written by the operator.")
