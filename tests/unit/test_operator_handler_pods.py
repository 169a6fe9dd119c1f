"""The handler's environment and the pods' placement and identity, as data (issue 44, items 1
and 2): spec.env / envFrom / Secret and ConfigMap volumes reach the driver and the executor pod
template; placement reaches the driver, executors and reader Jobs; ServiceAccount annotations;
the settings (and their hash) of a consumer that sets none of it stay what they were."""

from __future__ import annotations

import yaml

from antidote_api.handler_env import RESERVED_ENV, reserved
from antidote_api.semantics import EffectiveSettings
from antidote_operator.builders import handler_pods
from antidote_operator.builders.driver import (RenderOptions, build_deployment, executor_pod_template,
                                               settings_document)
from antidote_operator.builders.reader_job import build_reader_job

from .test_operator_builders import settings

ENV = [{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
       {"name": "REGION", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "region", "optional": True}}},
       {"name": "WHERE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
       {"name": "MODE", "value": "live"}]
ENV_FROM = [{"secretRef": {"name": "api-keys"}}, {"prefix": "APP_", "configMapRef": {"name": "app"}}]
VOLUMES = [{"name": "ckpt", "claimName": "ckpt", "mountPath": "/var/lib/antidote"},
           {"name": "tls", "secret": {"secretName": "client-tls", "items": [{"key": "tls.crt", "path": "crt"}]},
            "mountPath": "/etc/app/tls"},
           {"name": "rules", "configMap": {"name": "rules"}, "mountPath": "/etc/app/rules"}]


def with_env() -> EffectiveSettings:
    return settings(env=ENV, envFrom=ENV_FROM, volumes=VOLUMES)


def _driver_pod(s: EffectiveSettings) -> dict:
    return build_deployment(s, replicas=1, opts=RenderOptions(), config_hash="h")["spec"]["template"]["spec"]


def test_env_reaches_the_driver_after_the_operators_own() -> None:
    (c,) = _driver_pod(with_env())["containers"]
    names = [e["name"] for e in c["env"]]
    assert names[:3] == ["POD_NAME", "SPARK_CONF_DIR", "PYTHONUNBUFFERED"]
    assert c["env"][3:] == ENV  # Kubernetes' own shape, as written
    assert c["envFrom"] == ENV_FROM


def test_env_reaches_every_executor_through_the_pod_template() -> None:
    pod = executor_pod_template(with_env(), RenderOptions())["spec"]
    (c,) = pod["containers"]
    assert c["env"] == ENV and c["envFrom"] == ENV_FROM
    assert pod["automountServiceAccountToken"] is False  # no API token, whatever the env


def test_secret_and_config_map_volumes_go_where_the_handler_runs_claims_where_state_is() -> None:
    s = with_env()
    driver = _driver_pod(s)
    executor = executor_pod_template(s, RenderOptions())["spec"]
    reader = build_reader_job(s, RenderOptions(), trigger="Manual", name="orders-reader-1")["spec"]["template"]["spec"]

    def vols(pod: dict) -> dict:
        return {v["name"]: v for v in pod["volumes"]}

    def mounts(pod: dict) -> dict:
        return {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}

    for pod in (driver, executor):
        assert vols(pod)["user-tls"] == {"name": "user-tls", "secret": {
            "secretName": "client-tls", "items": [{"key": "tls.crt", "path": "crt"}]}}
        assert vols(pod)["user-rules"] == {"name": "user-rules", "configMap": {"name": "rules"}}
        assert mounts(pod)["user-tls"] == {"name": "user-tls", "mountPath": "/etc/app/tls", "readOnly": True}
        assert mounts(pod)["user-rules"]["mountPath"] == "/etc/app/rules"
    assert "claim-ckpt" in vols(driver) and "claim-ckpt" in vols(reader)
    assert "claim-ckpt" not in vols(executor)
    # The reader runs no handler: not its Secret volumes; but its env and envFrom (an archive
    # on object storage needs the credentials the checkpoint has).
    assert not {"user-tls", "user-rules"} & set(vols(reader))
    assert reader["containers"][0]["envFrom"] == ENV_FROM
    assert reader["containers"][0]["env"] == [{"name": "PYTHONUNBUFFERED", "value": "1"}, *ENV]


def test_the_admission_policy_is_told_of_every_secret_the_handler_reads() -> None:
    annotations = driver_sa(with_env())["metadata"]["annotations"]
    assert annotations["antidote.dev/executor-secrets"].split(",") == [
        "api-keys", "client-tls", "db", "orders-spark-auth"]
    assert handler_pods.referenced_config_maps(with_env()) == ["app", "rules"]


def test_every_env_name_the_operator_spark_or_the_image_sets_is_reserved() -> None:
    s = with_env()
    (driver,) = _driver_pod(s)["containers"]
    reader = build_reader_job(s, RenderOptions(), trigger="Manual", name="r")["spec"]["template"]["spec"]
    ours = {e["name"] for e in driver["env"][:3]} | {e["name"] for e in reader["containers"][0]["env"][:1]}
    # The dev runner's, Spark's executor pod's (BasicExecutorFeatureStep), the consumer image's.
    others = {"ANTIDOTE_DEV_RUNNER", "ANTIDOTE_SECRETS_DIR", "ANTIDOTE_SPARK_JARS", "SPARK_EXECUTOR_ID",
              "SPARK_DRIVER_URL", "SPARK_APPLICATION_ID", "SPARK_JAVA_OPT_0", "SPARK_LOCAL_DIRS",
              "SPARK_HOME", "SPARK_USER", "PYSPARK_PYTHON", "JAVA_HOME", "KUBERNETES_SERVICE_HOST"}
    assert all(reserved(n) for n in ours | others), sorted(n for n in ours | others if not reserved(n))
    assert not any(reserved(n) for n in ("DB_PASSWORD", "AWS_ACCESS_KEY_ID", "SPARKLY", "PYTHONIOENCODING"))
    assert "SPARK_*" in RESERVED_ENV and "POD_NAME" in RESERVED_ENV


