"""Kafka credentials from a secretRef reach every Kafka client: the consumer (Spark's source,
the ledger, the retry reader, the topics admin, the executors' sink producer), the reader,
and the dev runner's consumer. Against the broker's SASL_PLAINTEXT listener (PLAIN), where
a client without credentials gets nothing; results are read through the PLAINTEXT listener."""

from __future__ import annotations

import base64
import stat
import sys
from pathlib import Path

import pytest

from antidote_api.consumer import QueueConsumerSpec
from antidote_api.policy import PoisonPolicySpec
from antidote_api.semantics import EffectiveSettings, resolve
from antidote_consumer.kafka.auth import KafkaAuthError
from antidote_consumer.reader.run import run_reader
from antidote_consumer.reader.rules import ReaderOptions
from antidote_api.wire import ExitCode
from antidote_devstack.kafka import SASL_PASSWORD, SASL_USER

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all
from antidote_testkit.operators import Cluster, consumer, install_crds, operator, policy, wait_for

pytestmark = pytest.mark.integration

POLICY = {"retries": {"immediate": 1, "cycles": 1, "cycleDelay": "1s"}, "reader": {"action": "Redrive"}}


def jaas(username: str, password: str) -> str:
    return ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{username}" password="{password}";')


def secret_data(password: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": jaas(SASL_USER, password)}


def write_secret(root: Path, name: str, data: dict[str, str]) -> None:
    """As the kubelet mounts a Secret: one file per key (with a newline, as --from-file)."""
    (root / name).mkdir(parents=True)
    for key, value in data.items():
        (root / name / key).write_text(value + "\n")


@pytest.fixture
def sasl(stack) -> str:
    if not stack.kafka_sasl_bootstrap:
        pytest.fail(f"the stack in {stack.dir} has no SASL_PLAINTEXT listener (started before it "
                    "existed): restart it with `antidote dev down; antidote dev up`")
    return stack.kafka_sasl_bootstrap


@pytest.fixture
def secrets(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "secrets"
    write_secret(root, "kafka-creds", secret_data(SASL_PASSWORD))
    write_secret(root, "kafka-wrong", secret_data("not-the-password"))
    monkeypatch.setenv("ANTIDOTE_SECRETS_DIR", str(root))
    return root


def settings(bootstrap: str, topic: str, sink: str, tmp_path: Path, secret: str) -> EffectiveSettings:
    qc = QueueConsumerSpec.model_validate({
        "policyRef": {"name": "p"},
        "source": {"kafka": {"bootstrapServers": bootstrap, "topic": topic, "maxMessagesPerBatch": 100,
                             "secretRef": {"name": secret}}},
        "handler": "tests.integration.handlers:upper",
        "sink": {"kafka": {"topic": sink}},  # the source's brokers, so the source's Secret
        "checkpoint": {"location": str(tmp_path / f"ckpt-{secret}")},
    })
    return resolve(qc, PoisonPolicySpec.model_validate(POLICY), name="c", namespace="tests")


def test_consumer_and_reader_on_a_sasl_listener(spark, sasl, kafka_bootstrap, topic_factory, tmp_path,
                                                secrets) -> None:
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    values = [b"poison-%d" % i if i % 40 == 7 else b"msg-%d" % i for i in range(200)]
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, None) for i, v in enumerate(values)])
    s = settings(sasl, source, sink, tmp_path, "kafka-creds")

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    out = read_all(kafka_bootstrap, sink)
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert sorted(r.value for r in out) == sorted(v.upper() for v in values if b"poison" not in v)
    assert len(poison) == 5 and all(rec.value.startswith(b"poison-") for rec, _ in poison.values())
    assert len(read_all(kafka_bootstrap, s.topics.retry[0])) == 5  # the retry reader read them back
    assert cu.metric(m, "antidote_messages_total", outcome="processed") == 195
    assert cu.metric(m, "antidote_messages_total", outcome="moved") == 5

    # The reader over SASL too: the poison messages go back to the source topic.
    report = run_reader(s, ReaderOptions())
    assert (report.messages, report.redriven, report.faultAt) == (5, 5, None)
    assert len(read_all(kafka_bootstrap, source)) == 205


