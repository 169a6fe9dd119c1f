"""The project's images on the stack's node: docker/consumer.Dockerfile built with buildah
(project_images, no Docker), a test image derived from it carrying tests/integration/handlers.py
the way docs/images.md tells users to ship handlers, run as a pod in a `restricted`
namespace: a real consumer (`--until-idle`, `--master local[1]`) against the stack's Kafka,
with only what the image brings (no ANTIDOTE_SPARK_JARS, no checkout, no venv). The chart's
operator image under its own RBAC is test_node_consumers.py's (its cluster installs it).

Marker `images` (deselected by `make test`: the cold image build takes minutes; see
docs/images.md); root only, one node per machine like test_node.py.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from antidote_devstack import node
from antidote_devstack import stack as devstack
from antidote_devstack.paths import cache_dir

from . import consumer_util as cu
from .kafka_io import produce, read_all
from .node_util import handlers_image, phase, pod, restricted_container, restricted_namespace, wait

pytestmark = [
    pytest.mark.integration,
    pytest.mark.node,
    pytest.mark.images,
    pytest.mark.skipif(os.geteuid() != 0, reason="the node and buildah need root (docs/node.md)"),
]

HERE = Path(__file__).resolve().parent


def _topics(bootstrap: str, *names: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        fut.result(timeout=30)


@pytest.fixture(scope="module")
def node_stack() -> Iterator[devstack.Stack]:
    """One node for the module's tests (a machine holds one node at a time)."""
    state_dir = cache_dir() / "test-images-stack"
    s = devstack.up(state_dir, node=True)
    try:
        yield s
    finally:
        devstack.down(state_dir)


@pytest.fixture
def api(node_stack: devstack.Stack) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=node_stack.kubeconfig)
    yield api
    api.close()


def test_consumer_image_runs_a_consumer_as_a_restricted_pod(node_stack, api) -> None:
    s = node_stack
    started = time.monotonic()
    image, archive = handlers_image()
    build_seconds = time.monotonic() - started
    node.load_image(Path(s.dir), image, archive)
    core = client.CoreV1Api(api)
    ns = restricted_namespace(core, "images")

    # Ten messages, one of them poison: no retries, so it is quarantined at once.
    bootstrap = s.kafka_bootstrap  # the bridge's gateway: the same for host and pods
    source = f"images-{uuid.uuid4().hex[:6]}"
    sink = f"{source}-out"
    _topics(bootstrap, source, sink)
    produce(bootstrap, source, [(b"k%d" % i, b"poison" if i == 4 else b"m%d" % i, None)
                                for i in range(10)])
    qc = {"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer",
          "metadata": {"name": "img", "namespace": ns},
          "spec": {"policyRef": {"name": "pp"},
                   "source": {"kafka": {"bootstrapServers": bootstrap, "topic": source}},
                   "handler": "antidote_test_handlers:upper",
                   "sink": {"kafka": {"topic": sink}},
                   "checkpoint": {"location": "/tmp/checkpoint"}}}
    pp = {"apiVersion": "antidote.dev/v1alpha1", "kind": "PoisonPolicy",
          "metadata": {"name": "pp", "namespace": ns},
          "spec": {"retries": {"immediate": 0, "cycles": 0}}}
    core.create_namespaced_config_map(ns, {
        "metadata": {"name": "manifests"},
        "data": {"qc.yaml": yaml.safe_dump(qc), "pp.yaml": yaml.safe_dump(pp)}})

    # The image's own entrypoint (tini, then spark-entrypoint.sh) runs the command.
    container = restricted_container("consumer", image)
    container["args"] = ["antidote", "consumer", "--consumer", "/manifests/qc.yaml",
                         "--policy", "/manifests/pp.yaml", "--until-idle",
                         "--master", "local[1]", "--trigger-interval", "0.5"]
    container["volumeMounts"] = [{"name": "manifests", "mountPath": "/manifests"}]
    spec = pod("consumer", container)
    spec["spec"]["volumes"] = [{"name": "manifests", "configMap": {"name": "manifests"}}]
    core.create_namespaced_pod(ns, spec)
    ran = time.monotonic()
    result = wait("consumer pod finished", phase(core, ns, "consumer", {"Succeeded", "Failed"}), 420)
    run_seconds = time.monotonic() - ran
    log = core.read_namespaced_pod_log("consumer", ns)
    assert result == "Succeeded", f"consumer pod {result}; log:\n{log[-4000:]}"

    # Its outcome, in Kafka: nine handled, the poison quarantined once with its headers.
    outputs = sorted(r.value for r in read_all(bootstrap, sink))
    assert outputs == sorted(b"M%d" % i for i in range(10) if i != 4), outputs
    poison = cu.quarantined(bootstrap, f"{source}.poison")
    assert list(poison) == [(0, 4)], poison
    record, headers = poison[(0, 4)]
    assert record.value == b"poison" and headers["antidote.attempts"] == "1", headers
    print(f"images: {build_seconds:.1f}s to build (or find) them; consumer pod ran {run_seconds:.1f}s")
