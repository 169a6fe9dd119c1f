"""docs/compatibility.md's "tested" column is what the project pins (issue 49: a stated
compatibility a reviewer can trust): each row's version read from the file the row names, so
bumping a pin without the page fails here."""

from __future__ import annotations

import re
import tomllib

import pytest

from antidote_devstack import build

from ..api_cases import ROOT


def _rows() -> dict[str, list[str]]:
    text = (ROOT / "docs" / "compatibility.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and cells[0] not in ("component", "---"):
            rows[cells[0]] = cells
    return rows


def _tested(component_prefix: str) -> str:
    (row,) = [r for name, r in _rows().items() if name.startswith(component_prefix)]
    return row[2]


def _pom_property(path: str, name: str) -> str:
    return re.search(rf"<{re.escape(name)}>([^<]+)</", (ROOT / path).read_text()).group(1)


def _pin(name: str) -> str:
    return re.search(rf"^{name}==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M).group(1)


PINNED = {
    "Kubernetes": lambda: build.KUBE_VERSION.removeprefix("v"),
    "Helm": lambda: build.HELM_VERSION.removeprefix("v"),
    "Kafka brokers": lambda: _pom_property("hack/kafka/pom.xml", "kafka.version"),
    "Spark / PySpark": lambda: _pin("pyspark"),
    "Schema Registry": lambda: _pom_property("hack/schema-registry/pom.xml", "apicurio.version"),
}


@pytest.mark.parametrize("component", sorted(PINNED))
def test_the_tested_version_is_the_pinned_one(component: str) -> None:
    pinned = PINNED[component]()
    assert re.search(rf"(?<![\d.]){re.escape(pinned)}(?![\d.])", _tested(component)), (component, pinned)


def test_python_is_the_images_and_the_projects() -> None:
    tested = _tested("Python")
    image = re.search(r"ARG PYTHON_IMAGE=python:(\d+\.\d+)-",
                      (ROOT / "docker" / "consumer.Dockerfile").read_text()).group(1)
    needs = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert f"python:{image}-slim-bookworm" in tested and tested.startswith(image)
    assert needs == f">={image}" and _rows()["Python"][1].startswith(f"{image} or later")
    for dockerfile in ("consumer.Dockerfile", "operator.Dockerfile"):
        assert f"ARG PYTHON_IMAGE=python:{image}-slim-bookworm" in (ROOT / "docker" / dockerfile).read_text()


def test_java_is_the_consumer_images() -> None:
    dockerfile = (ROOT / "docker" / "consumer.Dockerfile").read_text()
    (jdk,) = set(re.findall(r"openjdk-(\d+)-jre-headless", dockerfile))
    assert f"OpenJDK {jdk}" in _tested("Java")
