"""What the operator observes about one consumer's driver, as `decide` reads it: a metrics
`Sample` (scrape or PromQL), the driver's last `Termination` (a Pod, or the dev runner),
the Deployment's replicas, and the PoisonDetected Event's rate-limit memory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from antidote_api.wire import CONSUMER_PREFIX, EXIT_REASONS, ExitCode


@dataclass(frozen=True)
class LastPoisonSample:
    time: datetime
    reason: str
    error_class: str | None
    topic: str
    partition: int
    offset: int
    disposition: str | None = None


@dataclass(frozen=True)
class Sample:
    """One reading of a consumer's metrics (a scrape of /metrics, or a PromQL answer)."""

    at: datetime
    counts: Mapping[str, int] = field(default_factory=dict)
    consecutive: int | None = None
    disabled: str | None = None  # the reason whose antidote_queue_disabled is 1
    last_poison: LastPoisonSample | None = None
    depths: Mapping[str, int] = field(default_factory=dict)  # topic kind -> records
    # Source partitions as (partition, next offset, lag), for autoscaling; None: not reported.
    partitions: tuple[tuple[int, int, int], ...] | None = None

    def same_values(self, other: Sample | None) -> bool:
        return other is not None and replace(other, at=self.at) == self


@dataclass(frozen=True)
class Termination:
    """The driver process ended: from a Pod's container status, or the dev runner."""

    exit_code: int
    finished_at: datetime
    source: str  # "pod" or "dev-runner"
    started_at: datetime | None = None  # when that process started
    message: str | None = None  # the termination message (the logs' tail on an error)

    def after(self, resumed_at: datetime | None) -> bool:
        """Evidence about the run since `resumed_at`: a driver that started before the resume
        belongs to the disabled run, however late it exits (its stop can outlast a quick resume)."""
        if resumed_at is None:
            return True
        if self.started_at is not None and self.started_at < resumed_at.replace(microsecond=0):
            return False
        return fresh(self.finished_at, resumed_at)

    @property
    def reason(self) -> str | None:
        return EXIT_REASONS.get(self.exit_code)

    def rejected_settings(self) -> str | None:
        """The driver's own line when it refused its settings (exit 2), else None."""
        if self.exit_code != ExitCode.BAD_SETTINGS:
            return None
        lines = [line.strip() for line in (self.message or "").splitlines() if line.strip()]
        # Its own line, though Spark may have logged after it (a Secret refused once Spark ran).
        own = [line for line in lines if line.startswith(CONSUMER_PREFIX)]
        line = (own or lines or ["no message"])[-1]
        return line.removeprefix(CONSUMER_PREFIX)[:1024]


@dataclass(frozen=True)
class DeploymentView:
    replicas: int
    available: int
    uid: str | None = None  # the consumer's own Deployment's: a scale is conditional on it


@dataclass(frozen=True)
class PoisonMemory:
    """Rate-limit state of the aggregated PoisonDetected Event (in memory only: after a
    restart the baseline is the count stored in status, so old poison is not re-announced)."""

    baseline: int | None = None
    last_event: datetime | None = None


def fresh(at: datetime, resumed_at: datetime | None) -> bool:
    # Condition times have second precision: evidence counts only from the second after a
    # resume, so a sample or exit from before the resume never disables again.
    return resumed_at is None or at >= resumed_at + timedelta(seconds=1)
