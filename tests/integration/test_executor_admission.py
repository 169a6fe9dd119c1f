"""The chart's executor-pods admission policy (templates/admission/executor-pods.yaml) on the
real API server: a consumer's driver token creates its own executor pods and nothing else.

The driver's ServiceAccount, executors' ServiceAccount and RoleBinding are the operator's
builders' (`build_children`), bound to a ClusterRole of `DRIVER_RULES`; requests are made
with a TokenRequest token of the driver's ServiceAccount, the identity the driver pod has.
Forged pods are first shown to be admitted by RBAC alone (the hole), then refused once the
chart's policy is applied. Pods are created with server-side dry run (admission, policies
included, runs; nothing is stored), except where an update is tried."""

from __future__ import annotations

import copy
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from antidote_api import PoisonPolicySpec, QueueConsumerSpec, resolve
from antidote_operator.builders import driver as builders
from antidote_operator.builders.driver import RenderOptions

from antidote_testkit.operators import wait_for
from .test_chart import env, run, template  # noqa: F401  (env: a fixture used here)
from antidote_testkit.spark_driver import local_conf, running_driver

pytestmark = pytest.mark.integration

IMAGE = "reg.example/shop/orders-consumer:7"


def _settings(namespace: str, **over: Any):
    spec = QueueConsumerSpec.model_validate({
        "policyRef": {"name": "p"}, "handler": "shop.orders:handle",
        "source": {"kafka": {"bootstrapServers": "kafka:9092", "topic": "orders",
                             "secretRef": {"name": "kafka-creds"}}},
        "checkpoint": {"location": "s3a://ckpt/orders"}, "spark": {"image": IMAGE}, **over})
    return resolve(spec, PoisonPolicySpec(), name="orders", namespace=namespace)


class Driver:
    """The consumer `orders`'s RBAC as the operator makes it, and a client with its token."""

    def __init__(self, api_client: client.ApiClient, namespace: str, **spec: Any):
        self.ns = namespace
        self.role = f"antidote-spark-driver-{uuid.uuid4().hex[:6]}"
        self.opts = RenderOptions(driver_cluster_role=self.role)
        self.settings = _settings(namespace, **spec)  # spec: QueueConsumer spec fields over the base
        owner = {"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer",
                 "metadata": {"name": "orders", "namespace": namespace, "uid": "uid-1"}}
        self.kids = {(c["kind"], c["metadata"]["name"]): c for c in
                     builders.build_children(owner, self.settings, replicas=1, opts=self.opts)}
        self.admin = client.CoreV1Api(api_client)
        self.rbac = client.RbacAuthorizationV1Api(api_client)
        self.rbac.create_cluster_role({"metadata": {"name": self.role}, "rules": builders.DRIVER_RULES})
        for sa in ("orders-driver", "orders-executor"):
            self.admin.create_namespaced_service_account(namespace, self.kids[("ServiceAccount", sa)])
        self.rbac.create_namespaced_role_binding(namespace, self.kids[("RoleBinding", "orders-driver")])
        self.token = self.admin.create_namespaced_service_account_token(
            "orders-driver", namespace, {"spec": {"expirationSeconds": 1200}}).status.token
        cfg = copy.copy(api_client.configuration)
        cfg.cert_file = cfg.key_file = None
        cfg.api_key = {"authorization": f"Bearer {self.token}"}
        self.client = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.client)

    def close(self) -> None:
        self.client.close()
        self.rbac.delete_cluster_role(self.role)

    def template(self) -> dict[str, Any]:
        cm = self.kids[("ConfigMap", "orders-settings")]
        return yaml.safe_load(cm["data"][builders.EXECUTOR_TEMPLATE_KEY])

    def create(self, pod: dict[str, Any], dry_run: bool = True) -> client.V1Pod:
        return self.core.create_namespaced_pod(self.ns, pod, **({"dry_run": "All"} if dry_run else {}))

    def refused(self, pod: dict[str, Any]) -> str:
        with pytest.raises(client.ApiException) as refused:
            self.create(pod)
        assert refused.value.status in (403, 422), refused.value.body
        return json.loads(refused.value.body)["message"]


@pytest.fixture
def driver(api_client: client.ApiClient, namespace: str) -> Iterator[Driver]:
    d = Driver(api_client, namespace)
    try:
        yield d
    finally:
        d.close()


