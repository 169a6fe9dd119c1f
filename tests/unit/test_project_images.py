"""The cache keys of the project's images (building and running them: tests/integration/test_node_consumers.py)."""

from __future__ import annotations

import re

import pytest

from antidote_devstack import project_images as pi

from ..api_cases import ROOT


def test_copy_sources_are_the_local_ones_of_the_dockerfiles() -> None:
    consumer = (ROOT / "docker/consumer.Dockerfile").read_text()
    assert pi.copy_sources(consumer) == ["hack/spark/pom.xml", "hack/s3/pom.xml", "pyproject.toml", "constraints.txt",
                                         "docker/spark-entrypoint.sh", "README.md", "pyproject.toml",
                                         "api/", "consumer/", "cli/"]
    operator = (ROOT / "docker/operator.Dockerfile").read_text()
    assert pi.copy_sources(operator) == ["pyproject.toml", "constraints.txt", "README.md",
                                         "pyproject.toml", "api/", "operator/", "consumer/", "cli/"]


# What each image runs, by layer folder (docs/architecture.md): the dev tooling in neither,
# the operator not in the consumer's. (The operator image carries consumer/ for the on-call
# commands, which read the ledger and the poison topics with its pure-Python modules.)
LAYERS = {"consumer": {"api/", "consumer/", "cli/"}, "operator": {"api/", "operator/", "consumer/", "cli/"}}


@pytest.mark.parametrize("dockerfile", ["consumer", "operator"])
def test_sources_change_only_the_last_stage(dockerfile) -> None:
    """The deps stage copies no source of Antidote's: a change to a layer's folder keeps the
    deps image (its key); the last stage copies the image's layers, and no dependency file."""
    text = (ROOT / f"docker/{dockerfile}.Dockerfile").read_text()
    last = pi.LAST_STAGE.search(text)
    assert last, "the last stage starts FROM ${DEPS}"
    assert re.search(r"^ARG DEPS=deps$", text, re.M) and re.search(r"^FROM \S+ AS deps$", text, re.M)
    head, tail = pi.copy_sources(text[:last.start()]), pi.copy_sources(text[last.start():])
    assert not {"api/", "operator/", "consumer/", "cli/", "dev/", "README.md"} & set(head), head
    folders = {s for s in tail if s.endswith("/")}
    assert folders == LAYERS[dockerfile] and "constraints.txt" not in tail, tail
    assert pi.deps_name("localhost/antidote/x:1.0") == "localhost/antidote/x-deps:1.0"


def test_tree_covers_every_copied_file_but_bytecode(tmp_path) -> None:
    (tmp_path / "pkg/__pycache__").mkdir(parents=True)
    (tmp_path / "pkg/a.py").write_text("a = 1\n")
    (tmp_path / "pkg/__pycache__/a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "README.md").write_text("hi\n")
    before = pi._tree_bytes(tmp_path, ["README.md", "pkg/"])
    assert before == [b"README.md", b"hi\n", b"pkg/a.py", b"a = 1\n"]
    (tmp_path / "pkg/a.py").write_text("a = 2\n")
    assert pi._tree_bytes(tmp_path, ["README.md", "pkg/"]) != before
