"""`make images`: which builder, the image names, the build and push commands (the build and
push themselves run on the node, to a real registry: tests/integration/test_node_images.py)."""

from __future__ import annotations

import subprocess

import pytest

from antidote_devstack import publish
from antidote_devstack.errors import StackError


def test_images_are_named_for_the_registry_and_tag() -> None:
    assert publish.image_refs("ghcr.io/you/", "1.2.0") == {
        "operator": "ghcr.io/you/antidote-operator:1.2.0", "consumer": "ghcr.io/you/antidote-consumer:1.2.0"}
    for registry, tag, field in (("", "1", "REGISTRY"), ("https://x.io", "1", "REGISTRY"),
                                 ("x.io", "", "TAG"), ("x.io", "a:b", "TAG"), ("x.io", "-a", "TAG")):
        with pytest.raises(StackError, match=field):
            publish.image_refs(registry, tag)


def test_docker_only_when_its_daemon_answers_then_podman_then_buildah(monkeypatch) -> None:
    present = {"docker", "buildah"}
    monkeypatch.setattr(publish.shutil, "which", lambda t: f"/usr/bin/{t}" if t in present else None)
    answers = {"rc": 1}
    monkeypatch.setattr(publish.subprocess, "run",
                        lambda cmd, **_: subprocess.CompletedProcess(cmd, answers["rc"]))
    assert publish.choose_tool() == "buildah"  # a docker client without a daemon is no builder
    with pytest.raises(StackError, match="daemon does not answer"):
        publish.choose_tool("docker")
    answers["rc"] = 0
    assert publish.choose_tool() == "docker"
    present.add("podman")
    answers["rc"] = 1
    assert publish.choose_tool() == "podman"
    present.clear()
    with pytest.raises(StackError, match="no image builder"):
        publish.choose_tool()
    with pytest.raises(StackError, match="podman: not installed"):
        publish.choose_tool("podman")


def test_the_commands_build_each_dockerfile_from_the_root_then_push() -> None:
    refs = publish.image_refs("127.0.0.1:5000/a", "t")
    root = str(publish.ROOT)
    docker = publish.commands("docker", refs)
    assert docker == [
        ["docker", "build", "-f", f"{root}/docker/operator.Dockerfile", "-t", refs["operator"], root],
        ["docker", "push", refs["operator"]],
        ["docker", "build", "-f", f"{root}/docker/consumer.Dockerfile", "-t", refs["consumer"], root],
        ["docker", "push", refs["consumer"]]]
    podman = publish.commands("podman", refs, tls_verify=False, push=True)
    python = ["--build-arg", "PYTHON_IMAGE=docker.io/library/python:3.11-slim-bookworm"]
    assert podman[0] == ["podman", "build", *python, "-f", f"{root}/docker/operator.Dockerfile",
                         "-t", refs["operator"], root]
    assert podman[1] == ["podman", "push", "--tls-verify=false", refs["operator"]]
    bah = publish.commands("buildah", refs, tls_verify=False)
    assert bah[0][-10:] == ["bud", "--network", "host", *python, "-f", f"{root}/docker/operator.Dockerfile",
                            "-t", refs["operator"], root]
    assert bah[0][:-10] == ["buildah", *publish.images.buildah_storage()]  # the node builder's storage
    assert "MAVEN_IMAGE=docker.io/library/maven:3.9-eclipse-temurin-17" in bah[2]
    assert bah[1][-3:] == ["--tls-verify=false", refs["operator"], f"docker://{refs['operator']}"]
    assert [publish.describe(c) for c in bah] == [f"build {refs['operator']}", f"push {refs['operator']}",
                                                  f"build {refs['consumer']}", f"push {refs['consumer']}"]
    assert len(publish.commands("docker", refs, push=False)) == 2


def test_make_images_runs_the_command_and_asks_for_a_registry() -> None:
    root = publish.ROOT
    dry = subprocess.run(["make", "-n", "-C", str(root), "images", "REGISTRY=r.io/you", "TAG=1.0",
                          "IMAGES_FLAGS=--tool podman"], capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    assert '.venv/bin/antidote dev images --registry "r.io/you" --tag "1.0" --tool podman' in dry.stdout
    missing = subprocess.run(["make", "-s", "-C", str(root), "images"], capture_output=True, text=True)
    assert missing.returncode == 2 and "give REGISTRY=" in missing.stderr  # before `install` runs


def test_short_base_names_are_qualified_for_podman_and_buildah() -> None:
    text = "ARG PYTHON_IMAGE=python:3.11\nARG X_IMAGE=me/img:1\nARG Y_IMAGE=ghcr.io/a/b:2\nARG DEPS=deps\n"
    assert publish.qualified_bases(text) == [
        "--build-arg", "PYTHON_IMAGE=docker.io/library/python:3.11", "--build-arg", "X_IMAGE=docker.io/me/img:1",
        "--build-arg", "Y_IMAGE=ghcr.io/a/b:2"]