def test_the_chart_renders_the_policy_bound_to_the_watched_namespaces(env) -> None:  # noqa: F811
    def policy_docs(*sets: str) -> dict[str, dict[str, Any]]:
        return {d["kind"]: d for d in template(env, *sets) if d["apiVersion"] == "admissionregistration.k8s.io/v1"}

    every = policy_docs()
    vap, binding = every["ValidatingAdmissionPolicy"], every["ValidatingAdmissionPolicyBinding"]
    assert vap["metadata"]["name"] == binding["spec"]["policyName"] == "t-antidote-executor-pods"
    assert vap["spec"]["failurePolicy"] == "Fail" and vap["spec"]["paramKind"] == {"apiVersion": "v1",
                                                                                  "kind": "ServiceAccount"}
    assert binding["spec"]["validationActions"] == ["Deny"] and "matchResources" not in binding["spec"]
    assert binding["spec"]["paramRef"] == {"selector": {"matchExpressions": [
        {"key": builders.LABEL_CONSUMER, "operator": "Exists"}]}, "parameterNotFoundAction": "Allow"}
    listed = policy_docs("watch.namespaces={shop,billing}", "admissionPolicy.validationActions={Warn,Audit}")
    spec = listed["ValidatingAdmissionPolicyBinding"]["spec"]
    assert spec["matchResources"]["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["shop", "billing"]}]
    assert spec["validationActions"] == ["Warn", "Audit"]
    assert policy_docs("admissionPolicy.enabled=false") == {}


def _policy_docs(env, namespace: str) -> tuple[str, str]:  # noqa: F811
    """The chart's policy and binding, rendered by helm for this namespace only (the binding
    follows watch.namespaces): (release, the YAML to apply)."""
    release = f"vap{uuid.uuid4().hex[:6]}"
    docs = [d for d in template(env, f"watch.namespaces={{{namespace}}}", release=release, namespace=namespace)
            if d["apiVersion"] == "admissionregistration.k8s.io/v1"]
    assert sorted(d["kind"] for d in docs) == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    return release, "\n---\n".join(yaml.safe_dump(d) for d in docs)


@pytest.fixture
def policy(env, namespace: str) -> Iterator[str]:  # noqa: F811
    """The chart's policy, applied for real; removed after the test. Yields the release."""
    release, text = _policy_docs(env, namespace)
    run(env, "kubectl", "apply", "-f", "-", stdin=text)
    try:
        yield release
    finally:
        run(env, "kubectl", "delete", "--ignore-not-found", "-f", "-", stdin=text)


def executor_pod(d: Driver, n: int = 1) -> dict[str, Any]:
    """An executor pod as Spark 4 builds it from the operator's pod template and
    spark-defaults (BasicExecutorFeatureStep, MountSecretsFeatureStep, LocalDirsFeatureStep,
    the executor conf ConfigMap): Spark's labels and the operator's, the image, args, env,
    resources, ports, a Secret volume per spark.kubernetes.executor.secrets.*, an emptyDir
    per local dir and the conf ConfigMap. Spark adds no security settings of its own."""
    conf = builders.spark_defaults(d.settings, d.opts)
    pod = d.template()
    spec = pod["spec"]
    (c,) = spec["containers"]
    c.update({"image": conf["spark.kubernetes.container.image"], "imagePullPolicy": "IfNotPresent",
              "args": ["executor"],
              "env": [{"name": "SPARK_DRIVER_URL", "value": "spark://CoarseGrainedScheduler@orders.x.svc:7078"},
                      {"name": "SPARK_EXECUTOR_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                      {"name": "SPARK_EXECUTOR_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
              "resources": {"requests": {"cpu": "1", "memory": "1408Mi"}, "limits": {"memory": "1408Mi"}},
              "ports": [{"name": "blockmanager", "containerPort": 7079}]})
    secrets = sorted(k.removeprefix("spark.kubernetes.executor.secrets.") for k in conf
                     if k.startswith("spark.kubernetes.executor.secrets."))
    assert secrets == ["kafka-creds", "orders-spark-auth"]
    for s in secrets:
        spec["volumes"].append({"name": f"{s}-volume", "secret": {"secretName": s}})
        c["volumeMounts"].append({"name": f"{s}-volume", "mountPath": conf[f"spark.kubernetes.executor.secrets.{s}"]})
    spec["volumes"] += [{"name": "spark-local-dir-1", "emptyDir": {}},
                        {"name": "spark-conf-volume-exec", "configMap": {"name": "spark-exec-1a2b-conf-map"}}]
    c["volumeMounts"] += [{"name": "spark-local-dir-1", "mountPath": "/var/data/spark-1"},
                          {"name": "spark-conf-volume-exec", "mountPath": "/opt/spark/conf"}]
    spec.update({"restartPolicy": "Never", "hostname": f"orders-exec-{n}"})
    pod["metadata"] = {"name": f"orders-exec-{n}", "labels": {
        "spark-app-selector": "spark-1a2b", "spark-app-name": "antidote-orders", "spark-role": "executor",
        "spark-exec-id": str(n), "spark-exec-resourceprofile-id": "0",
        builders.LABEL_CONSUMER: "orders", "app.kubernetes.io/component": "executor"}}
    return pod


def _forged(d: Driver) -> dict[str, tuple[dict[str, Any], str]]:
    """Pods the driver's token must not create, each with the words its refusal names."""
    out: dict[str, tuple[dict[str, Any], str]] = {}

    def forge(what: str, expect: str, edit) -> None:
        pod = executor_pod(d, len(out) + 2)
        edit(pod, pod["spec"], pod["spec"]["containers"][0])
        out[what] = (pod, expect)

    forge("another ServiceAccount", "may only create pods under ServiceAccount orders-executor with "
          "automountServiceAccountToken: false (this pod: default,",
          lambda p, s, c: s.update(serviceAccountName="default"))
    forge("a token mounted", "(this pod: orders-executor, automountServiceAccountToken: true)",
          lambda p, s, c: s.update(automountServiceAccountToken=True))
    forge("another Secret", "may only mount emptyDir and configMap volumes, the Secrets "
          "kafka-creds,orders-spark-auth and web-identity tokens",
          lambda p, s, c: s["volumes"].append({"name": "x", "secret": {"secretName": "other-consumer-creds"}}))
    forge("a Secret in env", "may only read the Secrets",
          lambda p, s, c: c["env"].append({"name": "X", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}))
    forge("a hostPath", "may only mount emptyDir and configMap volumes",
          lambda p, s, c: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}))
    forge("a PersistentVolumeClaim", "may only mount emptyDir and configMap volumes",
          lambda p, s, c: s["volumes"].append({"name": "v", "persistentVolumeClaim": {"claimName": "data"}}))
    forge("another image", f"may only create pods of image {IMAGE}",
          lambda p, s, c: c.update(image="evil/miner:1"))
    forge("an init container of another image", f"may only create pods of image {IMAGE}",
          lambda p, s, c: s.update(initContainers=[{**copy.deepcopy(c), "name": "i", "image": "evil/miner:1",
                                                    "ports": []}]))
    forge("privileged", "restricted security context",
          lambda p, s, c: c["securityContext"].update(privileged=True, allowPrivilegeEscalation=True))
    forge("privilege escalation", "restricted security context",
          lambda p, s, c: c["securityContext"].update(allowPrivilegeEscalation=True))
    forge("a capability added", "restricted security context",
          lambda p, s, c: c["securityContext"].update(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}))
    forge("as root", "restricted security context",
          lambda p, s, c: s["securityContext"].update(runAsNonRoot=False, runAsUser=0))
    forge("unconfined seccomp", "restricted security context",
          lambda p, s, c: s["securityContext"].update(seccompProfile={"type": "Unconfined"}))
    forge("the host network", "restricted security context", lambda p, s, c: s.update(hostNetwork=True))
    forge("the host PID namespace", "restricted security context", lambda p, s, c: s.update(hostPID=True))
    forge("labelled as another consumer's driver", "may only create or change its own executor pods",
          lambda p, s, c: p["metadata"]["labels"].update({builders.LABEL_CONSUMER: "billing",
                                                          "app.kubernetes.io/component": "driver"}))
    return out


