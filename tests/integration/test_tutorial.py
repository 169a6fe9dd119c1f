"""docs/tutorial.md, run as written: every ```sh block marked `<!-- tutorial:NAME -->`, in
order, in one shell session (each block's exported variables and directory carry over to the
next, as in the reader's terminal), against the session's stack. What the page says you see
is asserted on each block's output and through the API server and Kafka.

Two blocks are stood in for, and only these: `names` (a namespace and topic unique to this
run: the stack may be shared, and a namespace never finishes terminating without a
controller-manager) and `dev-up` (the session's stack is up already, named by
$ANTIDOTE_STACK_DIR, which `antidote dev env` reads); `make dev-down` is prose, not a block. The "checkout" the commands run in is a temporary folder holding the
repository's `examples/` and `crds/` and the venv, so the copy the tutorial makes lands there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from antidote_testkit.kafka_io import read_all
from antidote_testkit.operators import ANTIDOTE, ROOT, Cluster, wait_for

pytestmark = pytest.mark.integration

TUTORIAL = ROOT / "docs" / "tutorial.md"
BLOCK = re.compile(r"<!-- tutorial:([\w-]+) -->\n```sh\n(.*?)\n```", re.S)
STEPS = ["names", "copy", "pytest", "dev-up", "env", "operator", "apply", "produce", "watch",
         "inspect", "fix", "redrive", "cleanup"]


def blocks() -> list[tuple[str, str]]:
    return BLOCK.findall(TUTORIAL.read_text())


def test_the_tutorial_marks_every_command_block_for_this_test() -> None:
    text = TUTORIAL.read_text()
    assert [name for name, _ in blocks()] == STEPS
    # No command block the test would not run: every ```sh block carries a marker.
    assert text.count("```sh\n") == len(STEPS)


class Session:
    """One bash session spread over several processes: each block starts from the state
    (exported variables, directory) the previous one ended with."""

    def __init__(self, workdir: Path, env: dict[str, str]):
        self.state = workdir / ".tutorial-state"
        self.state.write_text(f"cd {shlex.quote(str(workdir))}\n")
        self.env = env
        self.outputs: dict[str, str] = {}

    def run(self, name: str, script: str, timeout: float = 420) -> str:
        state = shlex.quote(str(self.state))
        wrapped = (f"source {state}\nset -euo pipefail\n{script}\n"
                   f'{{ export -p; printf "cd %q\\n" "$PWD"; }} > {state}.next && mv {state}.next {state}\n')
        out = subprocess.run(["bash", "-c", wrapped], env=self.env, stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=timeout)
        self.outputs[name] = out.stdout + out.stderr
        assert out.returncode == 0, f"tutorial step {name!r} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
        return out.stdout

    def var(self, name: str) -> str:
        out = subprocess.run(["bash", "-c", f"source {shlex.quote(str(self.state))}; printf %s \"${name}\""],
                             env=self.env, capture_output=True, text=True, check=True)
        return out.stdout


def _stop(pid_file: Path) -> None:
    """The operator the `operator` block started in the background (a process of this test)."""
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        wait_for(lambda: not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
                 or None, "the operator to exit", timeout=90, errors=(OSError,))
    except AssertionError:
        os.kill(pid, signal.SIGKILL)


def test_the_tutorial_runs_as_written(stack, api_client: client.ApiClient, kafka_admin, tmp_path) -> None:
    steps = dict(blocks())
    assert list(steps) == STEPS
    suffix = uuid.uuid4().hex[:6]
    ns, topic = f"tutorial-{suffix}", f"tutorial-orders-{suffix}"
    # The "checkout": what the commands use of it, and nothing else.
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for part in ("examples", "crds"):
        (checkout / part).symlink_to(ROOT / part)
    (checkout / ".venv").symlink_to(Path(sys.executable).parents[1])
    env = {**os.environ, "ANTIDOTE_STACK_DIR": stack.dir}
    env.pop("KUBECONFIG", None)  # `antidote dev env` sets it
    sh = Session(checkout, env)
    project = checkout / "orders"
    k = Cluster(api_client, ns)
    try:
        # 1. names, the copy
        sh.run("names", f"export NS={ns} TOPIC={topic}")
        sh.run("copy", steps["copy"])
        assert (project / "orders_handlers" / "handler.py").is_file()
        assert sh.var("PWD") == str(project)

        # 2. the handler's tests: "4 passed"
        out = sh.run("pytest", steps["pytest"])
        assert re.search(r"^4 passed in ", out, re.M), out

        # 3. the stack (the session's) and the operator
        # Stood in for by the session's stack: the target it names exists, and starts the stack.
        assert steps["dev-up"] == "make -C .. dev-up"
        assert re.search(r"^dev-up:.*\n\t.*antidote dev up$", (ROOT / "Makefile").read_text(), re.M)
        sh.run("env", steps["env"])
        assert sh.var("KAFKA_BOOTSTRAP_SERVERS") == stack.kafka_bootstrap
        assert sh.var("KUBECONFIG") == stack.kubeconfig
        sh.run("operator", steps["operator"])
        assert (project / "operator.pid").is_file()

        # 4. the policy and the consumer, Ready
        out = sh.run("apply", steps["apply"])
        assert "queueconsumer.antidote.dev/orders condition met" in out
        qc = k.qc("orders")
        source = qc["spec"]["source"]["kafka"]
        assert (source["bootstrapServers"], source["topic"]) == (stack.kafka_bootstrap, topic)
        assert k.ppol("orders")["spec"]["retries"]["cycleDelay"] == "5s"

        # 5, 6. the orders in; one moved at once (validation), one after its cycles (KeyError)
        sh.run("produce", steps["produce"])
        out = sh.run("watch", steps["watch"])
        rows = [line.split() for line in out.splitlines() if line.startswith("orders ")]
        assert rows and rows[0][1:6] == ["True", "False", "Running", "3", "2"], out
        # The Event is posted beside the status: wait for it before reading the block's own.
        wait_for(lambda: "PoisonDetected" in k.event_reasons("orders"), "the PoisonDetected Event")
        out = sh.run("watch", steps["watch"])
        assert "PoisonDetected" in out and "Warning" in out, out

        out = sh.run("inspect", steps["inspect"])
        assert f"{topic}.poison: 2 record(s), 2 match, showing 2" in out, out
        assert re.search(r"max-attempts\s+KeyError\s+9\b", out), out
        assert re.search(r"validation\s+", out) and '"{not json"' in out, out
        doc = json.loads(subprocess.run([ANTIDOTE, "inspect", "orders", "-n", ns, "-o", "json"], env={
            **env, "KUBECONFIG": stack.kubeconfig}, capture_output=True, text=True, check=True).stdout)
        by_reason = {m["reason"]: m for m in doc["messages"]}
        assert set(by_reason) == {"max-attempts", "validation"}
        assert (by_reason["max-attempts"]["error_class"], by_reason["max-attempts"]["attempts"]) == ("KeyError", 9)
        assert by_reason["max-attempts"]["origin"] == f"{topic}/0/2"

        # 7. the fix (tested: "5 passed"), the restart, the redrive, processed
        out = sh.run("fix", steps["fix"])
        assert re.search(r"^5 passed in ", out, re.M), out
        out = sh.run("redrive", steps["redrive"])
        assert "1 redriven" in out and "queueconsumer.antidote.dev/orders condition met" in out, out
        rows = [line.split() for line in out.splitlines() if line.startswith("orders ")]
        assert rows and rows[0][1:6] == ["True", "False", "Running", "4", "2"], out
        priced = {json.loads(r.value)["id"]: json.loads(r.value) for r in read_all(stack.kafka_bootstrap,
                                                                                  f"{topic}-priced")}
        assert priced["o-3"] == {"id": "o-3", "totalCents": 450, "currency": "EUR"}
        assert {"o-1", "o-2", "o-4"} <= set(priced)
        back = [r for r in read_all(stack.kafka_bootstrap, topic) if r.key == b"o-3"]
        assert [dict(r.headers).get("antidote.redrive.count") for r in back] == [None, b"1"]
        poison = read_all(stack.kafka_bootstrap, f"{topic}.poison")
        assert len(poison) == 2  # the not-JSON message stays; nothing new quarantined

        # 8. clean up: the consumer's children go with it, the operator stops
        sh.run("cleanup", steps["cleanup"])
        wait_for(lambda: k.qc("orders") is None, "the QueueConsumer to be deleted (the operator's finalizer)")
        assert k.deployment("orders") is None
        pid = int((project / "operator.pid").read_text())
        wait_for(lambda: not Path(f"/proc/{pid}").exists()
                 or "zombie" in Path(f"/proc/{pid}/status").read_text().lower(),
                 "the operator to stop", timeout=90, errors=(OSError,))
    finally:
        for name, text in sh.outputs.items():
            print(f"--- {name}\n{text}")
        _stop(project / "operator.pid")
        if (project / "operator.log").exists():
            print("--- operator.log (tail)\n" + "\n".join((project / "operator.log").read_text(
                errors="replace").splitlines()[-40:]))
        ours = [t for t in kafka_admin.list_topics(timeout=30).topics if t.startswith(topic)]
        if ours:
            for fut in kafka_admin.delete_topics(ours).values():
                fut.result(timeout=30)
        try:
            k.core.delete_namespace(ns)
        except client.ApiException:
            pass