def test_wrong_password_fails_at_start_naming_the_secret(spark, sasl, topic_factory, tmp_path,
                                                         secrets, monkeypatch) -> None:
    from antidote_consumer.driver.metrics import Metrics
    from antidote_consumer.driver.consumer import Consumer

    s = settings(sasl, topic_factory(), topic_factory("-out"), tmp_path, "kafka-wrong")
    with pytest.raises(KafkaAuthError) as err:
        Consumer(s, spark, Metrics(s.namespace, s.consumer))
    assert "'kafka-wrong'" in str(err.value) and "Authentication failed" in str(err.value)
    assert "not-the-password" not in str(err.value)
    with pytest.raises(KafkaAuthError, match="'kafka-wrong'"):
        run_reader(s, ReaderOptions())
    # No secret where it should be mounted: the error says where it looked.
    monkeypatch.setenv("ANTIDOTE_SECRETS_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(KafkaAuthError, match=r"'kafka-creds': .*nowhere/kafka-creds does not exist"):
        Consumer(settings(sasl, s.source.topic, "x", tmp_path, "kafka-creds"), spark,
                 Metrics(s.namespace, s.consumer))


def test_dev_runner_materializes_the_secret_for_its_consumer(
        api_client, namespace, stack, sasl, kubeconfig, kafka_bootstrap, topic_factory, tmp_path,
        calls_dir) -> None:
    """The operator's Deployment mounts the Secret; the dev runner (no kubelet) writes it to a
    private directory for the local consumer, which then consumes over SASL."""
    install_crds(api_client)
    k = Cluster(api_client, namespace)
    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(None, b"poison" if i == 3 else b"m%d" % i, None) for i in range(20)])
    k.core.create_namespaced_secret(namespace, {
        "metadata": {"name": "kafka-creds"}, "type": "Opaque",
        "data": {k_: base64.b64encode(v.encode()).decode() for k_, v in secret_data(SASL_PASSWORD).items()}})
    k.create(policy("p", {"retries": {"immediate": 0, "cycles": 0}}))
    k.create(consumer("orders", "p", sasl, source, checkpoint={"location": str(tmp_path / "ckpt")},
                      sink={"kafka": {"topic": sink}},
                      source={"kafka": {"bootstrapServers": sasl, "topic": source,
                                        "secretRef": {"name": "kafka-creds"}}}))
    base = tmp_path / "dev-runner"
    env = {**stack.env(), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "ANTIDOTE_TEST_CALLS_DIR": str(calls_dir)}
    args = ("--dev-runner", "--dev-runner-dir", str(base), "--dev-runner-master", "local[1]")
    with operator(kubeconfig, namespace, tmp_path, *args, env=env) as op:
        counts = wait_for(lambda: ((k.qc("orders") or {}).get("status") or {}).get("counts", {}).get("moved") == 1
                          and k.qc("orders")["status"]["counts"], "1 moved", timeout=240)
        assert counts["processed"] == 19, op.log()[-3000:]
        (mounted,) = base.glob(f"{namespace}/orders/secrets-*")
        assert stat.S_IMODE(mounted.stat().st_mode) == 0o700
        files = sorted((mounted / "kafka-creds").iterdir())
        assert [f.name for f in files] == sorted(secret_data(SASL_PASSWORD))
        assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
        assert (mounted / "kafka-creds" / "sasl.jaas.config").read_text() == jaas(SASL_USER, SASL_PASSWORD)
        assert len(read_all(kafka_bootstrap, sink)) == 19
        # Paused: the process stops and its secrets go with it, as a pod's.
        k.patch("queueconsumers", "orders", {"spec": {"paused": True}})
        wait_for(lambda: not mounted.exists(), "the materialized secret removed", timeout=120)