def _policy_in_force(d: Driver) -> str:
    """The binding is served once the API server's informers have the policy, the binding and
    the params: wait for a refusal itself, not for time."""
    pod = executor_pod(d, 99)
    pod["spec"]["serviceAccountName"] = "default"
    try:
        d.create(pod)
    except client.ApiException as e:
        return json.loads(e.body)["message"] if e.status == 403 else ""
    return ""


def test_the_driver_token_creates_its_own_executors_and_nothing_else(driver: Driver, env, namespace) -> None:  # noqa: F811
    forged = _forged(driver)
    # Without the policy, RBAC alone lets the driver's token create every one of them.
    for what, (pod, _) in forged.items():
        assert driver.create(pod).metadata.name == pod["metadata"]["name"], what

    release, text = _policy_docs(env, namespace)
    run(env, "kubectl", "apply", "-f", "-", stdin=text)
    try:
        wait_for(lambda: _policy_in_force(driver), "the policy to refuse a forged pod", timeout=60)
        # (a) its own executor pod, as Spark builds it: admitted. Every expression compiled
        # and evaluated to true for it (one that does not compile fails closed: the pod would
        # be refused with a compile error; the stack has no controller-manager to fill in the
        # policy's status.typeChecking). executor pod, as Spark builds it: admitted.
        admitted = driver.create(executor_pod(driver))
        assert admitted.spec.service_account_name == "orders-executor"
        refusals = {}
        for what, (pod, expect) in forged.items():
            message = driver.refused(pod)
            assert f"ValidatingAdmissionPolicy '{release}-antidote-executor-pods'" in message, (what, message)
            assert expect in message, (what, message)
            refusals[what] = message
        print(json.dumps(refusals, indent=1))
        # The policy constrains the driver's token only: the admin creates the same pods.
        admin = client.CoreV1Api(driver.admin.api_client)
        for what, (pod, _) in forged.items():
            assert admin.create_namespaced_pod(namespace, pod, dry_run="All"), what
    finally:
        run(env, "kubectl", "delete", "--ignore-not-found", "-f", "-", stdin=text)


