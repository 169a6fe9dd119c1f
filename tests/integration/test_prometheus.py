"""A real Prometheus (`antidote dev up --prometheus`) scraping a real operator and a real
consumer (the dev runner's, found through the file_sd targets they write), evaluating the
chart's alert rules, and answering the operator's `--prometheus-url` mode.

One consumer run serves every assertion (Spark start-ups are what cost time here):
1. a producer sends a stream in which 1 message in 10 is poison (the `upper` handler fails
   it; one retry cycle, then the poison topic): AntidotePoisonRateHigh fires, as its
   runbook describes (a test-only copy of the rule with a 1 m window and `for: 10s`: the
   chart's 10 m / 10 m would make this a 20-minute test);
2. the downstream goes down (a flag file the handler checks): the consumer
   disables its queue, the operator pauses it from what Prometheus answers, and
   AntidoteQueueDisabled fires, read from Prometheus' own /api/v1/alerts;
3. fixed and resumed: the alert resolves and the waiting messages are processed;
4. every query of the Grafana dashboard (charts/antidote/files/dashboard.json) runs over
   the whole run against this Prometheus and returns series.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from antidote_devstack import prometheus as devprom
from antidote_devstack import stack as devstack

from antidote_testkit.kafka_io import produce
from antidote_testkit.operators import ANTIDOTE, ROOT, Cluster, consumer, install_crds, operator, policy, wait_for

pytestmark = pytest.mark.integration

RULES = ROOT / "charts/antidote/files/alerts.yaml"
DASHBOARD = ROOT / "charts/antidote/files/dashboard.json"
FAST_GROUP = "antidote-test-fast"
# Dashboard queries this run cannot give series to, and why.
NO_SERIES_HERE = {
    ("Reader Jobs", "A"): "no reader Job runs in this test (tests/integration/test_reader_jobs.py runs them)",
    ("Reader Jobs", "B"): "no reader Job fails in this test",
    ("Batch failures and isolation", "A"): "the outage disables the queue before any batch is rolled back",
    ("Batch failures and isolation", "B"): "no message crashes a whole batch here",
    ("Operator", "C"): "the operator makes no error in this run",
}


# --- Prometheus' HTTP API ----------------------------------------------------------------------

def api(url: str, path: str, **params: Any) -> Any:
    q = f"{url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    try:
        with urllib.request.urlopen(q, timeout=30) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as err:
        body = json.loads(err.read() or b"{}")
        raise AssertionError(f"Prometheus {path} {params}: {err.code} {body.get('error')}") from err
    assert body["status"] == "success", body
    return body["data"]


def query(url: str, expr: str) -> list[dict]:
    return api(url, "/api/v1/query", query=expr)["result"]


def alerts(url: str, name: str, ns: str, **labels: str) -> list[dict]:
    return [a for a in api(url, "/api/v1/alerts")["alerts"]
            if a["labels"].get("alertname") == name and a["labels"].get("namespace") == ns
            and all(a["labels"].get(k) == v for k, v in labels.items())]


def rules_evaluated_after(url: str, t: float) -> bool:
    """The chart's rule group was evaluated after `t` (Unix time)."""
    (group,) = [g for g in api(url, "/api/v1/rules")["groups"] if g["file"] == str(RULES)]
    # RFC 3339 with up to 9 fractional digits, which fromisoformat does not take.
    whole, _, frac = group["lastEvaluation"].rstrip("Z").partition(".")
    at = datetime.fromisoformat(whole).replace(tzinfo=timezone.utc).timestamp() + float(f"0.{frac or 0}")
    return at > t


def fast_poison_rate_rule() -> dict:
    """The chart's AntidotePoisonRateHigh with a 1 m window and `for: 10s` (test only), in a
    group of its own, labelled so it is told apart from the chart's."""
    (rule,) = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
               if r["alert"] == "AntidotePoisonRateHigh"]
    assert rule["for"] == "10m" and rule["expr"].count("[10m]") == 3
    fast = {**rule, "expr": rule["expr"].replace("[10m]", "[1m]"), "for": "10s",
            "labels": {**rule["labels"], "test_window": "1m"}}
    return {"groups": [{"name": FAST_GROUP, "rules": [fast]}]}


def with_test_rule(stack, file_name: str, rule: dict, group: str) -> Any:
    """The session's stack with Prometheus added (as `antidote dev up --prometheus` on a
    running stack does), plus a test-only rule group, loaded before it is yielded and removed
    after (for module fixtures: `yield from`)."""
    s = devstack.add_prometheus(Path(stack.dir))
    rule_file = devprom.rules_dir(Path(s.dir)) / file_name
    rule_file.write_text(yaml.safe_dump(rule, sort_keys=False))
    devprom.reload(s.prometheus_url)
    wait_for(lambda: group in {g["name"] for g in api(s.prometheus_url, "/api/v1/rules")["groups"]},
             "the test rule group loaded")
    try:
        yield s
    finally:
        rule_file.unlink(missing_ok=True)
        devprom.reload(s.prometheus_url)


