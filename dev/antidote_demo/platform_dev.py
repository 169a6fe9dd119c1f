"""Where the demo's story runs without a node: the operator as a local process with its dev
runner (consumers and reader Jobs as local processes), the accounts service a process on
loopback.
No root and no image build: an edit to the checkout is in the next run (docs/operator.md,
"The dev runner")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from antidote_consumer.examples import expenses

from .errors import DemoError


class DevPlatform:
    node = False
    label = "dev runner"

    def __init__(self, demo: Any):
        self.demo = demo
        self.workdir: Path = demo.workdir
        self._operator: subprocess.Popen | None = None
        self._accounts: subprocess.Popen | None = None
        self.accounts_port = 0

    # --- the operator --------------------------------------------------------------------
    def install(self) -> None:
        from kubernetes import client

        from antidote_api import crdgen
        from antidote_devstack.procs import free_port

        d, say = self.demo, self.demo.narrator
        say.step("Installing the CRDs and starting the operator (dev runner: consumers run as "
                 "local processes, since this stack has no node; `antidote demo --node` runs them as pods)")
        ext = client.ApiextensionsV1Api(d.api)
        for kind in crdgen.KINDS:  # generated from the models: the same CRDs as crds/
            try:
                # The client serialises a plain dict as it does its model (its annotation
                # names the model only).
                ext.create_custom_resource_definition(crdgen.crd(kind))  # type: ignore[arg-type]
            except client.ApiException as err:
                if err.status != 409:
                    raise
        d._wait(d._served, "the CRDs to be served", 60)
        d._namespace()
        self.accounts_port = free_port()
        self._start_accounts()
        env = {**os.environ, **d.st.env(), "PYSPARK_PYTHON": sys.executable,
               "SPARK_LOCAL_IP": "127.0.0.1",
               expenses.ACCOUNTS_URL_ENV: f"http://127.0.0.1:{self.accounts_port}"}
        antidote = str(Path(sys.executable).with_name("antidote"))
        # The operator's /metrics only for the stack's Prometheus (its dev runner writes the
        # scrape targets), on a free port.
        port = free_port() if d.st.prometheus_url else 0
        argv = [antidote, "operator", "--namespace", d.ns, "--metrics-port", str(port),
                "--scrape-interval", "1", "--poison-event-interval", "10", "--dev-runner",
                "--dev-runner-dir", str(self.workdir / "dev-runner"), "--dev-runner-master", "local[1]"]
        log = (self.workdir / "operator.log").open("ab")
        self._operator = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        say.ok(f"operator running (pid {self._operator.pid}), log {self.workdir / 'operator.log'}")

    def check(self, what: str) -> None:
        if self._operator is not None and self._operator.poll() is not None:
            raise DemoError(f"the operator exited ({self._operator.returncode}) while waiting for {what}")

    # --- the accounts service ------------------------------------------------------------
    def accounts(self, up: bool) -> None:
        """Its database down (every lookup answers 503) or back."""
        from antidote_consumer.examples import accounts

        accounts.set_outage(f"http://127.0.0.1:{self.accounts_port}", not up)

    def _start_accounts(self) -> None:
        log = (self.workdir / "accounts.log").open("ab")
        self._accounts = subprocess.Popen(
            [sys.executable, "-m", "antidote_consumer.examples.accounts", "--host", "127.0.0.1",
             "--port", str(self.accounts_port)], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.demo._wait(self._answers, "the accounts service to answer", 30)

    def _answers(self) -> bool:
        import urllib.request

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(f"http://127.0.0.1:{self.accounts_port}/healthz", timeout=1):
                return True
        except OSError:
            return False

    # --- what the story needs to know ----------------------------------------------------
    def spec(self) -> dict[str, Any]:
        """The QueueConsumer's fields that depend on where it runs."""
        return {"checkpoint": {"location": str(self.workdir / "checkpoint")}}

    @property
    def archive(self) -> str:
        return str(self.workdir / "archive")

    @property
    def archive_on_host(self) -> Path:
        return self.workdir / "archive"

    def show_pods(self) -> None:
        """No pods here: the consumers are processes."""

    def hints(self) -> list[str]:
        return [f"operator log: {self.workdir / 'operator.log'}; consumer logs: {self.workdir / 'dev-runner'}"]

    def where_to_look(self) -> list[str]:
        return [f"  operator log                             {self.workdir / 'operator.log'}",
                f"  consumer logs                            {self.workdir / 'dev-runner'}"]

    def stop(self) -> None:
        from antidote_devstack.procs import terminate

        for proc in (self._operator, self._accounts):
            if proc is not None:
                terminate(proc)
        self._operator = self._accounts = None
