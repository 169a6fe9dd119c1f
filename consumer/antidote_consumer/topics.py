"""Creating Antidote's topics: retry, poison and dead-letter topics with the source's
partition count (so a message keeps its partition), and the compacted ledger."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic

from .kafka_retry import retrying


def consumer_id(namespace: str, consumer: str) -> str:
    """Who wrote a retry or quarantine record (its `antidote.consumer` header): two
    QueueConsumers of one source topic share its retry topics and read only their own."""
    return f"{namespace}/{consumer}" if namespace else consumer


def ledger_topic(source: str, namespace: str, consumer: str) -> str:
    """A consumer's ledger topic: one per QueueConsumer (namespace and name) and source."""
    who = ".".join(filter(None, (namespace, consumer)))
    return f"{source}.ledger-{who}" if who else f"{source}.ledger"


def partitions_of(admin: AdminClient, topic: str, timeout: float = 30) -> int:
    md = admin.list_topics(topic, timeout=timeout).topics.get(topic)
    if md is None or md.error is not None:
        raise LookupError(f"source topic {topic!r} does not exist or is not readable"
                          + (f": {md.error}" if md is not None and md.error else ""))
    return len(md.partitions)


def _inherited_config(admin: AdminClient, source: str) -> dict[str, str]:
    """Settings a quarantine topic must share with its source: a record that fit in the
    source must fit in the poison topic too."""
    from confluent_kafka.admin import ConfigResource

    res = ConfigResource(ConfigResource.Type.TOPIC, source)
    entries = admin.describe_configs([res])[res].result(timeout=30)
    entry = entries.get("max.message.bytes")
    return {"max.message.bytes": entry.value} if entry is not None and entry.value else {}


DEFAULT_MAX_MESSAGE_BYTES = 1048588  # Kafka's default max.message.bytes


def max_message_bytes(admin: AdminClient, topic: str) -> int:
    """The largest record `topic` accepts (its max.message.bytes)."""
    value = _inherited_config(admin, topic).get("max.message.bytes")
    return int(value) if value else DEFAULT_MAX_MESSAGE_BYTES


def ensure_topics(admin: AdminClient, source: str, derived: list[str], ledger: str) -> int:
    """Create what is missing; return the source's partition count."""
    n = partitions_of(admin, source)
    existing = set(admin.list_topics(timeout=30).topics)
    missing = [t for t in derived if t not in existing]
    config = _inherited_config(admin, source) if missing else {}
    wanted = [NewTopic(t, n, -1, config=config) for t in missing]
    if ledger not in existing:
        wanted.append(NewTopic(ledger, 1, -1, config={"cleanup.policy": "compact"}))
    if wanted:
        for topic, fut in admin.create_topics(wanted).items():
            try:
                fut.result(timeout=30)
            except Exception as err:  # noqa: BLE001
                if "TOPIC_ALREADY_EXISTS" not in str(err):  # a concurrent creator won the race
                    raise RuntimeError(f"cannot create topic {topic}: {err}") from err
        wait_ready(admin, [t.topic for t in wanted])
    return n


def wait_ready(admin: AdminClient, topics: list[str], timeout: float = 60) -> None:
    """A created topic is usable once every partition has a leader; until then reads fail
    with NOT_LEADER_FOR_PARTITION."""
    deadline = time.monotonic() + timeout
    pending = set(topics)
    while pending:
        md = admin.list_topics(timeout=10).topics
        pending = {t for t in pending if t not in md or md[t].error is not None
                   or not md[t].partitions or any(p.leader < 0 for p in md[t].partitions.values())}
        if not pending:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topics {sorted(pending)} have no partition leader after {timeout:.0f}s")
        time.sleep(0.1)


def _ends(admin_consumer, topic: str, partition: int) -> tuple[int, int]:
    from confluent_kafka import TopicPartition

    return retrying(
        lambda: admin_consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10),
        f"topic {topic}: reading its offsets")


def end_offsets(admin_consumer, topic: str, partitions: int) -> dict[int, int]:
    """Partition -> the offset the next record of `topic` will get."""
    return {p: _ends(admin_consumer, topic, p)[1] for p in range(partitions)}


def source_lag(admin_consumer, topic: str, committed: dict[int, int]) -> int:
    """Records after `committed` (partition -> next offset) up to the end of `topic`."""
    return sum(max(0, _ends(admin_consumer, topic, p)[1] - pos) for p, pos in committed.items())


def depth(admin_consumer, topic: str) -> int:
    """Records kept in `topic`: the sum over partitions of end - start offsets."""
    md = admin_consumer.list_topics(topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None:
        return 0
    return sum(max(0, high - low) for low, high in (_ends(admin_consumer, topic, p) for p in md.partitions))
