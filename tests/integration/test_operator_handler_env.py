"""The handler's environment through the dev runner (issue 44, item 1), on the local stack:
a QueueConsumer's spec.env (a Secret's key) and spec.envFrom (a ConfigMap, prefixed) reach the
handler of a REAL consumer (Spark, Kafka), which writes them into its sink records; a consumer
whose Secret does not exist is not started, and Ready says which variable and which Secret."""

from __future__ import annotations

import sys
import uuid

import pytest
from kubernetes import client

from antidote_testkit.kafka_io import produce, read_all
from antidote_testkit.operators import Cluster, consumer, install_crds, operator, policy, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def k(api_client: client.ApiClient, namespace: str) -> Cluster:
    install_crds(api_client)
    return Cluster(api_client, namespace)


def test_env_from_a_secret_and_a_config_map_reaches_the_handler(
        k: Cluster, stack, kubeconfig: str, kafka_bootstrap: str, topic_factory, tmp_path, calls_dir) -> None:
    secret_value, region = f"s3cr3t-{uuid.uuid4().hex[:8]}", f"eu-{uuid.uuid4().hex[:6]}"
    k.core.create_namespaced_secret(k.ns, {"metadata": {"name": "app-secret"},
                                           "stringData": {"password": secret_value}})
    k.core.create_namespaced_config_map(k.ns, {"metadata": {"name": "app-config"}, "data": {"region": region}})
    source, sink = topic_factory(), topic_factory("sink")
    produce(kafka_bootstrap, source, [(b"k%d" % i, b"order-%d" % i, None) for i in range(3)])
    k.create(policy("plain", {"retries": {"immediate": 0, "cycles": 0}}))
    k.create(consumer("envq", "plain", kafka_bootstrap, source, handler="tests.integration.handlers:with_env",
                      checkpoint={"location": str(tmp_path / "checkpoint")}, sink={"kafka": {"topic": sink}},
                      env=[{"name": "APP_SECRET", "valueFrom": {"secretKeyRef": {"name": "app-secret",
                                                                                 "key": "password"}}}],
                      envFrom=[{"prefix": "CFG_", "configMapRef": {"name": "app-config"}}]))
    # Its Secret does not exist: refused before any process starts, naming variable and Secret.
    k.create(consumer("envmissing", "plain", kafka_bootstrap, source, handler="tests.integration.handlers:with_env",
                      checkpoint={"location": str(tmp_path / "checkpoint-missing")},
                      env=[{"name": "APP_SECRET", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "password"}}}]))
    # Kept as written (a CRD without these fields, an older one, would prune them).
    assert k.qc("envq")["spec"]["envFrom"] and k.qc("envmissing")["spec"]["env"]
    env = {**stack.env(), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "ANTIDOTE_TEST_CALLS_DIR": str(calls_dir)}
    args = ("--dev-runner", "--dev-runner-dir", str(tmp_path / "dev-runner"), "--dev-runner-master", "local[1]")

    with operator(kubeconfig, k.ns, tmp_path, *args, env=env):
        c = k.wait_condition("envmissing", "Ready", "False", "SettingsRejected", timeout=120)
        assert f"env APP_SECRET: Secret {k.ns}/nope not found" in c["message"], c
        assert "CreateContainerConfigError" in c["message"]
        wait_for(lambda: "SettingsRejected" in k.event_reasons("envmissing"), "the SettingsRejected Event")

        records = wait_for(lambda: (r := read_all(kafka_bootstrap, sink, missing_ok=True)) and len(r) >= 3 and r,
                           "3 sink records", timeout=300, interval=2)
        assert sorted(r.value.rsplit(b"|", 1)[0] for r in records) == [
            b"order-%d|%s|%s" % (i, secret_value.encode(), region.encode()) for i in range(3)]
        k.wait_condition("envq", "Ready", "True", "Running", timeout=60)
