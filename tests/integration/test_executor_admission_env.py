"""The chart's executor-pods admission policy and a consumer's own handler environment and
placement (issue 44, items 1 and 2), on the real API server: the driver's token may create
executor pods with exactly what the consumer's spec gives them (spec.env / envFrom Secrets and
ConfigMaps, Secret and ConfigMap volumes, spec.spark's imagePullSecrets, nodeSelector,
tolerations, affinity, priorityClassName), and still nothing else: another Secret in env, in
envFrom or as a volume, another pull secret, a token. Dry-run creates, as in
test_executor_admission.py (whose Driver and executor pod this reuses)."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from antidote_testkit.operators import wait_for
from .test_chart import env, run  # noqa: F401  (env: a fixture used here)
from .test_executor_admission import Driver, _policy_docs, _policy_in_force, executor_pod

pytestmark = pytest.mark.integration

PRIORITY = f"antidote-test-{uuid.uuid4().hex[:6]}"
SPEC = {
    "env": [{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
            {"name": "REGION", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "region"}}},
            {"name": "MODE", "value": "live"}],
    "envFrom": [{"secretRef": {"name": "api-keys"}}, {"prefix": "APP_", "configMapRef": {"name": "app"}}],
    "volumes": [{"name": "tls", "secret": {"secretName": "client-tls"}, "mountPath": "/etc/app/tls"},
                {"name": "rules", "configMap": {"name": "rules"}, "mountPath": "/etc/app/rules"}],
}
SPARK = {"imagePullSecrets": [{"name": "registry"}], "priorityClassName": PRIORITY,
         "nodeSelector": {"pool": "consumers"},
         "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
             {"weight": 50, "preference": {"matchExpressions": [
                 {"key": "zone", "operator": "In", "values": ["a"]}]}}]}},
         "executor": {"nodeSelector": {"pool": "spot"},
                      "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]}}


@pytest.fixture
def driver(api_client: client.ApiClient, namespace: str) -> Iterator[Driver]:
    sched = client.SchedulingV1Api(api_client)
    sched.create_priority_class({"metadata": {"name": PRIORITY}, "value": 1000})
    d = Driver(api_client, namespace, **SPEC, spark={"image": "reg.example/shop/orders-consumer:7", **SPARK})
    try:
        yield d
    finally:
        d.close()
        sched.delete_priority_class(PRIORITY)


def _forged(d: Driver) -> dict[str, tuple[dict[str, Any], str]]:
    out: dict[str, tuple[dict[str, Any], str]] = {}

    def forge(what: str, expect: str, edit) -> None:
        pod = executor_pod(d, len(out) + 2)
        edit(pod["spec"], pod["spec"]["containers"][0])
        out[what] = (pod, expect)

    forge("another Secret in env", "may only read the Secrets api-keys,client-tls,db,kafka-creds,orders-spark-auth",
          lambda s, c: c["env"].append({"name": "X", "valueFrom": {"secretKeyRef": {"name": "other", "key": "k"}}}))
    forge("another Secret in envFrom", "may only read the Secrets",
          lambda s, c: c["envFrom"].append({"secretRef": {"name": "other"}}))
    forge("another Secret as a volume", "may only mount emptyDir and configMap volumes, the Secrets",
          lambda s, c: s["volumes"].append({"name": "x", "secret": {"secretName": "other"}}))
    forge("another pull secret", "may only pull with the Secrets registry (spec.spark.imagePullSecrets)",
          lambda s, c: s["imagePullSecrets"].append({"name": "other-registry"}))
    forge("a token mounted", "automountServiceAccountToken: true",
          lambda s, c: s.update(automountServiceAccountToken=True))
    forge("a projected API token", "web-identity tokens (audience sts.amazonaws.com)",
          lambda s, c: s["volumes"].append({"name": "api", "projected": {"sources": [
              {"serviceAccountToken": {"path": "token"}}]}}))
    forge("a projected token beside a Secret", "web-identity tokens (audience sts.amazonaws.com)",
          lambda s, c: s["volumes"].append({"name": "api", "projected": {"sources": [
              {"serviceAccountToken": {"path": "token", "audience": "sts.amazonaws.com"}},
              {"secret": {"name": "other"}}]}}))
    return out


def test_the_driver_token_creates_executors_with_the_consumers_env_and_placement_only(
        driver: Driver, env, namespace: str) -> None:  # noqa: F811
    pod = executor_pod(driver)
    spec = pod["spec"]
    (c,) = spec["containers"]
    # What the operator's template gives every executor (Spark keeps it, adding its own env).
    assert [e["name"] for e in c["env"]][:1] == ["SPARK_DRIVER_URL"]
    template = driver.template()["spec"]
    c["env"] += template["containers"][0]["env"]
    assert c["envFrom"] == SPEC["envFrom"]
    assert {v["name"] for v in spec["volumes"]} >= {"user-tls", "user-rules"}
    assert spec["imagePullSecrets"] == [{"name": "registry"}] and spec["priorityClassName"] == PRIORITY
    assert spec["nodeSelector"] == {"pool": "spot"} and spec["tolerations"][0]["key"] == "spot"
    forged = _forged(driver)

    release, text = _policy_docs(env, namespace)
    run(env, "kubectl", "apply", "-f", "-", stdin=text)
    try:
        wait_for(lambda: _policy_in_force(driver), "the policy to refuse a forged pod", timeout=60)
        # As EKS's pod identity webhook mutates an executor pod of an IRSA-annotated
        # ServiceAccount: a web-identity token (not one the API server accepts) and its env.
        pod["spec"]["volumes"].append({"name": "aws-iam-token", "projected": {"sources": [
            {"serviceAccountToken": {"audience": "sts.amazonaws.com", "expirationSeconds": 86400,
                                     "path": "token"}}]}})
        c["volumeMounts"].append({"name": "aws-iam-token", "mountPath": "/var/run/secrets/eks.amazonaws.com/serviceaccount",
                                  "readOnly": True})
        c["env"] += [{"name": "AWS_ROLE_ARN", "value": "arn:aws:iam::123456789012:role/orders"},
                     {"name": "AWS_WEB_IDENTITY_TOKEN_FILE",
                      "value": "/var/run/secrets/eks.amazonaws.com/serviceaccount/token"}]
        admitted = driver.create(pod)
        assert admitted.spec.priority_class_name == PRIORITY
        assert [s.name for s in admitted.spec.image_pull_secrets] == ["registry"]
        assert {e.name for e in admitted.spec.containers[0].env} >= {"DB_PASSWORD", "REGION", "MODE"}
        refusals = {}
        for what, (bad, expect) in forged.items():
            message = driver.refused(bad)
            assert f"ValidatingAdmissionPolicy '{release}-antidote-executor-pods'" in message, (what, message)
            assert expect in message, (what, message)
            refusals[what] = message
        print(json.dumps(refusals, indent=1))
        # A consumer without pull secrets: its executors may name none.
        bare = copy.deepcopy(pod)
        driver.admin.patch_namespaced_service_account("orders-driver", namespace, {"metadata": {"annotations": {
            "antidote.dev/executor-image-pull-secrets": ""}}})
        message = wait_for(lambda: _refusal(driver, bare), "the pull secret refused once the spec has none")
        assert "may only pull with the Secrets  (spec.spark.imagePullSecrets)" in message
    finally:
        run(env, "kubectl", "delete", "--ignore-not-found", "-f", "-", stdin=text)


def _refusal(d: Driver, pod: dict[str, Any]) -> str:
    try:
        d.create(pod)
    except client.ApiException as e:
        return json.loads(e.body)["message"]
    return ""


def test_a_real_spark_driver_keeps_the_consumers_env_and_placement_in_its_executor(
        driver: Driver, env, api_client, namespace, tmp_path) -> None:  # noqa: F811
    """Spark itself (client mode, the operator's spark-defaults and pod template, the driver's
    token, under the chart's policy) creates its executor pod with the template's env, envFrom,
    Secret and ConfigMap volumes, pull secret and placement: what reaches the handler on the
    executors. No kubelet runs the pod here (the node test does); the API calls are real."""
    import yaml

    from antidote_operator.builders import driver as builders
    from antidote_testkit.spark_driver import local_conf, running_driver

    release, text = _policy_docs(env, namespace)
    run(env, "kubectl", "apply", "-f", "-", stdin=text)
    try:
        wait_for(lambda: _policy_in_force(driver), "the policy to refuse a forged pod", timeout=60)
        cfg = api_client.configuration
        conf = local_conf(builders.spark_defaults(driver.settings, driver.opts), tmp_path, host=cfg.host,
                          ca_cert=cfg.ssl_ca_cert, token=driver.token, template=yaml.safe_dump(driver.template()))
        with running_driver(conf, tmp_path) as spark_driver:
            _check_executor_pod(driver, namespace)
            text_log = spark_driver.stop()
        assert "ValidatingAdmissionPolicy" not in text_log and "Forbidden" not in text_log, text_log[-3000:]
    finally:
        run(env, "kubectl", "delete", "--ignore-not-found", "-f", "-", stdin=text)


def _check_executor_pod(driver: Driver, namespace: str) -> None:
    """The executor pod Spark created carries the consumer's env, envFrom, volumes, pull
    secret and placement, beside Spark's own."""
    (pod,) = wait_for(lambda: driver.admin.list_namespaced_pod(namespace, label_selector="spark-role=executor").items,
                      "Spark's executor pod, admitted", timeout=90)
    spec, (c,) = pod.spec, pod.spec.containers
    env_ = {e.name: e for e in c.env}
    assert env_["DB_PASSWORD"].value_from.secret_key_ref.name == "db"
    assert env_["REGION"].value_from.config_map_key_ref.key == "region" and env_["MODE"].value == "live"
    assert "SPARK_EXECUTOR_ID" in env_  # and Spark's own beside them
    assert [(e.prefix, (e.secret_ref or e.config_map_ref).name) for e in c.env_from] == [
        (None, "api-keys"), ("APP_", "app")]
    mounts = {m.name: m for m in c.volume_mounts}
    assert mounts["user-tls"].mount_path == "/etc/app/tls" and mounts["user-tls"].read_only
    assert mounts["user-rules"].mount_path == "/etc/app/rules"
    assert [s.name for s in spec.image_pull_secrets] == ["registry"]
    assert spec.node_selector == {"pool": "spot"} and spec.priority_class_name == PRIORITY
    assert [t.key for t in spec.tolerations if t.key == "spot"] == ["spot"]
    assert spec.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution[0].weight == 50
    assert spec.automount_service_account_token is False
