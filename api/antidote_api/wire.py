"""The contracts between Antidote's programs (the consumer, the reader, the operator and the
CLI) that are not CRD fields: exit codes, poison reasons, the reader's actions and sources,
metric names, the health path and the settings ConfigMap. One definition each; every program
imports it from here (the operator never imports the consumer for a contract).

Header names are in `antidote_api.headers`, object and Kafka client names in
`antidote_api.names`, the drain request in `antidote_api.drain`, condition reasons beside
`ConditionType` in `antidote_api.conditions`.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum

from .conditions import DisableReason, PoisonConditionReason


class ExitCode(IntEnum):
    """`antidote consumer`'s (and the reader's) exit codes; the operator reads them from
    the driver's termination."""

    OK = 0
    # Refused to start; its line says why: its settings (before any Spark work), a topic that
    # would lose records (kafka.topics), or a topic recreated under the ledger (driver.recreated).
    BAD_SETTINGS = 2
    CONSECUTIVE_BATCH_FAILURES = 3
    SYSTEMIC_FAILURE = 4
    FAULT = 5  # also the reader's "stopped at a poison record"
    FENCED = 6  # a newer instance of this consumer took over its ledger


# The exit codes that mean "I disabled my queue", by reason, and back.
DISABLE_EXIT = {DisableReason.CONSECUTIVE_BATCH_FAILURES: ExitCode.CONSECUTIVE_BATCH_FAILURES,
                DisableReason.SYSTEMIC_FAILURE: ExitCode.SYSTEMIC_FAILURE,
                DisableReason.FAULT: ExitCode.FAULT}
EXIT_REASONS = {int(code): reason.value for reason, code in DISABLE_EXIT.items()}
DISABLE_REASONS = frozenset(r.value for r in DisableReason)



def cli_prefix(command: str) -> str:
    """How every error line of `antidote <command>` starts (docs/cli.md): one place, so the
    CLI's lines and what the operator parses out of the consumer's cannot drift apart."""
    return f"antidote {command}: " if command else "antidote: "


class CliExit(IntEnum):
    """The CLI's own exit codes (docs/cli.md). `antidote consumer` and `antidote reader` keep
    theirs (ExitCode), whose 2 (BAD_SETTINGS) is a usage error of their input as well."""

    OK = 0
    ERROR = 1  # a runtime error (not found, refused, unreachable), said in one line
    USAGE = 2  # a bad flag or argument, as argparse's own
    INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT


# How `antidote consumer` starts its one-line refusals (the termination message on exit 2).
CONSUMER_PREFIX = cli_prefix("consumer")


class PoisonReason(StrEnum):
    """Why a message was quarantined: the `antidote.reason` header, status.lastPoison.reason,
    the `reason` label of the poison metrics (`types.PoisonReason` is its CRD type)."""

    MAX_ATTEMPTS = "max-attempts"
    NON_RETRYABLE = "non-retryable"
    VALIDATION = "validation"
    BATCH_ISOLATION = "batch-isolation"
    # spec.ordering Key: one more message of a key than spec.maxHeldPerKey (see ordering).
    HELD_OVERFLOW = "held-overflow"
    # retries.maxAge: too old for another retry cycle (docs/consumer.md, "Age limits").
    EXPIRED = "expired"


POISON_REASONS = tuple(r.value for r in PoisonReason)
# PoisonDetected's reason for the last poison message's reason.
POISON_CONDITION_REASONS = {
    PoisonReason.MAX_ATTEMPTS.value: PoisonConditionReason.MAX_ATTEMPTS.value,
    PoisonReason.NON_RETRYABLE.value: PoisonConditionReason.NON_RETRYABLE.value,
    PoisonReason.VALIDATION.value: PoisonConditionReason.VALIDATION.value,
    PoisonReason.BATCH_ISOLATION.value: PoisonConditionReason.BATCH_ISOLATION.value,
    PoisonReason.HELD_OVERFLOW.value: PoisonConditionReason.HELD_OVERFLOW.value,
    PoisonReason.EXPIRED.value: PoisonConditionReason.EXPIRED.value,
}

# The outcomes of a pass (`antidote_messages{outcome}`, status.counts).
OUTCOMES = ("processed", "retried", "moved", "rejected", "dropped")

# The poison-queue reader: what it does with each message, and what it reads.
READER_ACTIONS = ("Redrive", "Archive", "Drop", "Hold")
READER_SOURCES = ("poison", "dlq")


