"""Names Antidote's programs share: one definition for the consumer, the reader,
`antidote skip`, the operator and the on-call CLI.

- Kafka: the ledger topic, the consumer id on retry/quarantine records, transactional and
  group ids;
- Kubernetes: the child objects of a QueueConsumer (`children`), its settings ConfigMap.

Transactional ids and group ids join namespace and name with "/", which neither may
contain, so `team-a/orders` and `team/a-orders` never fence each other or share offsets."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .semantics import EffectiveSettings


def transactional_id(namespace: str, name: str, role: str = "") -> str:
    """The one writer of a consumer's ledger (`role` ""), or of its reader's (`reader-poison`,
    `reader-dlq`): a second producer with this id fences the first."""
    return "/".join(["antidote" + (f"-{role}" if role else ""), namespace or "-", name or "-"])


def sink_transactional_id(ledger_writer: str, topic: str, partition: int) -> str:
    """The writer of a consumer's exactly-once sink outputs read from one partition (of the
    source or a retry topic): a newer attempt of that partition fences an older one. Under the
    ledger writer's id (`transactional_id(namespace, name)`) as a prefix, which ACLs can grant."""
    return f"{ledger_writer}/{topic}/{partition}"


def reader_group_id(namespace: str, name: str) -> str:
    """The poison-queue reader's consumer group (its offsets show what it resolved)."""
    return transactional_id(namespace, name, "reader")


def consumer_id(namespace: str, consumer: str) -> str:
    """Who wrote a retry or quarantine record (its `antidote.consumer` header): two
    QueueConsumers of one source topic share its retry topics and read only their own."""
    return f"{namespace}/{consumer}" if namespace else consumer


def ledger_topic(source: str, namespace: str, consumer: str) -> str:
    """A consumer's ledger topic: one per QueueConsumer (namespace and name) and source."""
    who = ".".join(filter(None, (namespace, consumer)))
    return f"{source}.ledger-{who}" if who else f"{source}.ledger"


def parking_topic(source: str) -> str:
    """Where a reader's Redrive parks a message redriven maxRedrives times (the loop guard)."""
    return f"{source}.parking"


@dataclass(frozen=True)
class LedgerNames:
    topic: str
    consumer_id: str
    transactional_id: str


def ledger_names(settings: EffectiveSettings) -> LedgerNames:
    """A consumer's ledger topic, its consumer id and the ledger writer's transactional id:
    the driver, the runtime and `antidote skip` all write (or fence) the same ledger."""
    ns, name = settings.namespace, settings.consumer
    return LedgerNames(topic=ledger_topic(settings.source.topic, ns, name),
                       consumer_id=consumer_id(ns, name), transactional_id=transactional_id(ns, name))


# --- Kubernetes objects --------------------------------------------------------------------

def settings_configmap(consumer: str) -> str:
    """The ConfigMap holding the consumer's effective settings (key wire.SETTINGS_KEY)."""
    return f"{consumer}-settings"


@dataclass(frozen=True)
class Children:
    configmap: str
    service_account: str
    executor_service_account: str
    role_binding: str
    spark_auth_secret: str
    service: str
    deployment: str


def child_names(consumer: str) -> Children:
    """The names of a QueueConsumer's child objects."""
    # The consumer name is a DNS-1035 label of at most 40 characters (API rule), so the
    # suffixes fit in 63 and the Service name is a valid driver host.
    driver = f"{consumer}-driver"
    return Children(configmap=settings_configmap(consumer), service_account=driver,
                    executor_service_account=f"{consumer}-executor", role_binding=driver,
                    spark_auth_secret=f"{consumer}-spark-auth", service=consumer, deployment=consumer)


def reader_service_account(consumer: str) -> str:
    return f"{consumer}-reader"


# Reader Jobs: `<consumer>-reader-<slug>-<hash of the trigger instance>`. Slugs are short: a
# 40-character consumer name + "-reader-" + slug + "-" + 8 hex digits fits the 63 of a label
# value. Names come from the trigger instance (the request id, the slot, the newest Job before
# it), so an operator that restarts between creating a Job and recording it makes the same one.
READER_TRIGGER_SLUGS = ("drain", "sched", "depth")


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def reader_job_name(consumer: str, trigger: str, instance: str) -> str:
    if trigger not in READER_TRIGGER_SLUGS:
        raise ValueError(f"unknown reader trigger {trigger!r}")
    return f"{consumer}-reader-{trigger}-{short_hash(instance)}"


def drain_job_name(consumer: str, request_id: str) -> str:
    """The reader Job `antidote drain` asks for (the CLI waits for it by this name)."""
    return reader_job_name(consumer, "drain", request_id)


def schedule_job_name(consumer: str, slot: datetime) -> str:
    return reader_job_name(consumer, "sched", slot.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%MZ"))
