"""docs/upgrade.md's path, on the stack's API server: the previous chart (0.1.0, whose CRDs
were in Helm's crds/ folder and so belong to no release) installed, then `helm upgrade` to
this chart, with what the page says happens at each step: `--reuse-values` fails (the old
chart's values lack the new keys), the CRDs are not taken over silently (the message names
crds.install and the page), and `--reset-then-reuse-values --set crds.install=false`
upgrades, keeping the installed values and the images' names."""

from __future__ import annotations

import os
import subprocess
import tarfile
import uuid
from io import BytesIO

import pytest
from kubernetes import client

from ..api_cases import ROOT

CHART = ROOT / "charts/antidote"
# The last commit whose chart kept the CRDs in crds/ (the chart as 0.1.0 shipped it).
PREVIOUS = "39e8c555829488469a8fbadf98cedbf7606f8add"


@pytest.fixture(scope="module")
def env(stack) -> dict[str, str]:
    return {**os.environ, **stack.env()}


@pytest.fixture(scope="module")
def previous_chart(tmp_path_factory):
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"]).returncode:
        pytest.skip(f"{PREVIOUS} is not in this clone's history (a shallow clone)")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", PREVIOUS, "charts/antidote"],
                             capture_output=True, check=True).stdout
    out = tmp_path_factory.mktemp("previous")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    chart = out / "charts/antidote"
    assert sorted(p.name for p in (chart / "crds").glob("antidote.dev_*.yaml")) == \
        ["antidote.dev_poisonpolicies.yaml", "antidote.dev_queueconsumers.yaml"]
    return chart


def helm(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["helm", *map(str, args)], capture_output=True, text=True, env=env)


def test_upgrade_from_the_previous_chart_as_upgrade_md_says(env, previous_chart, namespace, api_client) -> None:
    release = f"up{uuid.uuid4().hex[:6]}"
    apps = client.AppsV1Api(api_client)
    operator = f"{release}-antidote-operator"
    installed = helm(env, "install", release, previous_chart, "-n", namespace,
                     "--set", f"watch.namespaces={{{namespace}}}", "--set", "operator.scrapeInterval=7")
    assert installed.returncode == 0, installed.stderr
    try:
        before = apps.read_namespaced_deployment(operator, namespace).spec.template.spec.containers[0]
        assert before.readiness_probe is None

        reused = helm(env, "upgrade", release, CHART, "-n", namespace, "--reuse-values")
        assert reused.returncode != 0 and "nil pointer" in reused.stderr, reused.stderr

        taken = helm(env, "upgrade", release, CHART, "-n", namespace, "--reset-then-reuse-values")
        assert taken.returncode != 0
        assert "crds.install: the CRD poisonpolicies.antidote.dev exists and no Helm release owns it" in taken.stderr
        assert "docs/upgrade.md" in taken.stderr

        upgraded = helm(env, "upgrade", release, CHART, "-n", namespace, "--reset-then-reuse-values",
                        "--set", "crds.install=false")
        assert upgraded.returncode == 0, upgraded.stderr
        after = apps.read_namespaced_deployment(operator, namespace).spec.template.spec.containers[0]
        assert after.image == before.image  # image.registry + image.repository: the same name
        assert f"--namespace={namespace}" in after.args and "--scrape-interval=7" in after.args
        assert [a for a in after.args if a.startswith("--consumer-image=")] == \
            [a for a in before.args if a.startswith("--consumer-image=")]
        assert after.readiness_probe.http_get.path == "/healthz"
        # The CRDs were left alone: still no release's.
        crd = client.ApiextensionsV1Api(api_client).read_custom_resource_definition("queueconsumers.antidote.dev")
        assert "meta.helm.sh/release-name" not in (crd.metadata.annotations or {})
    finally:
        helm(env, "uninstall", release, "-n", namespace, "--wait", "--timeout", "60s")
