"""QueueConsumer: one Kafka topic consumed by one Python handler on Spark, under a PoisonPolicy."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from . import autoscale as autoscaling, spark_conf
from .autoscale import Autoscale, ExecutorScale
from .base import ApiModel, Rule
from .conditions import Conditions
from .formats import REGISTRY_FORMATS, PayloadFormat, SinkFormat, needs_registry
from .handler_env import ConfigMapVolumeSource, EnvFromSource, EnvVar, SecretVolumeSource
from .placement import Annotations, Placement, annotations_rule
from .wire import OPERATOR_MOUNT_ROOTS
from .types import (API_VERSION, ApiVersionField, Bootstrap, Disposition, Handler, Int64, KindField,
                    Memory, Metadata, ObjectName, PoisonReason, StringMap, TopicName, seed)


class LocalObjectReference(ApiModel):
    name: ObjectName = Field(description="Name of the object, in the consumer's namespace.")


class SchemaRegistry(ApiModel):
    url: str = Field(
        min_length=1, max_length=1024, pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="Root of the registry's Confluent-compatible REST API (`https://` for TLS, "
                    "verified against the system's CAs), e.g. `https://registry:8081` or "
                    "Apicurio's `http://apicurio:8080/apis/ccompat/v6`.")
    secret_ref: LocalObjectReference | None = Field(
        None,
        description="Secret with the registry's credentials: `username` and `password` (HTTP "
                    "basic auth) or `token` (a bearer token). Default: none.")


_FORMAT = ("How the source's {what} are decoded before the handler sees them: `Bytes` (the "
           "default: as they are), `Json`, or in the Confluent wire format with their schema "
           "from `schemaRegistry`: `Avro`, `Protobuf`, `JsonSchema`. A {one} that cannot be "
           "decoded is invalid: reason `validation`, error class `antidote.DeserializationError`, "
           "no handler call (docs/consumer.md).")
_REGISTRY_FORMATS_CEL = "[" + ", ".join(f"'{f}'" for f in REGISTRY_FORMATS) + "]"


def _registry_rule(field: str) -> Rule:
    attr = re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), field)  # the model's name of it

    def check(s: Any) -> bool:
        return not needs_registry(getattr(s, attr)) or s.schema_registry is not None

    return Rule(f"!has(self.{field}) || !(self.{field} in {_REGISTRY_FORMATS_CEL}) || has(self.schemaRegistry)",
                f"{', '.join(REGISTRY_FORMATS)} need spec.source.kafka.schemaRegistry (where "
                f"their schemas are)", check, field=field)


class KafkaSource(ApiModel):
    bootstrap_servers: Bootstrap = Field(
        description="Comma-separated `host:port` list of Kafka brokers.")
    topic: TopicName = Field(description="Topic to consume; also the stem of the derived retry, "
                                         "poison and dead-letter topic names.")
    starting_offsets: Literal["earliest", "latest"] = Field(
        "earliest",
        description="Where a consumer without a checkpoint starts; afterwards the checkpoint decides.")
    max_messages_per_batch: int = Field(
        1000, ge=1, le=10_000_000,
        description="Most messages in one micro-batch (Spark `maxOffsetsPerTrigger`). Smaller "
                    "batches make a whole-batch failure cheaper to isolate.")
    secret_ref: LocalObjectReference | None = Field(
        None,
        description="Secret whose keys are Kafka client properties (`security.protocol`, "
                    "`sasl.mechanism`, `sasl.jaas.config`, ...), for credentials.")
    # None when unset (= Bytes), so the settings of consumers that do not set them stay what
    # they were (the operator's settings hash).
    value_format: PayloadFormat | None = Field(None, description=_FORMAT.format(what="values", one="value"))
    key_format: PayloadFormat | None = Field(None, description=_FORMAT.format(what="keys", one="key"))
    schema_registry: SchemaRegistry | None = Field(
        None, description="The Schema Registry that the `Avro`, `Protobuf` and `JsonSchema` "
                          "formats take their schemas from, by the id each record carries.")

    rules = (_registry_rule("valueFormat"), _registry_rule("keyFormat"))


class Source(ApiModel):
    kafka: KafkaSource = Field(description="The Kafka topic to consume.")


class KafkaSink(ApiModel):
    topic: TopicName = Field(description="Topic the handler's outputs are written to.")
    bootstrap_servers: Bootstrap | None = Field(
        None, description="Brokers of the sink. Default: the source's.")
    secret_ref: LocalObjectReference | None = Field(
        None, description="Credentials for the sink's brokers. Default: the source's, when "
                          "bootstrapServers is not set either.")
    delivery: Literal["ExactlyOnce", "AtLeastOnce"] = Field(
        "ExactlyOnce",
        description="`ExactlyOnce`: each output is committed once, in Kafka transactions with the "
                    "ledger (read the sink with `isolation.level=read_committed`); needs the sink "
                    "on the source's brokers. `AtLeastOnce`: outputs are written as they are made, "
                    "and a batch replayed after a crash writes its outputs again. See "
                    "docs/consumer.md, \"Exactly-once to a Kafka sink\".",
        json_schema_extra=seed("Kafka Streams processing.guarantee; Flink KafkaSink DeliveryGuarantee"))
    # None when unset (= Bytes), as the source's formats: the settings document stays the same.
    value_format: SinkFormat | None = Field(
        None,
        description="How the handler's return values are written: `Bytes` (the default: bytes, "
                    "str, or a dict/list as JSON, as returned), or in the Confluent wire format, "
                    "encoded with the latest schema of the subject `<topic>-value` in the schema "
                    "registry: `Avro`, `Protobuf`, `JsonSchema` (the handler returns a dict, or "
                    "for Protobuf a dict or the message). A value the schema refuses fails its "
                    "message: reason `non-retryable`, error class `antidote.SerializationError` "
                    "(docs/consumer.md).",
        json_schema_extra=seed("Confluent KafkaAvroSerializer; Kafka Connect value.converter"))
    schema_registry: SchemaRegistry | None = Field(
        None, description="The Schema Registry the sink's schema is taken from. Default: "
                          "spec.source.kafka.schemaRegistry.")

    rules = (
        Rule("!has(self.bootstrapServers) || (has(self.delivery) && self.delivery == 'AtLeastOnce')",
             "must be AtLeastOnce with the sink's own bootstrapServers: a transaction cannot span "
             "the sink's brokers and the source's, where the ledger is (omit bootstrapServers to "
             "write to the source's brokers exactly once)",
             lambda k: k.bootstrap_servers is None or k.delivery == "AtLeastOnce", field="delivery"),
    )


class Sink(ApiModel):
    kafka: KafkaSink | None = Field(None, description="Write outputs to a Kafka topic.")
    path: str | None = Field(
        None, min_length=1, max_length=1024,
        description="Write outputs as files under this directory (`s3a://`, `hdfs://`, a mounted path).")
    format: Literal["parquet", "json", "csv"] | None = Field(
        None, description="File format with `path`. Default: `parquet`.")

    rules = (
        Rule("has(self.kafka) != has(self.path)", "needs exactly one of kafka or path",
             lambda s: (s.kafka is None) != (s.path is None)),
        Rule("!has(self.format) || has(self.path)", "applies only to a path sink",
             lambda s: s.format is None or s.path is not None, field="format"),
    )


_SA_ANNOTATIONS = ("Annotations of {whose} ServiceAccount, for cloud identity: IRSA's "
                   "`eks.amazonaws.com/role-arn`, GKE's `iam.gke.io/gcp-service-account`. Keys "
                   "under `antidote.dev/` are the operator's own and refused.")
_OVERRIDES = (" Each placement field (nodeSelector, tolerations, affinity, priorityClassName) "
              "set here replaces spec.spark's for the {who}.")


class SparkDriver(Placement):
    cores: int = Field(1, ge=1, le=64, description="CPU cores of the driver.")
    memory: Memory = Field("1g", description="Driver memory, Spark notation (`512m`, `2g`).")
    service_account_annotations: Annotations | None = Field(
        None, description=_SA_ANNOTATIONS.format(whose="the driver's") + _OVERRIDES.format(who="driver pod"))

    rules = (annotations_rule("serviceAccountAnnotations"),)


class SparkExecutor(Placement):
    instances: int = Field(1, ge=1, le=1000, description="Number of executor pods.")
    cores: int = Field(1, ge=1, le=64, description="CPU cores per executor.")
    memory: Memory = Field("1g", description="Memory per executor, Spark notation (`512m`, `2g`).")
    service_account_annotations: Annotations | None = Field(
        None, description=_SA_ANNOTATIONS.format(whose="the executors'") + " Executors mount no API "
                          "token whatever the annotations." + _OVERRIDES.format(who="executor pods"))

    rules = (annotations_rule("serviceAccountAnnotations"),)


class Spark(Placement):
    image: str | None = Field(
        None, min_length=1, max_length=512,
        description="Container image of driver and executors. Default: the operator's consumer image.",
        json_schema_extra=seed("spark-operator SparkApplication.spec.image"))
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        None, max_length=16,
        description="Secrets (docker-registry, same namespace) to pull `image` with: driver, "
                    "executors and reader Jobs. The placement fields below apply to the driver, "
                    "its reader Jobs and the executors; spec.spark.driver and .executor override them.",
        json_schema_extra=seed("PodSpec.imagePullSecrets"))
    driver: SparkDriver = Field(default_factory=SparkDriver, description="The driver (runs `antidote consumer`).")
    executor: SparkExecutor = Field(default_factory=SparkExecutor, description="The executors.")
    autoscale: Autoscale | None = Field(
        None,
        description="Scale the executors by source lag between `min` and `max`, leaving out "
                    "partitions that are blocked (a batch that keeps failing, a Fault, a partition "
                    "that stopped moving); replaces `executor.instances`. See docs/operator.md.",
        json_schema_extra=seed("KEDA Kafka scaler lagThreshold, excludePersistentLag, "
                               "limitToPartitionsWithLag"))
    conf: StringMap | None = Field(
        None, description="Extra Spark configuration; keys start with `spark.`. Keys the operator "
                          "owns (master, namespace, ServiceAccounts, pod templates, mounts, driver "
                          "host, `spark.authenticate*`) are refused: see \"Spark configuration the "
                          "operator owns\" below. `spark.antidote.*` keys tune the consumer: see "
                          "\"Antidote's settings in spark.conf\" below.",
        json_schema_extra=seed("spark-operator sparkConf"))

    rules = (
        Rule("!has(self.conf) || self.conf.all(k, k.startsWith('spark.'))",
             "keys must start with spark.",
             lambda s: s.conf is None or all(k.startswith("spark.") for k in s.conf), field="conf"),
        Rule(spark_conf.RULE_CEL, spark_conf.MESSAGE,
             lambda s: not spark_conf.owned_keys(s.conf), field="conf",
             message_cel=spark_conf.MESSAGE_CEL, describe=lambda s: spark_conf.describe(s.conf)),
        Rule(autoscaling.CONFLICT_CEL, autoscaling.CONFLICT_MESSAGE, lambda s: not autoscaling.conflicts(s),
             field="conf"),
        Rule(spark_conf.TUNABLE_CEL, spark_conf.TUNABLE_MESSAGE,
             lambda s: not spark_conf.bad_tunables(s.conf), field="conf",
             describe=lambda s: spark_conf.describe_tunables(s.conf)),
    )


class Checkpoint(ApiModel):
    location: str = Field(
        min_length=1, max_length=1024,
        description="Where Spark keeps offsets and Antidote its attempt counts, so both survive "
                    "restarts: a shared filesystem URI (`s3a://`, `hdfs://`) or a directory on a claim in "
                    "`volumes`.")


# A mounted directory: absolute, no segment starting with "." (so no `..`), no trailing "/".
MOUNT_PATH_PATTERN = r"^(/[A-Za-z0-9_-][A-Za-z0-9._-]*)+$"
_ROOTS_CEL = "[" + ", ".join(f"'{r}'" for r in OPERATOR_MOUNT_ROOTS) + "]"


def _under_operator_mount(path: str) -> bool:
    return any(path == r or path.startswith(r + "/") for r in OPERATOR_MOUNT_ROOTS)


class Volume(ApiModel):
    # 57: the pods name it `claim-<name>` (or `user-<name>`), a DNS label of at most 63.
    name: str = Field(min_length=1, max_length=57, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                      description="Name of the volume (lowercase letters, digits and `-`).")
    claim_name: ObjectName | None = Field(
        None,
        description="A PersistentVolumeClaim (same namespace) to mount in the driver and reader "
                    "Job pods. Created by you; the operator never creates, owns or deletes claims.")
    secret: SecretVolumeSource | None = Field(
        None, description="A Secret (same namespace) to mount where the handler runs: the driver "
                          "and every executor. Always read-only.")
    config_map: ConfigMapVolumeSource | None = Field(
        None, description="A ConfigMap (same namespace) to mount where the handler runs: the "
                          "driver and every executor. Always read-only.")
    mount_path: str = Field(
        max_length=1024, pattern=MOUNT_PATH_PATTERN,
        description="Absolute directory it is mounted at, e.g. `/var/lib/antidote`; not under "
                    f"{', '.join(f'`{r}`' for r in OPERATOR_MOUNT_ROOTS)} (the operator's mounts).")
    read_only: bool = Field(False, description="Mount it read-only.")

    rules = (
        Rule(f"!{_ROOTS_CEL}.exists(r, self.mountPath == r || self.mountPath.startsWith(r + '/'))",
             "must not be at or under " + " or ".join(OPERATOR_MOUNT_ROOTS) + " (the operator's mounts)",
             lambda v: not _under_operator_mount(v.mount_path), field="mountPath"),
        # On claimName, where a spec written before secret and configMap existed missed it.
        Rule("[has(self.claimName), has(self.secret), has(self.configMap)].filter(x, x).size() == 1",
             "needs exactly one of claimName, secret or configMap",
             lambda v: [v.claim_name, v.secret, v.config_map].count(None) == 2, field="claimName"),
    )

    @property
    def handler_side(self) -> bool:
        """Mounted where the handler runs (driver and executors) rather than where the
        driver and reader keep state (driver and reader Jobs)."""
        return self.claim_name is None


ClaimVolume = Volume  # its name before Secret and ConfigMap volumes


def _sink_has_registry(spec: Any) -> bool:
    kafka = spec.sink.kafka if spec.sink is not None else None
    return (kafka is None or not needs_registry(kafka.value_format) or kafka.schema_registry is not None
            or spec.source.kafka.schema_registry is not None)


class QueueConsumerSpec(ApiModel):
    policy_ref: LocalObjectReference = Field(description="The PoisonPolicy (same namespace) that applies.")
    paused: bool = Field(
        False,
        description="Stop consuming (driver scaled to 0) until set back to false.",
        json_schema_extra=seed("Service Broker ALTER QUEUE STATUS = OFF; KEDA paused annotation"))
    source: Source = Field(description="Where messages come from.")
    handler: Handler = Field(
        description="The function called per message, as `package.module:function`. Raising "
                    "means the message failed.")
    sink: Sink | None = Field(
        None, description="Where the handler's return values go. Default: discarded (the handler "
                          "has side effects only).")
    spark: Spark = Field(default_factory=Spark, description="Spark resources and configuration.")
    checkpoint: Checkpoint = Field(description="Durable state of the stream.")
    ordering: Literal["None", "Key"] = Field(
        "None",
        description="`Key`: a key's messages are processed in source order through retries: while "
                    "one is in a retry cycle, the key's later messages are held behind it and run "
                    "in order once it has its outcome (processed or its disposition). Other keys "
                    "are not held; null keys are never ordered. `None`: no holding.",
        json_schema_extra=seed("Service Bus sessions; a Kafka partition's order"))
    max_held_per_key: int = Field(
        1000, ge=1, le=100_000,
        description="With ordering Key, the most messages held behind one key. One more is moved "
                    "to the poison topic with reason `held-overflow` (whatever the disposition: "
                    "it is never dropped, and can be redriven); the partition's other keys go on.")
    volumes: list[Volume] | None = Field(
        None, max_length=16,
        description="PersistentVolumeClaims mounted in the driver pod and in reader Job pods "
                    "(not in executors, which run the handler): where `checkpoint.location` and a "
                    "reader's `archive.path` can be a directory that outlives the pod; and Secrets "
                    "and ConfigMaps mounted where the handler runs (the driver and every executor). "
                    "See docs/consumer.md, \"Volumes\" and \"The handler's environment\".",
        json_schema_extra=seed("spark-operator spec.volumes + driver.volumeMounts"))
    env: list[EnvVar] | None = Field(
        None, max_length=64,
        description="Environment variables of the handler, in the driver and every executor (and "
                    "the dev runner's processes). Secrets and ConfigMaps of the consumer's namespace "
                    "only. See docs/consumer.md, \"The handler's environment\".",
        json_schema_extra=seed("PodSpec containers[].env"))
    env_from: list[EnvFromSource] | None = Field(
        None, max_length=16,
        description="Every key of a Secret or ConfigMap (same namespace) as an environment "
                    "variable of the handler, as `env`. A key that is a reserved name is overridden "
                    "by the operator's own variable.",
        json_schema_extra=seed("PodSpec containers[].envFrom"))

    rules = (
        Rule(f"!has(self.sink) || !has(self.sink.kafka) || !has(self.sink.kafka.valueFormat) || "
             f"!(self.sink.kafka.valueFormat in {_REGISTRY_FORMATS_CEL}) || "
             f"has(self.sink.kafka.schemaRegistry) || has(self.source.kafka.schemaRegistry)",
             f"{', '.join(REGISTRY_FORMATS)} need a schema registry (where the sink's schema is): "
             "spec.sink.kafka.schemaRegistry, or spec.source.kafka.schemaRegistry",
             _sink_has_registry, field="sink.kafka.valueFormat"),
        Rule("!has(self.volumes) || self.volumes.all(a, self.volumes.exists_one(b, b.name == a.name))",
             "names must be unique",
             lambda s: s.volumes is None or len({v.name for v in s.volumes}) == len(s.volumes),
             field="volumes"),
        Rule("!has(self.volumes) || self.volumes.all(a, self.volumes.exists_one(b, b.mountPath == a.mountPath))",
             "mountPaths must be unique",
             lambda s: s.volumes is None or len({v.mount_path for v in s.volumes}) == len(s.volumes),
             field="volumes"),
    )


class Counts(ApiModel):
    processed: Int64 = Field(0, description="Messages the handler succeeded on.")
    retried: Int64 = Field(0, description="Messages parked in a retry topic for a later cycle.")
    moved: Int64 = Field(0, description="Messages moved to the poison topic.")
    rejected: Int64 = Field(0, description="Messages rejected to the dead-letter topic.")
    dropped: Int64 = Field(0, description="Messages dropped (discarded, counted).")
    poisoned: Int64 = Field(0, description="`moved + rejected + dropped`: messages that got a disposition.")


class LastPoison(ApiModel):
    time: datetime = Field(description="When the message got its disposition.")
    reason: PoisonReason = Field(description="Why: `max-attempts`, `non-retryable`, `validation`, "
                                             "`batch-isolation`, `held-overflow` or `expired`.")
    error_class: str | None = Field(None, max_length=256, description="Exception class of the last failure.")
    disposition: Disposition = Field(description="What became of it.")
    topic: TopicName = Field(description="Original topic.")
    partition: int = Field(ge=0, description="Original partition.")
    offset: Int64 = Field(description="Original offset.")


class ReaderJob(ApiModel):
    name: str = Field(max_length=63, description="Name of the Job.")
    action: Literal["Redrive", "Archive", "Drop", "Hold"] = Field(description="The policy's reader action.")
    trigger: Literal["Manual", "PoisonDepth", "Schedule"] = Field(description="What started it.")
    phase: Literal["Pending", "Running", "Succeeded", "Failed"] = Field(description="Where it is.")
    start_time: datetime | None = Field(None, description="When it started.")
    completion_time: datetime | None = Field(None, description="When it finished.")
    messages: Int64 = Field(0, description="Poison messages it handled.")
    message: str = Field("", max_length=1024, description="Result in words.")
    poison_depth: Int64 | None = Field(
        None, description="Records in the poison topic when it was started; a `poisonDepth` "
                          "trigger counts new poison messages from the newest job's.")


class QueueConsumerStatus(ApiModel):
    observed_generation: int | None = Field(None, ge=0, description="Generation the operator last acted on.")
    conditions: Conditions | None = Field(
        None, description="`Ready`, `Paused`, `QueueDisabled`, `PoisonDetected`.",
        json_schema_extra=seed("Service Broker BROKER_QUEUE_DISABLED event"))
    counts: Counts | None = Field(None, description="Messages by outcome since the consumer was created.")
    consecutive_batch_failures: int | None = Field(
        None, ge=0, description="Whole-batch failures in a row, right now.")
    last_poison: LastPoison | None = Field(
        None, description="The latest message that got a disposition; never its payload.")
    reader_jobs: list[ReaderJob] | None = Field(
        None, max_length=16,
        description="Recent poison-reader jobs, newest first.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
    executors: ExecutorScale | None = Field(
        None, description="With `spec.spark.autoscale`: the executor count and why.")


# Child objects (Service, Deployment, reader Jobs) are named after the consumer, so the name
# must be a DNS-1035 label with room for suffixes within 63 characters.
NAME_MAX = 40
_DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


def _valid_name(name: str | None) -> bool:
    # No name yet (generateName): the server checks the generated one.
    return name is None or (len(name) <= NAME_MAX and re.fullmatch(_DNS_LABEL, name) is not None)


NAME_RULE = Rule(
    f"self.metadata.name.matches('{_DNS_LABEL}') && size(self.metadata.name) <= {NAME_MAX}",
    # No fieldPath: the server accepts none into metadata, so the message names the field.
    f"metadata.name must be a DNS-1035 label (a-z, 0-9, '-', starting with a letter) of at most "
    f"{NAME_MAX} characters: Antidote names the consumer's Service, Deployment and Jobs after it",
    lambda obj: _valid_name(obj.metadata.get("name")))


class QueueConsumer(ApiModel):
    """A whole QueueConsumer manifest."""

    api_version: ApiVersionField = Field(API_VERSION, description="`antidote.dev/v1alpha1`.")
    kind: KindField[Literal["QueueConsumer"]] = Field("QueueConsumer", description="`QueueConsumer`.")
    metadata: Metadata = Field(default_factory=dict, description="Standard object metadata.")
    spec: QueueConsumerSpec = Field(description="The consumer.")
    status: QueueConsumerStatus | None = Field(None, description="Written by the operator.")

    rules = (NAME_RULE,)