def test_placement_applies_to_both_sides_and_the_sides_override_it() -> None:
    s = settings(spark={
        "imagePullSecrets": [{"name": "registry"}],
        "nodeSelector": {"pool": "consumers"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "antidote", "effect": "NoSchedule"}],
        "priorityClassName": "antidote",
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
        "executor": {"nodeSelector": {"pool": "spot"},
                     "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]}})
    driver = _driver_pod(s)
    executor = executor_pod_template(s, RenderOptions())["spec"]
    reader = build_reader_job(s, RenderOptions(), trigger="Manual", name="r")["spec"]["template"]["spec"]
    for pod in (driver, executor, reader):
        assert pod["imagePullSecrets"] == [{"name": "registry"}]
        assert pod["priorityClassName"] == "antidote"
        assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"][0]["matchExpressions"] == [{"key": "zone", "operator": "In", "values": ["a"]}]
    assert driver["nodeSelector"] == reader["nodeSelector"] == {"pool": "consumers"}
    assert driver["tolerations"][0]["key"] == "dedicated"
    assert executor["nodeSelector"] == {"pool": "spot"}  # replaced, not merged
    assert executor["tolerations"] == [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
    annotations = driver_sa(s)["metadata"]["annotations"]
    assert annotations["antidote.dev/executor-image-pull-secrets"] == "registry"


def test_a_consumer_without_placement_has_the_pods_it_had() -> None:
    s = settings()
    for pod in (_driver_pod(s), executor_pod_template(s, RenderOptions())["spec"]):
        assert not {"imagePullSecrets", "nodeSelector", "tolerations", "affinity", "priorityClassName"} & set(pod)
        assert "envFrom" not in pod["containers"][0]
    annotations = driver_sa(s)["metadata"]["annotations"]
    assert annotations["antidote.dev/executor-image-pull-secrets"] == ""


def test_settings_of_a_consumer_without_the_new_fields_keep_their_document() -> None:
    doc = yaml.safe_load(settings_document(settings(volumes=[VOLUMES[0]])))
    assert not {"env", "envFrom"} & set(doc)
    assert not {"imagePullSecrets", "nodeSelector", "tolerations", "affinity", "priorityClassName"} & set(doc["spark"])
    assert set(doc["spark"]["driver"]) == {"cores", "memory"}
    assert set(doc["spark"]["executor"]) == {"instances", "cores", "memory"}
    assert doc["volumes"] == [{"name": "ckpt", "claimName": "ckpt", "mountPath": "/var/lib/antidote",
                               "readOnly": False}]
    # ... and a document with them loads back to the same settings.
    s = with_env()
    assert EffectiveSettings.model_validate(yaml.safe_load(settings_document(s))) == s


def test_service_account_annotations_for_cloud_identity() -> None:
    s = settings(spark={
        "driver": {"serviceAccountAnnotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/drv"}},
        "executor": {"serviceAccountAnnotations": {"iam.gke.io/gcp-service-account": "x@p.iam.gserviceaccount.com"}}})
    kids = [c for c in children_list(s) if c["kind"] == "ServiceAccount"]
    driver_sa, executor_sa = kids
    assert driver_sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == "arn:aws:iam::1:role/drv"
    assert driver_sa["metadata"]["annotations"]["antidote.dev/executor-service-account"] == "orders-executor"
    assert executor_sa["metadata"]["annotations"] == {
        "iam.gke.io/gcp-service-account": "x@p.iam.gserviceaccount.com",
        "antidote.dev/user-annotations": "iam.gke.io/gcp-service-account"}
    assert executor_sa["automountServiceAccountToken"] is False
    assert "annotations" not in [c for c in children_list(settings()) if c["kind"] == "ServiceAccount"][1]["metadata"]


def driver_sa(s: EffectiveSettings) -> dict:
    return next(c for c in children_list(s) if c["metadata"]["name"] == "orders-driver")


def children_list(s: EffectiveSettings) -> list[dict]:
    from antidote_operator.builders.driver import build_children
    from .test_operator_builders import OWNER
    return build_children(OWNER, s, replicas=1, opts=RenderOptions())


def test_a_service_account_annotation_taken_out_of_the_spec_is_taken_off_and_nothing_else() -> None:
    from antidote_operator.kube import owned_part, stale_annotations

    role = {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/drv"}
    before = driver_sa(settings(spark={"driver": {"serviceAccountAnnotations": role}}))
    assert before["metadata"]["annotations"]["antidote.dev/user-annotations"] == "eks.amazonaws.com/role-arn"
    # On the server: what the operator wrote, and an annotation of someone else's.
    have = {"metadata": {"annotations": {**before["metadata"]["annotations"], "cloud.example/added": "x"}}}
    assert stale_annotations(before, have) == {}
    after = driver_sa(settings())
    assert stale_annotations(after, have) == {"eks.amazonaws.com/role-arn": None,
                                              "antidote.dev/user-annotations": None}
    assert "antidote.dev/user-annotations" not in owned_part(after)["metadata"]["annotations"]
    # A key kept, another removed: only that one goes; the list follows.
    two = driver_sa(settings(spark={"driver": {"serviceAccountAnnotations": {**role, "team": "pay"}}}))
    one = driver_sa(settings(spark={"driver": {"serviceAccountAnnotations": {"team": "pay"}}}))
    assert stale_annotations(one, {"metadata": {"annotations": two["metadata"]["annotations"]}}) == {
        "eks.amazonaws.com/role-arn": None}
