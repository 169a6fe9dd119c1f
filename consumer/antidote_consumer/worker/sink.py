"""The Kafka sink of the executors' Python workers: one producer per process and sink, the
outputs of a task produced through it, and the task failed (replayed as a whole) when any of
its outputs is refused or not delivered in time, never a later task."""

from __future__ import annotations

from typing import Any

from antidote_consumer.kafka import auth as kafka_auth

_producers: dict[Any, Any] = {}

_sink_errors: list[str] = []
SINK_WAIT_S = 60.0


def _delivery_failed(err, _msg) -> None:
    _sink_errors.append(str(err))


# The sink's producer settings, the at-least-once producer's and the exactly-once ones' alike.
PRODUCER_CONF = {"linger.ms": 20, "compression.type": "lz4", "message.max.bytes": 64 * 1024 * 1024,
                 "queue.buffering.max.messages": 1_000_000}


def client_conf(sink_kafka: dict) -> dict:
    """The librdkafka settings of a sink ({"bootstrap.servers", "topic", "secret_dir"}): its
    Secret's, read from where it is mounted, and the rest but the topic."""
    conf = {k: v for k, v in sink_kafka.items() if k not in ("topic", "secret_dir")}
    return {**kafka_auth.from_dir(sink_kafka.get("secret_dir")), **conf}


def producer_for(sink_kafka: dict | None):
    """(topic, producer) of a Kafka sink, or (None, None): one producer per process and sink,
    so the Secret's files are read once, not on every task."""
    if not sink_kafka:
        return None, None
    topic = sink_kafka["topic"]
    key = tuple(sorted((k, v) for k, v in sink_kafka.items() if k != "topic"))
    if key not in _producers:
        from confluent_kafka import Producer

        # Delivery reports for failures only, through one producer-level callback: a Python
        # callback per delivered message would cost more than the handler itself.
        _producers[key] = Producer({**client_conf(sink_kafka), **PRODUCER_CONF, "enable.idempotence": True,
                                # An output not delivered in time fails its own batch (which
                                # waits SINK_WAIT_S for them), never a later one.
                                "message.timeout.ms": int(SINK_WAIT_S * 1000) - 5000,
                                "delivery.report.only.error": True,
                                "on_delivery": _delivery_failed})
    return topic, _producers[key]


def produce(producer, topic: str, key, value, headers) -> None:
    while True:
        producer.poll(0.01)
        try:
            producer.produce(topic, value, key, headers=headers)
            return
        except BufferError:
            continue


def begin() -> None:
    """A task starts producing: failures reported from here on are its own."""
    _sink_errors.clear()


def delivered(producer, topic: str) -> None:
    """Waits for the task's outputs; raises when any was refused or is still unsent."""
    remaining = producer.flush(SINK_WAIT_S)
    if remaining or _sink_errors:
        producer.purge()  # what is left belongs to this failed batch, replayed as a whole
        producer.flush(5)
        raise RuntimeError(f"sink topic {topic}: {len(_sink_errors)} outputs refused, "
                           f"{remaining} unsent after {SINK_WAIT_S:g}s; errors: {_sink_errors[:3]}")


def produce_all(p, topic: str, records: tuple[list, list, list | None]) -> None:
    """Every record of `records` (keys, values, headers or None: sink_txn.Records) produced to
    `topic`, waiting for room in the producer's queue when it is full."""
    keys, values, headers = records
    fast = p.produce
    if headers is None:
        for key, value in zip(keys, values):
            try:
                fast(topic, value, key)
            except BufferError:  # the local queue is full: produce() waits for room
                produce(p, topic, key, value, None)
        return
    for key, value, hdrs in zip(keys, values, headers):
        try:
            fast(topic, value, key, headers=hdrs)
        except BufferError:
            produce(p, topic, key, value, hdrs)


def produce_records(p, records: list | tuple) -> None:
    """Records of several topics, each (topic, partition, key, value, headers, timestamp ms):
    the failure records a task settles with its chunk (task_settle), waiting for room."""
    for topic, partition, key, value, headers, ts in records:
        while True:
            try:
                p.produce(topic, value, key, partition=partition, headers=headers, timestamp=ts)
                break
            except BufferError:
                p.poll(0.01)