@pytest.fixture(scope="module")
def prom(stack) -> Any:
    """Prometheus on the session's stack, with the test-only fast poison-rate rule."""
    yield from with_test_rule(stack, "test-fast.yaml", fast_poison_rate_rule(), FAST_GROUP)


def test_dev_cli_shows_prometheus_and_its_config_passes_promtool(prom) -> None:
    env = {**os.environ, **prom.env()}
    out = subprocess.run([ANTIDOTE, "dev", "env", "--dir", prom.dir], capture_output=True, text=True, env=env)
    assert f"export PROMETHEUS_URL='{prom.prometheus_url}'" in out.stdout
    assert f"export ANTIDOTE_PROMETHEUS_TARGETS='{prom.prometheus_targets}'" in out.stdout
    out = subprocess.run([ANTIDOTE, "dev", "status", "--dir", prom.dir], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and f"Prometheus {prom.prometheus_url}" in out.stdout
    assert prom.prometheus_url.startswith("http://127.0.0.1:")  # loopback only
    conf = Path(prom.dir) / "prometheus" / "prometheus.yml"
    check = subprocess.run([shutil.which("promtool") or "promtool", "check", "config", str(conf)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    # The chart's rules, loaded from the chart's own file (one source).
    groups = api(prom.prometheus_url, "/api/v1/rules")["groups"]
    chart = [g for g in groups if g["file"] == str(RULES)]
    assert {r["name"] for g in chart for r in g["rules"]} >= {"AntidoteQueueDisabled", "AntidotePoisonRateHigh"}


def test_alerts_promql_pause_and_the_dashboard_on_a_live_prometheus(
        prom, api_client: client.ApiClient, namespace: str, kubeconfig: str, kafka_bootstrap: str,
        topic_factory, tmp_path: Path, calls_dir: Path) -> None:
    # Long on purpose: alerts, PromQL pause and dashboard queries read the series of one
    # consumer in one live Prometheus; split up, each part would wait for its own scrapes.
    url = prom.prometheus_url
    install_crds(api_client)
    k = Cluster(api_client, namespace)
    started = time.time()
    source = topic_factory()
    k.create(policy("p", {"retries": {"immediate": 0, "cycles": 1, "cycleDelay": "2s"},
                          # A short window: the outage is judged on its own batches, not diluted
                          # by the healthy traffic before it.
                          "queueDisable": {"failureRatio": {"threshold": 0.5, "minMessages": 5,
                                                            "window": "10s"}}}))
    k.create(consumer("orders", "p", kafka_bootstrap, source,
                      handler="tests.integration.handlers:upper_unless_down",
                      checkpoint={"location": str(tmp_path / "checkpoint")},
                      # min = max: the executors panel has its series, and no count change
                      # restarts the driver in the middle of the alerts' sequence.
                      spark={"autoscale": {"min": 1, "max": 1}}))
    down = tmp_path / "downstream-down"
    env = {**prom.env(), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "ANTIDOTE_TEST_CALLS_DIR": str(calls_dir), "ANTIDOTE_TEST_DOWNSTREAM_DOWN": str(down)}
    args = ("--dev-runner", "--dev-runner-dir", str(tmp_path / "dev-runner"), "--dev-runner-master",
            "local[1]", "--prometheus-url", url)
    sel = f'namespace="{namespace}",consumer="orders"'

    def metric(expr: str) -> float | None:
        result = query(url, expr)
        return float(result[0]["value"][1]) if result else None

    with operator(kubeconfig, namespace, tmp_path, *args, env=env) as op:
        # Prometheus finds the operator and the consumer through the targets they write.
        wait_for(lambda: metric('max(up{job="antidote-operator"})') == 1, "the operator scraped", timeout=30)
        wait_for(lambda: metric(f"count(antidote_attempts_total{{{sel}}})"), "the consumer scraped",
                 timeout=180)

        # 1. A stream with 1 poison message in 10, burst by burst: each burst once the last
        # one reached its outcome (as Prometheus sees it), so the counters move in steps.
        produced = 0
        for burst in range(5):
            values = [b"order-%d-%d" % (burst, i) for i in range(9)] + [b"poison-%d" % burst]
            produce(kafka_bootstrap, source, [(b"k%d" % (produced + i), v, None) for i, v in enumerate(values)])
            produced += len(values)
            wait_for(lambda: (metric(f'sum(antidote_messages_total{{{sel},outcome="processed"}})') or 0)
                     >= 9 * (burst + 1), f"burst {burst} processed", timeout=120)
        (fast,) = wait_for(lambda: [a for a in alerts(url, "AntidotePoisonRateHigh", namespace,
                                                      consumer="orders", test_window="1m")
                                    if a["state"] == "firing"],
                           "AntidotePoisonRateHigh (1m window) firing", timeout=120)
        assert fast["labels"]["severity"] == "warning"
        assert "quarantines" in fast["annotations"]["summary"]
        # Every poison message went through its retry cycle to the poison topic.
        wait_for(lambda: metric(f'sum(antidote_poison_messages_total{{{sel}}})') == 5,
                 "5 poison messages moved", timeout=120)
        assert metric(f'sum(antidote_messages_total{{{sel},outcome="moved"}})') == 5
        assert not alerts(url, "AntidoteQueueDisabled", namespace)

        # 2. The downstream goes down: every message fails, the queue is disabled.
        down.touch()
        produce(kafka_bootstrap, source, [(b"w%d" % i, b"waiting-%d" % i, None) for i in range(10)])
        c = k.wait_condition("orders", "QueueDisabled", "True", "SystemicFailure", timeout=240)
        # The operator learnt it from PromQL (its --prometheus-url mode), not the exit code: the
        # driver keeps serving /metrics after disabling its queue (--metrics-linger) until the
        # operator, having seen it, scales it to 0 (SIGTERM).
        assert "the consumer's metrics report it (antidote_queue_disabled)" in c["message"], c["message"]
        wait_for(lambda: k.replicas("orders") == 0, "the Deployment scaled to 0")
        (disabled,) = wait_for(lambda: [a for a in alerts(url, "AntidoteQueueDisabled", namespace,
                                                          consumer="orders") if a["state"] == "firing"],
                               "AntidoteQueueDisabled firing", timeout=60)
        assert disabled["labels"]["reason"] == "SystemicFailure"
        assert disabled["labels"]["severity"] == "critical"
        # It stays firing after the consumer's own series went away with its process: the
        # operator's gauge holds it (checked on a rule evaluation after the series went).
        wait_for(lambda: metric(f'antidote_operator_queue_disabled{{{sel},reason="SystemicFailure"}}') == 1,
                 "the operator's gauge in Prometheus")
        wait_for(lambda: not query(url, f"antidote_queue_disabled{{{sel}}}"), "the consumer's series gone",
                 timeout=60)
        gone = time.time()
        wait_for(lambda: rules_evaluated_after(url, gone), "a rule evaluation after that")
        assert [a["state"] for a in alerts(url, "AntidoteQueueDisabled", namespace)] == ["firing"]

        # 3. Fixed and resumed: the alert resolves, the 10 messages that waited are processed.
        down.unlink()
        k.patch("queueconsumers", "orders", {"metadata": {"annotations": {"antidote.dev/resume": "fixed"}}})
        k.wait_condition("orders", "QueueDisabled", "False", "Resumed")
        wait_for(lambda: not alerts(url, "AntidoteQueueDisabled", namespace), "AntidoteQueueDisabled resolved",
                 timeout=60)
        wait_for(lambda: (k.qc("orders")["status"].get("counts") or {}).get("processed") == 55,
                 "the 10 waiting messages processed (status from PromQL)", timeout=240)
        assert f"Prometheus at {url}: " not in op.log()  # no failed PromQL round

        # 4. Every dashboard query, over the whole run, as Grafana would ask.
        check_dashboard(url, namespace, started)


def check_dashboard(url: str, namespace: str, since: float) -> None:
    dash = json.loads(DASHBOARD.read_text())
    subs = {"$namespace": namespace, "$consumer": "orders", "$__rate_interval": "30s"}
    empty, ran = [], 0
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in subs.items():
                expr = expr.replace(var, value)
            assert "$" not in expr, f"{panel['title']}: unknown variable in {expr}"
            key = (panel["title"], target["refId"])
            # An error (bad PromQL, a wrong function) fails here, with Prometheus' message.
            result = api(url, "/api/v1/query_range", query=expr, start=since, end=time.time(),
                         step=1)  # the scrape interval: a series that lived a few seconds shows["result"]
            ran += 1
            if not result and key not in NO_SERIES_HERE:
                empty.append(f"{key}: {expr}")
    assert ran >= 15
    assert not empty, "dashboard queries with no series: " + "; ".join(empty)
