"""Retrying Kafka calls that fail only while the cluster settles (a new topic's leader is
not serving yet, a leader moved)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

T = TypeVar("T")

TRANSIENT = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
             KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
             KafkaError.REQUEST_TIMED_OUT}


def retrying(call: Callable[[], T], what: str, timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            return call()
        except KafkaException as err:
            kerr = err.args[0] if err.args and isinstance(err.args[0], KafkaError) else None
            transient = kerr is not None and (kerr.code() in TRANSIENT or kerr.retriable())
            if not transient or time.monotonic() > deadline:
                raise RuntimeError(f"{what}: {err}") from err
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
