"""The local Schema Registry's pure pieces: its build's cache key, its command, what `dev env`
and `dev status` say, and `--with schema-registry` on the command line."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from antidote_cli import dev as dev_cli
from antidote_cli.main import build_parser
from antidote_devstack import schema_registry as registry
from antidote_devstack.stack import Stack

BASE = dict(dir="/s", kubeconfig="/k", apiserver_port=1, etcd_port=2, kafka_bootstrap="h:3")


def test_the_cli_spells_the_service_as_the_stack_names_it() -> None:
    assert dev_cli.SCHEMA_REGISTRY == registry.NAME


def test_with_schema_registry_starts_the_service_and_builds_no_binary_of_that_name() -> None:
    args = build_parser().parse_args(["dev", "up", "--with", "schema-registry", "--with", "kube-scheduler"])
    assert registry.NAME in args.extra
    assert dev_cli._binaries(args.extra) == ("kube-scheduler",)


def test_dev_env_names_the_registry_and_its_process_is_the_stacks() -> None:
    assert "SCHEMA_REGISTRY_URL" not in Stack(**BASE).env()
    assert registry.NAME not in Stack(**BASE).processes
    url = "http://h:4" + registry.CCOMPAT
    s = Stack(**BASE, schema_registry_url=url)
    assert s.env()["SCHEMA_REGISTRY_URL"] == url
    assert s.processes[-1] == registry.NAME


def test_the_registry_binds_the_stacks_host_and_sends_no_error_reports() -> None:
    cmd = registry.argv("/usr/bin/java", Path("/c/app"), "10.0.0.1", 4567)
    assert "-Dquarkus.http.host=10.0.0.1" in cmd and "-Dquarkus.http.port=4567" in cmd
    assert "-Dregistry.enable.sentry=false" in cmd
    assert cmd[-2:] == ["-jar", "/c/app/app.jar"]


def test_the_pinned_version_is_the_poms() -> None:
    pom = (registry.MODULE / "pom.xml").read_text()
    assert f"<apicurio.version>{registry.VERSION}</apicurio.version>" in pom
    # Everything Maven fetches is pinned: no version ranges, no SNAPSHOT, no LATEST.
    assert not re.search(r"<version>[\[(]|SNAPSHOT|LATEST|RELEASE<", pom)


def test_the_build_cache_key_follows_the_pom_and_the_sources(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "schema-registry"
    shutil.copytree(registry.MODULE, module, ignore=shutil.ignore_patterns("target"))
    monkeypatch.setattr(registry, "MODULE", module)
    monkeypatch.setenv("ANTIDOTE_CACHE", str(tmp_path / "cache"))
    first = registry.build_path()
    assert registry.build_path() == first
    java = next(module.rglob("*.java"))
    java.write_text(java.read_text() + "\n// changed\n")
    second = registry.build_path()
    assert second != first
    (module / "pom.xml").write_text((module / "pom.xml").read_text() + "\n")
    assert registry.build_path() not in (first, second)
