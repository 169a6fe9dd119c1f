"""What the dev runner writes on the objects it runs, as a kubelet and the controllers would,
and how the operator reads it back: the annotation names and the driver's last exit."""

from __future__ import annotations

import json
from collections.abc import Mapping

from antidote_api.times import parse_time

from antidote_operator.observations import Termination

DEV_RUNNER = "antidote.dev/dev-runner"
DEV_RUNNER_PID = "antidote.dev/dev-runner-pid"
DEV_RUNNER_LOG = "antidote.dev/dev-runner-log"
# Written on a Deployment it runs: the metrics URL, and the driver's last exit.
DEV_RUNNER_METRICS = "antidote.dev/dev-runner-metrics"
DEV_RUNNER_EXIT = "antidote.dev/dev-runner-exit"
# Written on a Job it ran: the report, as a pod's termination message is (DEV_RUNNER_REPORT,
# in antidote_api.wire: the on-call commands read it too).


def dev_runner_termination(annotations: Mapping[str, str]) -> Termination | None:
    """The driver's last exit as the dev runner recorded it (DEV_RUNNER_EXIT), else None."""
    raw = annotations.get(DEV_RUNNER_EXIT)
    if not raw:
        return None
    try:
        doc = json.loads(raw)
        at = parse_time(doc.get("finishedAt"))
        return Termination(int(doc["exitCode"]), at, "dev-runner",
                           parse_time(doc.get("startedAt")), doc.get("message")) if at else None
    except (ValueError, KeyError, TypeError):
        return None
