"""The live systemic-failure breaker on the node (issue 46, item 1): executors in their own
pods report their attempts to the driver pod's `reports` port through its headless Service
(spark.driver.host), and the breaker trips while the batch runs.

Markers `node` and `images` (`make test-node`); root only, one node per machine."""

from __future__ import annotations

import time
import uuid

from kubernetes import client

from antidote_testkit.kafka_io import produce, read_all
from .node_cluster import EXECUTORS, NODE_IMAGES, Cluster
from .node_util import wait

pytestmark = NODE_IMAGES

TRIPPED = "systemic failure while the batch runs"


def test_executor_pods_report_to_the_driver_pod_and_the_breaker_trips_while_the_batch_runs(
        cluster: Cluster) -> None:
    c = cluster
    source = f"hang-{uuid.uuid4().hex[:6]}"
    c.topics(source, partitions=2)
    produce(c.bootstrap, source, [(b"k%d" % i, b"m%d" % i, None) for i in range(200)])
    # Every call hangs 4 s then fails: 200 x 4 s on the executors' slots if judged at the end.
    policy = {"retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s"},
              "queueDisable": {"failureRatio": {"threshold": 0.5, "window": "5m", "minMessages": 6}}}
    with c.consumer("hangs", source, "antidote_test_handlers:hang_then_fail", policy):
        wait(f"{EXECUTORS} executor pods Running", lambda: c.running("hangs", "executor", EXECUTORS), 300)
        (driver,) = wait("the driver pod Running", lambda: c.running("hangs", "driver", 1), 60)
        ports = {p.name: p.port for p in c.core.read_namespaced_service("hangs", c.ns).spec.ports}
        assert ports["reports"] == 4044, ports
        started = time.monotonic()
        # The driver logs the trip while its pod lingers (the metrics linger) before it exits.
        def tripped() -> str | None:
            try:
                text = c.core.read_namespaced_pod_log(driver.metadata.name, c.ns)
            except client.ApiException:  # not ready to serve its log, or gone (then the wait fails)
                return None
            return text if TRIPPED in text else None

        log = str(wait("the breaker tripped while the batch ran", tripped, 600))
        took = time.monotonic() - started
        assert "queue disabled (SystemicFailure)" in log, log[-3000:]
        wait("QueueDisabled=True (SystemicFailure)",
             lambda: c.condition("hangs", "QueueDisabled") == ("True", "SystemicFailure"), 180)
        for topic in (f"{source}.poison", f"{source}.dlq", f"{source}.retry-1"):
            assert read_all(c.bootstrap, topic, missing_ok=True) == [], topic
    print(f"node: tripped while the batch ran, {took:.0f}s after the executors ran")
