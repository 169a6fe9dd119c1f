"""The node of the local stack (`antidote dev up --node`): real containerd, runc, kubelet,
kube-proxy, CoreDNS and the controllers, pods on a CNI bridge.

One test walks the whole life of a node, because a machine holds one node at a time (its
bridge, iptables and port 53 on the gateway): under pytest-xdist two tests of this module
on two workers would start two. Each step's assertion names the step.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from antidote_devstack import images, node
from antidote_devstack.controlplane import SERVICE_CIDR
from antidote_devstack import stack as devstack
from antidote_devstack.paths import cache_dir

from .node_util import RESTRICTED, phase as _phase, pod as _pod
from .node_util import restricted_container as _restricted_container, wait as _wait

pytestmark = [
    pytest.mark.integration,
    pytest.mark.node,
    pytest.mark.skipif(os.geteuid() != 0, reason="the node needs root (docs/node.md)"),
]

def _service_ip(core: client.CoreV1Api, ns: str, name: str) -> str:
    svc = core.create_namespaced_service(ns, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"ports": [{"port": 80, "targetPort": 8080}], "selector": {"app": name}}})
    return svc.spec.cluster_ip


def test_node_runs_restricted_pods_serves_services_reaches_kafka_and_leaves_nothing() -> None:
    # Long on purpose: one node's life, up to the check that `down` left nothing behind; a
    # node costs tens of seconds to start, so the checks share it in one story.
    state_dir = cache_dir() / "test-node-stack"
    started = time.monotonic()
    s = devstack.up(state_dir, node=True)
    up_seconds = time.monotonic() - started
    try:
        api = config.new_client_from_config(config_file=s.kubeconfig)
        core = client.CoreV1Api(api)

        # 1. The node is Ready, and `antidote dev status` says so.
        ready = [c.status for c in core.read_node(node.NODE_NAME).status.conditions if c.type == "Ready"]
        assert ready == ["True"], f"node Ready condition: {ready}"
        status = subprocess.run(["antidote", "dev", "status", "--dir", str(state_dir)],
                                capture_output=True, text=True, env={**os.environ, **s.env()})
        assert status.returncode == 0 and f"node {node.NODE_NAME} Ready" in status.stdout, status

        ns = f"node-{uuid.uuid4().hex[:6]}"
        core.create_namespace({"metadata": {"name": ns, "labels": RESTRICTED}})
        # The controller-manager creates the namespace's default ServiceAccount, which the
        # ServiceAccount admission plugin requires of every pod.
        _wait("default ServiceAccount", lambda: core.list_namespaced_service_account(
            ns, field_selector="metadata.name=default").items, 60)

        # 2. The API server's Pod Security admission enforces `restricted` there ...
        root = _pod("root", {"name": "c", "image": images.pause_image()[0]})
        with pytest.raises(ApiException) as denied:
            core.create_namespaced_pod(ns, root)
        assert denied.value.status == 403 and "restricted" in denied.value.body

        # ... and a pod that meets it runs: the locally built sandbox image as a container.
        pause = images.pause_image()[0]
        core.create_namespaced_pod(ns, _pod("pause", _restricted_container("pause", pause), "Always"))
        _wait("pause pod Running", _phase(core, ns, "pause", {"Running"}), 120)

        # The Debian base image (mmdebstrap, buildah), loaded into the node, runs too.
        debian, archive = images.debian_base_image()
        node.load_image(Path(s.dir), debian, archive)
        container = _restricted_container("debian", debian, ["cat", "/etc/debian_version"])
        container["securityContext"]["runAsUser"] = 65534  # the image's user is root
        core.create_namespaced_pod(ns, _pod("debian", container))
        phase = _wait("debian pod finished", _phase(core, ns, "debian", {"Succeeded", "Failed"}), 120)
        log = core.read_namespaced_pod_log("debian", ns)
        assert phase == "Succeeded" and log.startswith("12."), f"debian pod {phase}:\n{log}"

        # 3. A Service name resolves in a pod through CoreDNS and its ClusterIP leads, through
        # kube-proxy's rules, to the pod behind it; and the pod speaks Kafka with the broker
        # at KAFKA_BOOTSTRAP_SERVERS (the address the host uses too): an ApiVersions v0
        # request, answered with its correlation id (7) and no error.
        busybox = images.busybox_image()[0]
        server = _pod("orders", _restricted_container("orders", busybox, [
            "sh", "-c", "while true; do echo orders-here | nc -l -p 8080; done"]), "Always")
        server["metadata"]["labels"] = {"app": "orders"}
        core.create_namespaced_pod(ns, server)
        cluster_ip = _service_ip(core, ns, "orders")
        _wait("orders pod Running", _phase(core, ns, "orders", {"Running"}), 120)
        kafka_host, kafka_port = s.kafka_bootstrap.rsplit(":", 1)
        name = f"orders.{ns}.svc.cluster.local"
        script = (
            "ip route; "  # the pod's only routes: the pods' and the Services' ranges
            f"nslookup {name} || exit 1; "
            # Until kube-proxy has written the Service's rules (a second or so), or 30 tries.
            f"for i in $(seq 30); do timeout 2 nc {name} 80 </dev/null | grep orders-here "
            "&& break; sleep 1; done; "
            "printf '\\000\\000\\000\\012\\000\\022\\000\\000\\000\\000\\000\\007\\377\\377' "
            f"| timeout 5 nc {kafka_host} {kafka_port} | od -An -tx1 -N10 | tr -s ' \\n' ' '; "
            "echo ' end'"
        )
        core.create_namespaced_pod(ns, _pod("probe", _restricted_container(
            "probe", busybox, ["sh", "-c", script])))
        phase = _wait("probe pod finished", _phase(core, ns, "probe", {"Succeeded", "Failed"}), 120)
        log = core.read_namespaced_pod_log("probe", ns)
        assert phase == "Succeeded", f"probe pod {phase}; log:\n{log}"
        assert "default" not in log and f"{SERVICE_CIDR} via {node.GATEWAY}" in log, \
            f"a pod's routes go beyond the stack's ranges:\n{log}"
        assert cluster_ip in log, f"{name} did not resolve to {cluster_ip}:\n{log}"
        assert "orders-here" in log, f"the Service {name} did not lead to its pod:\n{log}"
        # Response: 4 bytes of size, then correlation id 7, then error code 0.
        words = log.rsplit(" end", 1)[0].split()[-10:]
        assert words[4:10] == ["00", "00", "00", "07", "00", "00"], f"Kafka from a pod:\n{log}"
        api.close()
    finally:
        devstack.down(state_dir)

    # 4. `dev down` left nothing of the node on the machine.
    left = node.leftovers(state_dir)
    assert left == {k: [] for k in left}, f"left behind by dev down: {left}"
    print(f"dev up --node: {up_seconds:.1f}s")
