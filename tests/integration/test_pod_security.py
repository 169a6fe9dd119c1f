"""The driver and executor pods the operator builds meet the `restricted` Pod Security
Standard, as the real API server's Pod Security admission judges them.

There is no kubelet on the local stack, but admission runs when a Pod object is created: in
a namespace labelled `pod-security.kubernetes.io/enforce: restricted` a pod that breaks the
standard is refused with 403. Each test first shows the namespace does refuse (a pod with
one setting removed), so an admitted pod means something."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from antidote_api import PoisonPolicySpec, QueueConsumerSpec, resolve
from antidote_operator.builders import driver as builders
from antidote_operator.builders.driver import RenderOptions

pytestmark = pytest.mark.integration

RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted",
              "pod-security.kubernetes.io/enforce-version": "latest"}


@pytest.fixture
def restricted(core_v1: client.CoreV1Api, namespace: str) -> Iterator[str]:
    core_v1.patch_namespace(namespace, {"metadata": {"labels": RESTRICTED}})
    yield namespace


def _children(namespace: str) -> dict[str, Any]:
    spec = QueueConsumerSpec.model_validate({
        "policyRef": {"name": "p"}, "handler": "shop.orders:handle",
        "source": {"kafka": {"bootstrapServers": "kafka:9092", "topic": "orders",
                             "secretRef": {"name": "kafka-creds"}}},
        "checkpoint": {"location": "s3a://ckpt/orders"}})
    settings = resolve(spec, PoisonPolicySpec(), name="orders", namespace=namespace)
    owner = {"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer",
             "metadata": {"name": "orders", "namespace": namespace, "uid": "uid-1"}}
    return {c["metadata"]["name"] if c["kind"] == "ServiceAccount" else c["kind"]: c
            for c in builders.build_children(owner, settings, replicas=1, opts=RenderOptions())}


def _pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def driver_pod(kids: dict[str, Any]) -> dict[str, Any]:
    """The Deployment's pod template as the ReplicaSet controller would create it."""
    return _pod("orders-driver-probe", copy.deepcopy(kids["Deployment"]["spec"]["template"]["spec"]))


def executor_pod(kids: dict[str, Any]) -> dict[str, Any]:
    """The executor pod template plus what Spark adds to it (BasicExecutorFeatureStep and
    LocalDirsFeatureStep): image, args, env, resources, port, its conf ConfigMap and an
    emptyDir for spark.local.dir. Spark adds no security settings of its own."""
    template = yaml.safe_load(kids["ConfigMap"]["data"][builders.EXECUTOR_TEMPLATE_KEY])
    spec = template["spec"]
    (c,) = spec["containers"]
    c.update({"image": RenderOptions().image, "imagePullPolicy": "IfNotPresent", "args": ["executor"],
              "env": [{"name": "SPARK_DRIVER_URL", "value": "spark://CoarseGrainedScheduler@orders:7078"}],
              "resources": {"requests": {"cpu": "1", "memory": "1408Mi"}, "limits": {"memory": "1408Mi"}},
              "ports": [{"name": "blockmanager", "containerPort": 7079}]})
    c["volumeMounts"] += [{"name": "spark-conf-volume-exec", "mountPath": "/opt/spark/conf"},
                          {"name": "spark-local-dir-1", "mountPath": "/var/data/spark-1"},
                          {"name": "spark-auth", "mountPath": builders.SPARK_AUTH_DIR}]
    spec["volumes"] += [{"name": "spark-conf-volume-exec", "configMap": {"name": "spark-exec-conf"}},
                        {"name": "spark-local-dir-1", "emptyDir": {}},
                        {"name": "spark-auth", "secret": {"secretName": "orders-spark-auth"}}]
    spec["restartPolicy"] = "Never"
    return _pod("orders-exec-1", spec)


def _refused(core_v1: client.CoreV1Api, ns: str, pod: dict[str, Any]) -> str:
    with pytest.raises(client.ApiException) as refused:
        core_v1.create_namespaced_pod(ns, pod)
    assert refused.value.status == 403, refused.value.body
    return str(refused.value.body)


@pytest.mark.parametrize("which", ["driver", "executor"])
def test_consumer_pods_are_admitted_as_restricted(which: str, core_v1: client.CoreV1Api, restricted: str) -> None:
    kids = _children(restricted)
    for sa in ("orders-driver", "orders-executor"):
        core_v1.create_namespaced_service_account(restricted, kids[sa])
    pod = (driver_pod if which == "driver" else executor_pod)(kids)

    # The namespace enforces: the same pod with privilege escalation allowed is refused.
    loose = copy.deepcopy(pod)
    loose["metadata"]["name"] += "-loose"
    del loose["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"]
    assert "allowPrivilegeEscalation" in _refused(core_v1, restricted, loose)
    no_seccomp = copy.deepcopy(pod)
    no_seccomp["metadata"]["name"] += "-noseccomp"
    del no_seccomp["spec"]["securityContext"]["seccompProfile"]
    assert "seccompProfile" in _refused(core_v1, restricted, no_seccomp)

    created = core_v1.create_namespaced_pod(restricted, pod)
    c = created.spec.containers[0]
    assert c.security_context.read_only_root_filesystem is True
    assert any(m.mount_path == "/tmp" for m in c.volume_mounts)  # the writable emptyDir
    if which == "executor":
        # Under its own ServiceAccount, which mounts no token.
        assert created.spec.service_account_name == "orders-executor"
        assert created.spec.automount_service_account_token is False
    else:
        assert created.spec.service_account_name == "orders-driver"


