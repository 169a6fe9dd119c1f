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

from .operator_util import wait_for
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
