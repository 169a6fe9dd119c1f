"""Where the consumer finds Spark's Kafka connector jars: the dev stack's cache from a
checkout, nothing extra from an installed package (the image has them in Spark's jars/)."""

from __future__ import annotations

from antidote_consumer import runner
from antidote_devstack import paths


def test_an_installed_package_without_hack_asks_for_no_jars(monkeypatch, tmp_path) -> None:
    # The consumer image: site-packages/../hack does not exist.
    monkeypatch.setattr(paths, "HACK", tmp_path / "hack")
    assert runner._dev_stack_jars() == ""


def test_a_checkout_uses_the_dev_stacks_cached_jars(monkeypatch, tmp_path) -> None:
    (tmp_path / "hack/spark").mkdir(parents=True)
    (tmp_path / "hack/spark/pom.xml").write_text("<project/>")
    monkeypatch.setattr(paths, "HACK", tmp_path / "hack")
    monkeypatch.setenv("ANTIDOTE_CACHE", str(tmp_path / "cache"))
    from antidote_devstack import build

    monkeypatch.setattr(build, "HACK", tmp_path / "hack")
    jars = build.jar_dir_path("spark")
    jars.mkdir(parents=True)
    (jars / "b.jar").write_text("")
    (jars / "a.jar").write_text("")
    assert runner._dev_stack_jars() == f"{jars / 'a.jar'},{jars / 'b.jar'}"
