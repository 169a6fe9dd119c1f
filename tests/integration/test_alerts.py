"""The alert rules pass `promtool check rules` and the `promtool test rules` unit tests (every
alert firing and not firing), both as the plain rules file and as the chart's rendered
PrometheusRule, which must carry the same rules."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ..api_cases import ROOT

RULES = ROOT / "charts/antidote/files/alerts.yaml"
TESTS = sorted((ROOT / "tests/alerts").glob("*.test.yaml"))
ALERTS = {"AntidoteQueueDisabled", "AntidotePoisonRateHigh", "AntidotePoisonTopicGrowing",
          "AntidotePoisonAging", "AntidoteConsumerStuck", "AntidoteConsumerNotRunning", "AntidoteRetryRecordsLost",
          "AntidoteReaderJobFailed",
          "AntidoteOperatorDown"}


def promtool() -> str:
    path = shutil.which("promtool")
    if not path:
        pytest.fail("promtool not found: install Debian's `prometheus` package "
                    "(apt-get install prometheus; hack/install.sh does it as root)")
    return path


def run(*cmd: str | Path, env: dict[str, str] | None = None) -> str:
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_rules_file_passes_promtool_check() -> None:
    out = run(promtool(), "check", "rules", RULES)
    assert f"SUCCESS: {len(ALERTS)} rules found" in out


def test_every_alert_is_documented_and_tested() -> None:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} == ALERTS
    docs = (ROOT / "docs/alerts.md").read_text()
    tests = "".join(t.read_text() for t in TESTS)
    for rule in rules:
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"]), name
        anchor = rule["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor == name.lower() and f"\n## {name}\n" in docs, f"{name}: no runbook section"
        # Each alert has a test case where it fires and one where it does not.
        assert f"alertname: {name}\n        exp_alerts: []" in tests, f"{name}: never tested silent"
        assert f"alertname: {name}\n        exp_alerts:\n" in tests or \
            f"alertname: {name}\n        exp_alerts: &" in tests, f"{name}: never tested firing"


def test_rules_unit_tests_pass() -> None:
    assert TESTS
    out = run(promtool(), "test", "rules", *TESTS)
    assert "SUCCESS" in out and "FAILED" not in out


def test_promtool_test_catches_a_wrong_rule(tmp_path: Path) -> None:
    """The unit tests can fail: with a threshold changed, they do."""
    broken = tmp_path / "alerts.yaml"
    broken.write_text(RULES.read_text().replace(") > 0.05", ") > 0.5"))
    test = tmp_path / "t.test.yaml"
    test.write_text(TESTS[0].read_text().replace("../../charts/antidote/files/alerts.yaml", str(broken)))
    out = subprocess.run([promtool(), "test", "rules", str(test)], capture_output=True, text=True)
    assert out.returncode != 0 and "AntidotePoisonRateHigh" in out.stdout + out.stderr


def test_rendered_prometheusrule_carries_the_same_rules(stack, tmp_path: Path) -> None:
    env = {**os.environ, **stack.env()}
    rendered = run("helm", "template", "t", ROOT / "charts/antidote", "--set", "monitoring.enabled=true",
                   "--show-only", "templates/monitoring/prometheusrule.yaml", env=env)
    rule = yaml.safe_load(rendered)
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    extracted = tmp_path / "rendered.yaml"
    extracted.write_text(yaml.safe_dump(rule["spec"], sort_keys=False))
    run(promtool(), "check", "rules", extracted)
    for t in TESTS:
        copy = tmp_path / t.name
        copy.write_text(t.read_text().replace("../../charts/antidote/files/alerts.yaml", str(extracted)))
        assert "SUCCESS" in run(promtool(), "test", "rules", copy)


def test_the_chart_value_sets_the_poison_aging_threshold(stack) -> None:
    """monitoring.prometheusRule.poisonAgingSeconds replaces AntidotePoisonAging's default
    threshold (the file's) in the rendered rule, and nothing else changes."""
    env = {**os.environ, **stack.env()}
    rendered = run("helm", "template", "t", ROOT / "charts/antidote", "--set", "monitoring.enabled=true",
                   "--set", "monitoring.prometheusRule.poisonAgingSeconds=3600",
                   "--show-only", "templates/monitoring/prometheusrule.yaml", env=env)
    spec = yaml.safe_load(rendered)["spec"]
    default = yaml.safe_load(RULES.read_text())
    (aging,) = [r for g in spec["groups"] for r in g["rules"] if r["alert"] == "AntidotePoisonAging"]
    assert aging["expr"].strip().endswith("(antidote_poison_oldest_age_seconds) > 3600"), aging["expr"]
    assert yaml.safe_dump(spec).replace("> 3600", "> 86400") == yaml.safe_dump(default)
