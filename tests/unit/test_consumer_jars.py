"""Where the consumer finds Spark's Kafka connector jars: ANTIDOTE_SPARK_JARS only (the image
has them in Spark's jars/); in a checkout the dev stack supplies it from its cache."""

from __future__ import annotations

from antidote_consumer import spark
from antidote_devstack import build, paths
from antidote_devrunner import local as devrunner


def test_the_consumer_reads_its_jars_from_the_environment_only(monkeypatch) -> None:
    monkeypatch.delenv("ANTIDOTE_SPARK_JARS", raising=False)
    assert spark.connector_jars() == ""
    monkeypatch.setenv("ANTIDOTE_SPARK_JARS", "/a.jar,/b.jar")
    assert spark.connector_jars() == "/a.jar,/b.jar"


def test_an_installed_package_without_hack_asks_for_no_jars(monkeypatch, tmp_path) -> None:
    # The consumer image: site-packages/../hack does not exist.
    monkeypatch.setattr(paths, "HACK", tmp_path / "hack")
    monkeypatch.setattr(build, "HACK", tmp_path / "hack")
    assert build.checkout_spark_jars() == ""


def test_a_checkout_uses_the_dev_stacks_cached_jars(monkeypatch, tmp_path) -> None:
    (tmp_path / "hack/spark").mkdir(parents=True)
    (tmp_path / "hack/spark/pom.xml").write_text("<project/>")
    monkeypatch.setattr(paths, "HACK", tmp_path / "hack")
    monkeypatch.setenv("ANTIDOTE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "HACK", tmp_path / "hack")
    jars = build.jar_dir_path("spark")
    jars.mkdir(parents=True)
    (jars / "b.jar").write_text("")
    (jars / "a.jar").write_text("")
    expected = f"{jars / 'a.jar'},{jars / 'b.jar'}"
    assert build.checkout_spark_jars() == expected
    # The dev runner hands them to the consumers it starts, unless the environment names some.
    monkeypatch.delenv("ANTIDOTE_SPARK_JARS", raising=False)
    assert devrunner.jars_env() == {"ANTIDOTE_SPARK_JARS": expected}
    monkeypatch.setenv("ANTIDOTE_SPARK_JARS", "/mine.jar")
    assert devrunner.jars_env() == {}
