"""Objects of a child's name that are not the consumer's (issue 43, item 11), against the real
API server: the operator leaves them byte for byte as they are (their resourceVersion does not
move), starts nothing that would run under them, reports Ready=False ChildConflict naming the
object with one Warning Event, and reconciles normally once they are gone."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from antidote_testkit.operators import Cluster, consumer, install_crds, operator, policy, reconciles, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def crds(api_client: client.ApiClient) -> None:
    install_crds(api_client)


@pytest.fixture
def k(api_client: client.ApiClient, namespace: str, crds: None) -> Cluster:
    return Cluster(api_client, namespace)


def team_deployment(name: str) -> dict[str, Any]:
    """A team's own Deployment, nothing of Antidote's about it."""
    labels = {"app": name, "team": "storefront"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}


def privileged_service_account(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "labels": {"team": "platform"}, "annotations": {"purpose": "cluster admin"}},
            "automountServiceAccountToken": True}


def conflict_events(k: Cluster, name: str) -> list[Any]:
    return [e for e in k.events(name) if e.involved_object.kind == "QueueConsumer" and e.reason == "ChildConflict"]


def owned_by(obj: Any, uid: str) -> bool:
    return obj is not None and any(r.uid == uid for r in obj.metadata.owner_references or [])


def test_a_team_deployment_of_the_consumers_name_is_left_alone_until_it_is_gone(
        k: Cluster, kubeconfig: str, tmp_path) -> None:
    k.create(policy("p"))
    k.apps.create_namespaced_deployment(k.ns, team_deployment("web"))
    before = k.deployment("web")
    with operator(kubeconfig, k.ns, tmp_path) as op:
        qc = k.create(consumer("web", "p", "kafka:9092", "web"))
        uid = qc["metadata"]["uid"]
        c = k.wait_condition("web", "Ready", "False", "ChildConflict")
        assert c["message"].startswith("Deployment web exists and is not owned by QueueConsumer web"), c
        wait_for(lambda: conflict_events(k, "web"), "a ChildConflict Event")
        # Looked at again (every CONFLICT_RECHECK) at least twice more: still one Event, and
        # the Deployment still exactly the team's (not a label, not a replica changed).
        seen = reconciles(op)
        wait_for(lambda: reconciles(op) >= seen + 2, "two more reconciles of the consumer", timeout=90)
        assert [(e.type, e.message) for e in conflict_events(k, "web")] == [("Warning", c["message"])]
        after = k.deployment("web")
        assert after.metadata.resource_version == before.metadata.resource_version
        assert after.metadata.labels == {"app": "web", "team": "storefront"} and after.spec.replicas == 2
        assert not after.metadata.owner_references
        assert after.spec.template.spec.containers[0].image == "nginx:1.27"
        # The children before the Deployment are the consumer's own, and harmless without it.
        assert owned_by(k.core.read_namespaced_service_account("web-driver", k.ns), uid)

        k.apps.delete_namespaced_deployment("web", k.ns)
        mine = wait_for(lambda: (d := k.deployment("web")) is not None and owned_by(d, uid) and d,
                        "the consumer's own Deployment web", timeout=90)
        assert mine.spec.template.spec.service_account_name == "web-driver"
        k.wait_condition("web", "Ready", "False", "Starting")
        assert len(conflict_events(k, "web")) == 1


def test_a_privileged_service_account_of_the_drivers_name_is_not_taken_over(
        k: Cluster, kubeconfig: str, tmp_path) -> None:
    k.create(policy("p"))
    k.core.create_namespaced_service_account(k.ns, privileged_service_account("x-driver"))
    before = k.core.read_namespaced_service_account("x-driver", k.ns)
    with operator(kubeconfig, k.ns, tmp_path) as op:
        qc = k.create(consumer("x", "p", "kafka:9092", "x"))
        uid = qc["metadata"]["uid"]
        c = k.wait_condition("x", "Ready", "False", "ChildConflict")
        assert c["message"].startswith("ServiceAccount x-driver exists and is not owned by QueueConsumer x"), c
        wait_for(lambda: conflict_events(k, "x"), "a ChildConflict Event")
        seen = reconciles(op)
        wait_for(lambda: reconciles(op) >= seen + 2, "two more reconciles of the consumer", timeout=90)
        assert [(e.type, e.message) for e in conflict_events(k, "x")] == [("Warning", c["message"])]
        after = k.core.read_namespaced_service_account("x-driver", k.ns)
        assert after.metadata.resource_version == before.metadata.resource_version
        assert after.metadata.labels == {"team": "platform"} and not after.metadata.owner_references
        assert after.automount_service_account_token is True
        # Nothing that would run under it, nor bind it: no Deployment, no RoleBinding.
        assert k.deployment("x") is None
        assert k.children("x")["RoleBinding"] == []

        k.core.delete_namespaced_service_account("x-driver", k.ns)
        wait_for(lambda: owned_by(k.deployment("x"), uid), "the consumer's Deployment x", timeout=90)
        sa = k.core.read_namespaced_service_account("x-driver", k.ns)
        assert owned_by(sa, uid) and sa.automount_service_account_token is not True
        k.wait_condition("x", "Ready", "False", "Starting")
        assert len(conflict_events(k, "x")) == 1


def test_another_rolebinding_of_the_drivers_name_is_neither_replaced_nor_patched(
        k: Cluster, kubeconfig: str, tmp_path) -> None:
    k.create(policy("p"))
    k.rbac.create_namespaced_role_binding(k.ns, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "rb-driver"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "ci", "namespace": k.ns}]})
    before = k.rbac.read_namespaced_role_binding("rb-driver", k.ns)
    with operator(kubeconfig, k.ns, tmp_path):
        k.create(consumer("rb", "p", "kafka:9092", "rb"))
        c = k.wait_condition("rb", "Ready", "False", "ChildConflict")
        assert c["message"].startswith("RoleBinding rb-driver exists and is not owned by QueueConsumer rb"), c
        after = k.rbac.read_namespaced_role_binding("rb-driver", k.ns)
        # Not deleted and made again (an older operator's roleRef path), not patched.
        assert (after.metadata.uid, after.metadata.resource_version) == (
            before.metadata.uid, before.metadata.resource_version)
        assert k.deployment("rb") is None


def test_a_write_is_refused_when_the_object_was_replaced_under_the_same_name_since_it_was_checked(
        kubeconfig: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What makes the check hold between the read and the write: the API server refuses a
    patch carrying the checked uid, a Scale with it, a delete with it as a precondition,
    when another object of the name is there now; that object is not touched."""
    import asyncio

    from antidote_operator import kube

    monkeypatch.setenv("KUBECONFIG", kubeconfig)

    async def scenario(k: kube.Kube) -> None:
        dep = team_deployment("web")
        checked = await k.create(kube.DEPLOYMENT, namespace, dep)
        await k.delete(kube.DEPLOYMENT, namespace, "web")
        theirs = await k.create(kube.DEPLOYMENT, namespace, dep)  # replaced: another uid
        old_uid, rv = checked["metadata"]["uid"], theirs["metadata"]["resourceVersion"]
        assert theirs["metadata"]["uid"] != old_uid
        with pytest.raises(kube.ApiError) as err:  # a uid cannot be changed: 422, not applied
            await k.patch(kube.DEPLOYMENT, namespace, "web",
                          {"metadata": {"uid": old_uid, "labels": {"antidote.dev/consumer": "web"}}})
        assert err.value.status == 422 and "metadata.uid" in err.value.message
        with pytest.raises(kube.Conflict):
            await k.patch(kube.DEPLOYMENT, namespace, "web", {"metadata": {"uid": old_uid}, "spec": {"replicas": 0}},
                          subresource="scale")
        with pytest.raises(kube.Conflict):
            await k.delete(kube.DEPLOYMENT, namespace, "web", uid=old_uid)
        now = await k.get(kube.DEPLOYMENT, namespace, "web")
        assert now is not None and now["metadata"]["resourceVersion"] == rv
        # With the uid that is there, each goes through.
        uid = theirs["metadata"]["uid"]
        assert await k.patch(kube.DEPLOYMENT, namespace, "web", {"metadata": {"uid": uid}, "spec": {"replicas": 1}},
                             subresource="scale") is not None
        assert await k.delete(kube.DEPLOYMENT, namespace, "web", uid=uid)

    async def main() -> None:
        k = kube.Kube.from_environment()
        try:
            await scenario(k)
        finally:
            await k.close()

    asyncio.run(main())
