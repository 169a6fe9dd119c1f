"""A partition's task that moved to another Python worker of its executor (each keeps its own
transactional producers, worker.sink_txn): the worker that served it before still holds a
producer the other one fenced. Its next chunk learns so from the broker's answer to its first
record while it is still producing the chunk's later ones, which fail with code _FATAL (an
error that does not say fatal()). That chunk is written by a new producer, not failed with the
whole batch (found by benchmarks/partition_scale.py: one batch in five failed as a whole at 8
and at 64 partitions)."""

from __future__ import annotations

import json
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from antidote_api.names import sink_transactional_id
from antidote_consumer.kafka.sink_entries import SinkEntry, entry_key, read_entry
from antidote_consumer.worker import sink_txn
from antidote_consumer.worker.sink_txn import ExactlyOnce, PartitionSink

# Enough records that the broker's answer to the first arrives while the rest are produced
# (16,000 took 30-60 ms here); fewer, and the commit itself says fenced, which was handled.
OUTPUTS = 60_000


def committed(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out = []
        while True:
            msg = c.poll(30)
            assert msg is not None, f"timed out reading {topic}"
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return out
            out.append(msg.value())
    finally:
        c.close()


def test_a_chunk_whose_producer_another_worker_fenced_is_written_by_a_new_producer(
        kafka_bootstrap, topic_factory) -> None:
    sink = topic_factory("-out")
    ledger = topic_factory(".ledger", config={"cleanup.policy": "compact"})
    # Fresh: this driver's tasks fenced the partition and read its entry before (the batches
    # of a running consumer), so the task trusts what the driver told it.
    eos = ExactlyOnce(ledger, f"antidote/tests/fenced-{uuid.uuid4().hex[:6]}", fresh=frozenset({"src:0"}))
    conf = {"bootstrap.servers": kafka_bootstrap}
    tid = sink_transactional_id(eos.ledger_writer, "src", 0)
    try:
        # This worker served partition src/0 before (its producer is kept, initialized) ...
        sink_txn.producer(conf, tid)
        # ... and another worker took the partition over since: its producer fenced ours.
        other = Producer({**conf, "transactional.id": tid})
        other.init_transactions(30)
        part = PartitionSink.open(eos, {"topic": sink, "bootstrap.servers": kafka_bootstrap}, "src", 0,
                                  retried_task=False)
        for offset in range(OUTPUTS):
            part.add(offset, None, b"%d" % offset, None)
        assert part.commit(OUTPUTS) == SinkEntry(OUTPUTS)
        assert read_entry(conf, ledger, entry_key("src", 0)) == SinkEntry(OUTPUTS)
        values = committed(kafka_bootstrap, sink)
        assert len(values) == OUTPUTS and set(values) == {b"%d" % o for o in range(OUTPUTS)}
        # The ledger entry is the one the chunk's transaction wrote, once.
        entries = [json.loads(v) for v in committed(kafka_bootstrap, ledger)]
        assert entries == [{"next": OUTPUTS, "pending": []}]
    finally:
        sink_txn.forget(tid)
