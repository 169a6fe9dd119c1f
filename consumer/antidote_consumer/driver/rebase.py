"""`antidote rebase`: read a recreated source or retry topic from its beginning.

A consumer whose source or retry topic was deleted and recreated refuses to start
(driver.recreated): its ledger's positions belong to the old topic, whose records were
deleted with it. Rebasing is the operator's explicit way on, and skips nothing of the new
topic: in one ledger transaction, the topic's positions become each new partition's first
offset, its new id is recorded, and for the source topic the positions a `latest` consumer
first started at are forgotten and the checkpoint (whose offsets are the old topic's) is
marked stale: the next start removes it and starts from those positions.
It refuses a topic that is the one the ledger recorded (nothing to rebase: a running
consumer would be fenced by taking the ledger's transactional id for nothing).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from antidote_api.names import ledger_names
from antidote_api.semantics import EffectiveSettings
from antidote_consumer.kafka.one_line import ledger_edit
from antidote_consumer.kafka.sink_entries import entry_key

from .ledger import Ledger, load_state
from .recreated import Recreated, current_ends, find_recreated, topic_ids


class RebaseError(Exception):
    """Nothing to rebase, or Kafka refused; the message says which and whether anything changed."""


@dataclass
class Rebased:
    topic: str
    found: Recreated
    starts: dict[int, int]  # partition -> where the new topic is read from
    source: bool  # the source topic: the checkpoint is removed at the next start
    dry_run: bool


def rebase(s: EffectiveSettings, topic: str, *, dry_run: bool = False, conf: dict | None = None) -> Rebased:
    """Raises RebaseError, one line, for everything that is not a bug."""
    topics = [s.topics.source, *s.topics.retry]
    if topic not in topics:
        raise RebaseError(f"{topic} is neither the source nor a retry topic of consumer "
                          f"{s.consumer!r} ({', '.join(topics)}); nothing was changed")
    return ledger_edit(s, conf, RebaseError, "rebase",
                       lambda bootstrap, conf: _rebase(s, topic, bootstrap, conf, dry_run))


def _rebase(s: EffectiveSettings, topic: str, bootstrap: str, conf: dict, dry_run: bool) -> Rebased:
    names = ledger_names(s)
    client = {**conf, "bootstrap.servers": bootstrap}
    admin = AdminClient(client)
    offsets = Consumer({**client, "group.id": "antidote-rebase", "enable.auto.commit": False})
    try:
        state = load_state(bootstrap, names.topic, conf)
        ids = topic_ids(admin, [topic])
        ends = current_ends(admin, offsets, [topic])
        found = find_recreated([topic], state.topic_ids, ids, state.positions, ends)
        if not found:
            raise RebaseError(f"topic {topic} is the one consumer {s.consumer!r}'s ledger recorded "
                              f"(topic id {ids[topic]}, no position past its end); nothing to "
                              "rebase, nothing was changed")
        starts = {p: offsets.get_watermark_offsets(_tp(topic, p), timeout=10)[0] for p in ends[topic]}
        out = Rebased(topic, found[0], starts, topic == s.source.topic, dry_run)
        if dry_run:
            return out
        ledger = Ledger(bootstrap, names.topic, names.transactional_id, conf)
        try:
            state = ledger.load()  # as the writer now: nothing can have changed in between
            new = copy.deepcopy(state)
            new.positions = {k: v for k, v in state.positions.items() if k.rpartition(":")[0] != topic}
            new.positions.update({f"{topic}:{p}": o for p, o in starts.items()})
            new.topic_ids[topic] = ids[topic]
            if out.source:
                new.source_start = {}
                new.stale_checkpoint = True
            # An exactly-once sink's entries say which of the OLD topic's offsets have their
            # outputs written: kept, they would pass over the new topic's first offsets.
            gone = sorted({int(k.rpartition(":")[2]) for k in state.sink if k.rpartition(":")[0] == topic}
                          | set(starts))
            for p in gone:
                new.sink.pop(f"{topic}:{p}", None)
            ledger.commit(new, [(names.topic, None, entry_key(topic, p).encode(), None, []) for p in gone],
                          keys=("positions", "batch", "topics"))
        finally:
            ledger.close()
        return out
    finally:
        offsets.close()


def _tp(topic: str, partition: int):
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, partition)
