"""The whole loop on the local stack: the operator with its dev runner runs a REAL consumer
(Spark, Kafka) whose downstream is down; the consumer disables its queue; the operator
scales it to 0, says why, survives a restart without repeating itself, and after the
cause is fixed a resume consumes every message that waited."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kubernetes import client

from antidote_testkit.kafka_io import produce
from antidote_testkit.operators import (Cluster, consumer, consumer_readiness, install_crds, operator, policy,
                                        wait_for, wait_settled)

pytestmark = pytest.mark.integration


@pytest.fixture
def k(api_client: client.ApiClient, namespace: str) -> Cluster:
    install_crds(api_client)
    return Cluster(api_client, namespace)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_queue_disable_by_a_real_consumer_then_fix_and_resume(
        k: Cluster, stack, kubeconfig: str, kafka_bootstrap: str, topic_factory, tmp_path, calls_dir) -> None:
    # Long on purpose: one story on one real consumer (disable, fix, resume), each step
    # starting from the state the step before left; split up, each part would start Spark again.
    source = topic_factory()
    # 18 good orders and 2 poison ones (the `upper` handler fails on those).
    values = [b"poison-%d" % i if i in (7, 13) else b"order-%d" % i for i in range(20)]
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, None) for i, v in enumerate(values)])
    # Every message fails: a systemic fault (the downstream is down), not 20 poison messages.
    k.create(policy("outage", {"retries": {"immediate": 0, "cycles": 0},
                               "queueDisable": {"failureRatio": {"threshold": 0.5, "minMessages": 5}}}))
    k.create(consumer("orders", "outage", kafka_bootstrap, source,
                      handler="tests.integration.handlers:downstream_down",
                      checkpoint={"location": str(tmp_path / "checkpoint")}))
    env = {**stack.env(), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "ANTIDOTE_TEST_CALLS_DIR": str(calls_dir)}
    runner_dir = str(tmp_path / "dev-runner")
    args = ("--dev-runner", "--dev-runner-dir", runner_dir, "--dev-runner-master", "local[1]")

    with operator(kubeconfig, k.ns, tmp_path, *args, env=env) as op:
        c = k.wait_condition("orders", "QueueDisabled", "True", "SystemicFailure", timeout=240)
        assert "failureRatio threshold 0.5" in c["message"]
        wait_for(lambda: k.replicas("orders") == 0, "the Deployment scaled to 0")
        assert k.condition("orders", "Ready") == ("False", "SystemicFailure")
        assert k.condition("orders", "Paused") == ("True", "QueueDisabled")
        wait_for(lambda: "QueueDisabled" in k.event_reasons("orders"), "the QueueDisabled Event")
        # The operator's gauge outlives the stopped consumer (the alert reads it).
        import urllib.request
        text = urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=5).read().decode()
        assert (f'antidote_operator_queue_disabled{{consumer="orders",namespace="{k.ns}",'
                f'reason="SystemicFailure"}} 1.0') in text
        # The driver answered the operator's waiting scrape when it disabled its queue (the
        # operator held one from the driver's start; disabling takes a batch of Spark work).
        waited = [line for line in text.splitlines()
                  if line.startswith('antidote_operator_scrapes_total{result="waited"}')]
        assert waited and float(waited[0].rsplit(" ", 1)[1]) >= 1, waited
        (ev,) = [e for e in k.events("orders") if e.reason == "QueueDisabled"]
        assert ev.type == "Warning" and "SystemicFailure" in ev.message
        # The dev runner reported the consumer's exit; nothing was quarantined or processed.
        dep = wait_for(lambda: (d := k.deployment("orders")) and "antidote.dev/dev-runner-exit" in
                       (d.metadata.annotations or {}) and d, "the dev runner to report the exit")
        exit_ = json.loads(dep.metadata.annotations["antidote.dev/dev-runner-exit"])
        assert exit_["exitCode"] == 4  # SystemicFailure
        assert "local process" in dep.metadata.annotations["antidote.dev/dev-runner"]
        status = k.qc("orders")["status"]
        assert status.get("counts", {}).get("processed", 0) == 0
        assert status.get("counts", {}).get("poisoned", 0) == 0
        assert "DEV RUNNER" in op.log()

    events_before = k.event_reasons("orders")
    children_before = k.children("orders")
    with operator(kubeconfig, k.ns, tmp_path, *args, env=env) as op:
        wait_settled(op, reconciled_past=0)  # the restarted operator's resume, then its rounds
        # Restarted: still disabled, still 0 replicas, no new Events, no new objects.
        assert k.condition("orders", "QueueDisabled") == ("True", "SystemicFailure")
        assert k.replicas("orders") == 0
        assert k.event_reasons("orders") == events_before
        assert k.children("orders") == children_before

        # Fix the cause (a handler that works), then resume with the annotation.
        k.patch("queueconsumers", "orders", {
            "metadata": {"annotations": {"antidote.dev/resume": "fixed"}},
            "spec": {"handler": "tests.integration.handlers:upper"}})
        k.wait_condition("orders", "QueueDisabled", "False", "Resumed")
        wait_for(lambda: k.replicas("orders") == 1, "running again")
        # The 20 messages that waited unconsumed get their outcome now: 18 processed, and
        # the 2 poison ones moved to the poison topic (immediate 0, cycles 0: one attempt).
        wait_for(lambda: (k.qc("orders")["status"].get("counts") or {}).get("processed") == 18,
                 "18 messages processed", timeout=240)
        counts = wait_for(lambda: (c := k.qc("orders")["status"]["counts"])["poisoned"] == 2 and c,
                          "2 messages poisoned")
        assert counts["moved"] == 2 and counts["rejected"] == counts["dropped"] == 0
        last = k.qc("orders")["status"]["lastPoison"]
        assert (last["topic"], last["partition"], last["reason"], last["disposition"]) == \
            (source, 0, "max-attempts", "Move")
        assert last["offset"] in (7, 13) and last["errorClass"] == "ValueError"
        c = k.wait_condition("orders", "PoisonDetected", "True", "MaxAttempts")
        assert "2 message(s) got a disposition (2 moved)" in c["message"]
        assert "poison-" not in c["message"]  # never the payload
        k.wait_condition("orders", "Ready", "True", "Running", timeout=30)
        wait_for(lambda: k.event_reasons("orders") == events_before + ["Resumed", "PoisonDetected"],
                 "a Resumed and one aggregated PoisonDetected Event")
        (ev,) = [e for e in k.events("orders") if e.reason == "PoisonDetected"]
        assert ev.type == "Warning" and "poison-" not in ev.message
        pid = int(k.deployment("orders").metadata.annotations["antidote.dev/dev-runner-pid"])
        assert pid_alive(pid)

        # Deleting the QueueConsumer removes its children and stops its local driver.
        k.delete("queueconsumers", "orders")
        wait_for(lambda: k.qc("orders") is None and not any(k.children("orders").values()),
                 "consumer and children gone")
        wait_for(lambda: not pid_alive(pid), "the dev runner's process stopped", timeout=90)


def test_the_dev_runner_refuses_to_run_inside_a_cluster(kubeconfig: str, namespace: str) -> None:
    from antidote_testkit.operators import ANTIDOTE

    env = {**os.environ, "KUBECONFIG": kubeconfig, "KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    out = subprocess.run([ANTIDOTE, "operator", "-n", namespace, "--dev-runner", "--metrics-port", "0"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--dev-runner refused: the operator runs inside a cluster" in out.stderr


def test_a_handler_that_cannot_be_imported_is_reported_in_ready_not_as_a_disabled_queue(
        k: Cluster, stack, kubeconfig: str, kafka_bootstrap: str, topic_factory, tmp_path, calls_dir) -> None:
    """The driver refuses its settings at start (exit 2, one line); the operator puts that
    line in Ready (reason SettingsRejected) with one Warning Event, and the queue stays
    enabled (a fixed spec turning it Running: tests/unit/test_operator_status.py)."""
    source = topic_factory()
    produce(kafka_bootstrap, source, [(b"k0", b"order-0", None)])
    k.create(policy("plain", {"retries": {"immediate": 0, "cycles": 0}}))
    k.create(consumer("typo", "plain", kafka_bootstrap, source,
                      handler="tests.integration.handlerz:upper",
                      checkpoint={"location": str(tmp_path / "checkpoint")}))
    env = {**stack.env(), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "ANTIDOTE_TEST_CALLS_DIR": str(calls_dir)}
    args = ("--dev-runner", "--dev-runner-dir", str(tmp_path / "dev-runner"),
            "--dev-runner-master", "local[1]")

    with operator(kubeconfig, k.ns, tmp_path, *args, env=env) as op:
        c = k.wait_condition("typo", "Ready", "False", "SettingsRejected", timeout=120)
        assert c["message"] == (
            "The driver refused its settings and exited with code 2: spec.handler "
            "'tests.integration.handlerz:upper': cannot import tests.integration.handlerz: "
            "No module named 'tests.integration.handlerz'")
        assert k.condition("typo", "QueueDisabled") == ("False", "QueueEnabled")
        assert k.replicas("typo") == 1  # restarted with back-off: a fixed image is picked up
        wait_for(lambda: "SettingsRejected" in k.event_reasons("typo"), "the SettingsRejected Event")
        # Restarted with back-off (10 s), refused again with the same line: no second Event.
        def exit_() -> dict | None:
            raw = (k.deployment("typo").metadata.annotations or {}).get("antidote.dev/dev-runner-exit")
            return json.loads(raw) if raw else None
        first = wait_for(exit_, "the dev runner to report the exit")
        assert first["exitCode"] == 2 and "spec.handler" in first["message"]
        wait_for(lambda: (e := exit_()) and e["finishedAt"] != first["finishedAt"], "a second exit",
                 timeout=60)
        assert k.condition("typo", "Ready") == ("False", "SettingsRejected")
        assert k.event_reasons("typo").count("SettingsRejected") == 1
        # The operator's gauge says the same (AntidoteConsumerNotRunning reads it), one series
        # per consumer, gone with the consumer.
        metrics = f"http://127.0.0.1:{op.metrics_port}/metrics"
        wait_for(lambda: consumer_readiness(metrics, k.ns).get("typo") == ("SettingsRejected", 0),
                 "the gauge says SettingsRejected")
        k.delete("queueconsumers", "typo")
        wait_for(lambda: "typo" not in consumer_readiness(metrics, k.ns), "the series gone with the consumer",
                 timeout=60)
