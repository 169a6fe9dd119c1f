"""Retrying Kafka calls that fail only while the cluster settles (a new topic's leader is
not serving yet, a leader moved)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

T = TypeVar("T")

# A partition's leader moved or restarted: a client that asked with the leader and epoch it
# had cached gets one of these until its metadata is refreshed (make test's broker crash
# caught FENCED_LEADER_EPOCH from the retry pump's ListOffsets ending a consumer).
LEADER_MOVED = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
                KafkaError.OFFSET_NOT_AVAILABLE}
TRANSIENT = LEADER_MOVED | {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TRANSPORT,
                            KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}


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


class Unanswered(Exception):
    """No broker answered in time: `errors` the client reported, `last` its last call's error."""

    def __init__(self, errors: list, last: str):
        super().__init__(last)
        self.errors, self.last = errors, last


def connect_once(conf: dict, bootstrap: str, timeout: float,
                 refused: Callable[[list], BaseException | None] = lambda errors: None) -> None:
    """Ask for metadata until a broker answers. `refused(errors)` may return an exception to
    raise at once (credentials refused); Unanswered after `timeout` s. The client's own log
    lines, one per refused connection and second, are kept quiet unless `conf` sets a
    log_level (`antidote redrive -v`)."""
    from confluent_kafka.admin import AdminClient

    errors: list = []
    admin = AdminClient({"log_level": 0, **conf, "bootstrap.servers": bootstrap,
                         "error_cb": errors.append})
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=1)
            return
        except KafkaException as err:
            last = err.args[0].str() if err.args and isinstance(err.args[0], KafkaError) else str(err)
        admin.poll(0)  # serves error_cb
        stop = refused(errors)
        if stop is not None:
            raise stop
        if time.monotonic() > deadline:
            raise Unanswered(errors, last)
