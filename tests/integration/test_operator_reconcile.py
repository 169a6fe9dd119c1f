"""The operator against the real API server: children, policy changes, missing and bad
references, pause and resume, deletion, restarts. `antidote operator` runs as a subprocess
watching the test's namespace; no consumer process runs here (no --dev-runner)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from antidote_api import PoisonPolicySpec, QueueConsumerSpec, resolve
from antidote_api.semantics import EffectiveSettings
from antidote_operator.handled_specs import KOPF_PREFIX

from antidote_testkit.operators import (ANTIDOTE, Cluster, consumer, install_crds, operator, operator_metric, policy,
                            wait_for, wait_settled)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def crds(api_client: client.ApiClient) -> None:
    install_crds(api_client)


@pytest.fixture
def k(api_client: client.ApiClient, namespace: str, crds: None) -> Cluster:
    return Cluster(api_client, namespace)


def test_children_have_the_right_specs_and_owners(k: Cluster, kubeconfig: str, kafka_bootstrap: str,
                                                   tmp_path) -> None:
    k.create(policy("strict", {"retries": {"immediate": 1, "cycles": 1, "cycleDelay": "1s"}}))
    qc = k.create(consumer("orders", "strict", kafka_bootstrap, "orders"))
    with operator(kubeconfig, k.ns, tmp_path) as op:
        wait_for(lambda: k.deployment("orders"), "the Deployment")
        wait_for(lambda: all(k.children("orders").values()), "all children")
        assert k.children("orders") == {
            "ConfigMap": ["orders-settings"], "ServiceAccount": ["orders-driver", "orders-executor"],
            "Secret": ["orders-spark-auth"], "RoleBinding": ["orders-driver"], "Service": ["orders"],
            "Deployment": ["orders"]}
        uid = qc["metadata"]["uid"]
        objs = [k.core.read_namespaced_config_map("orders-settings", k.ns),
                k.core.read_namespaced_service_account("orders-driver", k.ns),
                k.core.read_namespaced_secret("orders-spark-auth", k.ns),
                k.rbac.read_namespaced_role_binding("orders-driver", k.ns),
                k.core.read_namespaced_service("orders", k.ns), k.deployment("orders")]
        for o in objs:
            (ref,) = o.metadata.owner_references
            assert (ref.kind, ref.name, ref.uid, ref.controller) == ("QueueConsumer", "orders", uid, True)

        cm = objs[0]
        got = EffectiveSettings.model_validate(yaml.safe_load(cm.data["settings.yaml"]))
        want = resolve(QueueConsumerSpec.model_validate(k.qc("orders")["spec"]),
                       PoisonPolicySpec.model_validate(k.ppol("strict")["spec"]), name="orders", namespace=k.ns)
        assert got == want and got.retries.max_attempts == 4
        assert f"spark.driver.host orders.{k.ns}.svc" in cm.data["spark-defaults.conf"]
        dep = objs[5]
        assert dep.spec.replicas == 1 and dep.spec.strategy.type == "Recreate"
        (c,) = dep.spec.template.spec.containers
        assert c.command == ["antidote"] and c.args[:3] == ["consumer", "--settings", "/etc/antidote/settings.yaml"]
        assert dep.spec.template.spec.service_account_name == "orders-driver"
        assert objs[4].spec.cluster_ip == "None"
        # Least privilege: the chart's driver ClusterRole bound in this namespace only; the
        # executors' ServiceAccount bound to nothing and without a token; a random RPC secret.
        assert (objs[3].role_ref.kind, objs[3].role_ref.name) == ("ClusterRole", "antidote-spark-driver")
        assert k.core.read_namespaced_service_account("orders-executor", k.ns).automount_service_account_token is False
        assert len(objs[2].data["secret"]) >= 40 and objs[2].type == "Opaque"  # 32 bytes, base64

        k.wait_condition("orders", "Ready", "False", "Starting")
        assert k.condition("orders", "QueueDisabled") == ("False", "QueueEnabled")
        assert k.qc("orders")["status"]["observedGeneration"] == 1
        wait_for(lambda: k.ppol("strict").get("status", {}).get("maxAttempts") == 4, "policy maxAttempts")
        assert operator_metric(op.metrics_port, 'antidote_operator_reconciles_total{kind="QueueConsumer"') >= 1
        assert operator_metric(op.metrics_port, 'antidote_operator_child_writes_total{action="created",kind="Deployment"}') == 1
        assert operator_metric(op.metrics_port, 'antidote_operator_consumers{condition="Ready",status="False"}') == 1


def test_a_policy_change_rerenders_its_consumers_only(k: Cluster, kubeconfig: str, kafka_bootstrap: str,
                                                      tmp_path) -> None:
    k.create(policy("p"))
    k.create(policy("q"))
    for name, pol in (("a", "p"), ("b", "p"), ("c", "q")):
        k.create(consumer(name, pol, kafka_bootstrap, f"topic-{name}"))

    def hashes() -> dict[str, str]:
        return {n: k.deployment(n).spec.template.metadata.annotations["antidote.dev/settings-hash"]
                for n in "abc"}

    with operator(kubeconfig, k.ns, tmp_path):
        wait_for(lambda: all(k.deployment(n) for n in "abc"), "three Deployments")
        before = hashes()
        rv_c = k.core.read_namespaced_config_map("c-settings", k.ns).metadata.resource_version
        k.patch("poisonpolicies", "p", {"spec": {"retries": {"immediate": 0}, "disposition": "Reject"}})

        def rerendered() -> bool:
            docs = {n: yaml.safe_load(k.core.read_namespaced_config_map(f"{n}-settings", k.ns).data["settings.yaml"])
                    for n in "ab"}
            return all(d["retries"]["maxAttempts"] == 3 and d["disposition"] == "Reject" for d in docs.values())

        wait_for(rerendered, "consumers a and b re-rendered with the new policy")
        wait_for(lambda: hashes()["a"] != before["a"] and hashes()["b"] != before["b"], "drivers rolled")
        assert hashes()["c"] == before["c"]
        assert k.core.read_namespaced_config_map("c-settings", k.ns).metadata.resource_version == rv_c
        wait_for(lambda: k.ppol("p")["status"].get("maxAttempts") == 3, "policy status")


def test_missing_policy_then_recovery(k: Cluster, kubeconfig: str, kafka_bootstrap: str, tmp_path) -> None:
    k.create(consumer("lonely", "later", kafka_bootstrap, "lonely"))
    with operator(kubeconfig, k.ns, tmp_path):
        c = k.wait_condition("lonely", "Ready", "False", "PolicyNotFound")
        assert c["message"] == f'PoisonPolicy "later" does not exist in namespace "{k.ns}"; the consumer starts once it does.'
        wait_for(lambda: "PolicyNotFound" in k.event_reasons("lonely"), "a PolicyNotFound Event")
        ev = next(e for e in k.events("lonely") if e.reason == "PolicyNotFound")
        assert ev.type == "Warning"
        assert not any(k.children("lonely").values())

        k.create(policy("later"))
        k.wait_condition("lonely", "Ready", "False", "Starting")
        wait_for(lambda: all(k.children("lonely").values()), "children once the policy exists")

        # Deleting the policy again keeps the running consumer as it was, and says why.
        k.delete("poisonpolicies", "later")
        k.wait_condition("lonely", "Ready", "False", "PolicyNotFound")
        assert k.replicas("lonely") == 1
        assert k.event_reasons("lonely").count("PolicyNotFound") == 2


def test_bad_specs_give_conditions_with_clear_messages(k: Cluster, kubeconfig: str, kafka_bootstrap: str,
                                                       tmp_path) -> None:
    # The API server cannot check that a jsonSchema is a JSON Schema; the operator can.
    k.create(policy("broken", {"validation": {"format": "json", "jsonSchema": {"type": "objekt"}}}))
    k.create(consumer("uses-broken", "broken", kafka_bootstrap, "t1"))
    k.create(policy("fine"))
    # A topic name the server accepts, whose derived retry topic would be too long.
    k.create(consumer("long-topic", "fine", kafka_bootstrap, "t" * 245))
    with operator(kubeconfig, k.ns, tmp_path):
        pp = wait_for(lambda: {c["type"]: c for c in k.ppol("broken").get("status", {}).get("conditions", [])}.get("Ready"),
                      "policy condition")
        assert (pp["status"], pp["reason"]) == ("False", "PolicyInvalid")
        assert "spec.validation.jsonSchema" in pp["message"] and "not a valid JSON Schema" in pp["message"]
        c = k.wait_condition("uses-broken", "Ready", "False", "PolicyInvalid")
        assert c["message"].startswith('PoisonPolicy "broken" is invalid: spec.validation.jsonSchema')
        c = k.wait_condition("long-topic", "Ready", "False", "InvalidSpec")
        assert "longer than 249 characters" in c["message"] and "spec.topics" in c["message"]
        wait_for(lambda: "InvalidSpec" in k.event_reasons("long-topic"), "an InvalidSpec Event")
        assert not any(k.children("uses-broken").values()) and not any(k.children("long-topic").values())
        # Fixing the policy lets its consumer start.
        k.patch("poisonpolicies", "broken", {"spec": {"validation": {"jsonSchema": {"type": "object"}}}})
        k.wait_condition("uses-broken", "Ready", "False", "Starting")


def _driver_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-driver-0",
                         "labels": {"antidote.dev/consumer": name, "app.kubernetes.io/component": "driver"}},
            "spec": {"containers": [{"name": "driver", "image": "antidote:test"}]}}


def _terminated(name: str, code: int) -> dict:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"status": {"phase": "Running", "containerStatuses": [{
        "name": "driver", "image": "antidote:test", "imageID": "", "ready": False, "restartCount": 1,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": code, "reason": "Error", "startedAt": now, "finishedAt": now}}}]}}


def test_pause_disable_by_exit_code_and_resume(k: Cluster, kubeconfig: str, kafka_bootstrap: str, tmp_path) -> None:
    k.create(policy("p"))
    k.create(consumer("pay", "p", kafka_bootstrap, "pay"))
    with operator(kubeconfig, k.ns, tmp_path) as op:
        wait_for(lambda: k.replicas("pay") == 1, "one replica")

        k.patch("queueconsumers", "pay", {"spec": {"paused": True}})
        wait_for(lambda: k.replicas("pay") == 0, "scaled to 0 by spec.paused")
        assert k.wait_condition("pay", "Paused", "True", "UserRequested")
        assert k.condition("pay", "Ready") == ("False", "Paused")
        k.patch("queueconsumers", "pay", {"spec": {"paused": False}})
        wait_for(lambda: k.replicas("pay") == 1, "back to 1")
        k.wait_condition("pay", "Paused", "False", "NotPaused")
        wait_for(lambda: k.event_reasons("pay") == ["Paused", "Resumed"], "Paused then Resumed Events")

        # On a real cluster the kubelet reports the driver's exit code in the Pod's status;
        # here the test writes that status (no kubelet), the operator reads it as it would.
        k.core.create_namespaced_pod(k.ns, _driver_pod("pay"))
        k.core.patch_namespaced_pod_status(f"pay-driver-0", k.ns, _terminated("pay", 3))
        c = k.wait_condition("pay", "QueueDisabled", "True", "ConsecutiveBatchFailures")
        assert "exited with code 3 (its pod)" in c["message"]
        wait_for(lambda: k.replicas("pay") == 0, "scaled to 0 by the queue disable")
        assert k.condition("pay", "Paused") == ("True", "QueueDisabled")
        assert k.condition("pay", "Ready") == ("False", "ConsecutiveBatchFailures")
        wait_for(lambda: "QueueDisabled" in k.event_reasons("pay"), "a QueueDisabled Event")
        ev = next(e for e in k.events("pay") if e.reason == "QueueDisabled")
        assert ev.type == "Warning" and "antidote.dev/resume" in ev.message

        time.sleep(1.1)  # the resume must come after the exit, in whole seconds
        k.patch("queueconsumers", "pay", {"metadata": {"annotations": {"antidote.dev/resume": "now"}}})
        k.wait_condition("pay", "QueueDisabled", "False", "Resumed")
        wait_for(lambda: k.replicas("pay") == 1, "running again")
        wait_for(lambda: "antidote.dev/resume" not in (k.qc("pay")["metadata"].get("annotations") or {}),
                 "the resume annotation consumed")
        # The old exit predates the resume: it does not disable again.
        wait_settled(op)
        assert k.condition("pay", "QueueDisabled") == ("False", "Resumed") and k.replicas("pay") == 1
        assert k.event_reasons("pay") == ["Paused", "Resumed", "QueueDisabled", "Resumed"]


def test_a_driver_role_binding_of_an_older_operator_is_replaced(k: Cluster, kubeconfig: str, kafka_bootstrap: str,
                                                                tmp_path) -> None:
    """Older operators bound a Role of their own; a roleRef cannot be changed in place, so the
    binding is replaced by one to the drivers' ClusterRole."""
    k.create(policy("p"))
    qc = k.create(consumer("up", "p", kafka_bootstrap, "up"))
    # The older operator's binding: owned by the consumer, as every child (kopf.adopt).
    owner = {"apiVersion": qc["apiVersion"], "kind": "QueueConsumer", "name": "up", "uid": qc["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}
    k.rbac.create_namespaced_role_binding(k.ns, {
        "metadata": {"name": "up-driver", "labels": {"antidote.dev/consumer": "up"}, "ownerReferences": [owner]},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "up-driver"},
        "subjects": [{"kind": "ServiceAccount", "name": "up-driver"}]})
    with operator(kubeconfig, k.ns, tmp_path):
        wait_for(lambda: k.rbac.read_namespaced_role_binding("up-driver", k.ns).role_ref.kind == "ClusterRole",
                 "the binding replaced", errors=(client.ApiException,))
        wait_for(lambda: all(k.children("up").values()), "children")
        assert k.children("up")["RoleBinding"] == ["up-driver"]


def test_deleting_the_consumer_removes_its_children(k: Cluster, kubeconfig: str, kafka_bootstrap: str,
                                                    tmp_path) -> None:
    k.create(policy("p"))
    k.create(consumer("gone", "p", kafka_bootstrap, "gone"))
    with operator(kubeconfig, k.ns, tmp_path):
        wait_for(lambda: all(k.children("gone").values()), "children")
        k.delete("queueconsumers", "gone")
        wait_for(lambda: k.qc("gone") is None, "the QueueConsumer gone (finalizer released)")
        wait_for(lambda: not any(k.children("gone").values()), "no children left")


def test_without_finalizer_none_is_held_and_an_older_operators_is_taken_off(
        k: Cluster, kubeconfig: str, kafka_bootstrap: str, tmp_path) -> None:
    """As the chart runs it (a cluster's garbage collector deletes the children): the
    consumer is reconciled without Kopf's finalizer, one an earlier operator added goes, and
    a delete is not held up by the operator."""
    k.create(policy("p"))
    k.create(consumer("new", "p", kafka_bootstrap, "new"))
    older = consumer("older", "p", kafka_bootstrap, "older")
    older["metadata"]["finalizers"] = ["antidote.dev/finalizer"]
    k.create(older)
    with operator(kubeconfig, k.ns, tmp_path, finalizer=False):
        wait_for(lambda: all(k.children("new").values()) and all(k.children("older").values()), "children")
        wait_for(lambda: not (k.qc("older") or {}).get("metadata", {}).get("finalizers"),
                 "the older operator's finalizer taken off")
        assert not k.qc("new")["metadata"].get("finalizers")
        k.delete("queueconsumers", "new")
        wait_for(lambda: k.qc("new") is None, "the QueueConsumer gone at once")
    # The children stay for the garbage collector, which this stack does not run.
    assert all(k.children("new").values())


def settle(k: Cluster, names: tuple[str, ...], quiet: float = 3.0) -> None:
    """Wait until the consumers and their Deployments stop changing for `quiet` seconds."""
    def versions() -> list[str | None]:
        out = []
        for n in names:
            out.append(k.qc(n)["metadata"]["resourceVersion"])
            d = k.deployment(n)
            out.append(d.metadata.resource_version if d else None)
        return out

    last, since = versions(), time.monotonic()
    deadline = since + 60
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "the consumers never settled"
        time.sleep(0.5)
        now = versions()
        if now != last:
            last, since = now, time.monotonic()


def test_restarting_the_operator_makes_no_duplicates_and_no_event_storm(
        k: Cluster, kubeconfig: str, kafka_bootstrap: str, tmp_path) -> None:
    k.create(policy("p"))
    k.create(consumer("r1", "p", kafka_bootstrap, "r1", paused=True))
    k.create(consumer("r2", "missing", kafka_bootstrap, "r2"))
    op = operator(kubeconfig, k.ns, tmp_path)
    with op as first:
        # Killed mid-way: as soon as the first child of r3 exists.
        k.create(consumer("r3", "p", kafka_bootstrap, "r3"))
        wait_for(lambda: k.children("r3")["ConfigMap"], "r3's first child", interval=0.02)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    with operator(kubeconfig, k.ns, tmp_path):
        for n in ("r1", "r3"):
            wait_for(lambda n=n: all(k.children(n).values()), f"{n}'s children")
        k.wait_condition("r2", "Ready", "False", "PolicyNotFound")
        k.wait_condition("r1", "Paused", "True", "UserRequested")
        settle(k, ("r1", "r2", "r3"))
        events = {n: k.event_reasons(n) for n in ("r1", "r2", "r3")}
        versions = {n: {kind: k.children(n)[kind] for kind in k.children(n)} for n in ("r1", "r3")}
        rvs = {n: k.deployment(n).metadata.resource_version for n in ("r1", "r3")}
        status_rv = {n: k.qc(n)["metadata"]["resourceVersion"] for n in ("r1", "r2", "r3")}
        # Kopf's record of the handled spec is kept in the operator's memory, not written
        # onto the objects (one PATCH fewer per change).
        for n in ("r1", "r2", "r3"):
            kept = k.qc(n)["metadata"].get("annotations") or {}
            assert not [a for a in kept if a.startswith(f"{KOPF_PREFIX}/")], kept
    with operator(kubeconfig, k.ns, tmp_path) as third:
        wait_for(lambda: operator_metric(third.metrics_port, 'antidote_operator_reconciles_total{kind="QueueConsumer",result="ok"}') >= 3,
                 "the restarted operator to reconcile all three", timeout=30, errors=(OSError,))
        wait_settled(third)
        for n in ("r1", "r3"):
            assert k.children(n) == versions[n]
            assert {kind: len(names) for kind, names in k.children(n).items()} == {
                "ConfigMap": 1, "ServiceAccount": 2, "Secret": 1, "RoleBinding": 1, "Service": 1,
                "Deployment": 1}, k.children(n)
            assert k.deployment(n).metadata.resource_version == rvs[n]  # not even re-written
        assert {n: k.event_reasons(n) for n in ("r1", "r2", "r3")} == events
        # Events are posted after the status that records them is stored (so a restart never
        # posts them twice): one whose status the killed operator stored just before the
        # SIGKILL is lost, never duplicated.
        assert events["r1"] in ([], ["Paused"]) and events["r2"] in ([], ["PolicyNotFound"])
        assert events["r3"] == []
        assert {n: k.qc(n)["metadata"]["resourceVersion"] for n in ("r1", "r2", "r3")} == status_rv


def test_two_replicas_with_peering_one_acts(k: Cluster, kubeconfig: str, kafka_bootstrap: str, tmp_path) -> None:
    out = subprocess.run([ANTIDOTE, "operator", "--print-peering-crds"], capture_output=True, text=True, check=True)
    subprocess.run([str(Path(sys.executable).with_name("kubectl")), "apply", "-f", "-"], input=out.stdout,
                   env={**os.environ, "KUBECONFIG": kubeconfig}, capture_output=True, text=True, check=True)
    wait_for(lambda: k.objs.create_namespaced_custom_object(
        "kopf.dev", "v1", k.ns, "kopfpeerings",
        {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "antidote"}}),
        "the KopfPeering", errors=(client.ApiException,))
    k.create(policy("p"))
    with operator(kubeconfig, k.ns, tmp_path / "high", "--peering", "antidote", "--priority", "20") as high:
        wait_for(lambda: operator_metric(high.metrics_port, "antidote_operator_watched_consumers") is not None,
                 "the first replica", errors=(OSError,))
        with operator(kubeconfig, k.ns, tmp_path / "low", "--peering", "antidote", "--priority", "10") as low:
            # Under CI load the second process can take seconds to import and serve metrics;
            # the consumer is created only once both replicas are up and peering.
            wait_for(lambda: operator_metric(low.metrics_port, "antidote_operator_watched_consumers") is not None,
                     "the second replica", errors=(OSError,))
            # Both peers in Kopf's peering object, and the low one's rounds since (each reads it).
            wait_for(lambda: len(k.objs.get_namespaced_custom_object(
                "kopf.dev", "v1", k.ns, "kopfpeerings", "antidote").get("status") or {}) >= 2,
                "both replicas in the KopfPeering")
            wait_settled(low, rounds=2)
            k.create(consumer("ha", "p", kafka_bootstrap, "ha"))
            wait_for(lambda: all(k.children("ha").values()), "children")
            k.wait_condition("ha", "Ready", "False", "Starting")
            ok = 'antidote_operator_reconciles_total{kind="QueueConsumer",result="ok"}'
            wait_for(lambda: operator_metric(high.metrics_port, ok) >= 1, "the high replica's reconcile")
            wait_settled(low)
            assert operator_metric(low.metrics_port, ok) == 0  # paused by Kopf peering
            assert {kind: len(v) for kind, v in k.children("ha").items()} == {
                "ConfigMap": 1, "ServiceAccount": 2, "Secret": 1, "RoleBinding": 1, "Service": 1,
                "Deployment": 1}, k.children("ha")
