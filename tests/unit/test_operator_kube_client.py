"""The operator's own API client (`kube`, `kube_login`, `no_kubernetes`): the pure parts. Against the real API server it runs in
every operator integration test (tests/integration/test_operator_*.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from antidote_operator import kube, kube_login


# --- what a response means ----------------------------------------------------------------

def status_body(message: str, code: int) -> bytes:
    return json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": code}).encode()


def test_a_success_is_its_body() -> None:
    assert kube.outcome("GET", 200, "OK", b'{"a": 1}') == {"a": 1}
    assert kube.outcome("DELETE", 200, "OK", b"") == {}


def test_a_404_of_a_get_or_delete_is_absent_and_of_a_write_an_error() -> None:
    assert kube.outcome("GET", 404, "Not Found", status_body("x not found", 404)) is None
    assert kube.outcome("DELETE", 404, "Not Found", b"") is None
    with pytest.raises(kube.ApiError) as err:
        kube.outcome("POST", 404, "Not Found", status_body('namespaces "nope" not found', 404))
    assert (err.value.status, err.value.reason) == (404, "Not Found")
    assert err.value.message == 'namespaces "nope" not found'


def test_a_409_is_a_conflict_with_the_servers_message() -> None:
    with pytest.raises(kube.Conflict, match="the object has been modified"):
        kube.outcome("PATCH", 409, "Conflict", status_body("the object has been modified", 409))
    with pytest.raises(kube.Conflict, match="Conflict"):
        kube.outcome("POST", 409, "Conflict", b"not json")


def test_other_errors_carry_status_reason_and_message() -> None:
    with pytest.raises(kube.ApiError) as err:
        kube.outcome("PATCH", 422, "Unprocessable Entity", status_body("spec.replicas: Invalid value", 422))
    assert err.value.status == 422 and err.value.reason == "Unprocessable Entity"
    assert str(err.value) == "HTTP 422 Unprocessable Entity: spec.replicas: Invalid value"
    with pytest.raises(kube.ApiError) as err:
        kube.outcome("GET", 503, "Service Unavailable", b"<html>busy</html>")
    assert str(err.value) == "HTTP 503 Service Unavailable" and err.value.message == ""


# --- logging in ----------------------------------------------------------------------------

def kubeconfig(tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "eks-admin"}}],
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://10.0.0.1:6443"}}],
        "users": [{"name": "eks-admin", "user": user}]}))
    return path


@pytest.fixture
def outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def test_an_exec_plugin_kubeconfig_is_refused_naming_the_user_and_the_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outside_a_pod: None) -> None:
    path = kubeconfig(tmp_path, {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                          "command": "aws", "args": ["eks", "get-token"]}})
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(kube_login.LoginRefused) as err:
        kube_login.login()
    text = str(err.value)
    assert "'eks-admin'" in text and "users[].user.exec" in text and "'aws'" in text and str(path) in text


def test_a_token_kubeconfig_logs_in_and_relative_files_are_relative_to_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outside_a_pod: None) -> None:
    path = kubeconfig(tmp_path, {"token": "s3cret"},
                      {"server": "https://10.0.0.1:6443", "certificate-authority": "pki/ca.crt"})
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.chdir("/")
    info = kube_login.login()
    assert info.server == "https://10.0.0.1:6443"
    assert info.as_http_headers() == {"Authorization": "Bearer s3cret"}
    assert info.ca_path == str(tmp_path / "pki" / "ca.crt")


def test_no_credentials_at_all_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          outside_a_pod: None) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(kube_login.LoginRefused, match="no credentials"):
        kube_login.login()


# --- the operator's process does not import `kubernetes` ------------------------------------

def test_the_operator_process_imports_no_kubernetes_package() -> None:
    code = ("import sys\n"
            "from antidote_operator import no_kubernetes\n"
            "assert no_kubernetes.keep_out()\n"
            "import antidote_operator.main, antidote_operator.handlers, antidote_operator.devrunner.runner\n"
            "import kopf\n"
            "loaded = [m for m, v in sys.modules.items() if m.split('.')[0] == 'kubernetes' and v is not None]\n"
            "assert not loaded, loaded\n"
            "assert 'urllib3' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})
