"""The dev runner's local side: whether it may run at all, and what a container's command,
environment and Secret volumes become on this machine."""

from __future__ import annotations

import asyncio
import base64
import ctypes
import ipaddress
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from antidote_api.wire import SPARK_JARS_ENV as JARS_ENV
from antidote_devstack.build import checkout_spark_jars

from antidote_operator import kube
from antidote_operator.child_runner import ChildRunnerRefused
from antidote_operator.builders import driver
from .targets import TargetFiles

log = logging.getLogger("antidote.operator.devrunner")

# Exits after which the runner waits for a new Deployment generation instead of restarting:
# done (0) or the queue disabled (3, 4, 5: starting again would resume it behind the
# operator's back). Other exits restart with the kubelet's back-off.
FINAL_EXITS = frozenset({0, 3, 4, 5})
BACKOFF = (10, 20, 40, 80, 160, 300)
SECRET = kube.Kind("/api/v1", "secrets")
SECRETS_DIR_ENV = "ANTIDOTE_SECRETS_DIR"  # antidote_consumer.kafka.auth reads Secrets there


class Owner(Protocol):
    """What a local run needs of the DevRunner that holds it."""

    kube: kube.Kube
    master: str
    targets: TargetFiles | None
    base: Path


class LocalRun:
    """One object (a Deployment, a Job) the dev runner runs as a local process."""

    def __init__(self, owner: Owner, body: Mapping[str, Any]):
        self.owner = owner
        meta = body["metadata"]
        self.ns, self.name = meta["namespace"], meta["name"]
        self.body = body
        self.deleted = False
        self.proc: asyncio.subprocess.Process | None = None


class DevRunnerRefused(ChildRunnerRefused):
    def __init__(self, why: str) -> None:
        super().__init__(f"--dev-runner refused: {why}")


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
    # --reports-port: any free one, as several local drivers share the machine.
    out = _local_argv(container, {"--settings": settings_path, "--metrics-port": str(metrics_port),
                                  "--reports-port": "0", "--master": master},
                      append=("--metrics-port", "--master"))
    env = {e["name"]: str(e["value"]) for e in container.get("env") or []
           if "value" in e and e["name"] != "SPARK_CONF_DIR"}
    return out, env


async def materialize_settings(k: kube.Kube, namespace: str, pod_spec: Mapping[str, Any],
                               parent: Path) -> Path:
    """The kubelet's part for the pod's settings ConfigMap volume: its settings file, read
    through the API, written under `parent` (created); its path."""
    cm_name = next(v["configMap"]["name"] for v in pod_spec.get("volumes", []) if "configMap" in v)
    cm = await k.get(kube.CONFIGMAP, namespace, cm_name)
    if cm is None or driver.SETTINGS_KEY not in (cm.get("data") or {}):
        raise RuntimeError(f"ConfigMap {cm_name} with {driver.SETTINGS_KEY} not found")
    parent.mkdir(parents=True, exist_ok=True)
    settings = parent / driver.SETTINGS_KEY
    settings.write_text(cm["data"][driver.SETTINGS_KEY])
    return settings


async def materialize_secrets(k: kube.Kube, namespace: str, pod_spec: Mapping[str, Any],
                              container: Mapping[str, Any], parent: Path) -> str:
    """The kubelet's part for the container's Secret volumes mounted under SECRETS_DIR: each
    Secret, read through the API, written to a new private directory under `parent`, at its
    mount path relative to SECRETS_DIR. Returns that directory (for ANTIDOTE_SECRETS_DIR)."""
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="secrets-", dir=parent))  # mode 0700
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts") or []}
    prefix = driver.SECRETS_DIR + "/"
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


