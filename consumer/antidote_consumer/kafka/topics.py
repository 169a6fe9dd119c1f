"""Creating Antidote's topics: retry, poison and dead-letter topics with the source's
partition count (so a message keeps its partition), and the compacted ledger."""

from __future__ import annotations

import logging
import time

from confluent_kafka.admin import AdminClient, NewTopic

from .retry import Unanswered, connect_once, retrying


class KafkaUnreachable(RuntimeError):
    """No broker answered at start; the message names the bootstrap servers."""


class TopicMisfit(ValueError):
    """An existing derived topic cannot hold what the policy puts there; the message names
    the topic and the setting (exit 2, like bad settings)."""


log = logging.getLogger("antidote.consumer")
DAY_MS = 24 * 3600 * 1000
# Derived topics are created keeping records this long after the longest cycle delay: the
# time a consumer may stay stopped (paused, disabled, crash-looping, its cluster down) with
# retry records parked, before they expire unread.
PAUSE_MARGIN_MS = 7 * DAY_MS
# An existing retry topic is refused below the longest cycle delay plus this: a record
# parked for the longest delay must still be there when a consumer that was stopped for a
# day comes back. (Less than PAUSE_MARGIN_MS, so topics made with the broker's default
# retention of 7 days stay usable with delays of up to 6 days.)
MIN_MARGIN_MS = DAY_MS


def reachable(conf: dict, bootstrap: str, timeout: float = 20.0) -> None:
    """Connect once; KafkaUnreachable in one line when no broker answers in `timeout` s."""
    from confluent_kafka import KafkaError

    try:
        connect_once(conf, bootstrap, timeout)
    except Unanswered as err:
        seen = next((e.str() for e in reversed(err.errors) if e.code() != KafkaError._ALL_BROKERS_DOWN), None)
        raise KafkaUnreachable(f"cannot reach Kafka at {bootstrap} (no answer in {timeout:.0f}s): "
                               f"{seen or err.last}") from None


def partitions_of(admin: AdminClient, topic: str, timeout: float = 30) -> int:
    md = admin.list_topics(topic, timeout=timeout).topics.get(topic)
    if md is None or md.error is not None:
        raise LookupError(f"source topic {topic!r} does not exist or is not readable"
                          + (f": {md.error}" if md is not None and md.error else ""))
    return len(md.partitions)


def topic_config(admin: AdminClient, topic: str, names: tuple[str, ...]) -> dict[str, str]:
    from confluent_kafka.admin import ConfigResource

    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(timeout=30)
    return {n: entries[n].value for n in names if n in entries and entries[n].value is not None}


def _inherited_config(admin: AdminClient, source: str) -> dict[str, str]:
    """Settings a quarantine topic must share with its source: a record that fit in the
    source must fit in the poison topic too."""
    entry = topic_config(admin, source, ("max.message.bytes",)).get("max.message.bytes")
    return {"max.message.bytes": entry} if entry else {}


def derived_retention_ms(admin: AdminClient, source: str, longest_delay_ms: int) -> str:
    """retention.ms of a new derived topic: the longest cycle delay plus PAUSE_MARGIN_MS, or
    the source's own retention when that is longer (-1, forever, included)."""
    wanted = longest_delay_ms + PAUSE_MARGIN_MS
    src = int(topic_config(admin, source, ("retention.ms",)).get("retention.ms") or 0)
    return str(-1 if src < 0 else max(src, wanted))


def misfits(partitions: int, source_partitions: int, config: dict[str, str], *, retry: bool,
            longest_delay_ms: int) -> list[str]:
    """Why an existing derived topic cannot hold what the policy puts there ([] if it can).
    Records keep their partition number, so it needs the source's partitions; no derived
    topic may compact records away (a retry, poison or dead-letter record's key is its
    message's: two failures of one key would leave one, and a null value is a tombstone);
    a retry topic must keep a record past its due time, by age and by size alike."""
    out = []
    if partitions < source_partitions:
        out.append(f"it has {partitions} partition(s), fewer than the source's {source_partitions} "
                   "(records keep their partition number)")
    if "compact" in (config.get("cleanup.policy") or ""):
        what = "parked" if retry else "quarantined"
        out.append(f"cleanup.policy is {config['cleanup.policy']!r}: compaction would delete "
                   f"{what} records that share a key (and those with a null value)")
    if retry:
        retention = int(config.get("retention.ms") or -1)
        need = longest_delay_ms + MIN_MARGIN_MS
        if 0 <= retention < need:
            out.append(f"retention.ms is {retention}, below the longest cycle delay plus a day "
                       f"({need}): parked records would expire before they are due")
        size = int(config.get("retention.bytes") or -1)
        if size >= 0:
            # A size bound deletes the oldest parked records whenever a partition outgrows
            # it, due or not: a backlog (a burst of failures, a stopped consumer) loses them.
            out.append(f"retention.bytes is {size}: parked records would be deleted, due or not, "
                       "once a partition outgrows it (set it to -1)")
    return out


def ledger_misfits(config: dict[str, str]) -> list[str]:
    """Why an existing ledger topic cannot hold a consumer's ledger ([] if it can): its
    entries are rewritten only when they change, so a delete policy would expire the
    positions, counts and disabled state of a consumer that was idle or stopped long enough."""
    policy = config.get("cleanup.policy") or "delete"
    if policy.replace(" ", "") != "compact":
        return [f"cleanup.policy is {policy!r}, not 'compact': its entries would expire "
                "(positions, counts, a disabled queue)"]
    return []


