"""A pod in one namespace cannot disable a consumer of another through Prometheus (issue 43,
item 13): a real Prometheus scrapes two pages with the chart's PodMonitor settings, and the
operator's PromQL mode reads what it stored.

- "tenant-a/web" is any pod the PodMonitor selects in namespace tenant-a; its page says
  `antidote_queue_disabled{namespace="shop",consumer="orders"} 1`;
- "shop/orders" is the real consumer, running (`antidote_queue_disabled` 0).

The targets carry the Kubernetes metadata Prometheus' pod discovery would give them
(`__meta_kubernetes_namespace`, `__meta_kubernetes_pod_label_antidote_dev_consumer`), and the
scrape uses the rendered PodMonitor's `honorLabels` and `relabelings` as they are (file-based
discovery stands in for the API server's pod list: the local stack runs no pods with IPs).
"""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from antidote_devstack import prometheus as devprom
from antidote_operator.builders.common import LABEL_CONSUMER
from antidote_operator.watcher import parse_promql, promql_disabled, promql_selector

from .test_chart import env, template  # noqa: F401 - env is a fixture

pytestmark = pytest.mark.integration

META_CONSUMER = "__meta_kubernetes_pod_label_" + LABEL_CONSUMER.replace(".", "_").replace("/", "_")
PAGES = {
    "forger": ('antidote_queue_disabled{namespace="shop",consumer="orders",reason="SystemicFailure"} 1\n'
               'antidote_consecutive_batch_failures{namespace="shop",consumer="orders"} 99\n'),
    "orders": ('antidote_queue_disabled{namespace="shop",consumer="orders",reason="SystemicFailure"} 0\n'
               'antidote_messages_total{namespace="shop",consumer="orders",outcome="processed"} 5\n'),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def pages() -> Iterator[dict[str, int]]:
    """One HTTP server per page, each at its own port."""
    servers = {}
    for name, text in PAGES.items():
        class Page(http.server.BaseHTTPRequestHandler):
            body = text.encode()

            def do_GET(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(self.body)

            def log_message(self, *args: Any) -> None:
                pass
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers[name] = srv
    yield {name: srv.server_address[1] for name, srv in servers.items()}
    for srv in servers.values():
        srv.shutdown()
        srv.server_close()


def _relabel(r: dict[str, Any]) -> dict[str, Any]:
    """A PodMonitor relabeling (camelCase) as Prometheus' relabel_config."""
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {names.get(k, k): v for k, v in r.items()}


def _query(url: str, q: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': q})}", timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_a_pod_of_one_namespace_cannot_disable_a_consumer_of_another(env, pages, tmp_path: Path) -> None:  # noqa: F811
    pm = next(d for d in template(env, "monitoring.enabled=true") if d["kind"] == "PodMonitor")
    ep = pm["spec"]["podMetricsEndpoints"][0]
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps([
        {"targets": [f"127.0.0.1:{pages['forger']}"],
         "labels": {"__meta_kubernetes_namespace": "tenant-a", META_CONSUMER: "web"}},
        {"targets": [f"127.0.0.1:{pages['orders']}"],
         "labels": {"__meta_kubernetes_namespace": "shop", META_CONSUMER: "orders"}}]))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    conf = tmp_path / "prometheus.yml"
    conf.write_text(json.dumps({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "podmonitor", "honor_labels": ep.get("honorLabels", False),
                            "metrics_path": ep.get("path", "/metrics"),
                            "file_sd_configs": [{"files": [str(targets)]}],
                            "relabel_configs": [_relabel(r) for r in ep.get("relabelings", [])]}]}))
    proc = subprocess.Popen([devprom.binary(), f"--config.file={conf}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"))
    try:
        # Both pages scraped (the honest one's counter is there), whatever labels they end with.
        deadline = time.monotonic() + 60
        while True:
            try:
                up = _query(url, "up == 1")
                stored = _query(url, "antidote_messages_total")
                if len(up) == 2 and stored:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()[-2000:]
            time.sleep(0.2)
        result = _query(url, promql_selector())
        disabled = _query(url, promql_disabled())
        foreign: set = set()
        samples = parse_promql(result, disabled, datetime.now(timezone.utc), foreign)

        orders = samples[("shop", "orders")]
        assert orders.disabled is None, orders  # the forged disable did not reach shop/orders
        assert orders.consecutive is None and orders.counts == {"processed": 5}
        assert foreign == {("tenant-a", "web", "shop", "orders")}
        # The alert rules group by the target's labels too: the forged series alerts as
        # tenant-a/web, the pod that wrote it, not as shop/orders.
        alerting = _query(url, "max by (namespace, consumer, reason) (antidote_queue_disabled == 1)")
        assert [(s["metric"]["namespace"], s["metric"]["consumer"]) for s in alerting] == [("tenant-a", "web")]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
