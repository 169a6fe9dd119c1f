"""`helm test` on the stack's node (issue 49): the chart installed as a user installs it
(`helm install --wait`, which now waits for the readiness probe; the CRDs as the release's
own, kept), then the chart's test pod runs under `restricted` in the release's namespace and
passes; with the operator scaled to zero the same test fails, naming the check; upgrades
pass the chart's CRD ownership check, and turning crds.install off or `helm uninstall` keeps
the CRDs.

Markers `node` and `images` (`make test-node`); root only, one node per machine."""

from __future__ import annotations

import re
import subprocess

from kubernetes import client

from .node_cluster import CHART, NODE_IMAGES, RELEASE, VALUES, started
from .node_util import RESTRICTED, wait

pytestmark = NODE_IMAGES

CRDS = ("queueconsumers.antidote.dev", "poisonpolicies.antidote.dev")
TEST_POD = f"{RELEASE}-test"  # the release name contains the chart's: no `-antidote` suffix


def _helm_test(env: dict[str, str], system: str) -> subprocess.CompletedProcess:
    return subprocess.run(["helm", "test", RELEASE, "-n", system, "--timeout", "300s"],
                          capture_output=True, text=True, env=env, timeout=400)


def test_helm_test_passes_on_the_node_and_fails_without_the_operator() -> None:
    with started() as c:
        ext = client.ApiextensionsV1Api(c.api)
        apps = client.AppsV1Api(c.api)
        assert RESTRICTED.items() <= (c.core.read_namespace(c.system).metadata.labels or {}).items()
        # crds.install (the default): the release owns its CRDs, and keeps them.
        for name in CRDS:
            annotations = ext.read_custom_resource_definition(name).metadata.annotations or {}
            assert annotations.get("meta.helm.sh/release-name") == RELEASE, annotations
            assert annotations.get("helm.sh/resource-policy") == "keep", annotations
        # `helm install --wait` returned: the readiness probe passed on the real kubelet.
        operator = f"{RELEASE}-operator"
        assert apps.read_namespaced_deployment(operator, c.system).status.ready_replicas == 1

        ok = _helm_test(c.env, c.system)
        assert ok.returncode == 0, f"{ok.stdout}\n{ok.stderr}"
        assert re.search(rf"TEST SUITE:\s+{TEST_POD}\b", ok.stdout), ok.stdout
        assert re.search(r"Phase:\s+Succeeded", ok.stdout), ok.stdout
        # A pod that passed is deleted (hook pods outlive `helm uninstall` otherwise).
        wait("the passed test pod deleted", lambda: not [
            p for p in c.core.list_namespaced_pod(c.system).items if p.metadata.name == TEST_POD], 60)

        # Without the operator the same test fails, and its pod says which check.
        apps.patch_namespaced_deployment_scale(operator, c.system, {"spec": {"replicas": 0}})
        wait("the operator pod gone", lambda: not c.core.list_namespaced_pod(
            c.system, label_selector="app.kubernetes.io/component=operator").items, 120)
        failed = _helm_test(c.env, c.system)
        assert failed.returncode != 0, failed.stdout
        assert re.search(r"Phase:\s+Failed", failed.stdout + failed.stderr), f"{failed.stdout}\n{failed.stderr}"
        log = c.core.read_namespaced_pod_log(TEST_POD, c.system)
        assert "ok: antidote.dev/v1alpha1 serves" in log and "poisonpolicies" in log, log
        assert "FAILED: check_operator" in log, log
        c.core.delete_namespaced_pod(TEST_POD, c.system)

        # An upgrade of the release that owns the CRDs passes the chart's ownership check
        # (and brings the operator back: the chart says one replica); one that turns
        # crds.install off leaves them (crds.keep), no longer the release's.
        def upgrade(*sets: str) -> None:
            args = [a for s in sets for a in ("--set", s)]
            out = subprocess.run(["helm", "upgrade", RELEASE, str(CHART), "-n", c.system, "-f", str(VALUES),
                                  "--wait", "--timeout", "180s", *args],
                                 capture_output=True, text=True, env=c.env, timeout=240)
            assert out.returncode == 0, f"{out.stdout}\n{out.stderr}"

        upgrade()
        assert apps.read_namespaced_deployment(operator, c.system).status.ready_replicas == 1
        upgrade("crds.install=false")
        manifest = subprocess.run(["helm", "get", "manifest", RELEASE, "-n", c.system], capture_output=True,
                                  text=True, env=c.env, check=True).stdout
        assert "kind: CustomResourceDefinition" not in manifest
        for name in CRDS:
            assert ext.read_custom_resource_definition(name).metadata.deletion_timestamp is None

        # `helm uninstall` keeps the CRDs (crds.keep, the default).
        subprocess.run(["helm", "uninstall", RELEASE, "-n", c.system, "--wait", "--timeout", "180s"],
                       env=c.env, check=True, capture_output=True, timeout=240)
        for name in CRDS:
            assert ext.read_custom_resource_definition(name).metadata.deletion_timestamp is None
