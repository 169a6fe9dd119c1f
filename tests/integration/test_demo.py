"""`antidote demo` runs the whole story on the stack and ends with a balanced ledger."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from antidote_devstack import stack as devstack

pytestmark = pytest.mark.integration

ANTIDOTE = str(Path(sys.executable).with_name("antidote"))


def test_demo_runs_to_a_balanced_ledger(stack, tmp_path) -> None:
    # The stack with Prometheus, as the demo starts its own when Debian's `prometheus` is there.
    prometheus_url = devstack.add_prometheus(Path(stack.dir)).prometheus_url
    env = {**os.environ, "ANTIDOTE_STACK_DIR": str(stack.dir)}
    proc = subprocess.run([ANTIDOTE, "demo", "--workdir", str(tmp_path / "demo")], env=env,
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, f"demo exited {proc.returncode}\n{out[-4000:]}\n{proc.stderr[-3000:]}"
    assert "ledger: BALANCED" in out
    # The story happened, in the Events the operator wrote.
    for reason in ("PoisonDetected", "QueueDisabled", "Resumed", "ReaderJobSucceeded"):
        assert reason in out, f"no {reason} Event in the demo's report"
    assert "reports produced            450" in out
    # It ends with the Prometheus URL and queries to paste.
    tail = out[out.rindex(f"Prometheus {prometheus_url}"):]
    assert "sum by (outcome) (antidote_messages_total{namespace=" in tail
    # The archive the reader Job wrote holds the quarantined reports.
    assert list((tmp_path / "demo" / "archive").rglob("*.parquet"))