def test_the_driver_relabels_its_executors_but_changes_nothing_else(driver: Driver, policy: str, namespace: str) -> None:
    """Spark patches its executors' labels (patch is in DRIVER_RULES); the pod's spec, whose
    image could otherwise be changed on a running pod, stays what was admitted."""
    wait_for(lambda: _policy_in_force(driver), "the policy to refuse a forged pod", timeout=60)
    driver.create(executor_pod(driver), dry_run=False)
    patched = driver.core.patch_namespaced_pod("orders-exec-1", namespace,
                                               {"metadata": {"labels": {"spark-exec-inactive": "true"}}})
    assert patched.metadata.labels["spark-exec-inactive"] == "true"
    with pytest.raises(client.ApiException) as refused:
        driver.core.patch_namespaced_pod("orders-exec-1", namespace, {"spec": {"activeDeadlineSeconds": 60}})
    assert refused.value.status == 403
    assert "may change the labels and annotations of its executor pods only" in refused.value.body
    with pytest.raises(client.ApiException) as refused:
        driver.core.patch_namespaced_pod("orders-exec-1", namespace, {"spec": {"containers": [
            {"name": builders.EXECUTOR_CONTAINER, "image": "evil/miner:1"}]}})
    assert refused.value.status == 403 and "ValidatingAdmissionPolicy" in refused.value.body
    with pytest.raises(client.ApiException) as refused:
        driver.core.patch_namespaced_pod("orders-exec-1", namespace, {"metadata": {"labels": {
            builders.LABEL_CONSUMER: "billing", "app.kubernetes.io/component": "driver"}}})
    assert "may only create or change its own executor pods" in refused.value.body
    # Not any pod of the namespace either: another consumer's driver pod, say.
    other = executor_pod(driver, 7)
    other["metadata"]["labels"] = {builders.LABEL_CONSUMER: "billing", "app.kubernetes.io/component": "driver"}
    driver.admin.create_namespaced_pod(namespace, other)
    with pytest.raises(client.ApiException) as refused:
        driver.core.patch_namespaced_pod("orders-exec-7", namespace, {"metadata": {"labels": {"x": "y"}}})
    assert refused.value.status == 403


def test_the_driver_service_account_without_its_annotations_creates_nothing(driver: Driver, policy,
                                                                            namespace) -> None:
    """A driver ServiceAccount the operator has not described yet (an upgrade, before the
    first reconcile) is refused rather than unconstrained."""
    wait_for(lambda: _policy_in_force(driver), "the policy to refuse a forged pod", timeout=60)
    driver.admin.patch_namespaced_service_account("orders-driver", namespace, {"metadata": {"annotations": {
        k: None for k in (builders.EXECUTOR_SA_ANNOTATION, builders.EXECUTOR_IMAGE_ANNOTATION,
                          builders.EXECUTOR_SECRETS_ANNOTATION)}}})
    message = wait_for(lambda: _refusal(driver, executor_pod(driver)), "the refusal of an undescribed driver")
    assert "has no antidote.dev/executor-service-account" in message


