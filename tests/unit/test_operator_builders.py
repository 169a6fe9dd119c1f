"""The operator's child objects as data: names, owners, Spark client mode, secrets by reference."""

from __future__ import annotations

import json

import pytest
import yaml

from antidote_api import PoisonPolicySpec, QueueConsumerSpec, resolve
from antidote_api.semantics import EffectiveSettings
from antidote_operator.builders import driver as builders
from antidote_operator.builders.driver import RenderOptions, build_children

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
    assert [c["kind"] for c in kids] == ["ConfigMap", "ServiceAccount", "ServiceAccount", "RoleBinding",
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
    assert [(c["kind"], c["metadata"]["name"]) for c in kids] == [
        ("ConfigMap", "orders-settings"), ("ServiceAccount", "orders-driver"),
        ("ServiceAccount", "orders-executor"), ("RoleBinding", "orders-driver"), ("Service", "orders"),
        ("Deployment", "orders")]


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
                         "--reports-port", "4044", "--master", "k8s://https://kubernetes.default.svc"]
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
                                 "secretRef": {"name": "sink-creds"}, "delivery": "AtLeastOnce"}})
    kids = children(s)
    pod = kids["Deployment"]["spec"]["template"]["spec"]
    assert {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v} == {
        "kafka-creds", "sink-creds", "orders-spark-auth"}
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/etc/antidote/secrets/kafka-creds", "/etc/antidote/secrets/sink-creds"} <= mounts
    conf = kids["ConfigMap"]["data"]["spark-defaults.conf"]
    assert "spark.kubernetes.executor.secrets.kafka-creds /etc/antidote/secrets/kafka-creds" in conf
    assert "password" not in str(kids).lower()


def test_driver_is_bound_to_the_charts_cluster_role_in_its_namespace_only() -> None:
    binding = children(opts=RenderOptions(driver_cluster_role="rel-antidote-spark-driver"))["RoleBinding"]
    assert binding["kind"] == "RoleBinding"  # namespaced: the ClusterRole applies in "shop" only
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "rel-antidote-spark-driver"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "orders-driver"}]
    rules = {r["resources"][0]: set(r["verbs"]) for r in builders.DRIVER_RULES}
    assert rules == {"pods": {"get", "list", "watch", "create", "patch", "delete", "deletecollection"},
                     "configmaps": {"create", "deletecollection"}}


def _conf(kids) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in kids["ConfigMap"]["data"]["spark-defaults.conf"].splitlines())


def test_executors_run_under_their_own_service_account_without_a_token() -> None:
    kids = build_children(OWNER, settings(), replicas=1, opts=RenderOptions())
    executor_sa = next(c for c in kids if c["metadata"]["name"] == "orders-executor")
    assert executor_sa["automountServiceAccountToken"] is False
    assert not any(c["kind"] == "RoleBinding" and c["subjects"][0]["name"] == "orders-executor" for c in kids)
    cm = kids[0]
    template = yaml.safe_load(cm["data"]["executor-pod-template.yaml"])
    assert template["spec"]["serviceAccountName"] == "orders-executor"
    assert template["spec"]["automountServiceAccountToken"] is False
    conf = _conf({"ConfigMap": cm})
    assert conf["spark.kubernetes.authenticate.executor.serviceAccountName"] == "orders-executor"
    assert conf["spark.kubernetes.executor.podTemplateFile"] == "/etc/antidote/executor-pod-template.yaml"
    assert conf["spark.kubernetes.executor.podTemplateContainerName"] == template["spec"]["containers"][0]["name"]
    assert conf["spark.kubernetes.driver.service.deleteOnTermination"] == "false"  # no Service permission
    # No PersistentVolumeClaim permission either (Spark 4.0 owns and deletes claims by default).
    assert conf["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"
    assert conf["spark.kubernetes.driver.reusePersistentVolumeClaim"] == "false"


RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                        "readOnlyRootFilesystem": True, "runAsNonRoot": True}


def test_driver_and_executor_pods_are_restricted_with_a_writable_tmp() -> None:
    kids = children()
    driver = kids["Deployment"]["spec"]["template"]["spec"]
    executor = yaml.safe_load(kids["ConfigMap"]["data"]["executor-pod-template.yaml"])["spec"]
    for pod in (driver, executor):
        assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                          "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}}
        (c,) = pod["containers"]
        assert c["securityContext"] == RESTRICTED_CONTAINER
        assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
        assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]
        # Spark creates directories in its working directory (the driver's `artifacts`).
        assert c["workingDir"] == "/tmp"


