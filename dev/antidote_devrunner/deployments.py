"""A consumer Deployment's driver as a local process: the kubelet's and the Deployment
controller's part (start, readiness, restarts with back-off, the exit it reports)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from antidote_api.wire import ExitCode
from antidote_devstack.procs import free_port

from antidote_operator import kube
from . import env as env_of
from antidote_operator.builders import driver
from .annotations import (DEV_RUNNER, DEV_RUNNER_EXIT, DEV_RUNNER_LOG, DEV_RUNNER_METRICS,
                          DEV_RUNNER_PID)
from .local import (BACKOFF, FINAL_EXITS, SECRETS_DIR_ENV, LocalRun, Owner, _die_with_parent, _now,
                    _run_log_tail, jars_env, log, materialize_secrets, materialize_settings, translate)


# The variables the runner sets itself (POD_NAME) or leaves out (SPARK_CONF_DIR: the cluster's
# spark-defaults ask for executor pods).
OWN_ENV = frozenset({"POD_NAME", "SPARK_CONF_DIR"})


class _Runner(LocalRun):
    """One Deployment's local driver: a loop that converges the process on the replicas."""

    def __init__(self, owner: Owner, body: Mapping[str, Any]):
        super().__init__(owner, body)
        meta = body["metadata"]
        self.wake = asyncio.Event()
        self.generation_started: int | None = None
        self.template_started: str | None = None  # the pod template the process runs
        self.failures = 0
        self.not_before = 0.0
        self.last_exit: dict[str, Any] | None = None
        try:
            self.last_exit = json.loads((meta.get("annotations") or {}).get(DEV_RUNNER_EXIT) or "null")
        except ValueError:
            self.last_exit = None
        self.dir = owner.base / self.ns / self.name
        self.task = asyncio.create_task(self.loop(), name=f"dev runner {self.ns}/{self.name}")

    @property
    def generation(self) -> int:
        return int(self.body["metadata"].get("generation", 0))

    def update(self, body: Mapping[str, Any], deleted: bool) -> None:
        self.body, self.deleted = body, self.deleted or deleted
        self.wake.set()

    def template(self) -> str:
        return json.dumps((self.body.get("spec") or {}).get("template") or {}, sort_keys=True)

    def wanted(self) -> bool:
        return not self.deleted and int((self.body.get("spec") or {}).get("replicas", 1)) >= 1

    def may_start(self) -> bool:
        if self.last_exit and int(self.last_exit.get("exitCode", -1)) in FINAL_EXITS \
                and self.last_exit.get("generation") == self.generation:
            return False
        return time.monotonic() >= self.not_before

    async def loop(self) -> None:
        while True:
            timeout = max(0.1, self.not_before - time.monotonic()) if self.not_before else None
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()
            try:
                if self.proc is not None and not self.wanted():
                    await self.stop()
                elif self.proc is not None and self.template() != self.template_started:
                    # A new pod template (the settings hash: new settings, a new executor
                    # count): the Deployment controller would replace the pod (Recreate).
                    log.warning("DEV RUNNER: the pod template of %s/%s changed: restarting it",
                                self.ns, self.name)
                    await self.stop()
                if self.proc is None and self.wanted() and self.may_start():
                    await self.start()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - report, back off, try again
                log.warning("dev runner: %s/%s: %s", self.ns, self.name, err)
                self.failures += 1
                self.not_before = time.monotonic() + BACKOFF[min(self.failures, len(BACKOFF)) - 1]
            if self.deleted and self.proc is None:
                return

    async def start(self) -> None:
        k = self.owner.kube
        spec = self.body["spec"]["template"]["spec"]
        container = next(c for c in spec["containers"] if c["name"] == driver.CONTAINER)
        settings = await materialize_settings(k, self.ns, spec, self.dir)
        port = free_port()
        argv, extra_env = translate(container, settings_path=str(settings), metrics_port=port,
                                    master=self.owner.master)
        pod_name = f"{self.name}-dev-runner"
        try:
            # The handler's env and envFrom (spec.env, spec.envFrom), read as the kubelet would.
            handler_env = await env_of.resolve(k, self.ns, spec, container, pod_name=pod_name,
                                               uid=self.body["metadata"].get("uid", ""), skip=OWN_ENV)
        except env_of.MissingRef as err:
            await self.refuse(str(err))
            return
        secrets = await materialize_secrets(k, self.ns, spec, container, self.dir)
        env = {**os.environ, **jars_env(), **handler_env, **extra_env, "POD_NAME": pod_name,
               "ANTIDOTE_DEV_RUNNER": "1", SECRETS_DIR_ENV: secrets}
        logfile = self.dir / "consumer.log"
        with logfile.open("ab") as out:
            out.write(f"--- {_now()} dev runner: {' '.join(argv)}\n".encode())
            out.flush()
            try:
                self.proc = await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                    stderr=asyncio.subprocess.STDOUT, env=env, preexec_fn=_die_with_parent)
            except BaseException:
                shutil.rmtree(secrets, ignore_errors=True)
                raise
        self.generation_started, self.last_exit = self.generation, None
        self.template_started = self.template()
        self.started_at = _now()
        url = f"http://127.0.0.1:{port}/metrics"
        log.warning("DEV RUNNER: started %s/%s as local process %d (metrics %s, log %s)",
                    self.ns, self.name, self.proc.pid, url, logfile)
        await self.report({DEV_RUNNER: "local process of `antidote operator --dev-runner`, not a pod",
                           DEV_RUNNER_PID: str(self.proc.pid), DEV_RUNNER_METRICS: url,
                           DEV_RUNNER_LOG: str(logfile), DEV_RUNNER_EXIT: None}, available=0)
        if self.owner.targets is not None:
            self.owner.targets.consumer(self.ns, self.name, port)
        proc = self.proc
        asyncio.create_task(self.ready_when_serving(proc, url))
        asyncio.create_task(self.reap(proc, secrets))

    async def ready_when_serving(self, proc: asyncio.subprocess.Process, url: str) -> None:
        """availableReplicas = 1 once /metrics answers (the Deployment's readiness probe)."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            while proc.returncode is None:
                try:
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            await self.report({}, available=1)
                            return
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                    pass
                await asyncio.sleep(0.5)

    async def reap(self, proc: asyncio.subprocess.Process, secrets: str) -> None:
        code = await proc.wait()
        shutil.rmtree(secrets, ignore_errors=True)  # as the kubelet unmounts a pod's Secrets
        if code < 0:
            code = 128 - code  # killed by a signal: reported as the kubelet does
        if self.owner.targets is not None:
            self.owner.targets.remove_consumer(self.ns, self.name)
        self.last_exit = {"exitCode": code, "startedAt": self.started_at, "finishedAt": _now(),
                          "generation": self.generation_started}
        if code != 0:  # terminationMessagePolicy FallbackToLogsOnError: this run's logs' tail
            self.last_exit["message"] = _run_log_tail(self.dir / "consumer.log")
        if code in FINAL_EXITS:
            self.failures, self.not_before = 0, 0.0
        else:
            self.failures += 1
            self.not_before = time.monotonic() + BACKOFF[min(self.failures, len(BACKOFF)) - 1]
        log.warning("DEV RUNNER: %s/%s (process %d) exited with code %d", self.ns, self.name, proc.pid, code)
        if self.proc is proc:
            self.proc = None
        try:
            await self.report({DEV_RUNNER_PID: None, DEV_RUNNER_EXIT: json.dumps(self.last_exit)},
                              available=0)
        except Exception as err:  # noqa: BLE001 - e.g. the Deployment is gone
            log.info("dev runner: could not report the exit of %s/%s: %s", self.ns, self.name, err)
        self.wake.set()

    async def refuse(self, why: str) -> None:
        """A container the kubelet would not create (a missing Secret, ConfigMap or key in its
        env: CreateContainerConfigError): not started, reported as a refused start (exit 2,
        whose line the operator puts in Ready), tried again with back-off."""
        now = _now()
        self.last_exit = {"exitCode": int(ExitCode.BAD_SETTINGS), "startedAt": now, "finishedAt": now,
                          "generation": self.generation,
                          "message": f"dev runner: cannot create the driver's container "
                                     f"(CreateContainerConfigError): {why}"}
        self.failures += 1
        self.not_before = time.monotonic() + BACKOFF[min(self.failures, len(BACKOFF)) - 1]
        log.warning("DEV RUNNER: not starting %s/%s: %s", self.ns, self.name, why)
        await self.report({DEV_RUNNER_EXIT: json.dumps(self.last_exit)}, available=0)

    async def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        grace = min(int(self.body["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)), 60)
        log.warning("DEV RUNNER: stopping %s/%s (process %d)", self.ns, self.name, proc.pid)
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
        await asyncio.sleep(0)  # let reap() record the exit
        if self.proc is proc:
            self.proc = None

    async def report(self, annotations: Mapping[str, str | None], *, available: int) -> None:
        k = self.owner.kube
        if self.deleted:
            return
        if annotations:
            await k.patch(kube.DEPLOYMENT, self.ns, self.name, {"metadata": {"annotations": dict(annotations)}})
        n = 1 if self.proc is not None else 0
        await k.patch(kube.DEPLOYMENT, self.ns, self.name, {"status": {
            "observedGeneration": self.generation, "replicas": n, "updatedReplicas": n,
            "readyReplicas": available, "availableReplicas": available}}, subresource="status")
