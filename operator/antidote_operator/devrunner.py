"""The dev runner: on the local stack (an API server with no kubelet), runs each consumer
Deployment's driver as a local process while its replicas are >= 1.

It plays kubelet and Deployment controller for exactly one kind of object, so the whole
loop (QueueConsumer -> Deployment -> running consumer -> metrics -> status -> disable)
runs on `antidote dev up`. It is off unless `antidote operator --dev-runner` is given, and
refuses to start when the operator runs in a pod, the API server is not on loopback, or
the cluster has a Node (a kubelet would run the same Deployment: two drivers, one queue).

What it does to the container's command, and nothing else:
- `antidote ...` runs as this Python's `antidote` (same venv);
- `--settings <mounted file>` points at a copy of the ConfigMap's settings;
- `--metrics-port` gets a free loopback port; `--master` becomes a local master; with a
  targets folder (`--dev-runner-targets`) that port is written there for Prometheus
  (devtargets.py) while the process runs;
- env: the operator's own, plus the container's literal `value`s except SPARK_CONF_DIR
  (the cluster-mode spark-defaults.conf does not apply to a local master);
- Secret volumes (the Kafka credentials of `secretRef`): read through the API and written to
  a private directory (0700, files 0600) that ANTIDOTE_SECRETS_DIR points at, removed when
  the process ends.

It reports back on the Deployment, as a kubelet and the Deployment controller would:
`status.availableReplicas` (once /metrics answers, like the readiness probe), and
annotations `antidote.dev/dev-runner*`: pid, metrics URL, log file, and the last exit
(`{"exitCode": 4, "finishedAt": ..., "generation": ...}`), from which the operator learns
why a consumer stopped after its /metrics went away with it.

Poison-reader Jobs get the same treatment: each runs once as a local `antidote reader`
(`--settings` a copy of the ConfigMap, `--report-file` a local file instead of the
termination log), and the runner writes what the Job controller would (status.startTime,
active, succeeded/failed, the Complete or Failed condition, completionTime) plus the
report as annotation `antidote.dev/dev-runner-report`, where a kubelet would have put it
in the pod's termination message.
"""

from __future__ import annotations

import asyncio
import base64
import ctypes
import ipaddress
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import aiohttp

from antidote_api.wire import SPARK_JARS_ENV as JARS_ENV
from antidote_devstack.build import checkout_spark_jars
from antidote_devstack.procs import free_port

from . import builders, kube
from .devtargets import TargetFiles
from .reader_jobs import DEV_RUNNER_REPORT
from .reconcile import DEV_RUNNER_EXIT, DEV_RUNNER_METRICS

log = logging.getLogger("antidote.operator.devrunner")

DEV_RUNNER = "antidote.dev/dev-runner"
DEV_RUNNER_PID = "antidote.dev/dev-runner-pid"
DEV_RUNNER_LOG = "antidote.dev/dev-runner-log"
# Exits after which the runner waits for a new Deployment generation instead of restarting:
# done (0) or the queue disabled (3, 4, 5: starting again would resume it behind the
# operator's back). Other exits restart with the kubelet's back-off.
FINAL_EXITS = frozenset({0, 3, 4, 5})
BACKOFF = (10, 20, 40, 80, 160, 300)
SECRET = kube.Kind("/api/v1", "secrets")
SECRETS_DIR_ENV = "ANTIDOTE_SECRETS_DIR"  # antidote_consumer.kafka.auth reads Secrets there


class DevRunnerRefused(RuntimeError):
    pass


async def check_allowed(k: kube.Kube) -> None:
    """Raise DevRunnerRefused unless this is plainly a local stack with no kubelet."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise DevRunnerRefused("the operator runs inside a cluster; the dev runner is for the "
                               "local stack (antidote dev up) only")
    host = urlparse(k.server).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise DevRunnerRefused(f"the API server {k.server} is not on loopback; the dev runner "
                               "is for the local stack (antidote dev up) only")
    if await k.nodes_exist():
        raise DevRunnerRefused("the cluster has Nodes, so a kubelet would run consumer "
                               "Deployments too; the dev runner is for a stack without one")


def _die_with_parent() -> None:
    # A consumer outliving a killed operator would keep consuming unseen.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _local_argv(container: Mapping[str, Any], replace: dict[str, str],
                append: tuple[str, ...] = ()) -> list[str]:
    """The container's command as a local command line: `antidote` as this venv's, the
    values of the `replace` flags swapped, and the `append` flags added when missing."""
    command = list(container.get("command") or []) + list(container.get("args") or [])
    if not command:
        raise ValueError("the container has no command")
    if command[0] == "antidote":
        exe = Path(sys.executable).with_name("antidote")
        command[:1] = [str(exe)] if exe.exists() else [sys.executable, "-m", "antidote_cli.main"]
    replace = dict(replace)
    out: list[str] = []
    skip = False
    for i, arg in enumerate(command):
        if skip:
            skip = False
            continue
        if arg in replace and i + 1 < len(command):
            out += [arg, replace[arg]]
            skip = True
        else:
            out.append(arg)
    for flag in append:
        if flag not in command:
            out += [flag, replace[flag]]
    return out


def jars_env() -> dict[str, str]:
    """What the image has in Spark's jars/ and a checkout does not: the connector jars, from
    the dev stack's cache, unless the environment names them already (`antidote dev env`)."""
    if os.environ.get(JARS_ENV):
        return {}
    jars = checkout_spark_jars()
    return {JARS_ENV: jars} if jars else {}


