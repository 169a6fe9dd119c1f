"""The operator's in-memory view of each QueueConsumer, between events and scrapes.

Nothing here is authoritative: the API server holds the state (status, conditions,
annotations). This only keeps what is costly or impossible to re-read: the last metrics
sample (the consumer's /metrics vanishes when it stops), the Deployment as last seen,
the driver's last termination, and a lock that serialises writes per consumer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from datetime import datetime

from .observations import DeploymentView, PoisonMemory, Sample, Termination

Key = tuple[str, str]  # (namespace, name)


@dataclass
class ConsumerState:
    namespace: str
    name: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    uid: str | None = None
    body: dict[str, Any] | None = None  # the QueueConsumer as last seen on the watch stream
    deployment: DeploymentView | None = None
    sample: Sample | None = None
    termination: Termination | None = None
    metrics_url: str | None = None  # an override (the dev runner's port); else the template
    desired_replicas: int | None = None
    rendered: str | None = None  # fingerprint of the children last applied by this process
    poison: PoisonMemory = PoisonMemory()
    recheck_at: datetime | None = None
    next_resync: float = 0.0  # monotonic time of the next level-based full reconcile
    conditions: dict[str, str] = field(default_factory=dict)  # type -> status, for metrics
    disabled_reason: str | None = None  # the QueueDisabled reason as last written, for metrics
    disabled_seen_at: float | None = None  # monotonic time the disable evidence arrived
    reader_waiting: str | None = None  # a reader trigger waiting for the active Job (logged once)


class Registry:
    def __init__(self) -> None:
        self._items: dict[Key, ConsumerState] = {}

    def get(self, namespace: str, name: str) -> ConsumerState:
        key = (namespace, name)
        st = self._items.get(key)
        if st is None:
            st = self._items[key] = ConsumerState(namespace, name)
        return st

    def peek(self, namespace: str, name: str) -> ConsumerState | None:
        return self._items.get((namespace, name))

    def forget(self, namespace: str, name: str) -> None:
        self._items.pop((namespace, name), None)

    def __iter__(self) -> Iterator[ConsumerState]:
        return iter(list(self._items.values()))

    def __len__(self) -> int:
        return len(self._items)
