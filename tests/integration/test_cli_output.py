"""The CLI's conventions against the real stack (docs/cli.md): `-o yaml` is `-o json`'s
document on every data command that reads the cluster or Kafka, and a broker that does not
answer is one line on stderr (librdkafka's own lines only with -v), never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import NewTopic
from kubernetes import client

from antidote_api.names import settings_configmap
from antidote_api.times import parse_iso
from antidote_api.wire import RESUME_ANNOTATION, SETTINGS_KEY, cli_prefix
from antidote_devstack.procs import free_port

from antidote_testkit import consumers as consumer_util
from antidote_testkit.kafka_io import produce
from antidote_testkit.operators import ANTIDOTE, Cluster, consumer, install_crds, policy

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAME = "cli-out"  # this test's own consumer: no other test's transactions are fenced


def cli(*argv: str, kubeconfig: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"KUBECONFIG": kubeconfig} if kubeconfig else {})}
    return subprocess.run([ANTIDOTE, *argv], capture_output=True, text=True, timeout=timeout, env=env)


def both(*argv: str, kubeconfig: str | None = None) -> tuple[object, object]:
    """The command's document as JSON and as YAML."""
    docs = []
    for fmt in ("json", "yaml"):
        out = cli(*argv, "-o", fmt, kubeconfig=kubeconfig)
        assert out.returncode == 0, (fmt, out.stderr)
        assert "Traceback" not in out.stderr
        docs.append(json.loads(out.stdout) if fmt == "json" else yaml.safe_load(out.stdout))
    return docs[0], docs[1]


def _quarantined(source: str, offset: int) -> list[tuple[str, bytes]]:
    h = {"antidote.original.topic": source, "antidote.original.partition": "0",
         "antidote.original.offset": str(offset), "antidote.reason": "max-attempts",
         "antidote.error.class": "ValueError", "antidote.attempts": "3",
         "antidote.failure.first": "1795860000000", "antidote.failure.last": "1795860060000"}
    return [(k, v.encode()) for k, v in h.items()]


def test_yaml_is_the_json_document_on_every_command_that_reads_the_cluster(
        api_client: client.ApiClient, namespace: str, kubeconfig: str, kafka_bootstrap: str,
        kafka_admin, topic_factory, tmp_path: Path) -> None:
    install_crds(api_client)
    k = Cluster(api_client, namespace)
    # The poison topic first (its name is the source's plus .poison), then its source.
    poison = topic_factory(".poison")
    source = poison.removesuffix(".poison")
    for fut in kafka_admin.create_topics([NewTopic(source, 1, 1)]).values():
        fut.result(timeout=30)
    try:
        _documents(k, namespace, kubeconfig, kafka_bootstrap, source, poison, tmp_path)
    finally:
        for fut in kafka_admin.delete_topics([source]).values():
            fut.result(timeout=30)


def _documents(k: Cluster, namespace: str, kubeconfig: str, kafka_bootstrap: str, source: str,
               poison: str, tmp_path: Path) -> None:
    s = consumer_util.settings(kafka_bootstrap, source, tmp_path, name=NAME,
                               policy={"reader": {"action": "Hold"}})
    s = s.model_copy(update={"namespace": namespace})
    assert s.topics.poison == poison
    # Two quarantined records, as a consumer writes them (headers), on its poison topic.
    produce(kafka_bootstrap, s.topics.poison,
            [(b"k%d" % o, b"poison-%d" % o, _quarantined(source, o)) for o in (3, 7)])
    # The QueueConsumer and the settings ConfigMap the operator would write (no operator:
    # the commands only read them, and annotate).
    k.create(policy("p", {"reader": {"action": "Hold"}}))
    k.create(consumer(NAME, "p", kafka_bootstrap, source))
    doc = s.model_dump(mode="json", by_alias=True)
    k.core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=settings_configmap(NAME)), data={SETTINGS_KEY: yaml.safe_dump(doc)}))
    where = ("-n", namespace)

    as_json, as_yaml = both("inspect", NAME, *where, kubeconfig=kubeconfig)
    assert as_yaml == as_json and as_json["matched"] == 2
    assert [m["origin"] for m in as_json["messages"]] == [f"{source}/0/3", f"{source}/0/7"]
    as_json, as_yaml = both("inspect", NAME, *where, "--from", "dlq", kubeconfig=kubeconfig)
    assert as_yaml == as_json and (as_json["topic"], as_json["total"]) == (s.topics.dlq, 0)

    as_json, as_yaml = both("redrive", NAME, *where, "--dry-run", kubeconfig=kubeconfig)
    assert as_yaml == as_json and (as_json["dryRun"], as_json["redriven"]) == (True, 2)

    settings_file = tmp_path / "settings.json"
    settings_file.write_text(json.dumps(doc))
    as_json, as_yaml = both("reader", "--settings", str(settings_file), "--action", "Hold", "--dry-run")
    assert as_yaml == as_json and (as_json["action"], as_json["held"]) == ("Hold", 2)

    as_json, as_yaml = both("drain", NAME, *where, "--request-id", "r1", "--action", "Hold",
                            kubeconfig=kubeconfig)
    assert as_yaml == as_json and as_json["request"] == "r1"

    as_json, as_yaml = both("resume", NAME, *where, "--force", kubeconfig=kubeconfig)
    stamps = [d["annotation"].pop(RESUME_ANNOTATION) for d in (as_json, as_yaml)]
    assert as_yaml == as_json and as_json["was"] == "not paused (--force)"
    assert all(parse_iso(t) for t in stamps)  # the time of each run, the only difference


def test_a_broker_that_does_not_answer_is_one_line(tmp_path: Path) -> None:
    """`antidote redrive -f qc+pp.yaml --dry-run` with Kafka down: one line naming the broker,
    exit 1; --bootstrap-servers is honoured (the line names it); librdkafka's own retry lines
    (~600 of them before) only with -v."""
    closed, other = free_port(), free_port()
    qc = yaml.safe_load((EXAMPLES / "queueconsumer-minimal.yaml").read_text())
    qc["spec"]["source"]["kafka"]["bootstrapServers"] = f"127.0.0.1:{closed}"
    manifest = tmp_path / "qc+pp.yaml"  # a two-document manifest
    manifest.write_text(yaml.safe_dump(qc) + "---\n" + (EXAMPLES / "poisonpolicy-minimal.yaml").read_text())

    out = cli("redrive", "-f", str(manifest), "--dry-run")
    assert (out.returncode, out.stdout) == (1, ""), out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"{cli_prefix('redrive')}cannot reach Kafka at 127.0.0.1:{closed} (no answer in 15s): ")
    assert "Connection refused" in line and line.endswith("; nothing was changed")

    out = cli("redrive", "-f", str(manifest), "--dry-run", "--bootstrap-servers", f"127.0.0.1:{other}", "-v")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.splitlines()
    # librdkafka logs from its own threads, which may still write after the CLI's line (CI
    # once saw an empty line last): the CLI's line is found among them, once.
    ours = [l for l in lines if l.startswith(f"{cli_prefix('redrive')}cannot reach Kafka at 127.0.0.1:{other} ")]
    assert len(ours) == 1, out.stderr
    assert any(f"127.0.0.1:{other}/bootstrap" in l and "FAIL" in l for l in lines if l not in ours)  # librdkafka's own
    assert not any(str(closed) in l for l in lines)
