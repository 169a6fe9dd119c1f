"""A consumer whose driver image cannot be pulled, on the stack's node: the real kubelet
reports ErrImagePull and ImagePullBackOff by turns, and the chart's operator pod shows one
reason, ImagePullBackOff, in Ready, in one Warning Event and in its
`antidote_operator_consumer_ready` gauge; a live Prometheus (`antidote dev up --prometheus`
on the node's stack) scraping that pod fires AntidoteConsumerNotRunning (a test-only copy
with `for: 10s`, as in tests/integration/test_prometheus_not_running.py) with that reason.

Markers `node` and `images` (`make test-node`); root only, one node per machine."""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from antidote_api.wire import OperatorMetric
from antidote_devstack import prometheus as devprom
from antidote_devstack import stack as devstack

from .node_cluster import NODE_IMAGES, Cluster
from .node_util import wait
from .test_prometheus import alerts
from .test_prometheus_not_running import ALERT, fast_not_running_rule

pytestmark = NODE_IMAGES

# No registry answers on localhost: the kubelet's pull fails (IfNotPresent, the operator's
# default pull policy for consumer pods), as with a mistyped name or a missing pull secret.
MISSING_IMAGE = "localhost/antidote/never-built:0"


def operator_endpoints(c: Cluster) -> list[str]:
    """host:port of the operator pods' /metrics (their pod IPs: the host is the pods' gateway)."""
    found = []
    for p in c.core.list_namespaced_pod(c.system).items:
        if p.status.phase != "Running" or not p.status.pod_ip or p.metadata.deletion_timestamp:
            continue
        found += [f"{p.status.pod_ip}:{port.container_port}" for ct in p.spec.containers
                  for port in ct.ports or [] if port.name == "metrics"]
    return found


def operator_readiness(c: Cluster, consumer: str) -> list[tuple[str, float]]:
    """(reason, value) of the consumer's antidote_operator_consumer_ready, over the operator pods."""
    found = []
    for endpoint in operator_endpoints(c):
        text = urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=5).read().decode()
        found += [(s.labels["reason"], s.value) for f in text_string_to_metric_families(text)
                  for s in f.samples if s.name == OperatorMetric.CONSUMER_READY
                  and s.labels["namespace"] == c.ns and s.labels["consumer"] == consumer]
    return found


def test_a_driver_image_that_cannot_be_pulled_shows_image_pull_back_off_and_is_alerted(
        cluster: Cluster) -> None:
    c = cluster
    source = f"nopull-{uuid.uuid4().hex[:6]}"
    c.topics(source)
    with c.consumer("nopull", source, "antidote_test_handlers:upper", {"retries": {"immediate": 0, "cycles": 0}},
                    spark={"image": MISSING_IMAGE}):
        wait("Ready=False (ImagePullBackOff)", lambda: c.condition("nopull", "Ready") == ("False", "ImagePullBackOff"),
             180)
        wait("the gauge says ImagePullBackOff", lambda: operator_readiness(c, "nopull") == [("ImagePullBackOff", 0)], 60)
        # The kubelet alternates its two reasons: see both, and Ready (and its gauge) stays one.
        seen: set[str] = set()

        def both_reasons() -> bool:
            for p in c.pods("nopull", "driver"):
                for cs in p.status.container_statuses or []:
                    if cs.state.waiting is not None:
                        seen.add(cs.state.waiting.reason)
            return {"ErrImagePull", "ImagePullBackOff"} <= seen

        wait("the kubelet's ErrImagePull and ImagePullBackOff", both_reasons, 180)
        ready = next(x for x in c.qc("nopull")["status"]["conditions"] if x["type"] == "Ready")
        assert ready["reason"] == "ImagePullBackOff" and MISSING_IMAGE in ready["message"], ready
        assert operator_readiness(c, "nopull") == [("ImagePullBackOff", 0)]
        assert [e.reason for e in c.events("nopull")].count("ImagePullBackOff") == 1
        assert not c.running("nopull", "driver", 1)

        # A live Prometheus scraping the operator pod (job="antidote-operator", as the chart's
        # ServiceMonitor's job): the chart's rule pending, its `for: 10s` copy firing.
        prom = devstack.add_prometheus(Path(c.stack.dir))
        url = prom.prometheus_url
        (Path(prom.prometheus_targets) / "operator_node.json").write_text(
            json.dumps([{"targets": operator_endpoints(c), "labels": {}}]))
        rules = devprom.rules_dir(Path(prom.dir)) / "test-fast-not-running.yaml"
        rules.write_text(yaml.safe_dump(fast_not_running_rule(), sort_keys=False))
        devprom.reload(url)
        (fired,) = wait(f"{ALERT} (for: 10s) firing", lambda: [
            a for a in alerts(url, ALERT, c.ns, consumer="nopull", test_for="10s") if a["state"] == "firing"], 120)
        assert fired["labels"]["reason"] == "ImagePullBackOff" and fired["labels"]["severity"] == "critical"
        chart = [a for a in alerts(url, ALERT, c.ns, consumer="nopull") if "test_for" not in a["labels"]]
        assert [(a["state"], a["labels"]["reason"]) for a in chart] == [("pending", "ImagePullBackOff")]
