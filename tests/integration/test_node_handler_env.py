"""The handler's environment, placement and identity on the node (issue 44, items 1 and 2;
its first "Done when"): a QueueConsumer with env from a Secret and envFrom a ConfigMap,
`imagePullSecrets` and a `nodeSelector` (and executor tolerations of their own) runs under the
chart's operator and admission policy; the handler in the EXECUTOR pods reads the Secret's
value and writes it to the sink, with the name of the pod it ran in; the driver and executor
pods are admitted under the `restricted` Pod Security Standard.

Markers `node` and `images` (`make test-node`); root only, one node per machine. How node
tests work: test_node_consumers.py."""

from __future__ import annotations

import base64
import json
import uuid


from antidote_testkit.kafka_io import produce, read_all
from .node_cluster import EXECUTORS, NODE_IMAGES, SPARK, Cluster
from .node_util import wait

pytestmark = NODE_IMAGES


def test_env_from_a_secret_reaches_the_handler_in_the_executor_pods(cluster: Cluster) -> None:
    c = cluster
    secret_value, region = f"s3cr3t-{uuid.uuid4().hex[:8]}", f"eu-{uuid.uuid4().hex[:6]}"
    c.core.create_namespaced_secret(c.ns, {"metadata": {"name": "app-secret"},
                                           "stringData": {"password": secret_value}})
    c.core.create_namespaced_config_map(c.ns, {"metadata": {"name": "app-config"}, "data": {"region": region}})
    # A pull secret the kubelet is given (the images are on the node already: it is not needed
    # to pull them, but it must be accepted all the way to the pods).
    auths = json.dumps({"auths": {"registry.example": {"auth": base64.b64encode(b"u:p").decode()}}})
    c.core.create_namespaced_secret(c.ns, {"metadata": {"name": "registry"}, "type": "kubernetes.io/dockerconfigjson",
                                           "stringData": {".dockerconfigjson": auths}})
    (node,) = c.core.list_node().items
    host = node.metadata.labels["kubernetes.io/hostname"]
    source = f"env-{uuid.uuid4().hex[:6]}"
    sink = f"{source}-out"
    c.topics(source, sink, partitions=2)
    n = 20
    produce(c.bootstrap, source, [(b"k%d" % i, b"m%d" % i, None) for i in range(n)])
    spark = {"imagePullSecrets": [{"name": "registry"}], "nodeSelector": {"kubernetes.io/hostname": host},
             "executor": {**SPARK["executor"],
                          "tolerations": [{"key": "antidote.dev/spot", "operator": "Exists",
                                           "effect": "NoSchedule"}]}}
    env = [{"name": "APP_SECRET", "valueFrom": {"secretKeyRef": {"name": "app-secret", "key": "password"}}}]
    env_from = [{"prefix": "CFG_", "configMapRef": {"name": "app-config"}}]
    with c.consumer("envq", source, "antidote_test_handlers:with_env", {"retries": {"immediate": 0, "cycles": 0}},
                    sink={"kafka": {"topic": sink}}, spark=spark, env=env, envFrom=env_from):
        executors = wait(f"{EXECUTORS} executor pods Running", lambda: c.running("envq", "executor", EXECUTORS), 300)
        (driver,) = wait("the driver pod Running", lambda: c.running("envq", "driver", 1), 60)
        for p in (driver, *executors):
            assert p.spec.node_selector == {"kubernetes.io/hostname": host}, p.spec.node_selector
            assert [s.name for s in p.spec.image_pull_secrets] == ["registry"]
            ctr = p.spec.containers[0]
            (secret_env,) = [e for e in ctr.env if e.name == "APP_SECRET"]
            assert secret_env.value_from.secret_key_ref.name == "app-secret"
            assert [e.prefix for e in ctr.env_from] == ["CFG_"]
        for p in executors:
            assert [t.key for t in p.spec.tolerations if t.key.startswith("antidote.dev/")] == ["antidote.dev/spot"]
            assert p.spec.automount_service_account_token is False  # no API token, env or not
        assert not [t for t in driver.spec.tolerations or [] if (t.key or "").startswith("antidote.dev/")]

        outputs = wait(f"{n} outputs in the sink", lambda: (r := read_all(c.bootstrap, sink)) and len(r) >= n and r, 300)
        rows = [r.value.split(b"|") for r in outputs]
        assert sorted(row[0] for row in rows) == sorted(b"m%d" % i for i in range(n))
        # The Secret's value and the ConfigMap's, in the process that ran the handler...
        assert {(row[1], row[2]) for row in rows} == {(secret_value.encode(), region.encode())}, rows[:3]
        # ...and that process was in an executor pod (its hostname is the pod's name).
        ran_in = {row[3].decode() for row in rows}
        assert ran_in <= {p.metadata.name for p in executors}, (ran_in, [p.metadata.name for p in executors])
        c.no_pod_security_refusals()
    print(f"node: {n} messages with the Secret's value from executor pods {sorted(ran_in)}")


def test_a_missing_secret_key_is_reported_in_ready_then_the_driver_starts_once_it_exists(cluster: Cluster) -> None:
    """The kubelet does not create a container whose env names a key its Secret lacks
    (CreateContainerConfigError): Ready says so, naming the Secret and the key, with a Warning
    Event; once the key exists the kubelet starts the driver, with nothing else done."""
    c = cluster
    c.core.create_namespaced_secret(c.ns, {"metadata": {"name": "half-secret"}, "stringData": {"user": "app"}})
    source = f"miss-{uuid.uuid4().hex[:6]}"
    c.topics(source)
    env = [{"name": "APP_SECRET", "valueFrom": {"secretKeyRef": {"name": "half-secret", "key": "password"}}}]
    with c.consumer("envmiss", source, "antidote_test_handlers:with_env", {"retries": {"immediate": 0, "cycles": 0}},
                    env=env):
        wait("Ready=False CreateContainerConfigError",
             lambda: c.condition("envmiss", "Ready") == ("False", "CreateContainerConfigError"), 180)
        (ready,) = [x for x in c.qc("envmiss")["status"]["conditions"] if x["type"] == "Ready"]
        assert "password" in ready["message"] and "half-secret" in ready["message"], ready
        assert [e.type for e in c.events("envmiss") if e.reason == "CreateContainerConfigError"] == ["Warning"]
        c.core.patch_namespaced_secret("half-secret", c.ns, {"stringData": {"password": "now-here"}})
        wait("the driver pod Running once the key exists", lambda: c.running("envmiss", "driver", 1), 180)
        print(f"node: missing key reported as {ready['reason']}: {ready['message']}")