def _refusal(d: Driver, pod: dict[str, Any]) -> str:
    try:
        d.create(pod)
    except client.ApiException as e:
        return json.loads(e.body)["message"]
    return ""


def test_a_real_spark_driver_under_the_policy_gets_its_executor(driver: Driver, policy, api_client, namespace,
                                                               tmp_path) -> None:
    """Spark itself, in client mode with the operator's spark-defaults and the driver's token,
    creates its executor pod under the chart's policy: what the node tests' executors are."""
    wait_for(lambda: _policy_in_force(driver), "the policy to refuse a forged pod", timeout=60)
    cfg = api_client.configuration
    conf = local_conf(builders.spark_defaults(driver.settings, driver.opts), tmp_path, host=cfg.host,
                      ca_cert=cfg.ssl_ca_cert, token=driver.token, template=yaml.safe_dump(driver.template()))
    with running_driver(conf, tmp_path) as spark_driver:
        (pod,) = wait_for(lambda: driver.admin.list_namespaced_pod(namespace, label_selector="spark-role=executor").items,
                          "Spark's executor pod, admitted", timeout=90)
        assert pod.spec.service_account_name == "orders-executor" and pod.spec.containers[0].image == IMAGE
        assert {v.secret.secret_name for v in pod.spec.volumes if v.secret} == {"kafka-creds", "orders-spark-auth"}
        # Spark deletes it at stop (DELETE, which the policy does not restrict).
        text = spark_driver.stop()
        assert not driver.admin.list_namespaced_pod(namespace, label_selector="spark-role=executor").items
        assert "ValidatingAdmissionPolicy" not in text and "Forbidden" not in text, text[-3000:]


def test_the_operator_describes_each_driver_and_keeps_the_description_current(api_client: client.ApiClient,
                                                                              namespace: str, kubeconfig: str,
                                                                              kafka_bootstrap: str, tmp_path) -> None:
    """`antidote operator` writes the annotations on the driver's ServiceAccount, adds them to
    one an older operator made without them, and follows a changed spec.spark.image (which
    the policy would otherwise refuse for the new driver's executors)."""
    from antidote_testkit.operators import Cluster, consumer, install_crds, operator, policy

    install_crds(api_client)
    k = Cluster(api_client, namespace)
    k.create(policy("p"))
    old = k.create(consumer("old", "p", kafka_bootstrap, "old"))
    # "old-driver" as an older operator left it: labelled and owned by its consumer (as every
    # child is; one owned by nobody is another's, left alone), no annotations.
    owner = {"apiVersion": old["apiVersion"], "kind": "QueueConsumer", "name": "old",
             "uid": old["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    k.core.create_namespaced_service_account(namespace, {"metadata": {
        "name": "old-driver", "labels": builders.labels("old"), "ownerReferences": [owner]}})
    k.create(consumer("new", "p", kafka_bootstrap, "new", spark={"image": "shop/new:1"}))

    def described(name: str) -> dict[str, str]:
        ann = k.core.read_namespaced_service_account(f"{name}-driver", namespace).metadata.annotations or {}
        return {key: v for key, v in ann.items() if key.startswith("antidote.dev/executor-")}

    # The operator subprocess imports the code under test (a PYTHONPATH given to pytest wins
    # over the operator helper's default, the repository root).
    env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else None
    with operator(kubeconfig, namespace, tmp_path, env=env):
        assert wait_for(lambda: described("old"), "the older driver ServiceAccount described") == {
            builders.EXECUTOR_SA_ANNOTATION: "old-executor",
            builders.EXECUTOR_IMAGE_ANNOTATION: RenderOptions().image,
            builders.EXECUTOR_SECRETS_ANNOTATION: "old-spark-auth",
            builders.EXECUTOR_PULL_SECRETS_ANNOTATION: ""}
        assert wait_for(lambda: described("new"), "the new driver ServiceAccount described")[
            builders.EXECUTOR_IMAGE_ANNOTATION] == "shop/new:1"
        k.patch("queueconsumers", "new", {"spec": {"spark": {"image": "shop/new:2"}}})
        wait_for(lambda: described("new")[builders.EXECUTOR_IMAGE_ANNOTATION] == "shop/new:2",
                 "the image annotation following spec.spark.image")
