"""Small, exact Kafka reads and writes for tests: read a topic from its start to its end."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from antidote_consumer.kafka.retry import retrying


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int = 0  # ms


def produce(bootstrap: str, topic: str,
            records: Iterable[tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]],
            partition: int | None = None) -> int:
    """Write `records` (key, value, headers) and wait for them; to `partition` if given."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    errors: list[KafkaError] = []
    n = 0
    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers or None,
                         on_delivery=lambda err, _msg: err and errors.append(err),
                         **({} if partition is None else {"partition": partition}))
        n += 1
        if n % 10000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0 and not errors, f"produce to {topic}: {remaining} unsent, errors {errors[:3]}"
    return n


def read_all(bootstrap: str, topic: str, timeout: float = 30.0, missing_ok: bool = False) -> list[Record]:
    """Every record now in `topic`, in partition/offset order (no consumer group commits);
    [] for a topic that does not exist yet when `missing_ok`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "antidote-tests-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "earliest"})
    try:
        md = consumer.list_topics(topic, timeout=timeout).topics[topic]
        if missing_ok and md.error is not None and md.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return []
        assert md.error is None, f"topic {topic}: {md.error}"
        parts = sorted(md.partitions)
        ends = {p: retrying(lambda p=p: consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                                       timeout=timeout),
                            f"topic {topic}: reading its offsets")[1]
                for p in parts}
        todo = {p for p in parts if ends[p] > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in todo])
        out: list[Record] = []
        while todo:
            msg = consumer.poll(timeout)
            assert msg is not None, f"timed out reading {topic}; still waiting on {todo}"
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    todo.discard(msg.partition())
                    continue
                raise AssertionError(f"reading {topic}: {msg.error()}")
            out.append(Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                              tuple(msg.headers() or ()), msg.timestamp()[1]))
            if msg.offset() + 1 >= ends[msg.partition()]:
                todo.discard(msg.partition())
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()
