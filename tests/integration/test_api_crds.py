"""The generated CRDs on a real API server: examples apply, bad specs are refused naming the
field, defaults show the effective policy, printer columns read well, status is a subresource."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from antidote_api import PoisonPolicySpec, crdgen
from antidote_api.conditions import condition

from ..api_cases import BAD_SPECS, ROOT, BadSpec, example_files, valid_consumer, valid_policy

GROUP, VERSION = "antidote.dev", "v1alpha1"
PLURALS = {"PoisonPolicy": "poisonpolicies", "QueueConsumer": "queueconsumers"}
KUBECTL = str(Path(sys.executable).parent / "kubectl")


@pytest.fixture(scope="session")
def antidote_crds(api_client: client.ApiClient) -> None:
    """The committed CRDs, installed (or updated) once per session and left in place."""
    ext = client.ApiextensionsV1Api(api_client)
    for kind in crdgen.KINDS:
        body = yaml.safe_load((ROOT / "crds" / kind.filename).read_text())
        try:
            ext.create_custom_resource_definition(body)
        except ApiException as err:
            if err.status != 409:
                raise
            body["metadata"]["resourceVersion"] = \
                ext.read_custom_resource_definition(kind.name).metadata.resource_version
            ext.replace_custom_resource_definition(kind.name, body)
    objs = client.CustomObjectsApi(api_client)
    deadline = time.monotonic() + 60
    for kind in crdgen.KINDS:
        while True:
            conds = ext.read_custom_resource_definition(kind.name).status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                try:  # discovery can lag Established by a moment
                    objs.list_namespaced_custom_object(GROUP, VERSION, "default", kind.plural)
                    break
                except ApiException as err:
                    if err.status != 404:
                        raise
            assert time.monotonic() < deadline, f"{kind.name} never became usable: {conds}"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def ns(core_v1: client.CoreV1Api, antidote_crds: None) -> Iterator[str]:
    name = f"api-{uuid.uuid4().hex[:8]}"
    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core_v1.delete_namespace(name)  # stays Terminating without a controller-manager


@pytest.fixture(scope="module")
def objs(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def kubectl(kubeconfig: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    done = subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{done.stderr}")
    return done


def create(objs: client.CustomObjectsApi, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    return objs.create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURALS[body["kind"]], body, field_validation="Strict")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# --- examples --------------------------------------------------------------------------

@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_example_applies_cleanly(path: Path, kubeconfig: str, ns: str) -> None:
    out = kubectl(kubeconfig, "apply", "--validate=strict", "-n", ns, "-f", str(path))
    assert out.stderr == "", out.stderr  # no warnings either (unknown or duplicate fields)
    for doc in yaml.safe_load_all(path.read_text()):
        got = json.loads(kubectl(kubeconfig, "get", "-n", ns, doc["kind"], doc["metadata"]["name"],
                                 "-o", "json").stdout)
        # what the user wrote comes back, with defaults filled in around it
        assert _contains(got["spec"], doc.get("spec", {})), got["spec"]


def _contains(big: Any, small: Any) -> bool:
    if isinstance(small, dict):
        return isinstance(big, dict) and all(k in big and _contains(big[k], v) for k, v in small.items())
    return big == small


def test_defaults_show_the_effective_policy(objs: client.CustomObjectsApi, kubeconfig: str, ns: str) -> None:
    name = unique("bare")
    create(objs, ns, valid_policy(name) | {"spec": {"retries": {"immediate": 1}}})
    got = yaml.safe_load(kubectl(kubeconfig, "get", "ppol", name, "-n", ns, "-o", "yaml").stdout)
    assert got["spec"] == PoisonPolicySpec(retries={"immediate": 1}).wire()
    assert got["spec"]["reader"]["disposition"] == "Reject"
    assert got["spec"]["queueDisable"]["failureRatio"] == {"threshold": 0.5, "window": "5m", "minMessages": 100}
    # an object with no spec at all gets the whole default policy
    bare = unique("nospec")
    create(objs, ns, {k: v for k, v in valid_policy(bare).items() if k != "spec"})
    got = objs.get_namespaced_custom_object(GROUP, VERSION, ns, "poisonpolicies", bare)
    assert got["spec"] == PoisonPolicySpec().wire()


# --- bad specs -------------------------------------------------------------------------

def _server_message(err: ApiException) -> str:
    try:
        return json.loads(err.body)["message"]
    except (TypeError, ValueError, KeyError):
        return str(err.body)


@pytest.mark.parametrize("case", BAD_SPECS, ids=lambda c: c.id)
def test_bad_spec_is_refused_naming_the_field(case: BadSpec, objs: client.CustomObjectsApi, ns: str) -> None:
    body = case.manifest(name=unique(case.id[:30]))
    with pytest.raises(ApiException) as refused:
        create(objs, ns, body)
    message = _server_message(refused.value)
    print(f"BAD-SPEC | {case.kind} | {case.describe()} | {message}")
    assert refused.value.status in (400, 422), message
    assert case.field in message, message
    for mention in case.mentions:
        assert mention in message, message


def test_kubectl_refuses_unknown_fields_by_default(kubeconfig: str, ns: str, tmp_path: Path) -> None:
    manifest = tmp_path / "typo.yaml"
    manifest.write_text(yaml.safe_dump(valid_policy(unique("typo")) | {"spec": {"retries": {"cycels": 3}}}))
    out = kubectl(kubeconfig, "apply", "-n", ns, "-f", str(manifest), check=False)
    assert out.returncode != 0
    assert 'unknown field "spec.retries.cycels"' in out.stderr, out.stderr


# --- printer columns, explain ------------------------------------------------------------

def _table(text: str) -> list[list[str]]:
    import re

    lines = text.strip().splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
    return [[line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])] for line in lines]


def test_kubectl_get_shows_the_printer_columns(objs: client.CustomObjectsApi, kubeconfig: str, ns: str) -> None:
    policy, consumer = unique("cols"), unique("cols")
    create(objs, ns, valid_policy(policy) | {"spec": {"disposition": "Reject", "retries": {"cycleDelay": "10m"}}})
    body = valid_consumer(consumer)
    body["spec"]["policyRef"]["name"] = policy
    create(objs, ns, body)
    objs.patch_namespaced_custom_object_status(GROUP, VERSION, ns, "poisonpolicies", policy,
                                               {"status": {"maxAttempts": 18, "observedGeneration": 1}})
    objs.patch_namespaced_custom_object_status(GROUP, VERSION, ns, "queueconsumers", consumer, {"status": {
        "observedGeneration": 1,
        "conditions": [condition("Ready", True, "Consuming").wire(),
                       condition("Paused", False, "Running").wire()],
        "counts": {"processed": 1234, "moved": 2, "rejected": 1, "poisoned": 3},
        "executors": {"current": 3, "desired": 5, "reason": "ScaleUpCoolingDown"}}})

    qc = _table(kubectl(kubeconfig, "get", "qc", consumer, "-n", ns).stdout)
    assert qc[0] == ["NAME", "READY", "PAUSED", "REASON", "PROCESSED", "POISONED", "AGE"]
    assert qc[1][:6] == [consumer, "True", "False", "Consuming", "1234", "3"]
    wide = _table(kubectl(kubeconfig, "get", "queueconsumers", consumer, "-n", ns, "-o", "wide").stdout)
    assert dict(zip(wide[0], wide[1]))["POLICY"] == policy
    assert dict(zip(wide[0], wide[1]))["TOPIC"] == "orders"
    assert dict(zip(wide[0], wide[1]))["EXECUTORS"] == "3"

    ppol = _table(kubectl(kubeconfig, "get", "ppol", policy, "-n", ns).stdout)
    assert ppol[0] == ["NAME", "DISPOSITION", "IMMEDIATE", "CYCLES", "DELAY", "ATTEMPTS", "AGE"]
    assert ppol[1][:6] == [policy, "Reject", "5", "2", "10m", "18"]

    both = kubectl(kubeconfig, "get", "antidote", "-n", ns).stdout  # the category
    assert f"poisonpolicy.antidote.dev/{policy}" in both and f"queueconsumer.antidote.dev/{consumer}" in both


def test_kubectl_explain_reads_the_model_descriptions(kubeconfig: str, antidote_crds: None) -> None:
    out = kubectl(kubeconfig, "explain", "ppol.spec.reader.disposition").stdout
    assert "Move is refused" in out or "Never `Move`" in out
    out = kubectl(kubeconfig, "explain", "qc.spec.handler").stdout
    assert "package.module:function" in out


# --- status subresource ------------------------------------------------------------------

def test_status_is_writable_only_through_the_subresource(objs: client.CustomObjectsApi, ns: str) -> None:
    name = unique("status")
    forged = {"counts": {"processed": 999}}
    created = create(objs, ns, valid_consumer(name) | {"status": forged})
    assert "status" not in created  # dropped on create

    objs.patch_namespaced_custom_object(GROUP, VERSION, ns, "queueconsumers", name,
                                        {"spec": {"paused": True}, "status": forged})
    got = objs.get_namespaced_custom_object(GROUP, VERSION, ns, "queueconsumers", name)
    assert got["spec"]["paused"] is True and "status" not in got  # spec changed, status ignored
    generation = got["metadata"]["generation"]

    objs.patch_namespaced_custom_object_status(GROUP, VERSION, ns, "queueconsumers", name, {
        "status": {"counts": {"processed": 7}, "consecutiveBatchFailures": 2},
        "spec": {"paused": False}})
    got = objs.get_namespaced_custom_object(GROUP, VERSION, ns, "queueconsumers", name)
    assert got["status"]["counts"]["processed"] == 7 and got["status"]["consecutiveBatchFailures"] == 2
    assert got["spec"]["paused"] is True  # the status endpoint ignores spec
    assert got["metadata"]["generation"] == generation  # status writes do not bump generation

    # status is validated too: a malformed condition is refused, naming the field
    with pytest.raises(ApiException) as refused:
        objs.patch_namespaced_custom_object_status(GROUP, VERSION, ns, "queueconsumers", name, {
            "status": {"conditions": [{"type": "Ready", "status": "Yes", "reason": "Consuming",
                                       "lastTransitionTime": "2025-01-01T00:00:00Z"}]}})
    assert "status.conditions[0].status" in _server_message(refused.value)


def test_conditions_merge_by_type_under_server_side_apply(objs: client.CustomObjectsApi, ns: str) -> None:
    """`x-kubernetes-list-type: map` keyed by type: two field managers own one condition each."""
    name = unique("ssa")
    create(objs, ns, valid_consumer(name))

    def apply(manager: str, cond: dict[str, Any]) -> None:
        objs.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, "queueconsumers", name,
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "QueueConsumer", "metadata": {"name": name},
             "status": {"conditions": [cond]}},
            field_manager=manager, force=True, _content_type="application/apply-patch+yaml")

    apply("antidote-operator", condition("Ready", True, "Consuming").wire())
    apply("antidote-watcher", condition("PoisonDetected", True, "MaxAttempts").wire())
    apply("antidote-operator", condition("Ready", False, "QueueDisabled").wire())
    got = objs.get_namespaced_custom_object(GROUP, VERSION, ns, "queueconsumers", name)
    by_type = {c["type"]: c for c in got["status"]["conditions"]}
    assert set(by_type) == {"Ready", "PoisonDetected"}
    assert by_type["Ready"]["reason"] == "QueueDisabled"
