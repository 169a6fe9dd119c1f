"""`DevRunner`: the dev runner the operator holds; it keeps one local runner per consumer
Deployment and per reader Job it observes."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import kube
from .targets import TargetFiles
from .deployments import _Runner
from .jobs import _JobRunner

class DevRunner:
    def __init__(self, k: kube.Kube, *, base: str | None = None, master: str = "local[2]",
                 targets: TargetFiles | None = None):
        self.kube = k
        self.master = master
        self.targets = targets
        self.base = Path(base) if base else Path(tempfile.mkdtemp(prefix="antidote-dev-runner-"))
        self.runners: dict[tuple[str, str], _Runner] = {}
        self.jobs: dict[tuple[str, str], _JobRunner] = {}

    def observe(self, body: Mapping[str, Any], deleted: bool) -> None:
        meta = body.get("metadata", {})
        key = (meta.get("namespace"), meta.get("name"))
        runner = self.runners.get(key)  # type: ignore[arg-type]
        if runner is None or runner.task.done():
            if deleted:
                return
            runner = self.runners[key] = _Runner(self, dict(body))  # type: ignore[index]
        runner.update(dict(body), deleted)

    def observe_job(self, body: Mapping[str, Any], deleted: bool) -> None:
        """A reader Job: run it once, unless it finished (or another run of it is going)."""
        meta = body.get("metadata", {})
        key = (meta.get("namespace"), meta.get("name"))
        runner = self.jobs.get(key)  # type: ignore[arg-type]
        if deleted:
            if runner is not None:
                asyncio.create_task(runner.stop())
            return
        if runner is None:
            self.jobs[key] = _JobRunner(self, dict(body))  # type: ignore[index]

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

