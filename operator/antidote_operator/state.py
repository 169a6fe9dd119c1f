"""The operator's in-memory view of each QueueConsumer, between events and scrapes.

Nothing here is authoritative: the API server holds the state (status, conditions,
annotations). This only keeps what is costly or impossible to re-read: the last metrics
sample (the consumer's /metrics vanishes when it stops), the Deployment as last seen,
the driver's last termination, and a lock that serialises writes per consumer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .executor_scale import Progress
from .observations import DeploymentView, PoisonMemory, Sample, Termination
from .reader_jobs import JobView, job_view

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
    ready: tuple[str, str] | None = None  # Ready's (status, reason) as last written, for metrics
    disabled_reason: str | None = None  # the QueueDisabled reason as last written, for metrics
    disabled_seen_at: float | None = None  # monotonic time the disable evidence arrived
    # Source partitions' progress between readings (executor_scale.track), for autoscaling.
    progress: dict[int, Progress] = field(default_factory=dict)
    # When the driver last became available (its Deployment's availableReplicas went from 0 to
    # more): partitions must be seen moving after it before a stall counts (autoscaler.step).
    driver_ready_at: datetime | None = None
    executors: tuple[int, int] | None = None  # status.executors (current, desired) as last written
    reader_waiting: str | None = None  # a reader trigger waiting for the active Job (logged once)
    # An object of a child's name that is not this consumer's (ownership), as last met by
    # the children's apply and by the reader's: Ready's reason until it is gone.
    child_conflict: str | None = None
    reader_conflict: str | None = None

    @property
    def conflict(self) -> str | None:
        return self.child_conflict or self.reader_conflict


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


@dataclass
class JobIndex:
    """Reader Jobs and their reports per consumer, fed by the watch streams (no list call
    per decision; one list per namespace the first time, as the stream may not have
    delivered them yet after a restart)."""

    jobs: dict[tuple[str, str], dict[str, JobView]] = field(default_factory=dict)
    reports: dict[tuple[str, str], str] = field(default_factory=dict)  # (ns, job) -> report
    listed: set[str] = field(default_factory=set)  # namespaces listed once

    def put(self, namespace: str, body: Mapping[str, Any], deleted: bool = False,
            report: str | None = None) -> JobView | None:
        """The Job's view, indexed; `report` is its reader's report when a ChildRunner ran it
        (on a cluster the report is read from its pod's termination message)."""
        view = job_view(body)
        if view is None:
            return None
        per = self.jobs.setdefault((namespace, view.consumer), {})
        if deleted:
            per.pop(view.name, None)
            self.reports.pop((namespace, view.name), None)
        else:
            per[view.name] = view
            if report:
                self.reports[(namespace, view.name)] = report
        return view

    def of(self, namespace: str, consumer: str) -> list[JobView]:
        return list(self.jobs.get((namespace, consumer), {}).values())

    def forget(self, namespace: str, consumer: str) -> None:
        for name in self.jobs.pop((namespace, consumer), {}):
            self.reports.pop((namespace, name), None)
