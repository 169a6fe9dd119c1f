"""`antidote demo` runs the whole story on the stack and ends with a balanced ledger."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ANTIDOTE = str(Path(sys.executable).with_name("antidote"))


def test_demo_runs_to_a_balanced_ledger(stack, tmp_path) -> None:
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
    # The archive the reader Job wrote holds the quarantined reports.
    assert list((tmp_path / "demo" / "archive").rglob("*.parquet"))
