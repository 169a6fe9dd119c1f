"""`DevRunner`: the operator's ChildRunner on the local stack (antidote_operator.child_runner);
it keeps one local runner per consumer Deployment and per reader Job it observes. `factory`
is what `antidote operator --dev-runner` passes to the operator."""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antidote_operator import kube
from antidote_operator.child_runner import RunnerFactory
from antidote_operator.context import Options
from antidote_operator.observations import Termination

from antidote_api.wire import DEV_RUNNER_REPORT

from .annotations import DEV_RUNNER_METRICS, dev_runner_termination
from .deployments import _Runner
from .jobs import _JobRunner
from .local import DevRunnerRefused, check_allowed
from .targets import TargetFiles

log = logging.getLogger("antidote.operator")


@dataclass(frozen=True)
class DevRunnerOptions:
    base: str | None = None  # where its runs' files go (a temporary folder if None)
    master: str = "local[2]"
    targets: str | None = None  # file_sd folder of the stack's Prometheus


def factory(dev: DevRunnerOptions) -> RunnerFactory:
    """What `antidote operator --dev-runner` hands to `antidote_operator.main.run`."""
    async def make(k: kube.Kube, options: Options) -> DevRunner:
        if options.peering:
            raise DevRunnerRefused("it runs consumers inside this process, so it cannot hand "
                                   "them over to another replica: drop --peering")
        await check_allowed(k)
        targets = None
        if dev.targets:
            targets = TargetFiles(dev.targets)
            targets.prune()
        return DevRunner(k, base=dev.base, master=dev.master, targets=targets)
    return make


class DevRunner:
    def __init__(self, k: kube.Kube, *, base: str | None = None, master: str = "local[2]",
                 targets: TargetFiles | None = None):
        self.kube = k
        self.master = master
        self.targets = targets
        self.base = Path(base) if base else Path(tempfile.mkdtemp(prefix="antidote-dev-runner-"))
        self.runners: dict[tuple[str, str], _Runner] = {}
        self.jobs: dict[tuple[str, str], _JobRunner] = {}

    def started(self, metrics_port: int | None) -> None:
        if self.targets is not None and metrics_port:
            self.targets.operator(metrics_port)
        log.warning("DEV RUNNER ON: consumer Deployments run as local processes of this "
                    "operator (local stack only; never on a real cluster)")

    def metrics_url(self, annotations: Mapping[str, str]) -> str | None:
        return annotations.get(DEV_RUNNER_METRICS)

    def termination(self, annotations: Mapping[str, str]) -> Termination | None:
        return dev_runner_termination(annotations)

    def job_report(self, annotations: Mapping[str, str]) -> str | None:
        return annotations.get(DEV_RUNNER_REPORT) or None

    def observe(self, body: Mapping[str, Any], deleted: bool) -> None:
        meta = body.get("metadata", {})
        key = (meta.get("namespace"), meta.get("name"))
        runner = self.runners.get(key)
        if runner is None or runner.task.done():
            if deleted:
                return
            runner = self.runners[key] = _Runner(self, dict(body))
        runner.update(dict(body), deleted)

    def observe_job(self, body: Mapping[str, Any], deleted: bool) -> None:
        """A reader Job: run it once, unless it finished (or another run of it is going)."""
        meta = body.get("metadata", {})
        key = (meta.get("namespace"), meta.get("name"))
        runner = self.jobs.get(key)
        if deleted:
            if runner is not None:
                asyncio.create_task(runner.stop())
            return
        if runner is None:
            self.jobs[key] = _JobRunner(self, dict(body))

    async def close(self) -> None:
        """Stop every local driver (SIGTERM, then the grace period) as the operator exits."""
        await asyncio.gather(*(j.stop() for j in self.jobs.values()), return_exceptions=True)
        for j in self.jobs.values():
            j.task.cancel()
        runners = list(self.runners.values())
        for r in runners:
            r.deleted = True
        await asyncio.gather(*(r.stop() for r in runners), return_exceptions=True)
        for r in runners:
            r.task.cancel()
        await asyncio.gather(*(r.task for r in runners), return_exceptions=True)
        if self.targets is not None:
            self.targets.close()  # this operator's own file too

