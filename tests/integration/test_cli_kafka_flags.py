"""The Kafka flags of the on-call commands against the real stack (docs/cli.md): `antidote
inspect` with a broker that does not answer is one line on stderr (librdkafka's own lines
only with -v), never a traceback; `--kafka-property` is honoured for a consumer in the
cluster (`redrive CONSUMER`). A property librdkafka refuses: tests/unit/test_cli_kafka_flags.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from antidote_api.names import settings_configmap
from antidote_api.wire import SETTINGS_KEY, cli_prefix
from antidote_devstack.procs import free_port

from antidote_testkit import consumers as consumer_util
from antidote_testkit.operators import ANTIDOTE, Cluster, consumer, install_crds, policy

pytestmark = pytest.mark.integration

NAME = "cli-kafka-flags"  # this test's own consumer


def cli(*argv: str, kubeconfig: str) -> subprocess.CompletedProcess:
    return subprocess.run([ANTIDOTE, *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KUBECONFIG": kubeconfig})


@pytest.fixture
def in_cluster(api_client: client.ApiClient, namespace: str, kafka_bootstrap: str, tmp_path: Path) -> str:
    """A QueueConsumer and the settings ConfigMap the operator would write for it (the
    commands only read them), its brokers the stack's Kafka."""
    install_crds(api_client)
    k = Cluster(api_client, namespace)
    source = f"{NAME}-{namespace}"
    s = consumer_util.settings(kafka_bootstrap, source, tmp_path, name=NAME)
    s = s.model_copy(update={"namespace": namespace})
    k.create(policy("p"))
    k.create(consumer(NAME, "p", kafka_bootstrap, source))
    k.core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=settings_configmap(NAME)),
        data={SETTINGS_KEY: yaml.safe_dump(s.model_dump(mode="json", by_alias=True))}))
    return namespace


def test_inspect_with_a_broker_that_does_not_answer_is_one_line(in_cluster: str, kubeconfig: str) -> None:
    closed = free_port()
    where = ("inspect", NAME, "-n", in_cluster, "--bootstrap-servers", f"127.0.0.1:{closed}")
    out = cli(*where, kubeconfig=kubeconfig)
    assert (out.returncode, out.stdout) == (1, ""), out.stderr
    (line,) = out.stderr.splitlines()  # ~190 librdkafka lines before
    assert line.startswith(f"{cli_prefix('inspect')}cannot reach Kafka at 127.0.0.1:{closed} (no answer in 15s): ")
    assert "Connection refused" in line and "pass --bootstrap-servers" in line, line

    out = cli(*where, "-v", kubeconfig=kubeconfig)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.splitlines()
    assert lines[-1] == line
    assert any(f"127.0.0.1:{closed}/bootstrap" in l and "FAIL" in l for l in lines[:-1])  # librdkafka's own


def test_kafka_property_is_honoured_for_a_consumer_in_the_cluster(in_cluster: str, kubeconfig: str) -> None:
    """The stack's broker speaks PLAINTEXT: without the property the redrive runs (nothing
    quarantined yet), with security.protocol=SSL it cannot connect, as that client would."""
    out = cli("redrive", NAME, "-n", in_cluster, "--dry-run", "-o", "json", kubeconfig=kubeconfig)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["dryRun"] is True

    out = cli("redrive", NAME, "-n", in_cluster, "--dry-run", "--kafka-property", "security.protocol=SSL",
              kubeconfig=kubeconfig)
    assert (out.returncode, out.stdout) == (1, ""), out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"{cli_prefix('redrive')}cannot reach Kafka at ") and "SSL" in line, line


def test_rebase_with_a_broker_that_does_not_answer_is_one_line(tmp_path: Path) -> None:
    """A local consumer's settings (no cluster): as skip's (test_consumer_limits.py)."""
    closed = free_port()
    s = consumer_util.settings(f"127.0.0.1:{closed}", "t", tmp_path, name=NAME)
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(s.model_dump(mode="json", by_alias=True)))
    out = subprocess.run([ANTIDOTE, "rebase", NAME, "--topic", "t", "--settings", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout) == (1, ""), out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"{cli_prefix('rebase')}cannot reach Kafka at 127.0.0.1:{closed} (no answer in 15s): ")
    assert line.endswith("; nothing was changed"), line