def translate(container: Mapping[str, Any], *, settings_path: str, metrics_port: int,
              master: str) -> tuple[list[str], dict[str, str]]:
    """The local command line and extra environment for a Deployment's driver container."""
    out = _local_argv(container, {"--settings": settings_path, "--metrics-port": str(metrics_port),
                                  "--master": master}, append=("--metrics-port", "--master"))
    env = {e["name"]: str(e["value"]) for e in container.get("env") or []
           if "value" in e and e["name"] != "SPARK_CONF_DIR"}
    return out, env


async def materialize_secrets(k: kube.Kube, namespace: str, pod_spec: Mapping[str, Any],
                              container: Mapping[str, Any], parent: Path) -> str:
    """The kubelet's part for the container's Secret volumes mounted under SECRETS_DIR: each
    Secret, read through the API, written to a new private directory under `parent`, at its
    mount path relative to SECRETS_DIR. Returns that directory (for ANTIDOTE_SECRETS_DIR)."""
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="secrets-", dir=parent))  # mode 0700
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts") or []}
    prefix = builders.SECRETS_DIR + "/"
    try:
        for volume in pod_spec.get("volumes") or []:
            name = (volume.get("secret") or {}).get("secretName")
            path = mounts.get(volume.get("name"), "")
            if not name or not path.startswith(prefix):
                continue
            secret = await k.get(SECRET, namespace, name)
            if secret is None:
                raise RuntimeError(f"Secret {namespace}/{name} (mounted at {path}) not found")
            target = root / path[len(prefix):]
            target.mkdir(mode=0o700, parents=True)
            for key, value in (secret.get("data") or {}).items():
                fd = os.open(target / key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(base64.b64decode(value))
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return str(root)


class _Runner:
    """One Deployment's local driver: a loop that converges the process on the replicas."""

    def __init__(self, owner: DevRunner, body: Mapping[str, Any]):
        self.owner = owner
        meta = body["metadata"]
        self.ns, self.name = meta["namespace"], meta["name"]
        self.body = body
        self.deleted = False
        self.wake = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None
        self.generation_started: int | None = None
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
        container = next(c for c in spec["containers"] if c["name"] == builders.CONTAINER)
        cm_name = next(v["configMap"]["name"] for v in spec.get("volumes", []) if "configMap" in v)
        cm = await k.get(kube.CONFIGMAP, self.ns, cm_name)
        if cm is None or builders.SETTINGS_KEY not in (cm.get("data") or {}):
            raise RuntimeError(f"ConfigMap {cm_name} with {builders.SETTINGS_KEY} not found")
        self.dir.mkdir(parents=True, exist_ok=True)
        settings = self.dir / builders.SETTINGS_KEY
        settings.write_text(cm["data"][builders.SETTINGS_KEY])
        port = free_port()
        argv, extra_env = translate(container, settings_path=str(settings), metrics_port=port,
                                    master=self.owner.master)
        secrets = await materialize_secrets(k, self.ns, spec, container, self.dir)
        env = {**os.environ, **jars_env(), **extra_env, "POD_NAME": f"{self.name}-dev-runner",
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

    def cleanup_files(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


# --- reader Jobs (dev only, as above): the kubelet's and the Job controller's part -----------------

REPORT_LIMIT = 4096  # the kubelet keeps at most 4096 bytes of a termination message


def translate_job(container: Mapping[str, Any], *, settings_path: str,
                  report_path: str) -> tuple[list[str], dict[str, str]]:
    """The local command line and extra environment of a reader Job's container."""
    out = _local_argv(container, {"--settings": settings_path, "--report-file": report_path})
    env = {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}
    return out, env


def _run_log_tail(logfile: Path, limit: int = 2048) -> str:
    """The last `limit` bytes the latest run wrote to `logfile` (runs start with a '--- ' line),
    as the kubelet keeps a failed container's logs' tail as its termination message."""
    try:
        with logfile.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    text = "\n" + text
    run = text.rsplit("\n--- ", 1)[-1].split("\n", 1)[-1] if "\n--- " in text else text
    return run[-limit:]


def _finished(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in status.get("conditions") or [])


class _JobRunner:
    """One reader Job run once as a local process (restartPolicy Never, backoffLimit 0)."""

    def __init__(self, owner: DevRunner, body: Mapping[str, Any]):
        self.owner = owner
        meta = body["metadata"]
        self.ns, self.name = meta["namespace"], meta["name"]
        self.body = body
        self.proc: asyncio.subprocess.Process | None = None
        self.deleted = False
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
        cm_name = next(v["configMap"]["name"] for v in spec.get("volumes", []) if "configMap" in v)
        cm = await k.get(kube.CONFIGMAP, self.ns, cm_name)
        if cm is None or builders.SETTINGS_KEY not in (cm.get("data") or {}):
            raise RuntimeError(f"ConfigMap {cm_name} with {builders.SETTINGS_KEY} not found")
        self.dir.mkdir(parents=True, exist_ok=True)
        settings = self.dir / builders.SETTINGS_KEY
        settings.write_text(cm["data"][builders.SETTINGS_KEY])
        report = self.dir / "report.json"
        report.unlink(missing_ok=True)
        argv, extra_env = translate_job(container, settings_path=str(settings), report_path=str(report))
        self.secrets = await materialize_secrets(k, self.ns, spec, container, self.dir)
        env = {**os.environ, **jars_env(), **extra_env, "ANTIDOTE_DEV_RUNNER": "1",
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
