"""What a handler receives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs ~1us per message
class Message:
    """One Kafka message, as first produced: on a retry cycle the topic, partition and offset
    are still the original ones, and Antidote's own `antidote.*` headers are not shown."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    topic: str
    partition: int
    offset: int
    timestamp: int  # milliseconds since the epoch, as Kafka keeps it
    attempt: int = 1  # 1 for the first attempt of all, counting earlier cycles
    # The value and key as spec.source.kafka.valueFormat / keyFormat decode them (a dict for
    # Json, Avro and JsonSchema, the message for Protobuf); None with Bytes (the default) and
    # for a null. `value` and `key` stay the bytes as produced.
    data: Any = None
    key_data: Any = None

    def header(self, name: str) -> bytes | None:
        """The last value of header `name`, or None."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return found
