"""Marks every test under tests/integration as needing the real local stack, and starts the
slowest ones first."""

from __future__ import annotations

from pathlib import Path

import pytest

INTEGRATION = Path(__file__).parent / "integration"

# Modules whose tests run Spark drivers, operators or the demo as processes, slowest first
# (30-130 s a test in CI on 2 cores). Collected first, they start first on the xdist
# workers and the short tests fill in at the end; in the default order they came last, and
# one worker ran the final few minutes alone. (The Makefile's worksteal does the rest.)
SLOW_FIRST = ["test_chaos.py", "test_skip_cli.py", "test_demo.py", "test_consumer_process.py",
              "test_reader_jobs.py", "test_operator_queue_disable.py", "test_oncall_cli.py",
              "test_consumer_credentials.py", "test_consumer_edges.py", "test_consumer_failures.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(SLOW_FIRST)))  # stable
