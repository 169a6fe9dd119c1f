"""A consumer that does not run says why, in Ready and in the operator's
`antidote_operator_consumer_ready{namespace,consumer,reason}` (one series per consumer,
gone with the consumer): against the real API server and a real `antidote operator`.

- A driver that refuses its settings (SettingsRejected, from the real `antidote consumer`
  the dev runner runs): tests/integration/test_operator_queue_disable.py.
- A driver pod the scheduler cannot place (Unschedulable): the local stack runs no
  scheduler and no ReplicaSet controller, so the test creates the driver pod as the
  ReplicaSet would and writes the status the scheduler writes; the operator learns it from
  its Pod watch, as on a cluster. A pod whose image cannot be pulled, on a real kubelet:
  tests/integration/test_node_not_running.py.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from antidote_testkit.operators import Cluster, consumer, consumer_readiness, install_crds, operator, policy, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def k(api_client: client.ApiClient, namespace: str) -> Cluster:
    install_crds(api_client)
    return Cluster(api_client, namespace)


def readiness(port: int, namespace: str) -> dict[str, tuple[str, float]]:
    return consumer_readiness(f"http://127.0.0.1:{port}/metrics", namespace)


def driver_pod(name: str, consumer_name: str) -> dict:
    """The pod the consumer's ReplicaSet would create (the labels the operator watches)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"antidote.dev/consumer": consumer_name,
                                                  "app.kubernetes.io/component": "driver"}},
            "spec": {"containers": [{"name": "driver", "image": "antidote-consumer:never-pulled"}]}}


def test_a_driver_pod_that_cannot_be_placed_is_unschedulable_in_status_events_and_metric(
        k: Cluster, kubeconfig: str, kafka_bootstrap: str, topic_factory, tmp_path) -> None:
    source = topic_factory()
    k.create(policy("plain"))
    k.create(consumer("unplaced", "plain", kafka_bootstrap, source))
    with operator(kubeconfig, k.ns, tmp_path) as op:
        k.wait_condition("unplaced", "Ready", "False", "Starting")
        wait_for(lambda: readiness(op.metrics_port, k.ns).get("unplaced") == ("Starting", 0), "Starting in the gauge")
        pod = "unplaced-7d9f-abcde"
        k.core.create_namespaced_pod(k.ns, driver_pod(pod, "unplaced"))
        answer = "0/1 nodes are available: 1 Insufficient memory."
        k.core.patch_namespaced_pod_status(pod, k.ns, {"status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": answer}]}})
        c = k.wait_condition("unplaced", "Ready", "False", "Unschedulable")
        assert c["message"].startswith(f"The scheduler cannot place the driver pod {pod}: {answer}"), c["message"]
        wait_for(lambda: readiness(op.metrics_port, k.ns).get("unplaced") == ("Unschedulable", 0),
                 "Unschedulable in the gauge")
        wait_for(lambda: "Unschedulable" in k.event_reasons("unplaced"), "the Unschedulable Event")
        # The scheduler's text changes (another node count): Ready's message follows, no new Event.
        k.core.patch_namespaced_pod_status(pod, k.ns, {"status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/2 nodes are available: 2 Insufficient memory."}]}})
        wait_for(lambda: "0/2 nodes" in k.conditions("unplaced")["Ready"]["message"], "the new answer in Ready")
        assert k.event_reasons("unplaced").count("Unschedulable") == 1
        # The pod gone (a smaller request rolled out): no reason of its own any more.
        k.core.delete_namespaced_pod(pod, k.ns, grace_period_seconds=0)
        k.wait_condition("unplaced", "Ready", "False", "Starting")
        wait_for(lambda: readiness(op.metrics_port, k.ns).get("unplaced") == ("Starting", 0), "Starting again")
