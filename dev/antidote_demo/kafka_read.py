"""Reading a topic's keys for the demo's ledger check (read_committed, no group commits)."""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, TopicPartition


def keys_of(bootstrap: str, topic: str, timeout: float = 30.0) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "antidote-demo-check",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": "read_committed"})
    try:
        md = c.list_topics(topic, timeout=timeout).topics.get(topic)
        if md is None or md.error is not None:
            return []
        todo = set()
        tps = []
        for p in md.partitions:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if high > low:
                todo.add(p)
                tps.append(TopicPartition(topic, p, low))
        c.assign(tps)
        keys: list[bytes] = []
        while todo:
            msg = c.poll(timeout)
            if msg is None:
                raise TimeoutError(f"reading {topic}: no answer in {timeout:.0f}s")
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    todo.discard(msg.partition())
                    continue
                raise RuntimeError(f"reading {topic}: {err}")
            key = msg.key()
            if key is None:
                raise RuntimeError(f"reading {topic}: a message without a key at partition "
                                   f"{msg.partition()} offset {msg.offset()}")
            keys.append(key)
        return keys
    finally:
        c.close()
