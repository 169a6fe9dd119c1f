"""What a source's keys and values are encoded as (QueueConsumer spec.source.kafka.valueFormat,
keyFormat), and the names the decoding shares across processes."""

from __future__ import annotations

from typing import Literal

PayloadFormat = Literal["Bytes", "Json", "Avro", "Protobuf", "JsonSchema"]
# What a Kafka sink's values are encoded as (spec.sink.kafka.valueFormat): as the handler
# returned them, or with the latest schema of the sink topic's subject in the registry.
SinkFormat = Literal["Bytes", "Avro", "Protobuf", "JsonSchema"]
BYTES = "Bytes"
# The formats whose records carry a schema id (the Confluent wire format: a zero magic byte,
# a 4-byte schema id, the body) and so need spec.source.kafka.schemaRegistry.
REGISTRY_FORMATS: tuple[str, ...] = ("Avro", "Protobuf", "JsonSchema")
# antidote.error.class of a key or value that cannot be decoded (reason `validation`).
DESERIALIZATION_ERROR = "antidote.DeserializationError"
# antidote.error.class of a handler's return value that the sink's schema refuses (reason
# `non-retryable`: no retries, counted by the systemic-failure breaker; docs/consumer.md).
SERIALIZATION_ERROR = "antidote.SerializationError"
# The keys of spec.source.kafka.schemaRegistry.secretRef's Secret that are read.
REGISTRY_SECRET_KEYS = ("username", "password", "token")


def needs_registry(fmt: str | None) -> bool:
    return fmt in REGISTRY_FORMATS


def sink_subject(topic: str) -> str:
    """The subject whose latest schema a sink's values are encoded with (TopicNameStrategy)."""
    return f"{topic}-value"