class Metric(StrEnum):
    """The consumer's Prometheus metrics that the operator reads (names as exposed: counters
    carry `_total`). The consumer registers them without the suffix (prometheus_client adds it)."""

    MESSAGES = "antidote_messages_total"
    CONSECUTIVE_BATCH_FAILURES = "antidote_consecutive_batch_failures"
    QUEUE_DISABLED = "antidote_queue_disabled"
    LAST_POISON_TIMESTAMP = "antidote_last_poison_timestamp_seconds"
    POISON_MESSAGES = "antidote_poison_messages_total"
    TOPIC_DEPTH = "antidote_topic_depth"
    LAST_POISON_PARTITION = "antidote_last_poison_partition"
    LAST_POISON_OFFSET = "antidote_last_poison_offset"
    # Per source partition, for the executor autoscaling (operator.md, "Executors scaled by lag").
    SOURCE_PARTITION_OFFSET = "antidote_source_partition_offset"
    SOURCE_PARTITION_LAG = "antidote_source_partition_lag_records"
    # Per poison and dead-letter topic: the records the reader has not resolved yet, and how
    # long the first of them has waited (driver.poison_age; AntidotePoisonAging reads the age).
    POISON_WAITING = "antidote_poison_waiting_records"
    POISON_OLDEST_AGE = "antidote_poison_oldest_age_seconds"

    @property
    def registered(self) -> str:
        """The name given to prometheus_client (a Counter's without `_total`)."""
        return self.value.removesuffix("_total")


class OperatorMetric(StrEnum):
    """The operator's own series that the alert rules (charts/antidote/files/alerts.yaml) and
    the tests read by name."""

    # 1 while Ready is True, else 0; one series per QueueConsumer, its `reason` label Ready's
    # reason (conditions.CONSUMER_READY_REASONS): AntidoteConsumerNotRunning reads it.
    CONSUMER_READY = "antidote_operator_consumer_ready"
    QUEUE_DISABLED = "antidote_operator_queue_disabled"


METRIC_PREFIX = "antidote_"
# The driver's liveness endpoint (served beside /metrics; the Deployment's livenessProbe).
HEALTH_PATH = "/healthz"

# A waiting scrape: GET /metrics?<DISABLE_WAIT_PARAM>=<seconds> is answered with the page as
# soon as the queue is disabled (at once if it already is), else with 204 after at most that
# many seconds (the driver caps it at DISABLE_WAIT_MAX). Both answers carry
# DISABLE_WAIT_HEADER; a consumer that does not know the parameter answers its page at once
# without it. The operator holds one per running consumer, so it learns of a disabling when
# it happens instead of at its next scrape (operator.md, "Metrics").
DISABLE_WAIT_PARAM = "antidote_wait_disabled"
DISABLE_WAIT_HEADER = "X-Antidote-Wait-Disabled"
DISABLE_WAIT_MAX = 60.0

# The consumer's effective settings: ConfigMap `<consumer>-settings` (names.settings_configmap),
# this key, mounted at CONFIG_DIR in the driver and reader pods.
SETTINGS_KEY = "settings.yaml"
CONFIG_DIR = "/etc/antidote"
# Where the operator mounts what it owns in the driver, executor and reader pods (settings,
# Secrets, the RPC secret under CONFIG_DIR; the writable emptyDir at /tmp): a QueueConsumer's
# own volumes (spec.volumes) may not be mounted at or under them, nor at "/".
OPERATOR_MOUNT_ROOTS = (CONFIG_DIR, "/tmp")

# Annotations on a QueueConsumer that people (and the on-call commands) write.
RESUME_ANNOTATION = "antidote.dev/resume"  # re-enable a disabled queue
DRAIN_ANNOTATION = "antidote.dev/drain"  # start a reader Job (antidote_api.drain)
PROBE_ANNOTATION = "antidote.dev/probe"  # the operator's own: an auto-resume probe runs
# A reader Job's report where no kubelet ran it: the dev runner writes it on the Job (a pod's
# termination message holds it on a cluster), the on-call commands read either.
DEV_RUNNER_REPORT = "antidote.dev/dev-runner-report"
# On both ServiceAccounts of a consumer: the keys of spec.spark.<side>.serviceAccountAnnotations
# the operator wrote (comma-separated), so that a key taken out of the spec is taken off the
# ServiceAccount and nothing else is (a cloud's controllers may annotate it too).
USER_ANNOTATIONS = "antidote.dev/user-annotations"

# Extra jars for a consumer's Spark (comma-separated): the dev stack's connector jars in a
# checkout; unset in the consumer image, whose jars are in Spark's own jars/.
SPARK_JARS_ENV = "ANTIDOTE_SPARK_JARS"
