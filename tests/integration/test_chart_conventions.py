"""The chart's conventions (issue 49): a subchart with `global`, name overrides, an image
registry for mirrors, pull secrets, the CRD toggles, the readiness probe, topology spread,
extra volumes, `helm test`'s pod, `monitoring.enabled` that alone decides, and quantities
checked by the schema. Rendered with the stack's helm; what the API server can judge
(objects, the CRDs, the test pod under the restricted Pod Security Standard, the CRD
ownership guard) is sent to the stack's API server as a server-side dry run, which changes
nothing on the shared stack. `helm test` for real runs on the node:
tests/integration/test_node_helm_test.py."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from ..api_cases import ROOT

CHART = ROOT / "charts/antidote"
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]


@pytest.fixture(scope="module")
def env(stack) -> dict[str, str]:
    return {**os.environ, **stack.env()}


def run(env, *cmd, check=True, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, input=stdin, cwd=cwd)
    if check:
        assert out.returncode == 0, f"{cmd} failed:\n{out.stdout}\n{out.stderr}"
    return out


def template(env, *sets: str, chart: Path = CHART, release: str = "t", namespace: str = "default",
             extra: tuple[str, ...] = ()) -> list[dict]:
    args = ["helm", "template", release, chart, "-n", namespace, *extra]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(run(env, *args).stdout) if d]


def one(docs: list[dict], kind: str) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"].get("annotations", {}).get("helm.sh/hook") is None]
    return doc


def operator_container(docs: list[dict]) -> dict:
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def consumer_image(docs: list[dict]) -> str:
    (arg,) = [a for a in operator_container(docs)["args"] if a.startswith("--consumer-image=")]
    return arg.split("=", 1)[1]


def helm_test_pod(docs: list[dict]) -> dict:
    (pod,) = [d for d in docs if d["kind"] == "Pod"]
    return pod


def dry_run(env, docs: list[dict], namespace: str) -> subprocess.CompletedProcess:
    """Server-side apply, dry run: the API server validates (and admits) every object."""
    return run(env, "kubectl", "apply", "--server-side", "--force-conflicts", "--dry-run=server",
               "--field-manager=chart-conventions-test", "-n", namespace, "-o", "name", "-f", "-",
               stdin="\n---\n".join(yaml.safe_dump(d) for d in docs), check=False)


# --- a subchart ---------------------------------------------------------------------------

def _parent_chart(tmp_path: Path, values: dict) -> Path:
    parent = tmp_path / "platform"
    parent.mkdir()
    (parent / "Chart.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v2", "name": "platform", "version": "1.0.0",
        "dependencies": [{"name": "antidote", "version": yaml.safe_load((CHART / "Chart.yaml").read_text())["version"],
                          "repository": f"file://{CHART}", "condition": "antidote.enabled"}]}))
    (parent / "values.yaml").write_text(yaml.safe_dump(values))
    return parent


def test_renders_as_a_subchart_with_global(env, tmp_path, namespace) -> None:
    """Inside a parent chart Helm adds `global` (here with keys the chart does not know) to
    its values; the schema allows it, global.imageRegistry reaches both images, and the
    rendered objects pass the API server."""
    parent = _parent_chart(tmp_path, {
        "global": {"imageRegistry": "mirror.example:5000", "storageClass": "fast", "team": {"name": "shop"}},
        "antidote": {"enabled": True, "fullnameOverride": "queues", "crds": {"install": False},
                     "watch": {"namespaces": [namespace]}}})
    run(env, "helm", "dependency", "update", parent)
    assert list((parent / "charts").glob("antidote-*.tgz")), "helm dependency update packaged no antidote"
    run(env, "helm", "lint", "--strict", parent)
    docs = template(env, chart=parent, namespace=namespace)
    dep = one(docs, "Deployment")
    assert dep["metadata"]["name"] == "queues-operator"
    assert operator_container(docs)["image"] == f"mirror.example:5000/antidote-dev/antidote-operator:{APP_VERSION}"
    assert consumer_image(docs) == f"mirror.example:5000/antidote-dev/antidote-consumer:{APP_VERSION}"
    out = dry_run(env, [d for d in docs if d["kind"] != "Pod"], namespace)
    assert out.returncode == 0, out.stderr
    # The subchart is off with its condition, and its schema still judges its values.
    assert not template(env, "antidote.enabled=false", chart=parent, namespace=namespace)
    bad = run(env, "helm", "template", "t", parent, "--set", "antidote.replicaCount=0", check=False)
    assert bad.returncode != 0 and "/replicaCount" in bad.stderr, bad.stderr


def test_global_alone_is_accepted(env) -> None:
    """The same `global` given to the chart alone (`--set global.x=y`)."""
    docs = template(env, "global.team=shop", "global.imageRegistry=")
    assert operator_container(docs)["image"] == f"ghcr.io/antidote-dev/antidote-operator:{APP_VERSION}"


# --- names --------------------------------------------------------------------------------

def _names(docs: list[dict]) -> set[str]:
    return {d["metadata"]["name"] for d in docs if d["kind"] != "CustomResourceDefinition"}


def test_name_overrides_change_every_name(env) -> None:
    default = template(env)
    assert "t-antidote-operator" in _names(default)

    full = template(env, "fullnameOverride=queues")
    assert all(n.startswith("queues") for n in _names(full)), _names(full)
    assert len(_names(full)) == len(_names(default))
    assert "--driver-cluster-role=queues-spark-driver" in operator_container(full)["args"]
    assert one(full, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "queues"

    named = template(env, "nameOverride=qd", release="shop")
    assert all(n.startswith("shop-qd") for n in _names(named)), _names(named)
    dep = one(named, "Deployment")
    assert dep["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "qd"
    # The Service and PDB select what the Deployment's pods carry.
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert one(named, "Service")["spec"]["selector"].items() <= pod_labels.items()
    # A release whose name contains the (overridden) name is not repeated.
    assert "qd-operator" in _names(template(env, "nameOverride=qd", release="qd"))
    # The CRDs keep their API names whatever the release is called.
    assert {d["metadata"]["name"] for d in full if d["kind"] == "CustomResourceDefinition"} == \
        {"queueconsumers.antidote.dev", "poisonpolicies.antidote.dev"}


@pytest.mark.parametrize("bad, named", [
    ("fullnameOverride=Not_A_Name", "/fullnameOverride"),
    ("nameOverride=a.b", "/nameOverride"),
])
def test_a_bad_name_override_is_refused_naming_it(env, bad, named) -> None:
    out = run(env, "helm", "template", "t", CHART, "--set", bad, check=False)
    assert out.returncode != 0 and named in out.stderr, out.stderr


# --- images -------------------------------------------------------------------------------

@pytest.mark.parametrize("sets, operator, consumer", [
    ((), "ghcr.io/antidote-dev/antidote-operator", "ghcr.io/antidote-dev/antidote-consumer"),
    (("image.registry=mirror.example",),
     "mirror.example/antidote-dev/antidote-operator", "mirror.example/antidote-dev/antidote-consumer"),
    (("image.registry=mirror.example", "consumer.image.registry=registry.shop.example"),
     "mirror.example/antidote-dev/antidote-operator", "registry.shop.example/antidote-dev/antidote-consumer"),
    (("image.registry=mirror.example", "consumer.image.registry=registry.shop.example",
      "global.imageRegistry=harbor.example/proxy"),
     "harbor.example/proxy/antidote-dev/antidote-operator", "harbor.example/proxy/antidote-dev/antidote-consumer"),
    (("image.registry=", "image.repository=localhost/antidote/operator", "consumer.image.repository=my/handlers",
      "consumer.image.tag=v7"),
     "localhost/antidote/operator", "my/handlers"),
])
def test_registry_prefixes_the_operator_and_the_default_consumer_image(env, sets, operator, consumer) -> None:
    docs = template(env, *sets)
    tag = "v7" if "consumer.image.tag=v7" in sets else APP_VERSION
    assert operator_container(docs)["image"] == f"{operator}:{APP_VERSION}"
    assert helm_test_pod(docs)["spec"]["containers"][0]["image"] == f"{operator}:{APP_VERSION}"
    assert consumer_image(docs) == f"{consumer}:{tag}"


def test_local_images_values_name_the_images_dev_build_makes(env) -> None:
    docs = template(env, extra=("-f", str(ROOT / "hack/local-images.values.yaml")))
    assert operator_container(docs)["image"] == f"localhost/antidote/operator:{APP_VERSION}"
    assert consumer_image(docs) == f"localhost/antidote/consumer:{APP_VERSION}"


def test_pull_secrets_reach_the_operator_and_the_test_pod(env) -> None:
    docs = template(env, "imagePullSecrets[0].name=regcred")
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert helm_test_pod(docs)["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert "imagePullSecrets" not in one(template(env), "Deployment")["spec"]["template"]["spec"]


# --- CRDs -----------------------------------------------------------------------------------

def _crds(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}


def test_crds_install_renders_the_generated_crds_kept_on_uninstall(env) -> None:
    crds = _crds(template(env))
    assert set(crds) == {"queueconsumers.antidote.dev", "poisonpolicies.antidote.dev"}
    for name, crd in crds.items():
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert crd["metadata"]["labels"]["app.kubernetes.io/instance"] == "t"
        # Exactly the generated CRD (crds/, from the models), but for Helm's metadata.
        plural = name.split(".")[0]
        generated = yaml.safe_load((ROOT / "crds" / f"antidote.dev_{plural}.yaml").read_text())
        ours = copy.deepcopy(crd)
        del ours["metadata"]["annotations"]
        ours["metadata"]["labels"] = generated["metadata"]["labels"]
        assert ours == generated, name
    unkept = _crds(template(env, "crds.keep=false"))
    assert set(unkept) == set(crds) and all("annotations" not in c["metadata"] for c in unkept.values())
    assert not _crds(template(env, "crds.install=false"))
    # Helm's crds/ folder holds only Kopf's peering CRDs (installed first, for the peering objects).
    with_folder = _crds(template(env, "crds.install=false", extra=("--include-crds",)))
    assert set(with_folder) == {"kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"}


def test_the_api_server_accepts_the_rendered_crds(env, namespace) -> None:
    crds = list(_crds(template(env)).values())
    out = dry_run(env, crds, namespace)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == ["customresourcedefinition.apiextensions.k8s.io/poisonpolicies.antidote.dev",
                                          "customresourcedefinition.apiextensions.k8s.io/queueconsumers.antidote.dev"]


def test_crds_install_refuses_crds_no_release_owns(env, namespace, api_client) -> None:
    """The stack's CRDs were applied without Helm (as by hand, or by the chart when they were
    in crds/): an install that would take them over is refused, naming crds.install and the
    way on; crds.install=false installs."""
    from antidote_testkit.operators import install_crds  # noqa: PLC0415

    install_crds(api_client)  # as the other tests apply them: with the API, not Helm
    ext = client.ApiextensionsV1Api(api_client)
    qc = ext.read_custom_resource_definition("queueconsumers.antidote.dev")
    assert "meta.helm.sh/release-name" not in (qc.metadata.annotations or {})
    out = run(env, "helm", "install", "owner", CHART, "-n", namespace, "--dry-run=server", check=False)
    assert out.returncode != 0
    assert "crds.install: the CRD" in out.stderr and "no Helm release owns it" in out.stderr, out.stderr
    assert "set crds.install=false" in out.stderr and "docs/upgrade.md" in out.stderr
    run(env, "helm", "install", "owner", CHART, "-n", namespace, "--dry-run=server", "--set", "crds.install=false")


# --- the operator pod -----------------------------------------------------------------------

def test_readiness_probe_is_kopfs_health_endpoint(env) -> None:
    c = operator_container(template(env, "readiness.periodSeconds=3", "readiness.failureThreshold=2"))
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert (c["readinessProbe"]["periodSeconds"], c["readinessProbe"]["failureThreshold"]) == (3, 2)
    assert {"name": "healthz", "containerPort": 8081, "protocol": "TCP"} in c["ports"]


def test_topology_spread_gets_the_operators_selector(env, namespace) -> None:
    docs = template(env, "replicaCount=2",
                    "topologySpreadConstraints[0].maxSkew=1",
                    "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
                    "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
                    "topologySpreadConstraints[1].maxSkew=2",
                    "topologySpreadConstraints[1].topologyKey=topology.kubernetes.io/zone",
                    "topologySpreadConstraints[1].whenUnsatisfiable=DoNotSchedule",
                    "topologySpreadConstraints[1].labelSelector.matchLabels.team=shop", namespace=namespace)
    spec = one(docs, "Deployment")["spec"]
    first, second = spec["template"]["spec"]["topologySpreadConstraints"]
    assert first["labelSelector"] == {"matchLabels": spec["selector"]["matchLabels"]}
    assert (first["maxSkew"], first["topologyKey"]) == (1, "kubernetes.io/hostname")
    assert second["labelSelector"] == {"matchLabels": {"team": "shop"}}  # the user's own is kept
    assert "topologySpreadConstraints" not in one(template(env), "Deployment")["spec"]["template"]["spec"]
    out = dry_run(env, [one(docs, "Deployment")], namespace)
    assert out.returncode == 0, out.stderr
    bad = run(env, "helm", "template", "t", CHART, "--set", "topologySpreadConstraints[0].maxSkew=1", check=False)
    assert bad.returncode != 0 and "/topologySpreadConstraints/0" in bad.stderr, bad.stderr


def test_extra_volumes_are_mounted_beside_tmp(env, namespace) -> None:
    docs = template(env, "extraVolumes[0].name=ca", "extraVolumes[0].configMap.name=corp-ca",
                    "extraVolumeMounts[0].name=ca", "extraVolumeMounts[0].mountPath=/etc/ssl/corp",
                    "extraVolumeMounts[0].readOnly=true", namespace=namespace)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["tmp", "ca"]
    assert {"name": "ca", "configMap": {"name": "corp-ca"}} in pod["volumes"]
    mounts = pod["containers"][0]["volumeMounts"]
    assert mounts == [{"name": "tmp", "mountPath": "/tmp"},
                      {"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": True}]
    out = dry_run(env, [one(docs, "Deployment")], namespace)
    assert out.returncode == 0, out.stderr
    bad = run(env, "helm", "template", "t", CHART, "--set", "extraVolumeMounts[0].name=ca",
              "--set", "extraVolumeMounts[0].mountPath=relative", check=False)
    assert bad.returncode != 0 and "/extraVolumeMounts/0/mountPath" in bad.stderr, bad.stderr


# --- monitoring -------------------------------------------------------------------------------

MONITORING = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def test_monitoring_enabled_alone_decides_when_the_api_is_there(env) -> None:
    """`--api-versions` is what Helm's Capabilities show when the Prometheus Operator runs
    (test_chart.py checks the same against the API server with its CRDs installed)."""
    api = ("--api-versions", "monitoring.coreos.com/v1")
    assert not MONITORING & {d["kind"] for d in template(env, extra=api)}
    assert not MONITORING & {d["kind"] for d in template(env, "monitoring.enabled=false", extra=api)}
    assert MONITORING <= {d["kind"] for d in template(env, "monitoring.enabled=true", extra=api)}
    assert MONITORING <= {d["kind"] for d in template(env, "monitoring.enabled=true")}


# --- quantities -------------------------------------------------------------------------------

@pytest.mark.parametrize("bad, named", [
    ("resources.limits.memory=lots", "/resources/limits/memory"),
    ("resources.requests.cpu=fast", "/resources/requests/cpu"),
    ("resources.requests.memory=128 Mi", "/resources/requests/memory"),
    ("resources.limits.cpu=1.5.0", "/resources/limits/cpu"),
    ("resources.limit.memory=1Gi", "'limit' not allowed"),
])
def test_a_bad_quantity_is_refused_naming_the_field(env, bad, named) -> None:
    out = run(env, "helm", "template", "t", CHART, "--set", bad, check=False)
    assert out.returncode != 0, out.stdout
    assert named in out.stderr, out.stderr


def test_kubernetes_quantities_are_accepted(env, namespace) -> None:
    docs = template(env, "resources.requests.cpu=0.25", "resources.requests.memory=100M",
                    "resources.limits.cpu=2", "resources.limits.memory=1.5Gi",
                    "resources.requests.ephemeral-storage=1e9", namespace=namespace)
    res = operator_container(docs)["resources"]
    assert res["limits"] == {"cpu": 2, "memory": "1.5Gi"}
    out = dry_run(env, [one(docs, "Deployment")], namespace)
    assert out.returncode == 0, out.stderr


# --- helm test ----------------------------------------------------------------------------------

def test_the_test_pod_checks_the_crds_and_the_operators_service(env) -> None:
    docs = template(env, "metrics.port=9100", release="shop", namespace="queues")
    pod = helm_test_pod(docs)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    service = one(docs, "Service")
    # The metrics Service does not route to the test pod.
    assert not service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["port"] == 9100
    script = pod["spec"]["containers"][0]["args"][0]
    assert f"http://{service['metadata']['name']}.queues.svc:9100/metrics" in script
    assert "https://kubernetes.default.svc/apis/antidote.dev/v1alpha1" in script
    assert {"queueconsumers", "poisonpolicies"} <= set(script.replace('"', " ").replace("{", " ").split())
    compile(script, "test-operator", "exec")  # the script the pod runs is valid Python


def test_the_test_pod_passes_the_restricted_pod_security_standard(env, namespace, core_v1) -> None:
    """Created (dry run) in a namespace that enforces `restricted`: admitted; the same pod
    without its seccomp profile is refused, so the namespace does enforce."""
    core_v1.patch_namespace(namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}})
    pod = helm_test_pod(template(env, namespace=namespace))
    out = dry_run(env, [pod], namespace)
    assert out.returncode == 0, out.stderr
    weaker = copy.deepcopy(pod)
    del weaker["spec"]["securityContext"]["seccompProfile"]
    del weaker["spec"]["containers"][0]["securityContext"]["seccompProfile"]
    out = dry_run(env, [weaker], namespace)
    assert out.returncode != 0 and "restricted" in out.stderr and "seccompProfile" in out.stderr, out.stderr

