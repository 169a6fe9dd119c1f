"""The Helm chart against the real API server of `antidote dev up`: lint, a matrix of
rendered values checked by `kubectl apply --dry-run=server`, install/upgrade/uninstall, the
values schema and the RBAC.

The dev API server has no Prometheus Operator: for the monitoring-on cases the test
installs minimal CRDs for ServiceMonitor, PodMonitor and PrometheusRule (the fields the
chart sets, with their required keys) so the server checks those objects too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from antidote_operator.builders import driver as builders

from ..api_cases import ROOT

CHART = ROOT / "charts/antidote"


@pytest.fixture(scope="module")
def env(stack) -> dict[str, str]:
    return {**os.environ, **stack.env()}


def run(env, *cmd, check=True, stdin: str | None = None) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, input=stdin)
    if check:
        assert out.returncode == 0, f"{cmd} failed:\n{out.stdout}\n{out.stderr}"
    return out


def template(env, *sets: str, release: str = "t", namespace: str = "default", crds: bool = False) -> list[dict]:
    args = ["helm", "template", release, CHART, "-n", namespace]
    if crds:
        args.append("--include-crds")
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(run(env, *args).stdout) if d]


def _monitoring_crd(plural: str, kind: str, spec_schema: dict) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"plural": plural, "singular": plural[:-1], "kind": kind},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                         "openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}}}]}}


OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
MONITORING_CRDS = [
    _monitoring_crd("servicemonitors", "ServiceMonitor", {
        "type": "object", "required": ["selector", "endpoints"],
        "properties": {"selector": OPEN, "jobLabel": {"type": "string"},
                       "endpoints": {"type": "array", "items": OPEN}}}),
    _monitoring_crd("podmonitors", "PodMonitor", {
        "type": "object", "required": ["selector", "podMetricsEndpoints"],
        "properties": {"selector": OPEN, "namespaceSelector": OPEN,
                       "podMetricsEndpoints": {"type": "array", "items": OPEN}}}),
    _monitoring_crd("prometheusrules", "PrometheusRule", {
        "type": "object", "required": ["groups"], "properties": {"groups": {
            "type": "array", "items": {"type": "object", "required": ["name", "rules"], "properties": {
                "name": {"type": "string"},
                "rules": {"type": "array", "items": {
                    "type": "object", "required": ["expr"], "properties": {
                        "alert": {"type": "string"}, "record": {"type": "string"},
                        "expr": {"type": "string"}, "for": {"type": "string"},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}}}}}}}}),
]


@pytest.fixture(scope="module")
def chart_crds(env, api_client) -> None:
    """The chart's crds/ (Antidote's and Kopf's peering CRDs), applied for real, as Helm does
    on a first install; and the minimal monitoring CRDs."""
    docs = [d for d in template(env, crds=True) if d["kind"] == "CustomResourceDefinition"]
    assert {d["metadata"]["name"] for d in docs} >= {"queueconsumers.antidote.dev", "poisonpolicies.antidote.dev",
                                                     "kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"}
    docs += MONITORING_CRDS
    run(env, "kubectl", "apply", "--server-side", "--force-conflicts", "-f", "-",
        stdin="\n---\n".join(yaml.safe_dump(d) for d in docs))
    ext = client.ApiextensionsV1Api(api_client)
    deadline = time.monotonic() + 30
    for d in docs:
        while not any(c.type == "Established" and c.status == "True"
                      for c in ext.read_custom_resource_definition(d["metadata"]["name"]).status.conditions or []):
            assert time.monotonic() < deadline, d["metadata"]["name"]
            time.sleep(0.2)
    yield
    for d in MONITORING_CRDS:
        ext.delete_custom_resource_definition(d["metadata"]["name"])


def test_helm_lint_strict(env) -> None:
    for sets in ([], ["replicaCount=2", "watch.namespaces={a,b}", "monitoring.enabled=true"]):
        args = [a for s in sets for a in ("--set", s)]
        out = run(env, "helm", "lint", "--strict", CHART, *args)
        assert "0 chart(s) failed" in out.stdout


MATRIX = {
    "cluster-wide": [],
    "namespaced": ["watch.namespaces={NS1,NS2}"],
    "cluster-wide+monitoring+dashboard": ["monitoring.enabled=true", "dashboard.enabled=true"],
    "namespaced+monitoring+2-replicas": ["watch.namespaces={NS1,NS2}", "monitoring.enabled=true", "replicaCount=2"],
    "cluster-wide+2-replicas": ["replicaCount=2"],
}


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_rendered_objects_pass_the_api_server(case, env, chart_crds, core_v1, namespace) -> None:
    other = f"{namespace[:50]}-b"
    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    try:
        sets = [s.replace("NS1", namespace).replace("NS2", other) for s in MATRIX[case]]
        release = f"r{uuid.uuid4().hex[:6]}"
        docs = template(env, *sets, release=release, namespace=namespace)
        kinds = sorted(d["kind"] for d in docs)
        monitoring = "monitoring.enabled=true" in sets
        assert ("PrometheusRule" in kinds) == monitoring and ("ServiceMonitor" in kinds) == monitoring
        assert ("PodDisruptionBudget" in kinds) == ("replicaCount=2" in sets)
        assert ("ConfigMap" in kinds) == ("dashboard.enabled=true" in sets)
        peering = [d for d in docs if d["apiVersion"] == "kopf.dev/v1"]
        if "replicaCount=2" in sets:
            assert peering and all(d["kind"] == ("KopfPeering" if "namespaced" in case else "ClusterKopfPeering")
                                   for d in peering)
        else:
            assert not peering
        if "namespaced" in case:
            assert sorted(d["metadata"]["namespace"] for d in docs if d["kind"] == "Role") == sorted([namespace, other])
        out = run(env, "kubectl", "apply", "--dry-run=server", "-o", "name", "-f", "-",
                  stdin="\n---\n".join(yaml.safe_dump(d) for d in docs))
        assert len(out.stdout.split()) == len(docs), out.stdout
    finally:
        core_v1.delete_namespace(other)


def test_the_server_rejects_a_broken_monitoring_object(env, chart_crds, namespace) -> None:
    """The minimal monitoring CRDs really check: a PrometheusRule without expr is refused."""
    rule = next(d for d in template(env, "monitoring.enabled=true", namespace=namespace)
                if d["kind"] == "PrometheusRule")
    del rule["spec"]["groups"][0]["rules"][0]["expr"]
    out = run(env, "kubectl", "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(rule), check=False)
    assert out.returncode != 0 and "expr" in out.stderr


def test_monitoring_enabled_alone_decides(env, chart_crds) -> None:
    """With monitoring.coreos.com/v1 served, `helm install --dry-run=server` renders no
    monitoring object unless monitoring.enabled (false means off, issue 49), and NOTES say
    how to turn it on; with it, every one of them."""
    off = run(env, "helm", "install", "cap", CHART, "--dry-run=server", "--set", "crds.install=false")
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        assert f"kind: {kind}" not in off.stdout
    assert "set monitoring.enabled=true to install them" in " ".join(off.stdout.split())
    on = run(env, "helm", "install", "cap", CHART, "--dry-run=server", "--set", "crds.install=false",
             "--set", "monitoring.enabled=true")
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        assert f"kind: {kind}" in on.stdout


def _rbac_rules(docs: list[dict]) -> list[tuple[str, dict]]:
    return [(f"{d['kind']}/{d['metadata']['name']}", r) for d in docs
            if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]


def _operator_rules(docs: list[dict]) -> list[tuple[str, dict]]:
    driver = [d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-spark-driver")]
    return [(w, r) for w, r in _rbac_rules(docs) if w.split("/", 1)[1] not in driver]


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_rbac_has_no_wildcards_no_readable_secrets_and_binds_only_the_driver_role(case, env) -> None:
    sets = [s.replace("NS1", "a").replace("NS2", "b") for s in MATRIX[case]]
    docs = template(env, *sets)
    rules = _rbac_rules(docs)
    assert rules
    for where, rule in rules:
        for field in ("verbs", "resources", "apiGroups"):
            assert not any("*" in v for v in rule.get(field, [])), f"{where}: wildcard in {field}: {rule}"
        if "secrets" in rule["resources"]:
            # The Spark RPC Secrets: created and deleted, never read.
            assert rule["resources"] == ["secrets"] and set(rule["verbs"]) <= {"create", "delete"}, where
        assert not {"escalate", "impersonate"} & set(rule["verbs"]), where
        if "bind" in rule["verbs"]:
            assert rule == {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                            "verbs": ["bind"], "resourceNames": ["t-antidote-spark-driver"]}, where
    for where, rule in _operator_rules(docs):
        if "pods" in rule["resources"]:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, f"{where}: the operator may not create pods"
        assert "roles" not in rule["resources"], where


def test_driver_cluster_role_is_what_the_operator_binds(env) -> None:
    """One ClusterRole for every driver, with the rules the operator's builders document,
    and its name on the operator's command line."""
    docs = template(env, "watch.namespaces={a}")
    role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "t-antidote-spark-driver")
    assert role["rules"] == builders.DRIVER_RULES
    c = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--driver-cluster-role=t-antidote-spark-driver" in c["args"]


