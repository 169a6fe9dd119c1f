"""The stack's node with the chart installed, for the real-path tests (test_node_consumers.py):
the operator runs as a pod, consumers are applied with kubectl into a restricted namespace,
and their driver and executor pods are read through the API server."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from antidote_devstack import node, project_images
from antidote_devstack import stack as devstack
from antidote_devstack.paths import cache_dir

from .jvm_archive import C1_ONLY
from .node_util import handlers_image, restricted_namespace, wait

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts/antidote"
VALUES = ROOT / "hack/local-images.values.yaml"
RELEASE = "antidote"
MASTER = "k8s://https://kubernetes.default.svc"
EXECUTORS = 2
# The marks of a module whose tests run on the node with the project's images, and take the
# `cluster` fixture (conftest.py): `pytestmark = NODE_IMAGES`.
NODE_IMAGES = [
    pytest.mark.integration,
    pytest.mark.node,
    pytest.mark.images,
    pytest.mark.skipif(os.geteuid() != 0, reason="the node and buildah need root (docs/node.md)"),
]
# Each executor asks for a tenth of a CPU (Spark's default is spark.executor.cores, a whole
# one): the node has two, the driver takes one and the operator a tenth. The JVMs run C1
# only, as the tests' JVMs on the host do (jvm_archive.py; docs/testing.md); Spark passes
# the driver's options to its JVM's launch, the executors' to their pods (SPARK_JAVA_OPT_<n>).
SPARK = {"driver": {"memory": "512m"},
         "executor": {"instances": EXECUTORS, "memory": "512m"},
         "conf": {"spark.kubernetes.executor.request.cores": "100m",
                  "spark.driver.extraJavaOptions": C1_ONLY,
                  "spark.executor.extraJavaOptions": C1_ONLY}}


def _run(env: dict[str, str], *cmd: str, stdin: str | None = None, timeout: float = 600) -> str:
    out = subprocess.run(list(cmd), capture_output=True, text=True, env=env, input=stdin,
                         timeout=timeout)
    assert out.returncode == 0, f"{' '.join(cmd)}: exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout


@dataclass
class Cluster:
    """The node with the chart installed, and one restricted namespace for consumers."""

    stack: devstack.Stack
    api: client.ApiClient
    env: dict[str, str]
    system: str
    ns: str
    image: str  # the test handlers' image

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def bootstrap(self) -> str:
        return self.stack.kafka_bootstrap  # the bridge's gateway: the same for host and pods

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return _run(self.env, "kubectl", *args, stdin=stdin)

    def antidote(self, *args: str) -> str:
        return _run(self.env, str(ROOT / ".venv/bin/antidote"), *args)

    def qc(self, name: str) -> dict[str, Any]:
        return client.CustomObjectsApi(self.api).get_namespaced_custom_object(
            "antidote.dev", "v1alpha1", self.ns, "queueconsumers", name)

    def condition(self, name: str, type_: str) -> tuple[str, str] | None:
        for c in self.qc(name).get("status", {}).get("conditions", []):
            if c["type"] == type_:
                return c["status"], c["reason"]
        return None

    def counts(self, name: str) -> dict[str, int]:
        return self.qc(name).get("status", {}).get("counts", {})

    def executor_pods(self, consumer: str) -> list[client.V1Pod]:
        """The consumer's live executor pods, found by Spark's own label (`spark-role`), not
        by the pod template's: what Spark created for the consumer's driver."""
        return [p for p in self.core.list_namespaced_pod(
                    self.ns, label_selector=f"spark-role=executor,antidote.dev/consumer={consumer}").items
                if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]

    def pods(self, consumer: str, component: str) -> list[client.V1Pod]:
        return self.core.list_namespaced_pod(
            self.ns, label_selector=f"antidote.dev/consumer={consumer},"
                                    f"app.kubernetes.io/component={component}").items

    def running(self, consumer: str, component: str, n: int) -> list[client.V1Pod] | None:
        pods = [p for p in self.pods(consumer, component)
                if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
        return pods if len(pods) == n else None

    def replicas(self, name: str) -> int:
        return client.AppsV1Api(self.api).read_namespaced_deployment(name, self.ns).spec.replicas

    def events(self, name: str) -> list[Any]:
        return self.core.list_namespaced_event(
            self.ns, field_selector=f"involvedObject.name={name},involvedObject.kind=QueueConsumer").items

    def topics(self, *names: str, partitions: int = 1) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for fut in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
            fut.result(timeout=30)

    @contextmanager
    def consumer(self, name: str, source: str, handler: str, policy: dict[str, Any],
                 max_batch: int | None = None, spark: dict[str, Any] | None = None,
                 **spec: Any) -> Iterator[None]:
        """A PoisonPolicy and a QueueConsumer applied with kubectl; deleted on the way out,
        and waited for until none of its pods is left."""
        manifests = [
            {"apiVersion": "antidote.dev/v1alpha1", "kind": "PoisonPolicy",
             "metadata": {"name": name, "namespace": self.ns}, "spec": policy},
            {"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer",
             "metadata": {"name": name, "namespace": self.ns},
             "spec": {"policyRef": {"name": name}, "handler": handler,
                      "source": {"kafka": {"bootstrapServers": self.bootstrap, "topic": source,
                                           **({"maxMessagesPerBatch": max_batch} if max_batch else {})}},
                      # The driver pod's /tmp: a new driver pod starts without it.
                      "checkpoint": {"location": "/tmp/checkpoint"},
                      "spark": {**SPARK, "image": self.image, **(spark or {})}, **spec}},
        ]
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifests))
        try:
            yield
        finally:
            self.kubectl("delete", "qc,ppol", name, "-n", self.ns, "--wait", "--timeout=300s")
            wait(f"{name}'s pods gone", lambda: not self.core.list_namespaced_pod(
                self.ns, label_selector=f"antidote.dev/consumer={name}").items, 300)

    def no_pod_security_refusals(self) -> None:
        """Every pod Antidote asked for was admitted under `restricted` (a refused executor or
        Job pod shows only as a Warning Event of its creator)."""
        refused = [f"{e.involved_object.kind}/{e.involved_object.name}: {e.message}"
                   for e in self.core.list_namespaced_event(self.ns).items
                   if "PodSecurity" in (e.message or "") or "violates" in (e.message or "")]
        assert not refused, refused


@contextmanager
def started() -> Iterator[Cluster]:
    """The node, the operator and test images loaded into it, the chart installed; all
    stopped on the way out."""
    state_dir = cache_dir() / "test-images-stack"
    s = devstack.up(state_dir, node=True)
    api = config.new_client_from_config(config_file=s.kubeconfig)
    env = {**os.environ, **s.env()}
    try:
        operator, operator_archive = project_images.operator_image()
        image, image_archive = handlers_image()
        node.load_image(Path(s.dir), operator, operator_archive)
        node.load_image(Path(s.dir), image, image_archive)
        core = client.CoreV1Api(api)
        system = restricted_namespace(core, "antidote-system")
        ns = restricted_namespace(core, "shop")
        # The values kind-up.sh uses; the images carry the chart's appVersion as their tag.
        values = yaml.safe_load(VALUES.read_text())["image"]
        assert operator == f"{values['registry']}/{values['repository']}:" \
                           f"{yaml.safe_load((CHART / 'Chart.yaml').read_text())['appVersion']}"
        _run(env, "helm", "install", RELEASE, str(CHART), "-n", system, "-f", str(VALUES),
             "--wait", "--timeout", "180s")
        yield Cluster(s, api, env, system, ns, image)
    finally:
        api.close()
        devstack.down(state_dir)


