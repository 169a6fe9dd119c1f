"""Executors scaled by lag, poison excluded (spec.spark.autoscale), on the real stack: the API
server, Kafka, and the operator with its dev runner running the driver as a local process.

The dev runner runs the driver with a local master (`local[N]` threads in one JVM), where
`spark.executor.instances` has no effect; what is checked is the operator's decision and
what it writes for a cluster: `status.executors`, the Event, the count in the driver's
Spark configuration (the settings ConfigMap's spark-defaults.conf) and the pod template's
settings hash, whose change restarts the driver (here: the dev runner's process).

One consumer run, two situations:
1. a message hangs in the handler at the head of partition 0 (until its attempt time limit)
   while a backlog arrives on all four partitions: a micro-batch ends only when all its
   tasks do, so no partition moves; the lag is there, and the executors stay at 1
   (`LagBlocked`), though the same lag would ask for 4;
2. the attempt time limit ends the hang (the message goes to its retry cycle), the
   partitions move, and the same backlog now scales the consumer up to 4 (one task per
   partition: 4 partitions keep 4 one-core executors busy); once it is worked off, the
   count stays up until the scale-down cool-down (1 h here) has passed.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client

from antidote_testkit.kafka_io import produce
from antidote_testkit.operators import Cluster, consumer, install_crds, operator, policy, wait_for

pytestmark = pytest.mark.integration

PARTITIONS = 4
BACKLOG = 1000  # per partition
HANG_LIMIT_S = 45  # the attempt time limit that ends the hang


def executors(k: Cluster, name: str) -> dict:
    return (k.qc(name) or {}).get("status", {}).get("executors") or {}


def counts(k: Cluster, name: str) -> dict:
    return ((k.qc(name) or {}).get("status") or {}).get("counts") or {}


def spark_instances(k: Cluster, name: str) -> int:
    cm = k.core.read_namespaced_config_map(f"{name}-settings", k.ns)
    (line,) = [ln for ln in cm.data["spark-defaults.conf"].splitlines()
               if ln.startswith("spark.executor.instances ")]
    return int(line.split()[1])


def settings_hash(k: Cluster, name: str) -> str:
    return k.deployment(name).spec.template.metadata.annotations["antidote.dev/settings-hash"]


def source_lag(k: Cluster, name: str) -> int:
    """The consumer's own reading of its source lag, from its /metrics (the dev runner's port)."""
    url = k.deployment(name).metadata.annotations["antidote.dev/dev-runner-metrics"]
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("antidote_source_partition_lag_records{"))


@pytest.mark.slow  # `make test-slow` (docs/testing.md)
def test_a_hanging_message_does_not_scale_up_and_a_real_backlog_does(
        api_client: client.ApiClient, namespace: str, kubeconfig: str, kafka_bootstrap: str,
        topic_factory, tmp_path: Path, calls_dir: Path) -> None:
    install_crds(api_client)
    k = Cluster(api_client, namespace)
    source = topic_factory(partitions=PARTITIONS)
    k.create(policy("p", {"retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1h",
                                      "attemptTimeout": f"{HANG_LIMIT_S}s"}}))
    k.create(consumer("orders", "p", kafka_bootstrap, source, handler="tests.integration.handlers:slow_or_hang",
                      checkpoint={"location": str(tmp_path / "checkpoint")},
                      spark={"autoscale": {"min": 1, "max": 8, "targetLagPerExecutor": 200,
                                           "scaleUpCooldown": "0s", "scaleDownCooldown": "1h"}}))
    for p in range(PARTITIONS):  # one record each: every partition has been read once
        produce(kafka_bootstrap, source, [(None, b"warm-up", None)], partition=p)
    env = {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "ANTIDOTE_TEST_CALLS_DIR": str(calls_dir), "ANTIDOTE_TEST_DELAY": "0.005"}
    args = ("--dev-runner", "--dev-runner-dir", str(tmp_path / "dev-runner"), "--dev-runner-master", "local[1]")

    with operator(kubeconfig, namespace, tmp_path, *args, env=env) as op:
        wait_for(lambda: counts(k, "orders").get("processed") == PARTITIONS,
                 "the warm-up records processed", timeout=240)
        st = wait_for(lambda: (e := executors(k, "orders")).get("reason") == "Steady" and e,
                      "status.executors after the first reading")
        assert (st["current"], st["desired"]) == (1, 1)
        assert spark_instances(k, "orders") == 1
        first_hash = settings_hash(k, "orders")
        first_pid = k.deployment("orders").metadata.annotations["antidote.dev/dev-runner-pid"]

        # 1. A message that hangs at the head of partition 0, then a backlog everywhere.
        produce(kafka_bootstrap, source, [(None, b"hang", None)], partition=0)
        calls = calls_dir / f"{source}.calls"
        wait_for(lambda: any(line.startswith(f"{source}/0/1 ") for line in calls.read_text().splitlines()),
                 "the handler to hang on partition 0, offset 1", timeout=60)
        for p in range(PARTITIONS):
            produce(kafka_bootstrap, source, [(None, b"m-%d-%d" % (p, i), None) for i in range(BACKLOG)],
                    partition=p)
        wait_for(lambda: source_lag(k, "orders") >= PARTITIONS * BACKLOG, "the consumer to report the backlog",
                 timeout=30)
        blocked = wait_for(lambda: (e := executors(k, "orders")).get("reason") == "LagBlocked"
                           and all(f"{p} (not seen moving yet)" in e["message"] for p in range(PARTITIONS))
                           and e, "the operator to see the lag, all of it blocked", timeout=30)
        # 4000 records of lag at 200 per executor would ask for the maximum of 4 useful ones.
        assert (blocked["current"], blocked["desired"]) == (1, 1), blocked
        assert spark_instances(k, "orders") == 1
        assert settings_hash(k, "orders") == first_hash
        assert "ScaledUp" not in k.event_reasons("orders")

        # 2. The attempt time limit ends the hang: the same backlog, now moving, scales up.
        up = wait_for(lambda: (e := executors(k, "orders")).get("current") == 4 and e,
                      "the scale-up to 4 executors", timeout=HANG_LIMIT_S + 60)
        assert up["reason"] in ("ScaledUp", "Steady") and up["lastScaleTime"], up
        # The operator posts Events after the status write that records them: wait for it.
        wait_for(lambda: "ScaledUp" in k.event_reasons("orders"), "the ScaledUp Event")
        (ev,) = [e for e in k.events("orders") if e.reason == "ScaledUp"]
        assert ev.type == "Normal" and "Scaled up from 1 to 4" in ev.message, ev.message
        assert "record(s) of lag in 4 partition(s)" in ev.message
        assert spark_instances(k, "orders") == 4
        settings = k.core.read_namespaced_config_map("orders-settings", namespace).data["settings.yaml"]
        assert "instances: 4" in settings
        assert settings_hash(k, "orders") != first_hash
        # The new pod template restarts the driver (the dev runner plays the Deployment controller).
        wait_for(lambda: (pid := (k.deployment("orders").metadata.annotations or {})
                          .get("antidote.dev/dev-runner-pid")) and pid != first_pid,
                 "the driver restarted with the new count", timeout=120)
        assert "pod template of" in op.log() and "changed: restarting it" in op.log()
        # The hanging message went to its retry cycle; everything else is processed.
        wait_for(lambda: counts(k, "orders").get("processed")
                 == PARTITIONS * (BACKLOG + 1), "the backlog worked off", timeout=300)
        assert counts(k, "orders").get("retried") == 1
        # The lag is gone: 1 executor would do, but not before the 1 h scale-down cool-down.
        # (The consumer reads its lag every 2 s: the counts may be ahead of it for a moment.)
        down = wait_for(lambda: (e := executors(k, "orders")).get("reason") == "ScaleDownCoolingDown"
                        and e["desired"] == 1 and e, "the scale-down to 1 held by its cool-down", timeout=60)
        assert down["current"] == 4 and "scaleDownCooldown 1h" in down["message"]
        assert spark_instances(k, "orders") == 4
        assert [e.reason for e in k.events("orders")].count("ScaledUp") == 1
        assert "ScaledDown" not in k.event_reasons("orders")
