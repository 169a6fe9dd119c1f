"""The documented kind path, run for real (`make test-kind`; docs/kind.md): hack/kind-up.sh
against podman (kind's provider here, no Docker engine) with the node image built by
`antidote dev build --kind`, then the node's real-path checks on that cluster: the chart's
operator pod, a consumer's driver and executor pods in a `restricted` namespace, messages
through, a poison message quarantined; then `kind delete cluster`, and nothing of kind left.

Marker `kind` (not in `make test`: docs/testing.md); root, podman; one at a time per machine,
like the node (the kind node runs its own containerd and kubelet).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from types import SimpleNamespace

import pytest
from kubernetes import client, config

from antidote_devstack import kind_env

from antidote_testkit.kafka_io import produce, read_all
from .kind_cluster import CLUSTER, gateway, kafka_on, kind_up
from .node_cluster import EXECUTORS, MASTER, RELEASE, Cluster, _run
from .node_util import handlers_image, restricted_namespace, wait

pytestmark = [
    pytest.mark.integration,
    pytest.mark.kind,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("podman"),
                       reason="kind here needs root and podman (docs/kind.md)"),
]


def test_kind_up_runs_the_real_path_and_kind_delete_leaves_nothing() -> None:
    started = time.monotonic()
    env = {**os.environ, **kind_env.build()}
    image, _ = handlers_image()
    archive = kind_env.docker_archive(image)  # `kind load image-archive` names it by its tag
    built = time.monotonic() - started
    with kind_up(env) as kubeconfig:
        up = time.monotonic() - started - built
        env = {**env, "KUBECONFIG": str(kubeconfig)}
        _run(env, "kind", "load", "image-archive", "--name", CLUSTER, str(archive))
        api = config.new_client_from_config(config_file=str(kubeconfig))
        core = client.CoreV1Api(api)
        # Step 1: the chart's operator, installed by kind-up.sh in `antidote`, Ready as a pod
        # under the chart's ServiceAccount, from the image loaded with `kind load image-archive`.
        (operator,) = core.list_namespaced_pod("antidote", label_selector="app.kubernetes.io/component=operator").items
        assert operator.spec.service_account_name == RELEASE, operator.spec.service_account_name
        assert [x.status for x in operator.status.conditions if x.type == "Ready"] == ["True"], operator.status
        assert operator.spec.containers[0].image.startswith("localhost/antidote/operator:")
        # kind-up.sh applied the examples (consumers paused).
        assert "queueconsumer" in _run(env, "kubectl", "get", "qc", "-A", "-o", "name")
        # The node has this machine's 2 CPUs, and kubeadm's control plane asks for 850m of
        # them (the API server 250m, the controller-manager 200m, the scheduler, etcd and
        # each of 2 CoreDNS pods 100m): with the operator's 100m, a driver's 1 and two
        # executors' 100m each, the second executor would stay Pending. CoreDNS's requests
        # are the only ones the API can change.
        _run(env, "kubectl", "-n", "kube-system", "set", "resources", "deployment/coredns",
             "--requests=cpu=10m")
        _run(env, "kubectl", "-n", "kube-system", "rollout", "status", "deployment/coredns",
             "--timeout=180s")
        with kafka_on(gateway()) as bootstrap:
            ns = restricted_namespace(core, "shop")
            # Cluster reads Kafka's address from its stack: here only a Kafka.
            kafka_only = SimpleNamespace(kafka_bootstrap=bootstrap)
            c = Cluster(stack=kafka_only, api=api, env=env, system="antidote", ns=ns,  # type: ignore[arg-type]
                        image=image)
            source = f"kind-{uuid.uuid4().hex[:6]}"
            sink = f"{source}-out"
            _topics(bootstrap, source, sink)
            produce(bootstrap, source, [(b"k%d" % i, b"poison" if i == 7 else b"m%d" % i, None)
                                        for i in range(20)])
            flow_started = time.monotonic()
            with c.consumer(
                    "orders", source, "antidote_test_handlers:upper",
                    {"retries": {"immediate": 0, "cycles": 0}}, sink={"kafka": {"topic": sink}}):
                executors = wait(f"{EXECUTORS} executor pods Running",
                                 lambda: c.running("orders", "executor", EXECUTORS), 400)
                (driver,) = wait("the driver pod Running", lambda: c.running("orders", "driver", 1), 60)
                assert MASTER in driver.spec.containers[0].args, driver.spec.containers[0].args
                for p in executors:
                    assert [o.name for o in p.metadata.owner_references] == [driver.metadata.name]
                    assert p.spec.containers[0].image == image
                outputs = wait("19 outputs in the sink",
                               lambda: (r := read_all(bootstrap, sink)) and len(r) >= 19 and r, 400)
                assert sorted(r.value for r in outputs) == sorted(b"M%d" % i for i in range(20) if i != 7)
                poison = wait("the poison record", lambda: read_all(bootstrap, f"{source}.poison",
                                                                    missing_ok=True), 120)
                assert [r.value for r in poison] == [b"poison"]
                headers = {k: v.decode() for k, v in poison[0].headers}
                assert headers["antidote.original.topic"] == source
                assert headers["antidote.consumer"] == f"{ns}/orders"
                flowed = time.monotonic() - flow_started
                # The operator pod scraped the driver's /metrics through its Service's DNS name.
                wait("status counts", lambda: c.counts("orders").get("processed") == 19
                     and c.counts("orders").get("poisoned") == 1, 180)
                c.no_pod_security_refusals()
        api.close()
    print(f"kind path: build {built:.0f}s, kind-up.sh {up:.0f}s, 20 messages through "
          f"{EXECUTORS} executors in {flowed:.0f}s from apply, whole test "
          f"{time.monotonic() - started:.0f}s")


def _topics(bootstrap: str, *names: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(n, 2, 1) for n in names]).values():
        fut.result(timeout=30)
