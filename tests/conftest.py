"""Marks every test under tests/integration as needing the real local stack, starts the
slowest ones first, and keeps the node's modules on one pytest-xdist worker."""

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


# Modules that start the stack's node. The machine holds one node at a time, so under `make
# test` (-n 2 --dist loadgroup) they run on one worker, one after the other, while the other
# worker runs the rest. pytest-xdist 3.8's own loadgroup does not group under pytest 9 (it
# renames `item._nodeid`, which pytest 9 no longer reads: every test stays a unit of its own),
# hence the scheduler below, which groups by these names.
NODE_GROUP = ("test_node.py", "test_node_consumers.py", "test_node_s3.py")
# Modules that use the local S3 server (conftest's `s3` fixture, one per worker's session):
# on one worker, so that `make test` starts one server, not one per worker.
S3_GROUP = ("test_s3_storage.py", "test_s3_examples.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
        if Path(str(item.fspath)).name in NODE_GROUP:
            item.add_marker(pytest.mark.xdist_group("node"))
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(SLOW_FIRST)))  # stable


def _scope(nodeid: str) -> str:
    """The work unit of a test: "node" for the node's modules, "s3" for the S3 server's,
    else the test itself."""
    module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return "node" if module in NODE_GROUP else "s3" if module in S3_GROUP else nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN201 - xdist's hook
    """--dist loadgroup with the node group: xdist's load-scope scheduler hands each worker
    one unit at a time (a worker with at most 2 tests pending gets the next); the largest
    unit, the node group, goes out first."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class NodeGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return NodeGroupScheduling(config, log)
