"""A reader Job as one local `antidote reader` run: the kubelet's and the Job controller's
part (status, conditions, the report as an annotation)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from antidote_api.wire import DEV_RUNNER_REPORT
from antidote_operator import kube
from . import env as env_of
from .annotations import DEV_RUNNER, DEV_RUNNER_EXIT, DEV_RUNNER_LOG, DEV_RUNNER_PID
from .local import (REPORT_LIMIT, SECRETS_DIR_ENV, LocalRun, Owner, _die_with_parent, _finished,
                    _now, jars_env, log, materialize_secrets, materialize_settings, translate_job)


class _JobRunner(LocalRun):
    """One reader Job run once as a local process (restartPolicy Never, backoffLimit 0)."""

    def __init__(self, owner: Owner, body: Mapping[str, Any]):
        super().__init__(owner, body)
        self.dir = owner.base / self.ns / "jobs" / self.name
        self.secrets: str | None = None
        self.task = asyncio.create_task(self.run(), name=f"dev runner job {self.ns}/{self.name}")

    async def run(self) -> None:
        try:
            status = self.body.get("status") or {}
            if _finished(status):
                return
            if status.get("startTime"):
                # Started by an earlier operator process, whose children died with it.
                await self.finish(None, "DevRunnerRestarted", "the dev runner's process ended "
                                  "with the operator that started it")
                return
            await self.execute()
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - the Job fails, as a pod that cannot start
            log.warning("dev runner: Job %s/%s: %s", self.ns, self.name, err)
            try:
                await self.finish(None, "DevRunnerError", str(err)[:500])
            except Exception:  # noqa: BLE001
                pass
        finally:
            if self.secrets is not None:
                shutil.rmtree(self.secrets, ignore_errors=True)

    async def execute(self) -> None:
        k = self.owner.kube
        spec = self.body["spec"]["template"]["spec"]
        container = spec["containers"][0]
        settings = await materialize_settings(k, self.ns, spec, self.dir)
        report = self.dir / "report.json"
        report.unlink(missing_ok=True)
        argv, extra_env = translate_job(container, settings_path=str(settings), report_path=str(report))
        try:
            # The consumer's env and envFrom (its storage credentials), read as the kubelet would.
            user_env = await env_of.resolve(k, self.ns, spec, container, pod_name=f"{self.name}-dev-runner",
                                            uid=self.body["metadata"].get("uid", ""))
        except env_of.MissingRef as err:  # the kubelet would not start the container
            await self.finish(None, "CreateContainerConfigError", str(err))
            return
        self.secrets = await materialize_secrets(k, self.ns, spec, container, self.dir)
        env = {**os.environ, **jars_env(), **user_env, **extra_env, "ANTIDOTE_DEV_RUNNER": "1",
               SECRETS_DIR_ENV: self.secrets}
        logfile = self.dir / "reader.log"
        with logfile.open("ab") as out:
            out.write(f"--- {_now()} dev runner: {' '.join(argv)}\n".encode())
            out.flush()
            self.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
                env=env, preexec_fn=_die_with_parent)
        log.warning("DEV RUNNER: started reader Job %s/%s as local process %d (log %s)",
                    self.ns, self.name, self.proc.pid, logfile)
        await k.patch(kube.JOB, self.ns, self.name, {"metadata": {"annotations": {
            DEV_RUNNER: "local process of `antidote operator --dev-runner`, not a pod",
            DEV_RUNNER_PID: str(self.proc.pid), DEV_RUNNER_LOG: str(logfile)}}})
        await k.patch(kube.JOB, self.ns, self.name, {"status": {"startTime": _now(), "active": 1}},
                      subresource="status")
        deadline = self.body["spec"].get("activeDeadlineSeconds")
        try:
            code = await asyncio.wait_for(self.proc.wait(), deadline)
        except asyncio.TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            log.warning("DEV RUNNER: reader Job %s/%s passed its activeDeadlineSeconds", self.ns, self.name)
            await self.finish(None, "DeadlineExceeded", "Job was active longer than specified deadline",
                              report)
            return
        if code < 0:
            code = 128 - code
        log.warning("DEV RUNNER: reader Job %s/%s (process %d) exited with code %d",
                    self.ns, self.name, self.proc.pid, code)
        if self.deleted:
            return
        if code == 0:
            await self.finish(code, None, None, report)
        else:
            await self.finish(code, "BackoffLimitExceeded",
                              f"Job has reached the specified backoff limit (exit code {code})", report,
                              logfile=logfile)

    async def finish(self, code: int | None, reason: str | None, message: str | None,
                     report: Path | None = None, logfile: Path | None = None) -> None:
        """Report as the kubelet (termination message) and the Job controller (status) would."""
        k = self.owner.kube
        text = None
        if report is not None and report.exists() and report.stat().st_size:
            text = report.read_bytes()[:REPORT_LIMIT].decode("utf-8", "replace")
        elif logfile is not None and logfile.exists():
            # terminationMessagePolicy FallbackToLogsOnError: the logs' tail.
            text = logfile.read_bytes()[-2048:].decode("utf-8", "replace")
        ann: dict[str, str | None] = {DEV_RUNNER_PID: None}
        if text is not None:
            ann[DEV_RUNNER_REPORT] = text
        if code is not None:
            ann[DEV_RUNNER_EXIT] = json.dumps({"exitCode": code, "finishedAt": _now()})
        await k.patch(kube.JOB, self.ns, self.name, {"metadata": {"annotations": ann}})
        now = _now()
        if reason is None:
            conds = [{"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                      "message": "Reached expected number of succeeded pods", "lastTransitionTime": now},
                     {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                      "message": "Reached expected number of succeeded pods", "lastTransitionTime": now}]
            status: dict[str, Any] = {"active": 0, "succeeded": 1, "completionTime": now, "conditions": conds}
        else:
            conds = [{"type": t, "status": "True", "reason": reason, "message": message or reason,
                      "lastTransitionTime": now} for t in ("FailureTarget", "Failed")]
            status = {"active": 0, "failed": 1, "conditions": conds}
        await k.patch(kube.JOB, self.ns, self.name, {"status": status}, subresource="status")

    async def stop(self) -> None:
        self.deleted = True
        proc = self.proc
        if proc is not None and proc.returncode is None:
            log.warning("DEV RUNNER: stopping reader Job %s/%s (process %d)", self.ns, self.name, proc.pid)
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), 30)
            except asyncio.TimeoutError:
                proc.kill()
