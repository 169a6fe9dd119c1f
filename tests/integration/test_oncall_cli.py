"""`antidote inspect|resume|drain` (and `kubectl antidote ...`) against the real API server
and a poison topic filled by a real consumer run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from kubernetes import client
import pytest
import yaml

from antidote_api.drain import parse_drain
from antidote_api.names import drain_job_name

from antidote_testkit import consumers as consumer_util
from antidote_testkit.kafka_io import produce, read_all
from antidote_testkit.operators import ANTIDOTE, Cluster, consumer, free_port, install_crds, operator, policy, wait_for

pytestmark = pytest.mark.integration

POLICY = {"retries": {"immediate": 0, "cycles": 0}, "reader": {"action": "Hold"}}


@pytest.fixture
def k(api_client: client.ApiClient, namespace: str) -> Cluster:
    install_crds(api_client)
    return Cluster(api_client, namespace)


def cli(*argv: str, kubeconfig: str, env: dict[str, str] | None = None, prog: str = ANTIDOTE) -> subprocess.CompletedProcess:
    return subprocess.run([prog, *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KUBECONFIG": kubeconfig, **(env or {})})


def test_inspect_shows_what_a_real_consumer_quarantined(k: Cluster, kubeconfig: str, kafka_bootstrap: str,
                                                       topic_factory, spark, calls_dir, tmp_path) -> None:
    source = topic_factory()
    values = [b"poison-%d" % i if i in (2, 5, 9) else b"order-%d" % i for i in range(12)]
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, None) for i, v in enumerate(values)])
    s = consumer_util.settings(kafka_bootstrap, source, tmp_path, policy=POLICY, name="orders")
    code, _ = consumer_util.run(spark, s)
    assert int(code) == 0
    # The QueueConsumer over the same topic (paused: the consumer above already ran); the
    # operator writes the settings ConfigMap that inspect reads.
    k.create(policy("p", POLICY))
    k.create(consumer("orders", "p", kafka_bootstrap, source, paused=True))
    with operator(kubeconfig, k.ns, tmp_path):
        wait_for(lambda: k.condition("orders", "Paused") == ("True", "UserRequested"), "the operator")
        out = cli("inspect", "orders", "-n", k.ns, kubeconfig=kubeconfig)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("ORIGIN "))
        text = " ".join(" ".join(lines[:at]).split())  # the header, wrapped at 100 columns
        assert text.startswith(f"{k.ns}/orders: Ready=False(Paused) Paused=True(UserRequested)")
        assert f"{source}.poison: 3 record(s), 3 match, showing 3; ORIGIN is partition/offset in {source}" in text
        lines = lines[at - 2:]
        assert lines[2].split()[:3] == ["ORIGIN", "REASON", "ERROR"]
        rows = lines[3:6]
        for row, offset in zip(rows, (2, 5, 9)):
            cells = row.split()
            assert cells[0] == f"0/{offset}" and cells[1:4] == ["max-attempts", "ValueError", "1"]
        assert all(len(line) <= 100 for line in lines)
        assert "poison-" not in out.stdout  # no payload unless asked

        out = cli("inspect", "orders", "-n", k.ns, "--show-payload", "--limit", "1", kubeconfig=kubeconfig)
        assert out.returncode == 0, out.stderr
        assert '    payload (8 bytes): "poison-2"' in out.stdout
        assert "2 more not shown (--limit 1)" in out.stdout and "may hold secrets" in out.stdout

        out = cli("inspect", "orders", "-n", k.ns, "-o", "json", "--error-class", "KeyError", kubeconfig=kubeconfig)
        doc = json.loads(out.stdout)
        assert (doc["total"], doc["matched"], doc["messages"]) == (3, 0, [])
        out = cli("inspect", "orders", "-n", k.ns, "-o", "json", "--reason", "max-attempts", kubeconfig=kubeconfig)
        doc = json.loads(out.stdout)
        assert [m["offset"] for m in doc["messages"]] == [0, 1, 2]
        assert [m["origin"] for m in doc["messages"]] == [f"{source}/0/{o}" for o in (2, 5, 9)]
        assert all(m["payload"] is None and m["first_failure"] and m["attempts"] == 1 for m in doc["messages"])
        assert doc["status"]["conditions"]

        # kubectl's plugin: `kubectl antidote ...` runs kubectl-antidote with the same words.
        bin_dir = str(Path(ANTIDOTE).parent)
        out = subprocess.run(["kubectl", "antidote", "inspect", "orders", "-n", k.ns, "-o", "json"],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "KUBECONFIG": kubeconfig,
                                  "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")})
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["matched"] == 3

        # `redrive <consumer>`: the reader, in this process, with the cluster's settings.
        out = cli("redrive", "orders", "-n", k.ns, "--dry-run", "-o", "json", kubeconfig=kubeconfig)
        assert out.returncode == 0, out.stderr
        assert (json.loads(out.stdout)["dryRun"], json.loads(out.stdout)["redriven"]) == (True, 3)
        assert len(read_all(kafka_bootstrap, source)) == 12  # a dry run changes nothing
        out = cli("redrive", "orders", "-n", k.ns, "--error-class", "ValueError", "-o", "json", kubeconfig=kubeconfig)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["redriven"] == 3
        back = read_all(kafka_bootstrap, source)[12:]
        assert sorted(r.value for r in back) == [b"poison-2", b"poison-5", b"poison-9"]
        assert all(dict(r.headers)["antidote.redrive.count"] == b"1" for r in back)
        # inspect marks what a reader has handled (below its group's committed offset).
        out = cli("inspect", "orders", "-n", k.ns, "-o", "json", kubeconfig=kubeconfig)
        assert [m["handled"] for m in json.loads(out.stdout)["messages"]] == [True, True, True]
        out = cli("inspect", "orders", "-n", k.ns, kubeconfig=kubeconfig)
        assert "* handled already by a reader Job" in out.stdout


def test_resume_and_drain_write_what_the_operator_acts_on(k: Cluster, kubeconfig: str, kafka_bootstrap: str,
                                                          tmp_path) -> None:
    k.create(policy("p", POLICY))
    k.create(consumer("orders", "p", kafka_bootstrap, "orders", paused=True))
    with operator(kubeconfig, k.ns, tmp_path):
        k.wait_condition("orders", "Paused", "True", "UserRequested")
        out = cli("resume", "orders", "-n", k.ns, kubeconfig=kubeconfig)
        assert out.returncode == 0, out.stderr
        said = " ".join(out.stdout.split())  # wrapped at 100 columns
        assert "was paused: annotated antidote.dev/resume=" in said and "and set spec.paused to false" in said
        k.wait_condition("orders", "Paused", "False", "NotPaused")
        wait_for(lambda: "antidote.dev/resume" not in (k.qc("orders")["metadata"].get("annotations") or {}),
                 "the operator to consume the resume annotation")
        assert k.qc("orders")["spec"]["paused"] is False
        # Events are posted after the status write that records them: wait for it.
        wait_for(lambda: "Resumed" in k.event_reasons("orders"), "the Resumed Event")

        out = cli("resume", "orders", "-n", k.ns, kubeconfig=kubeconfig)
        assert out.returncode == 1
        assert out.stderr == (f'antidote resume: queueconsumer "orders" is neither paused nor disabled (QueueDisabled=False '
                              f'(QueueEnabled)); nothing to resume (--force annotates it anyway)\n')

        out = cli("drain", "orders", "-n", k.ns, "--action", "Drop", "--reason", "validation",
                  "--request-id", "r9", "-o", "json", kubeconfig=kubeconfig)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["job"] == drain_job_name("orders", "r9")
        job = wait_for(lambda: _job(k, drain_job_name("orders", "r9")), "the drain Job")
        assert job.spec.template.spec.containers[0].args[5:] == ["--action", "Drop", "--reason", "validation"]
        assert parse_drain(job.metadata.annotations["antidote.dev/drain-request"]).reasons == ("validation",)


def _job(k: Cluster, name: str):
    try:
        return client.BatchV1Api(k.core.api_client).read_namespaced_job(name, k.ns)
    except client.ApiException:
        return None


def test_errors_are_one_line_without_tracebacks(k: Cluster, kubeconfig: str, tmp_path) -> None:
    for cmd in ("inspect", "resume", "drain", "redrive"):
        out = cli(cmd, "nope", "-n", k.ns, kubeconfig=kubeconfig)
        assert out.returncode == 1, (cmd, out.stderr)
        assert out.stderr == f'antidote {cmd}: queueconsumer "nope" not found in namespace "{k.ns}"\n', cmd

    # A cluster that does not answer: the kubeconfig of the stack, pointed at a closed port.
    cfg = yaml.safe_load(Path(kubeconfig).read_text())
    port = free_port()
    for c in cfg["clusters"]:
        c["cluster"]["server"] = f"https://127.0.0.1:{port}"
    dead = tmp_path / "dead-kubeconfig"
    dead.write_text(yaml.safe_dump(cfg))
    out = cli("inspect", "orders", "-n", k.ns, kubeconfig=str(dead))
    assert out.returncode == 1
    assert out.stderr == f"antidote inspect: cannot reach the Kubernetes API server at https://127.0.0.1:{port}: connection refused\n"
    out = cli("inspect", "orders", "--kubeconfig", str(tmp_path / "missing"), kubeconfig=kubeconfig)
    assert out.returncode == 1 and out.stderr.startswith("antidote inspect: cannot load the kubeconfig") and "Traceback" not in out.stderr
