"""The cache keys of the project's images (building them: tests/integration/test_images.py)."""

from __future__ import annotations

from antidote_devstack import project_images as pi

from ..api_cases import ROOT


def test_copy_sources_are_the_local_ones_of_the_dockerfiles() -> None:
    consumer = (ROOT / "docker/consumer.Dockerfile").read_text()
    assert pi.copy_sources(consumer) == ["hack/spark/pom.xml", "pyproject.toml", "README.md",
                                         "operator/", "consumer/", "docker/spark-entrypoint.sh"]
    operator = (ROOT / "docker/operator.Dockerfile").read_text()
    assert pi.copy_sources(operator) == ["pyproject.toml", "README.md", "operator/", "consumer/"]


def test_tree_covers_every_copied_file_but_bytecode(tmp_path) -> None:
    (tmp_path / "pkg/__pycache__").mkdir(parents=True)
    (tmp_path / "pkg/a.py").write_text("a = 1\n")
    (tmp_path / "pkg/__pycache__/a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "README.md").write_text("hi\n")
    before = pi._tree_bytes(tmp_path, ["README.md", "pkg/"])
    assert before == [b"README.md", b"hi\n", b"pkg/a.py", b"a = 1\n"]
    (tmp_path / "pkg/a.py").write_text("a = 2\n")
    assert pi._tree_bytes(tmp_path, ["README.md", "pkg/"]) != before