def test_dashboard_configmap_is_the_dashboard_file_for_grafanas_sidecar(env) -> None:
    assert not [d for d in template(env) if d["kind"] == "ConfigMap"]  # off by default
    (cm,) = [d for d in template(env, "dashboard.enabled=true", "dashboard.annotations.grafana_folder=Antidote")
             if d["kind"] == "ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Antidote"}
    assert json.loads(cm["data"]["antidote.json"]) == json.loads((CHART / "files/dashboard.json").read_text())
    (cm,) = [d for d in template(env, "dashboard.enabled=true", "dashboard.namespace=monitoring",
                                 "dashboard.labels.grafana_dashboard=null", "dashboard.labels.team=sre")
             if d["kind"] == "ConfigMap"]
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["team"] == "sre" and "grafana_dashboard" not in cm["metadata"]["labels"]


def test_podmonitor_selects_the_consumer_drivers(env) -> None:
    pm = next(d for d in template(env, "monitoring.enabled=true") if d["kind"] == "PodMonitor")
    assert pm["spec"]["selector"]["matchLabels"].items() <= builders.labels("orders").items()
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] in {n for n, _ in builders._ports(builders.RenderOptions())}
    # Identity from the pod's metadata, never from its page (issue 43, item 13): honorLabels
    # off, namespace and consumer relabelled from the namespace and the label the operator sets.
    ep = pm["spec"]["podMetricsEndpoints"][0]
    label = "__meta_kubernetes_pod_label_" + builders.LABEL_CONSUMER.replace(".", "_").replace("/", "_")
    assert ep["honorLabels"] is False
    assert {"sourceLabels": [label], "regex": ".+", "action": "keep"} in ep["relabelings"]
    assert {"sourceLabels": ["__meta_kubernetes_namespace"], "targetLabel": "namespace"} in ep["relabelings"]
    assert {"sourceLabels": [label], "targetLabel": "consumer"} in ep["relabelings"]
    # The operator's own series name the consumer they are about: kept.
    sm = next(d for d in template(env, "monitoring.enabled=true") if d["kind"] == "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["honorLabels"] is True


@pytest.mark.parametrize("bad, named", [
    ("replicaCount=0", "/replicaCount"),
    ("watch.namespace=x", "'namespace' not allowed"),
    ("watch.namespaces={Not_A_Namespace}", "/watch/namespaces/0"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("monitoring.serviceMonitor.interval=often", "/monitoring/serviceMonitor/interval"),
    ("admissionPolicy.validationActions={Never}", "/admissionPolicy/validationActions/0"),
])
def test_schema_refuses_a_bad_value_naming_it(bad, named, env) -> None:
    out = run(env, "helm", "template", "t", CHART, "--set", bad, check=False)
    assert out.returncode != 0
    assert named in out.stderr, out.stderr


def test_security_context_is_restricted(env) -> None:
    dep = next(d for d in template(env) if d["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert "--liveness=http://0.0.0.0:8081/healthz" in c["args"]
    assert {e["name"] for e in c["env"]} >= {"POD_NAME", "POD_NAMESPACE"}


def test_operator_args_parse(env) -> None:
    """The rendered command line is one `antidote operator` accepts."""
    from antidote_cli.main import build_parser  # noqa: PLC0415

    for sets in ([], ["watch.namespaces={a,b}", "replicaCount=2", "operator.prometheusUrl=http://prom:9090"]):
        c = next(d for d in template(env, *sets) if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
        args = build_parser().parse_args(c["args"] + (["--priority=7"] if "replicaCount=2" in sets else []))
        assert args.metrics_port == 8080
        if sets:
            assert args.namespaces == ["a", "b"] and args.peering == "antidote"
            assert args.prometheus_url == "http://prom:9090"
        else:
            assert args.all_namespaces


def _notes_example(notes: str) -> str:
    m = re.search(r"cat <<'YAML' \| kubectl apply -f -\n(.*?)\n  YAML\n", notes, re.S)
    assert m, notes
    return textwrap.dedent(m.group(1))


def _operator_rbac_is_least_privilege(api_client, namespace: str, *, sa: str, driver_role: str) -> None:
    """What the API server lets the installed operator's ServiceAccount do (impersonated)."""
    cfg = api_client.configuration
    as_sa = client.ApiClient(cfg, header_name="Impersonate-User", header_value=sa)
    try:
        rbac, core = client.RbacAuthorizationV1Api(as_sa), client.CoreV1Api(as_sa)

        def binding(role: str) -> dict:
            return {"metadata": {"name": f"probe-{role}"[:60]},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                    "subjects": [{"kind": "ServiceAccount", "name": "some-driver", "namespace": namespace}]}

        # It binds the drivers' ClusterRole without holding its permissions...
        rbac.create_namespaced_role_binding(namespace, binding(driver_role))
        rbac.delete_namespaced_role_binding(f"probe-{driver_role}"[:60], namespace)
        # ...and no other role, and it cannot create pods nor read Secrets itself.
        # (cluster-admin: `edit` and `admin` are aggregated ClusterRoles, empty on a stack
        # without the aggregation controller, and binding an empty role escalates nothing.)
        for forbidden in (lambda: rbac.create_namespaced_role_binding(namespace, binding("cluster-admin")),
                          lambda: core.create_namespaced_pod(namespace, {
                              "metadata": {"name": "probe"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
                          lambda: core.read_namespaced_secret("anything", namespace),
                          lambda: core.list_namespaced_secret(namespace)):
            with pytest.raises(client.ApiException) as refused:
                forbidden()
            assert refused.value.status == 403, refused.value.body
        # It scales a driver's Deployment through the scale subresource (pause, disable, resume).
        review = client.AuthorizationV1Api(api_client).create_subject_access_review({
            "spec": {"user": sa, "resourceAttributes": {
                "group": "apps", "resource": "deployments", "subresource": "scale", "verb": "patch",
                "namespace": namespace}}})
        assert review.status.allowed, review.status
        # It creates and deletes a consumer's Spark RPC Secret.
        core.create_namespaced_secret(namespace, {"metadata": {"name": "probe-spark-auth"}, "data": {"secret": "eA=="}})
        core.delete_namespaced_secret("probe-spark-auth", namespace)
    finally:
        as_sa.close()


def test_install_upgrade_uninstall(env, chart_crds, api_client, core_v1, namespace) -> None:
    release = f"it{uuid.uuid4().hex[:6]}"
    apps, rbac = client.AppsV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    name = f"{release}-antidote-operator"
    # The stack's CRDs were applied without Helm: this release does not own them.
    out = run(env, "helm", "install", release, CHART, "-n", namespace, "--set", f"watch.namespaces={{{namespace}}}",
              "--set", "crds.install=false")
    try:
        # NOTES' example is valid: the API server accepts it.
        example = _notes_example(out.stdout)
        run(env, "kubectl", "apply", "--dry-run=server", "-n", namespace, "-f", "-", stdin=example)
        dep = apps.read_namespaced_deployment(name, namespace)
        args = dep.spec.template.spec.containers[0].args
        assert f"--namespace={namespace}" in args and "--scrape-interval=2" in args
        assert rbac.read_namespaced_role(name, namespace).rules
        _operator_rbac_is_least_privilege(api_client, namespace, sa=f"system:serviceaccount:{namespace}:{release}-antidote",
                                          driver_role=f"{release}-antidote-spark-driver")
        assert core_v1.read_namespaced_service(f"{name}-metrics", namespace).spec.ports[0].port == 8080

        run(env, "helm", "upgrade", release, CHART, "-n", namespace, "--reuse-values",
            "--set", "operator.scrapeInterval=5", "--set", "replicaCount=2")
        dep = apps.read_namespaced_deployment(name, namespace)
        args = dep.spec.template.spec.containers[0].args
        assert "--scrape-interval=5" in args and "--peering=antidote" in args and dep.spec.replicas == 2
        assert client.PolicyV1Api(api_client).read_namespaced_pod_disruption_budget(name, namespace)
        peering = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            "kopf.dev", "v1", namespace, "kopfpeerings", "antidote")
        assert peering["metadata"]["labels"]["app.kubernetes.io/instance"] == release
        status = json.loads(run(env, "helm", "status", release, "-n", namespace, "-o", "json").stdout)
        assert status["version"] == 2 and status["info"]["status"] == "deployed"
    finally:
        run(env, "helm", "uninstall", release, "-n", namespace, "--wait", "--timeout", "60s")
    for read in (lambda: apps.read_namespaced_deployment(name, namespace),
                 lambda: rbac.read_namespaced_role(name, namespace),
                 lambda: rbac.read_cluster_role(name),
                 lambda: rbac.read_cluster_role(f"{release}-antidote-spark-driver"),
                 lambda: core_v1.read_namespaced_service_account(f"{release}-antidote", namespace)):
        with pytest.raises(client.ApiException) as gone:
            read()
        assert gone.value.status == 404
    # CRDs stay (crds.install=false: not the release's; Kopf's peering CRDs: Helm keeps crds/).
    client.ApiextensionsV1Api(api_client).read_custom_resource_definition("queueconsumers.antidote.dev")
    client.ApiextensionsV1Api(api_client).read_custom_resource_definition("kopfpeerings.kopf.dev")


def test_the_operator_reconciles_with_only_the_charts_rbac(env, chart_crds, api_client, core_v1, namespace,
                                                           tmp_path) -> None:
    """`antidote operator` authenticated as the installed chart's ServiceAccount (a real
    token, no admin rights) creates a consumer's children, binds the drivers' ClusterRole,
    creates the RPC Secret and deletes them all with the consumer: the least-privilege RBAC
    is enough, and the API server refuses it nothing."""
    from antidote_testkit.operators import Cluster, consumer, operator, policy, wait_for

    release = f"op{uuid.uuid4().hex[:6]}"
    driver_role = f"{release}-antidote-spark-driver"
    run(env, "helm", "install", release, CHART, "-n", namespace, "--set", f"watch.namespaces={{{namespace}}}",
        "--set", "crds.install=false")
    try:
        token = core_v1.create_namespaced_service_account_token(
            f"{release}-antidote", namespace, {"spec": {"expirationSeconds": 3600}}).status.token
        cfg = api_client.configuration
        kubeconfig = tmp_path / "operator.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "op",
            "clusters": [{"name": "c", "cluster": {"server": cfg.host, "certificate-authority": cfg.ssl_ca_cert}}],
            "users": [{"name": "op", "user": {"token": token}}],
            "contexts": [{"name": "op", "context": {"cluster": "c", "user": "op", "namespace": namespace}}]}))
        k = Cluster(api_client, namespace)
        k.create(policy("p"))
        k.create(consumer("orders", "p", "kafka:9092", "orders"))
        with operator(str(kubeconfig), namespace, tmp_path, f"--driver-cluster-role={driver_role}") as op:
            wait_for(lambda: all(k.children("orders").values()), "all children, made with the chart's RBAC")
            binding = k.rbac.read_namespaced_role_binding("orders-driver", namespace)
            assert (binding.role_ref.kind, binding.role_ref.name) == ("ClusterRole", driver_role)
            assert k.core.read_namespaced_secret("orders-spark-auth", namespace).data["secret"]
            k.wait_condition("orders", "Ready", "False", "Starting")
            k.delete("queueconsumers", "orders")
            wait_for(lambda: k.qc("orders") is None and not any(k.children("orders").values()),
                     "the consumer and every child deleted")
            log = op.log()
        # Not even the namespace list Kopf makes at start (refused, it retried ~20 s first).
        # The message only: a log line's timestamp may end in ",403".
        refused = [line for line in log.splitlines()
                   if "403" in (msg := line.partition("] ")[2]) or "orbidden" in msg]
        assert not refused, "\n".join(refused)
    finally:
        run(env, "helm", "uninstall", release, "-n", namespace, "--wait", "--timeout", "60s")
