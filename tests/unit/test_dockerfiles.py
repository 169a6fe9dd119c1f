"""What can be checked by reading the Dockerfiles (building them takes buildah, root and
minutes: tests/integration/test_node_consumers.py): every COPY source exists and passes
.dockerignore, non-root user 10001, the pinned Python, and the connector jars from the dev
stack's own pom."""

from __future__ import annotations

import fnmatch
import re

import pytest

from ..api_cases import ROOT

DOCKERFILES = sorted((ROOT / "docker").glob("*.Dockerfile"))


def _ignored(rel: str) -> bool:
    """.dockerignore semantics for our simple file: last matching pattern wins."""
    ignored = False
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        neg, pat = line.startswith("!"), line.lstrip("!").rstrip("/")
        parts = rel.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pat) or fnmatch.fnmatch(p, pat.replace("**/", "")) for p in prefixes):
            ignored = not neg
    return ignored


def test_both_images_exist() -> None:
    assert [p.name for p in DOCKERFILES] == ["consumer.Dockerfile", "operator.Dockerfile"]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_copy_sources_exist_and_are_in_the_context(path) -> None:
    text = path.read_text()
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.M):
        *sources, _dest = line.split()
        for src in sources:
            assert (ROOT / src).exists(), f"{path.name}: COPY {src} does not exist"
            assert not _ignored(src.rstrip("/")), f"{path.name}: {src} is excluded by .dockerignore"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_runs_as_non_root_10001_on_python_311(path) -> None:
    text = path.read_text()
    # The base is a build argument (buildah builds on a local stand-in); Docker's default.
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim-bookworm$", text, re.M)
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\}( AS deps)?$", text, re.M)
    assert "useradd --uid 10001" in text
    last_user = re.findall(r"^USER (\S+)$", text, re.M)[-1]
    assert last_user.split(":")[0] == "10001"


def test_consumer_image_has_java17_and_the_connector_jars() -> None:
    text = (ROOT / "docker/consumer.Dockerfile").read_text()
    assert "openjdk-17-jre-headless" in text
    assert re.search(r"^ARG MAVEN_IMAGE=maven:3\.9-eclipse-temurin-17$", text, re.M)
    assert re.search(r"^FROM \$\{MAVEN_IMAGE\} AS jars$", text, re.M)
    assert "COPY hack/spark/pom.xml" in text and "dependency:copy-dependencies" in text
    assert "${SPARK_HOME}/jars/" in text
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "/opt/antidote/entrypoint.sh"]' in text
    pyproject = (ROOT / "pyproject.toml").read_text()
    pom = (ROOT / "hack/spark/pom.xml").read_text()
    pyspark = re.search(r'"pyspark==([0-9.]+)"', pyproject).group(1)
    assert f"<spark.version>{pyspark}</spark.version>" in pom


def test_operator_image_entrypoint() -> None:
    text = (ROOT / "docker/operator.Dockerfile").read_text()
    assert 'ENTRYPOINT ["antidote"]' in text


def test_entrypoint_starts_a_spark_executor(tmp_path) -> None:
    """Spark starts executor pods with the argument `executor`; the entrypoint turns the
    environment Spark sets into the executor backend's command line."""
    import os
    import subprocess

    java = tmp_path / "bin/java"
    java.parent.mkdir()
    java.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    java.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "JAVA_HOME": str(tmp_path), "SPARK_HOME": "/spark",
           "SPARK_JAVA_OPT_1": "-Dsecond=2", "SPARK_JAVA_OPT_0": "-Dfirst=a b", "SPARK_JAVA_OPT_10": "-Dtenth",
           "SPARK_EXECUTOR_MEMORY": "1g", "SPARK_DRIVER_URL": "spark://d:7078", "SPARK_EXECUTOR_ID": "3",
           "SPARK_EXECUTOR_CORES": "2", "SPARK_APPLICATION_ID": "app-1", "SPARK_EXECUTOR_POD_IP": "10.0.0.9",
           "SPARK_RESOURCE_PROFILE_ID": "0", "SPARK_EXECUTOR_POD_NAME": "orders-exec-3"}
    script = str(ROOT / "docker/spark-entrypoint.sh")
    argv = subprocess.run(["sh", script, "executor"], env=env, capture_output=True, text=True,
                          check=True).stdout.splitlines()
    # A k8s:// master first (Spark reads the RPC secret file only under one), then Spark's
    # options in order, so they could override it.
    assert argv[0] == "-Dspark.master=k8s://https://kubernetes.default.svc"
    assert argv[1:4] == ["-Dfirst=a b", "-Dsecond=2", "-Dtenth"]
    assert argv[4:6] == ["-Xms1g", "-Xmx1g"] and argv[7].startswith("/spark/jars/*")
    assert argv[8] == "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
    opts = dict(zip(argv[9::2], argv[10::2]))
    assert opts == {"--driver-url": "spark://d:7078", "--executor-id": "3", "--cores": "2",
                    "--app-id": "app-1", "--hostname": "10.0.0.9", "--resourceProfileId": "0",
                    "--podName": "orders-exec-3"}
    # Anything else runs as given (the driver's `antidote consumer ...`).
    assert subprocess.run(["sh", script, "echo", "hello"], env=env, capture_output=True, text=True,
                          check=True).stdout == "hello\n"