# The ledger topic as created. Kafka compacts only segments that have rolled, and keeps a
# transaction marker (an exactly-once sink writes one per partition and chunk) and a tombstone
# for delete.retention.ms once cleaned: with its defaults (1 GB, 7 days, 1 day) the ledger is
# in practice never compacted, and every scan of it (a new driver's load, a task's read of its
# entry) grows with the log. A segment of 4 MiB holds any record batch (at most
# max.message.bytes, 1 MB: the positions entry, ~30 bytes a partition, is the largest record,
# and the largest batch is one transaction's) several times over; 10 minutes bounds how long
# a quiet ledger's active segment waits; 10 minutes still far exceeds a read of the whole
# ledger (a load, a task's scan: seconds), which must not lose a tombstone it has not reached.
LEDGER_SEGMENT_BYTES = 4 * 1024 * 1024
LEDGER_SEGMENT_MS = 10 * 60 * 1000
LEDGER_DELETE_RETENTION_MS = 10 * 60 * 1000
LEDGER_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(LEDGER_SEGMENT_BYTES),
                 "segment.ms": str(LEDGER_SEGMENT_MS), "delete.retention.ms": str(LEDGER_DELETE_RETENTION_MS)}
LEDGER_CHECKED = ("cleanup.policy", "segment.bytes", "segment.ms", "delete.retention.ms")


def ledger_advice(config: dict[str, str]) -> list[str]:
    """Why an existing ledger topic's log may stay far from its compacted state ([] if it
    will not): a warning, never a refusal (its entries are all there; only reading them takes
    longer as the log grows). Settings not known (not described) are not judged."""
    out = []
    for name, ours, what in (("segment.bytes", LEDGER_SEGMENT_BYTES, "a segment is compacted only once it rolls"),
                             ("segment.ms", LEDGER_SEGMENT_MS, "a segment is compacted only once it rolls"),
                             ("delete.retention.ms", LEDGER_DELETE_RETENTION_MS,
                              "cleaned transaction markers and tombstones are kept that long")):
        value = config.get(name)
        if value is not None and int(value) > ours:
            out.append(f"{name} is {value} (Antidote creates it with {ours}): {what}")
    return out


DEFAULT_MAX_MESSAGE_BYTES = 1048588  # Kafka's default max.message.bytes


def max_message_bytes(admin: AdminClient, topic: str) -> int:
    """The largest record `topic` accepts (its max.message.bytes)."""
    value = _inherited_config(admin, topic).get("max.message.bytes")
    return int(value) if value else DEFAULT_MAX_MESSAGE_BYTES


def ensure_topics(admin: AdminClient, source: str, derived: list[str], ledger: str, *,
                  retry: tuple[str, ...] | list[str] = (), longest_delay_ms: int = 0) -> int:
    """Create what is missing (derived topics keep records the longest cycle delay plus
    PAUSE_MARGIN_MS); refuse existing ones that cannot hold the policy (TopicMisfit); return
    the source's partition count."""
    n = partitions_of(admin, source)
    listed = admin.list_topics(timeout=30).topics
    existing = set(listed)
    problems = []
    for t in derived:
        if t in existing:
            conf = topic_config(admin, t, ("retention.ms", "retention.bytes", "cleanup.policy"))
            problems += [f"topic {t}: {why}" for why in misfits(
                len(listed[t].partitions), n, conf, retry=t in retry, longest_delay_ms=longest_delay_ms)]
    if ledger in existing:
        ledger_conf = topic_config(admin, ledger, LEDGER_CHECKED)
        problems += [f"topic {ledger}: {why}" for why in ledger_misfits(ledger_conf)]
        advice = ledger_advice(ledger_conf)
        if advice:
            log.warning("topic %s: %s; every read of the ledger grows with its log until it is compacted "
                        "(kafka-configs --alter --add-config segment.bytes=%d,segment.ms=%d,delete.retention.ms=%d)",
                        ledger, "; ".join(advice), LEDGER_SEGMENT_BYTES, LEDGER_SEGMENT_MS,
                        LEDGER_DELETE_RETENTION_MS)
    if problems:
        raise TopicMisfit("; ".join(problems) + ". Change the topic (kafka-configs --alter, "
                          "kafka-topics --alter --partitions) or name other topics in the policy")
    missing = [t for t in derived if t not in existing]
    config = _inherited_config(admin, source) if missing else {}
    if missing:
        config["retention.ms"] = derived_retention_ms(admin, source, longest_delay_ms)
        # Never compacted, retry topics never size-bound (misfits): a broker default
        # (log.cleanup.policy, log.retention.bytes) would otherwise make a topic this start
        # creates one the next start refuses.
        config["cleanup.policy"] = "delete"
    wanted = [NewTopic(t, n, -1, config={**config, **({"retention.bytes": "-1"} if t in retry else {})})
              for t in missing]
    if ledger not in existing:
        wanted.append(NewTopic(ledger, 1, -1, config=dict(LEDGER_CONFIG)))
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


def partition_lags(admin_consumer, topic: str, committed: dict[int, int]) -> dict[int, int]:
    """Partition -> records after `committed` (partition -> next offset) up to its end."""
    return {p: max(0, _ends(admin_consumer, topic, p)[1] - pos) for p, pos in committed.items()}


def depth(admin_consumer, topic: str) -> int:
    """Records kept in `topic`: the sum over partitions of end - start offsets."""
    md = admin_consumer.list_topics(topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None:
        return 0
    return sum(max(0, high - low) for low, high in (_ends(admin_consumer, topic, p) for p in md.partitions))
