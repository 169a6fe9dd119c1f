"""Why a consumer's driver pod does not run, as its status says (the kubelet's and the
scheduler's own reasons): the Ready reason of a consumer that never starts, which the
`AntidoteConsumerNotRunning` alert carries (docs/alerts.md).

`driver_pod_problem` is the pure reading of one Pod; `PodProblems` keeps the latest per
driver pod, fed by the operator's Pod watch. It is an index of its own, not part of a
consumer's in-memory state, because the watch's first listing after a restart can come
before the consumer is known: the problem must not wait for the pod's next change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from antidote_api.conditions import DriverReason
from antidote_api.times import parse_time

from .builders.driver import CONTAINER

# The kubelet's waiting reasons for an image it cannot pull (it alternates the first two).
IMAGE_PULL_WAITING = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName"})
MESSAGE_MAX = 512


@dataclass(frozen=True)
class PodProblem:
    reason: str  # a DriverReason
    message: str
    # A crash loop's last exit: one from before a resume is the disabled run's (status.py).
    since: datetime | None = None


def _short(text: str | None) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= MESSAGE_MAX else text[:MESSAGE_MAX - 3] + "..."


def driver_pod_problem(pod: Mapping[str, Any]) -> PodProblem | None:
    """Why this driver pod does not run, or None (running, starting, or going away).

    The messages stay the same while the problem does (no counts, no times, not the
    kubelet's alternating texts): Ready's message changes, and is written, only when the
    problem does."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp"):
        return None
    name, ns = meta.get("name", "?"), meta.get("namespace", "?")
    if status.get("phase", "Pending") == "Pending":
        for c in status.get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" \
                    and c.get("reason") == "Unschedulable":
                return PodProblem(DriverReason.UNSCHEDULABLE.value,
                                  f"The scheduler cannot place the driver pod {name}: {_short(c.get('message'))}. "
                                  "Check spec.spark's resources, nodeSelector, affinity and tolerations.")
    image = next((c.get("image", "?") for c in (pod.get("spec") or {}).get("containers") or []
                  if c.get("name") == CONTAINER), "?")
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") != CONTAINER:
            continue
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in IMAGE_PULL_WAITING:
            return PodProblem(DriverReason.IMAGE_PULL_BACK_OFF.value,
                              f'The driver pod {name} cannot pull its image "{image}". Check spec.spark.image '
                              "and spec.spark.imagePullSecrets; `kubectl describe pod -n "
                              f"{ns} {name}` shows the registry's answer.")
        if reason == "CreateContainerConfigError":
            return PodProblem(DriverReason.CREATE_CONTAINER_CONFIG_ERROR.value,
                              f"The driver pod {name} cannot create its container: {_short(waiting.get('message'))}.")
        last = (cs.get("lastState") or {}).get("terminated")
        # Waiting in back-off, or started again after a crash and not up yet: the same
        # crash loop (a driver that refuses its settings is SettingsRejected instead).
        if reason == "CrashLoopBackOff" or (last and int(cs.get("restartCount") or 0) > 0
                                            and not cs.get("ready")):
            code = f" (last exit code {last['exitCode']})" if last and "exitCode" in last else ""
            return PodProblem(DriverReason.CRASH_LOOP_BACK_OFF.value,
                              f"The driver container of pod {name} keeps exiting{code}; "
                              f"`kubectl logs -n {ns} {name} --previous` shows why.",
                              parse_time(last.get("finishedAt")) if last else None)
    return None


class PodProblems:
    """The latest problem of each driver pod, by consumer (the Pod watch feeds it)."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], dict[str, PodProblem]] = {}
        # The Pod watches that feed it (anything counting its LISTs read, `lists`).
        self.watches: list[Any] = []

    @property
    def listed(self) -> bool:
        """Every Pod watch has read its list once: no problem known means none. Before (an
        operator's start), a consumer keeps the pod's reason it had, instead of flapping to
        Starting and back (a second Event, the alert's `for:` started again)."""
        return all(w.lists > 0 for w in self.watches)

    def put(self, namespace: str, consumer: str, pod: str, problem: PodProblem | None) -> bool:
        """Record a pod's problem (None: it has none, or is gone); True when that changed."""
        per = self._pods.setdefault((namespace, consumer), {})
        old = per.get(pod)
        if problem is None:
            per.pop(pod, None)
        else:
            per[pod] = problem
        if not per:
            self._pods.pop((namespace, consumer), None)
        return old != problem

    def of(self, namespace: str, consumer: str) -> PodProblem | None:
        """One problem of the consumer's driver pods (the same one each time: by pod name)."""
        per = self._pods.get((namespace, consumer)) or {}
        return per[min(per)] if per else None

    def forget(self, namespace: str, consumer: str) -> None:
        self._pods.pop((namespace, consumer), None)
