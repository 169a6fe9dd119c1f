"""examples/handler-project, the template a team copies, holds together: its Dockerfile builds
FROM the consumer image and copies what exists, its QueueConsumer names a handler the package
has and the image it builds, and its tests run with `make test` (pyproject's testpaths)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from antidote_consumer.worker.handler import load_handler
from antidote_devstack.project_images import copy_sources

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "examples" / "handler-project"


def test_the_dockerfile_builds_on_the_consumer_image_and_copies_what_exists() -> None:
    text = (PROJECT / "Dockerfile").read_text()
    assert re.search(r"^ARG CONSUMER_IMAGE=\S+antidote-consumer:\S+$", text, re.M)
    assert re.findall(r"^FROM (.+)$", text, re.M) == ["${CONSUMER_IMAGE}"]
    assert re.findall(r"^USER (.+)$", text, re.M)[-1] == "10001:10001"  # as the pods run it
    for src in copy_sources(text):
        assert (PROJECT / src).exists(), src


def test_the_manifest_names_the_package_handler_and_the_built_image(monkeypatch) -> None:
    docs = {d["kind"]: d for d in yaml.safe_load_all((PROJECT / "deploy/orders.yaml").read_text())}
    qc = docs["QueueConsumer"]["spec"]
    assert qc["policyRef"]["name"] == docs["PoisonPolicy"]["metadata"]["name"]
    monkeypatch.syspath_prepend(str(PROJECT))
    assert callable(load_handler(qc["handler"]))
    tag = re.search(r"-t (\S+) \.", (PROJECT / "Dockerfile").read_text()).group(1)
    assert qc["spark"]["image"] == tag


def test_its_tests_are_part_of_make_test() -> None:
    paths = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]
    assert "examples/handler-project/tests" in paths
    assert list((PROJECT / "tests").glob("test_*.py"))