# --- a real Spark driver under the driver ClusterRole -------------------------------------

def _executor_pods(core_v1: client.CoreV1Api, ns: str) -> list[Any]:
    return core_v1.list_namespaced_pod(ns, label_selector="spark-role=executor").items


def test_a_spark_driver_with_only_the_driver_role_runs_restricted_authenticated_executors(
        core_v1: client.CoreV1Api, api_client: client.ApiClient, restricted: str, tmp_path) -> None:
    """Spark 4.0 itself, in client mode with the operator's spark-defaults, authenticated as
    the driver's ServiceAccount bound to nothing but DRIVER_RULES, in a restricted namespace:
    it creates an executor pod from the template (admitted by Pod Security, under the
    executors' ServiceAccount, the RPC secret mounted and not in the environment) and its
    conf ConfigMap, and at stop deletes both. No kubelet runs it; the API calls are real."""
    import uuid

    from antidote_testkit.spark_driver import local_conf, running_driver

    ns = restricted
    role_name = f"antidote-spark-driver-{uuid.uuid4().hex[:6]}"
    opts = RenderOptions(driver_cluster_role=role_name)
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.create_cluster_role({"metadata": {"name": role_name}, "rules": builders.DRIVER_RULES})
    try:
        kids = _children(ns)
        for sa in ("orders-driver", "orders-executor"):
            core_v1.create_namespaced_service_account(ns, kids[sa])
        rbac.create_namespaced_role_binding(ns, builders.build_role_binding("orders", opts))
        secret = builders.build_spark_auth_secret("orders", uuid.uuid4().bytes * 2)
        core_v1.create_namespaced_secret(ns, secret)
        token = core_v1.create_namespaced_service_account_token(
            "orders-driver", ns, {"spec": {"expirationSeconds": 600}}).status.token

        # The operator's spark-defaults.conf, with what a pod would provide made local: the
        # token, the mounted template and secret files, a loopback driver address, no pod.
        conf = builders.spark_defaults(
            resolve(QueueConsumerSpec.model_validate({
                "policyRef": {"name": "p"}, "handler": "shop.orders:handle",
                "source": {"kafka": {"bootstrapServers": "kafka:9092", "topic": "orders"}},
                "checkpoint": {"location": "s3a://ckpt/orders"}}), PoisonPolicySpec(), name="orders", namespace=ns),
            opts)
        cfg = api_client.configuration
        conf = local_conf(conf, tmp_path, host=cfg.host, ca_cert=cfg.ssl_ca_cert, token=token,
                          template=kids["ConfigMap"]["data"][builders.EXECUTOR_TEMPLATE_KEY])
        with running_driver(conf, tmp_path) as spark_driver:
            _check_executor(core_v1, ns)
            log = spark_driver.stop()
        # Stopping deleted them by label: deletecollection under the driver's Role.
        assert not _executor_pods(core_v1, ns)
        assert not core_v1.list_namespaced_config_map(ns, label_selector="spark-role=executor").items
        assert "Forbidden" not in log and " 403" not in log, log[-3000:]
    finally:
        rbac.delete_cluster_role(role_name)


def _check_executor(core_v1: client.CoreV1Api, ns: str) -> None:
    """The executor pod and conf ConfigMap the driver created: restricted, under the
    executors' ServiceAccount, the RPC secret mounted and not in the environment."""
    from antidote_testkit.operators import wait_for

    (pod,) = wait_for(lambda: _executor_pods(core_v1, ns), "Spark's executor pod", timeout=60)
    spec = pod.spec
    assert pod.metadata.name == "orders-exec-1"
    assert spec.service_account_name == "orders-executor" and spec.automount_service_account_token is False
    assert spec.security_context.run_as_non_root is True
    assert spec.security_context.seccomp_profile.type == "RuntimeDefault"
    (c,) = spec.containers
    assert c.name == "executor" and c.security_context.read_only_root_filesystem is True
    assert c.security_context.capabilities.drop == ["ALL"]
    assert "SPARK_AUTHENTICATE_SECRET" not in {e.name for e in c.env or []}
    # The executor starts with RPC encryption on (Spark passes spark.network.* at start).
    java_opts = {e.value for e in c.env or [] if e.name.startswith("SPARK_JAVA_OPT_")}
    assert "-Dspark.network.crypto.enabled=true" in java_opts, java_opts
    mounts = {m.mount_path: m.name for m in c.volume_mounts}
    assert "/tmp" in mounts and builders.SPARK_AUTH_DIR in mounts
    assert {v.secret.secret_name for v in spec.volumes if v.secret} == {"orders-spark-auth"}
    assert wait_for(lambda: core_v1.list_namespaced_config_map(ns, label_selector="spark-role=executor").items,
                    "the executors' conf ConfigMap")
