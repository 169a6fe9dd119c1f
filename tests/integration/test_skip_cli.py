"""`antidote skip <consumer>` the way on-call runs it: a real consumer (run by the operator's
dev runner) stops at a poison message under disposition Fault; skip (dry run, then for
real) reads the cluster's settings and moves the message; `antidote resume` restarts the
consumer, which goes past it."""

from __future__ import annotations

import json
from collections import Counter
import os
import subprocess
import sys

import pytest
from kubernetes import client

from antidote_testkit.consumers import calls
from antidote_testkit.kafka_io import produce, read_all
from antidote_testkit.operators import ANTIDOTE, Cluster, consumer, install_crds, operator, policy, wait_for

pytestmark = pytest.mark.integration


def cli(*argv: str, kubeconfig: str) -> subprocess.CompletedProcess:
    return subprocess.run([ANTIDOTE, *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KUBECONFIG": kubeconfig})


@pytest.fixture
def k(api_client: client.ApiClient, namespace: str) -> Cluster:
    install_crds(api_client)
    return Cluster(api_client, namespace)


def test_skip_then_resume_through_the_cli_goes_past_the_fault_message(
        k: Cluster, stack, kubeconfig: str, kafka_bootstrap: str, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    values = [b"poison" if i == 5 else b"order-%d" % i for i in range(10)]
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, [("trace", b"t%d" % i)]) for i, v in enumerate(values)])
    k.create(policy("p", {"retries": {"immediate": 1, "cycles": 0}, "disposition": "Fault",
                          "nativeHeaders": ["Connect"]}))
    k.create(consumer("orders", "p", kafka_bootstrap, source, sink={"kafka": {"topic": sink}},
                      checkpoint={"location": str(tmp_path / "checkpoint")}))
    env = {**stack.env(), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "ANTIDOTE_TEST_CALLS_DIR": str(calls_dir)}
    args = ("--dev-runner", "--dev-runner-dir", str(tmp_path / "dev-runner"), "--dev-runner-master", "local[1]")
    poison = f"{source}.poison"
    ns = k.ns

    with operator(kubeconfig, ns, tmp_path, *args, env=env):
        k.wait_condition("orders", "QueueDisabled", "True", "Fault", timeout=120)
        wait_for(lambda: k.replicas("orders") == 0, "the Deployment scaled to 0")

        out = cli("skip", "orders", "-n", ns, "--dry-run", kubeconfig=kubeconfig)
        assert out.returncode == 0, out.stderr
        assert out.stdout == (f"would move {source}/0/5 (original {source}/0/5; max-attempts, "
                              f"ValueError) to {poison}\n")
        assert read_all(kafka_bootstrap, poison) == []  # a dry run changes nothing

        out = cli("skip", "orders", "-n", ns, "-o", "json", kubeconfig=kubeconfig)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {
            "topic": source, "partition": 0, "offset": 5, "origin": f"{source}/0/5",
            "reason": "max-attempts", "error_class": "ValueError", "poison_topic": poison, "dry_run": False}
        (q,) = read_all(kafka_bootstrap, poison)
        hdrs = dict(q.headers)
        assert (q.key, q.value, hdrs["trace"]) == (b"k5", b"poison", b"t5")
        assert hdrs["antidote.original.offset"] == b"5" and "antidote.skipped.at" in hdrs
        assert (hdrs["antidote.attempts"], hdrs["antidote.disposition"]) == (b"2", b"Fault")
        # The policy's nativeHeaders, through the API server, the operator's settings and skip.
        assert (hdrs["__connect.errors.topic"], hdrs["__connect.errors.offset"]) == (source.encode(), b"5")
        assert hdrs["__connect.errors.exception.class.name"] == b"ValueError"

        # Skipped once: a second skip finds nothing to move and says what to do instead.
        out = cli("skip", "orders", "-n", ns, kubeconfig=kubeconfig)
        assert out.returncode == 1
        assert out.stderr == (f"antidote skip: the message consumer 'orders' stopped at ({source}/0/5) was "
                              f"skipped already; nothing was changed. Next: antidote resume orders -n {ns}\n")

        out = cli("resume", "orders", "-n", ns, kubeconfig=kubeconfig)
        assert out.returncode == 0, out.stderr
        counts = wait_for(lambda: (c := (k.qc("orders")["status"].get("counts") or {})).get("processed") == 9
                          and c, "the 9 other messages processed", timeout=120)
        assert (counts["moved"], counts["poisoned"]) == (1, 1)  # the skip, counted in the ledger
        assert k.condition("orders", "QueueDisabled")[0] == "False"
        # Everything but the skipped message reached the sink, each once (read_committed: the
        # outputs of the messages before it in the stopped batch were committed by their task
        # before the Fault stopped it, and the resumed run passed over them), nothing else moved.
        assert Counter(r.value for r in read_all(kafka_bootstrap, sink)) == Counter(
            v.upper() for i, v in enumerate(values) if i != 5)
        assert len(read_all(kafka_bootstrap, poison)) == 1
        # The skipped message was never handed to the handler again: its 2 attempts were
        # before the stop; every other message ran once (those before it, whose outputs were
        # committed, are not run again).
        per_offset = calls(calls_dir, source)
        assert [per_offset[f"{source}/0/{i}"] for i in range(10)] == [1, 1, 1, 1, 1, 2, 1, 1, 1, 1]
