"""A real Spark driver in client mode against the API server, from this machine: what a
driver pod runs, with what the pod would provide made local (its token, the mounted
executor template and RPC secret, a loopback driver address). No kubelet starts the
executors it asks for; the API calls (pod creation under RBAC and admission, deletion at
stop) are real. Tests of the driver's permissions and of the executors' pods use it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The driver process: starts a session with the given conf, says STARTED, stops on a line.
DRIVER_SCRIPT = """
import json, sys
from pyspark.sql import SparkSession
b = SparkSession.builder.appName("antidote-rbac-probe")
for k, v in json.loads(sys.argv[1]).items():
    b = b.config(k, v)
spark = b.getOrCreate()
print("STARTED", flush=True)
sys.stdin.readline()
spark.stop()
print("STOPPED", flush=True)
"""


def local_conf(conf: Mapping[str, str], folder: Path, *, host: str, ca_cert: str, token: str,
               template: str) -> dict[str, str]:
    """The operator's spark-defaults (`conf`) for a driver here instead of in its pod: the
    token, the executor template and a fresh RPC secret written under `folder`."""
    (folder / "token").write_text(token)
    (folder / "template.yaml").write_text(template)
    (folder / "secret").write_bytes(uuid.uuid4().bytes * 2)
    out = {k: v for k, v in conf.items() if k != "spark.kubernetes.driver.pod.name"}
    out.update({
        "spark.master": f"k8s://{host}",
        "spark.kubernetes.authenticate.oauthTokenFile": str(folder / "token"),
        "spark.kubernetes.authenticate.caCertFile": ca_cert,
        "spark.kubernetes.executor.podTemplateFile": str(folder / "template.yaml"),
        "spark.authenticate.secret.file": str(folder / "secret"),
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.port": "0", "spark.driver.blockManager.port": "0", "spark.ui.enabled": "false",
        # Do not wait 30 s for executors that no kubelet will start.
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "1s",
    })
    return out


@dataclass
class Driver:
    proc: subprocess.Popen[str]
    log: Path

    def tail(self) -> str:
        return self.log.read_text()[-3000:]

    def stop(self) -> str:
        """Stops the session (Spark deletes its executor pods and ConfigMap); its whole log."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        assert self.proc.wait(timeout=120) == 0, self.tail()
        return self.log.read_text()


@contextmanager
def running_driver(conf: Mapping[str, Any], folder: Path, *, token_only: bool = True) -> Iterator[Driver]:
    """The driver process, started (STARTED read); killed on the way out if still running.
    `token_only`: no kubeconfig either, or Spark's Kubernetes client would load the admin's."""
    env = dict(os.environ)
    if token_only:
        env["KUBECONFIG"] = str(folder / "no-kubeconfig")
    log = folder / "driver.log"
    proc = subprocess.Popen([sys.executable, "-c", DRIVER_SCRIPT, json.dumps(conf)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=log.open("w"), text=True, env=env)
    driver = Driver(proc, log)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "STARTED", driver.tail()
        yield driver
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
