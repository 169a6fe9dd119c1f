"""The operator's child objects as data: names, owners, Spark client mode, secrets by reference."""

from __future__ import annotations

import pytest
import yaml

from antidote_api import PoisonPolicySpec, QueueConsumerSpec, resolve
from antidote_api.semantics import EffectiveSettings
from antidote_operator import builders
from antidote_operator.builders import RenderOptions, build_children

OWNER = {"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer",
         "metadata": {"name": "orders", "namespace": "shop", "uid": "uid-1", "labels": {"team": "pay"}}}


def settings(**over) -> EffectiveSettings:
    spec = {"policyRef": {"name": "strict"},
            "source": {"kafka": {"bootstrapServers": "kafka:9092", "topic": "orders"}},
            "handler": "shop.handlers:charge", "checkpoint": {"location": "s3a://ckpt/orders"}}
    spec.update(over)
    return resolve(QueueConsumerSpec.model_validate(spec), PoisonPolicySpec.model_validate({}),
                   name="orders", namespace="shop")


def children(s: EffectiveSettings | None = None, replicas: int = 1, opts: RenderOptions = RenderOptions()):
    return {c["kind"]: c for c in build_children(OWNER, s or settings(), replicas=replicas, opts=opts)}


def test_every_child_is_named_labelled_and_owned_by_the_consumer() -> None:
    kids = build_children(OWNER, settings(), replicas=1, opts=RenderOptions())
    assert [c["kind"] for c in kids] == ["ConfigMap", "ServiceAccount", "Role", "RoleBinding",
                                         "Service", "Deployment"]
    for c in kids:
        meta = c["metadata"]
        assert meta["namespace"] == "shop"
        assert meta["labels"]["antidote.dev/consumer"] == "orders"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "antidote-operator"
        assert meta["labels"]["team"] == "pay"  # the owner's labels propagate (kopf.adopt)
        assert meta["ownerReferences"] == [{"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer",
                                            "name": "orders", "uid": "uid-1", "controller": True,
                                            "blockOwnerDeletion": True}]
    names = {c["kind"]: c["metadata"]["name"] for c in kids}
    assert names == {"ConfigMap": "orders-settings", "ServiceAccount": "orders-driver", "Role": "orders-driver",
                     "RoleBinding": "orders-driver", "Service": "orders", "Deployment": "orders"}


def test_configmap_holds_the_effective_settings_that_load_back() -> None:
    s = settings()
    data = children(s)["ConfigMap"]["data"]
    assert EffectiveSettings.model_validate(yaml.safe_load(data["settings.yaml"])) == s


def test_spark_client_mode_against_the_cluster() -> None:
    s = settings(spark={"image": "shop/consumer:7", "executor": {"instances": 3, "cores": 2, "memory": "4g"}})
    conf = dict(line.split(" ", 1) for line in children(s)["ConfigMap"]["data"]["spark-defaults.conf"].splitlines())
    assert conf["spark.submit.deployMode"] == "client"
    assert conf["spark.kubernetes.namespace"] == "shop"
    assert conf["spark.kubernetes.container.image"] == "shop/consumer:7"
    assert conf["spark.driver.host"] == "orders.shop.svc"  # the headless Service
    assert conf["spark.driver.port"] == "7078" and conf["spark.driver.blockManager.port"] == "7079"
    assert conf["spark.kubernetes.driver.pod.name"] == "${env:POD_NAME}"  # executors owned by the driver pod
    assert (conf["spark.executor.instances"], conf["spark.executor.cores"], conf["spark.executor.memory"]) == ("3", "2", "4g")
    assert conf["spark.kubernetes.executor.label.antidote.dev/consumer"] == "orders"


def test_deployment_runs_one_driver_with_the_mounted_settings() -> None:
    dep = children()["Deployment"]
    spec = dep["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    assert spec["selector"]["matchLabels"] == {"antidote.dev/consumer": "orders"}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "orders-driver"
    (c,) = pod["containers"]
    assert c["command"] == ["antidote"]
    assert c["args"] == ["consumer", "--settings", "/etc/antidote/settings.yaml", "--metrics-port", "9090",
                         "--master", "k8s://https://kubernetes.default.svc"]
    env = {e["name"]: e for e in c["env"]}
    assert env["SPARK_CONF_DIR"]["value"] == "/etc/antidote"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert c["image"] == RenderOptions().image
    assert c["resources"]["requests"] == {"cpu": "1", "memory": "1408Mi"}  # 1g + 384Mi overhead
    assert pod["volumes"][0] == {"name": "settings", "configMap": {"name": "orders-settings"}}
    assert children(replicas=0)["Deployment"]["spec"]["replicas"] == 0
    # The consumer's heartbeat is its liveness; its one line on exit 2 its termination message.
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_settings_hash_rolls_the_driver_when_the_settings_change() -> None:
    a = children(settings())["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    b = children(settings(paused=True))["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert a["antidote.dev/settings-hash"] != b["antidote.dev/settings-hash"]
    assert a == children(settings())["Deployment"]["spec"]["template"]["metadata"]["annotations"]


def test_secrets_are_mounted_by_reference_never_copied() -> None:
    s = settings(source={"kafka": {"bootstrapServers": "kafka:9092", "topic": "orders",
                                   "secretRef": {"name": "kafka-creds"}}},
                 sink={"kafka": {"topic": "out", "bootstrapServers": "other:9092",
                                 "secretRef": {"name": "sink-creds"}}})
    kids = children(s)
    pod = kids["Deployment"]["spec"]["template"]["spec"]
    assert {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v} == {"kafka-creds", "sink-creds"}
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/etc/antidote/secrets/kafka-creds", "/etc/antidote/secrets/sink-creds"} <= mounts
    conf = kids["ConfigMap"]["data"]["spark-defaults.conf"]
    assert "spark.kubernetes.executor.secrets.kafka-creds /etc/antidote/secrets/kafka-creds" in conf
    assert "password" not in str(kids).lower()


def test_role_lets_the_driver_manage_executor_pods_in_its_namespace_only() -> None:
    kids = children()
    role, binding = kids["Role"], kids["RoleBinding"]
    assert role["kind"] == "Role"  # namespaced, never a ClusterRole
    pods = next(r for r in role["rules"] if r["resources"] == ["pods"])
    assert {"create", "delete", "watch", "list"} <= set(pods["verbs"])
    assert all("*" not in r["verbs"] and "*" not in r["resources"] for r in role["rules"])
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "orders-driver"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "orders-driver"}]


def test_headless_service_exposes_driver_and_metrics() -> None:
    svc = children()["Service"]["spec"]
    assert svc["clusterIP"] == "None" and svc["publishNotReadyAddresses"] is True
    assert svc["selector"] == {"antidote.dev/consumer": "orders"}
    assert {p["name"]: p["port"] for p in svc["ports"]} == {"driver": 7078, "blockmanager": 7079, "metrics": 9090}
    assert builders.metrics_url("orders", "shop") == "http://orders.shop.svc:9090/metrics"


@pytest.mark.parametrize(("memory", "mib", "quantity"), [
    ("512m", 896, "896Mi"), ("1g", 1408, "1408Mi"), ("2048m", 2432, "2432Mi"), ("10g", 11264, "11Gi"),
    ("1024k", 385, "385Mi"), ("4gb", 4505, "4505Mi")])
def test_driver_memory_gets_spark_overhead(memory: str, mib: int, quantity: str) -> None:
    assert builders.container_memory_mib(memory) == mib
    assert builders.quantity_mib(mib) == quantity
