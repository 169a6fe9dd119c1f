"""The dev runner's Prometheus target files (file_sd): one per endpoint, removed only by
the operator that wrote them, and pruned when that operator is gone."""

from __future__ import annotations

import json
import subprocess
import sys

from antidote_devrunner.targets import PID_LABEL, TargetFiles


def test_files_name_each_endpoint_and_go_away_on_close(tmp_path) -> None:
    t = TargetFiles(tmp_path)
    t.operator(8080)
    t.consumer("shop", "orders", 9100)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([f"operator_{t.pid}.json", "consumer_shop_orders.json"])
    (entry,) = json.loads((tmp_path / "consumer_shop_orders.json").read_text())
    assert entry["targets"] == ["127.0.0.1:9100"]
    # The pid is dropped by Prometheus (`__` prefix); namespace and consumer are the target's
    # identity, which the stack's Prometheus keeps over the page's own (honor_labels false).
    assert entry["labels"] == {"namespace": "shop", "consumer": "orders", PID_LABEL: str(t.pid)}
    t.remove_consumer("shop", "orders")
    assert not (tmp_path / "consumer_shop_orders.json").exists()
    t.close()
    assert list(tmp_path.iterdir()) == []


def test_another_operators_file_is_left_alone_until_that_operator_is_gone(tmp_path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        theirs = TargetFiles(tmp_path)
        theirs.pid = other.pid
        theirs.consumer("shop", "orders", 9100)
        mine = TargetFiles(tmp_path)
        mine.remove_consumer("shop", "orders")
        mine.close()
        assert mine.prune() == []
        assert (tmp_path / "consumer_shop_orders.json").exists()
    finally:
        other.kill()
        other.wait()
    assert mine.prune() == ["consumer_shop_orders.json"]
    assert list(tmp_path.iterdir()) == []


def test_the_stacks_prometheus_takes_identity_from_the_targets(tmp_path) -> None:
    from antidote_devstack import prometheus

    jobs = {j["job_name"]: j for j in prometheus.config(tmp_path, tmp_path)["scrape_configs"]}
    assert jobs["antidote-consumers"].get("honor_labels", False) is False