def test_spark_rpc_is_authenticated_with_the_consumers_secret_from_a_file() -> None:
    kids = children()
    conf = _conf(kids)
    assert conf["spark.authenticate"] == "true"
    # Encrypted too: tasks carry the Kafka source's kafka.* options (a Secret's password).
    assert conf["spark.network.crypto.enabled"] == "true"
    assert (conf["spark.network.crypto.authEngineVersion"], conf["spark.network.crypto.cipher"],
            conf["spark.network.crypto.saslFallback"]) == ("2", "AES/GCM/NoPadding", "false")
    assert conf["spark.authenticate.secret.file"] == "/etc/antidote/spark-auth/secret"
    assert conf["spark.kubernetes.executor.secrets.orders-spark-auth"] == "/etc/antidote/spark-auth"
    pod = kids["Deployment"]["spec"]["template"]["spec"]
    assert {"name": "spark-auth", "secret": {"secretName": "orders-spark-auth", "defaultMode": 0o440}} in pod["volumes"]
    assert {"name": "spark-auth", "mountPath": "/etc/antidote/spark-auth", "readOnly": True} in \
        pod["containers"][0]["volumeMounts"]
    secret = builders.build_spark_auth_secret("orders", b"\x00" * 32)
    assert secret["metadata"]["name"] == "orders-spark-auth" and secret["type"] == "Opaque"
    assert list(secret["data"]) == ["secret"]


def test_the_operator_sets_only_keys_the_api_refuses_in_spec_spark_conf() -> None:
    """Every key of spark-defaults.conf that matters for isolation is one the user cannot
    override; resources and tuning the spec sets are left to it."""
    from antidote_api import spark_conf

    conf = _conf(children())
    tuning = {"spark.driver.cores", "spark.executor.instances", "spark.executor.cores", "spark.executor.memory",
              "spark.sql.warehouse.dir"}
    assert {k for k in conf if not spark_conf.is_owned(k)} == tuning


def test_headless_service_exposes_driver_and_metrics() -> None:
    svc = children()["Service"]["spec"]
    assert svc["clusterIP"] == "None" and svc["publishNotReadyAddresses"] is True
    assert svc["selector"] == {"antidote.dev/consumer": "orders", "app.kubernetes.io/component": "driver"}
    # It selects the driver pod and not the executors, which carry the consumer label too.
    driver_labels = children()["Deployment"]["spec"]["template"]["metadata"]["labels"]
    conf = _conf(children())
    executor_labels = {k.removeprefix("spark.kubernetes.executor.label."): v for k, v in conf.items()
                       if k.startswith("spark.kubernetes.executor.label.")}
    assert svc["selector"].items() <= driver_labels.items()
    assert not svc["selector"].items() <= executor_labels.items()
    assert {p["name"]: p["port"] for p in svc["ports"]} == {"driver": 7078, "blockmanager": 7079, "metrics": 9090,
                                                          "reports": 4044}
    assert builders.metrics_url("orders", "shop") == "http://orders.shop.svc:9090/metrics"


@pytest.mark.parametrize(("memory", "mib", "quantity"), [
    ("512m", 896, "896Mi"), ("1g", 1408, "1408Mi"), ("2048m", 2432, "2432Mi"), ("10g", 11264, "11Gi"),
    ("1024k", 385, "385Mi"), ("4gb", 4505, "4505Mi")])
def test_driver_memory_gets_spark_overhead(memory: str, mib: int, quantity: str) -> None:
    assert builders.container_memory_mib(memory) == mib
    assert builders.quantity_mib(mib) == quantity


def test_claims_are_mounted_in_the_driver_and_reader_pods_and_not_in_executors() -> None:
    from antidote_operator.builders.reader_job import build_reader_job

    s = settings(volumes=[{"name": "state", "claimName": "orders-state", "mountPath": "/var/lib/antidote"},
                          {"name": "ref", "claimName": "shared-ref", "mountPath": "/ref", "readOnly": True}])
    want_volumes = [{"name": "claim-state", "persistentVolumeClaim": {"claimName": "orders-state"}},
                    {"name": "claim-ref", "persistentVolumeClaim": {"claimName": "shared-ref", "readOnly": True}}]
    want_mounts = [{"name": "claim-state", "mountPath": "/var/lib/antidote"},
                   {"name": "claim-ref", "mountPath": "/ref", "readOnly": True}]
    kids = children(s)
    pod = kids["Deployment"]["spec"]["template"]["spec"]
    assert [v for v in pod["volumes"] if "persistentVolumeClaim" in v] == want_volumes
    assert [m for m in pod["containers"][0]["volumeMounts"] if m["name"].startswith("claim-")] == want_mounts
    # fsGroup: a claim the image's user does not own is still writable by it.
    assert pod["securityContext"]["fsGroup"] == RenderOptions().run_as_user
    job = build_reader_job(s, RenderOptions(), trigger="drain", name="orders-drain-1")["spec"]["template"]["spec"]
    assert [v for v in job["volumes"] if "persistentVolumeClaim" in v] == want_volumes
    assert [m for m in job["containers"][0]["volumeMounts"] if m["name"].startswith("claim-")] == want_mounts
    assert job["securityContext"] == pod["securityContext"]
    template = yaml.safe_load(kids["ConfigMap"]["data"]["executor-pod-template.yaml"])
    assert "claim" not in json.dumps(template)


def test_without_volumes_the_settings_are_as_before_the_field() -> None:
    """An operator upgrade must not roll every driver: no `volumes` key when none are set."""
    data = children(settings())["ConfigMap"]["data"]
    assert "volumes" not in yaml.safe_load(data["settings.yaml"])
