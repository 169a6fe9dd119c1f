"""A source or retry topic deleted and recreated under a consumer's ledger.

The ledger's positions are keyed by topic name ("topic:partition" -> the next offset without
an outcome). A topic deleted and created again under that name starts its offsets at 0, so
the old positions lie past the new topic's records: a retry topic's new records would never
be read (and `--until-idle` would call that idle), a source topic's records below the old
offset would be passed over, and Spark's query, whose checkpoint holds the old offsets,
fails at every start. So each start compares the topics with what the ledger recorded:

- Kafka gives every topic an id when it is created (KIP-516); the ledger records the id of
  the source and each retry topic, and another id under the same name means a new topic;
- a ledger written before ids were recorded has none: a position past a partition's end
  offset says the same then (a new topic that has already grown past the old positions
  cannot be told from the old one: that start records the new id, once, at the upgrade).

Either way the consumer does not start (exit 2, the line names the topic, the recorded and
current ids, and each partition's position against its end), and nothing is skipped:
`antidote rebase` (driver.rebase) is the operator's explicit "read the new topic from its
beginning". A topic with no position above 0 lost nothing to this consumer: its new id is
simply recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

from antidote_consumer.kafka.topics import TopicMisfit


SHOWN = 3  # partitions named in a refusal, per topic


class TopicRecreated(TopicMisfit):
    """A topic the ledger keeps positions for was deleted (and recreated) since: exit 2,
    like a topic that cannot hold the policy; the message says what to do."""


@dataclass(frozen=True)
class Recreated:
    topic: str
    recorded_id: str | None  # None: a ledger from before topic ids were recorded
    current_id: str | None
    # partition -> (the ledger's position, the partition's end offset now; -1: no such partition)
    positions: dict[int, tuple[int, int]]

    def describe(self) -> str:
        if self.recorded_id is not None:
            ids = f"topic id {self.recorded_id} in the ledger, {self.current_id} now"
        elif self.current_id is not None:
            ids = f"topic id {self.current_id} now, none in the ledger"
        else:  # seen while running (the retry pump): by the end offsets alone
            ids = "its end offsets are now below the ledger's positions"
        shown = sorted(self.positions.items())
        # At most SHOWN partitions: the operator keeps 1,024 characters of the line, whose
        # end says what to do.
        parts = ", ".join(f"partition {p}: ledger position {pos}, "
                          + (f"end offset now {end}" if end >= 0 else "no such partition now")
                          for p, (pos, end) in shown[:SHOWN])
        if len(shown) > SHOWN:
            parts += f" and {len(shown) - SHOWN} more partition(s)"
        return f"topic {self.topic} was deleted and recreated since the ledger recorded it ({ids}; {parts})"


class RetryTopicGone(Exception):
    """The retry pump found a ledger position past a retry partition's end: its topic was
    deleted (and recreated) while this consumer ran. The consumer stops (TopicRecreated)."""

    def __init__(self, found: list[Recreated]):
        super().__init__("; ".join(r.describe() for r in found))
        self.found = found


def behind_ends(positions: dict[str, int], ends: dict[tuple[str, int], int]) -> list[Recreated]:
    """The topics of `ends` ((topic, partition) -> end offset) with a ledger position past
    a partition's end: no record was ever read there, so the topic is not the one read."""
    behind: dict[str, dict[int, tuple[int, int]]] = {}
    for (topic, partition), end in sorted(ends.items()):
        pos = positions.get(f"{topic}:{partition}", 0)
        if pos > end:
            behind.setdefault(topic, {})[partition] = (pos, end)
    return [Recreated(t, None, None, parts) for t, parts in behind.items()]


def positions_of(positions: dict[str, int], topic: str) -> dict[int, int]:
    """Partition -> the ledger's position, for `topic` (Kafka topic names have no ':')."""
    out = {}
    for key, offset in positions.items():
        name, _, partition = key.rpartition(":")
        if name == topic:
            out[int(partition)] = offset
    return out


def find_recreated(topics: list[str], recorded: dict[str, str], current: dict[str, str],
                   positions: dict[str, int], ends: dict[str, dict[int, int]]) -> list[Recreated]:
    """The topics among `topics` that are not the ones the ledger's positions belong to.
    `recorded`/`current`: topic ids by name, as the ledger has them and as the broker says;
    `ends`: each topic's partitions and their end offsets now."""
    out = []
    for topic in topics:
        held = {p: pos for p, pos in positions_of(positions, topic).items() if pos > 0}
        if not held:
            continue  # nothing read from it yet: a new topic loses nothing
        now = ends.get(topic, {})
        seen = {p: (pos, now.get(p, -1)) for p, pos in held.items()}
        before = recorded.get(topic)
        if before is not None:
            if before != current.get(topic):
                out.append(Recreated(topic, before, current.get(topic), seen))
        else:
            behind = {p: (pos, end) for p, (pos, end) in seen.items() if pos > end}
            if behind:
                out.append(Recreated(topic, None, current.get(topic), behind))
    return out


def refusal(found: list[Recreated], consumer: str, namespace: str | None) -> str:
    """The one line a refusing start prints (and the operator shows as SettingsRejected)."""
    where = consumer + (f" -n {namespace}" if namespace else "")
    names = " ".join(f"--topic {r.topic}" for r in found)
    return ("; ".join(r.describe() for r in found)
            + ". Reading it from those positions would skip its records, so the consumer stops"
            "; the old topic's records were deleted with it. To read the new topic from its "
            f"beginning: antidote rebase {where} {names}")


def topic_ids(admin, topics: list[str], timeout: float = 30) -> dict[str, str]:
    """Topic name -> its Kafka topic id (base64, as kafka-topics prints it)."""
    from confluent_kafka import TopicCollection

    futures = admin.describe_topics(TopicCollection(list(topics)), request_timeout=timeout)
    ids = {name: str(fut.result().topic_id) for name, fut in futures.items()}
    # A broker before Kafka 2.8 has no topic ids (all zeros): the end offsets decide alone.
    return {name: i for name, i in ids.items() if i.strip("A") not in ("", "=")}


def current_ends(admin, offsets_consumer, topics: list[str]) -> dict[str, dict[int, int]]:
    """Each topic's partitions (as the broker lists them now) and their end offsets."""
    from antidote_consumer.kafka.topics import end_offsets

    listed = admin.list_topics(timeout=30).topics
    return {t: end_offsets(offsets_consumer, t, len(listed[t].partitions)) if t in listed else {}
            for t in topics}


def check(admin, offsets_consumer, topics: list[str], recorded: dict[str, str],
          positions: dict[str, int]) -> tuple[dict[str, str], list[Recreated]]:
    """(the topics' ids now, the ones recreated under the ledger's positions)."""
    current = topic_ids(admin, topics)
    ends = current_ends(admin, offsets_consumer, topics)
    return current, find_recreated(topics, recorded, current, positions, ends)


def watch(admin, offsets_consumer, topics: list[str], recorded: dict[str, str],
          positions: dict[str, int]) -> list[Recreated]:
    """While the consumer runs: `check` by topic ids alone (one request), unless one changed.
    A topic recreated and refilled past the old positions between two looks would otherwise
    be read from them: Spark's query and the retry pump see only offsets."""
    current = topic_ids(admin, topics)
    if all(recorded.get(t) in (None, i) for t, i in current.items()):
        return []
    return find_recreated(topics, recorded, current, positions, current_ends(admin, offsets_consumer, topics))
