"""`antidote inspect --decode` against the real API server, Kafka and the stack's Schema
Registry: quarantined Avro records shown decoded (or why they do not decode) beside their
reason, and a registry that cannot be asked from here is one line naming it."""

from __future__ import annotations

import json
import socket
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kubernetes import client

from antidote_api.consumer import QueueConsumerSpec
from antidote_api.formats import DESERIALIZATION_ERROR, SERIALIZATION_ERROR
from antidote_api.names import settings_configmap
from antidote_api.policy import PoisonPolicySpec
from antidote_api.semantics import resolve
from antidote_api.wire import SETTINGS_KEY
from antidote_consumer.kafka import headers as h
from antidote_devstack import schema_registry as registry
from antidote_operator.builders.driver import settings_document
from antidote_testkit.kafka_io import produce
from antidote_testkit.operators import Cluster, consumer, install_crds, policy

from .schema_registry_util import subject
from .test_consumer_formats import ORDER, avro, framed
from .test_oncall_cli import cli

pytestmark = pytest.mark.integration


def poisoned(source: str, offset: int, value: bytes, reason: str, error_class: str) -> tuple:
    now = int(time.time() * 1000)
    return (b"k%d" % offset, value, h.failure_headers(
        origin=h.Origin(source, 0, offset, now), attempts=0, cycle=0, first_failure=now, last_failure=now,
        reason=reason, error_class=error_class, error_message="x", stack="", consumer="c", policy="p",
        disposition="Move"))


def test_inspect_decode_shows_quarantined_avro_records_decoded_beside_the_reason(
        api_client: client.ApiClient, namespace: str, kubeconfig: str, kafka_bootstrap: str,
        topic_factory, schema_registry: str) -> None:
    install_crds(api_client)
    k = Cluster(api_client, namespace)
    source = topic_factory("-avro")
    schema_id = registry.register(schema_registry, subject("inspect-decode"), json.dumps(ORDER))
    good = avro(schema_id, {"id": "o-7", "qty": -1})  # decodes; the handler refused it
    unknown = framed(schema_id + 1000, b"\x02a\x02")
    spec = {"source": {"kafka": {"bootstrapServers": kafka_bootstrap, "topic": source, "valueFormat": "Avro",
                                 "schemaRegistry": {"url": "http://registry.in-cluster.invalid:8080"}}}}
    name = f"dec-{uuid.uuid4().hex[:6]}"
    k.create(policy("p"))
    qc = consumer(name, "p", kafka_bootstrap, source, paused=True, **spec)
    k.create(qc)
    # The settings ConfigMap, as the operator renders it for this QueueConsumer.
    s = resolve(QueueConsumerSpec.model_validate(qc["spec"]), PoisonPolicySpec(), name=name, namespace=namespace)
    k.core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=settings_configmap(name)), data={SETTINGS_KEY: settings_document(s)}))
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for fut in admin.create_topics([NewTopic(s.topics.poison, 1, 1)]).values():
        fut.result(30)
    produce(kafka_bootstrap, s.topics.poison, [
        poisoned(source, 3, unknown, "validation", DESERIALIZATION_ERROR),
        poisoned(source, 7, good, "non-retryable", SERIALIZATION_ERROR)])

    # The consumer's URL is the cluster's: from here, --schema-registry.
    out = cli("inspect", name, "-n", namespace, "--decode", "--schema-registry", schema_registry, "-o", "json",
              kubeconfig=kubeconfig)
    assert out.returncode == 0, out.stderr
    msgs = json.loads(out.stdout)["messages"]
    assert [(m["origin"], m["reason"]) for m in msgs] == [(f"{source}/0/3", "validation"),
                                                         (f"{source}/0/7", "non-retryable")]
    assert msgs[0]["decoded"] == {"error": f"value (schema id {schema_id + 1000}): unknown schema id "
                                           f"{schema_id + 1000}: the registry has no schema with that id"}
    assert msgs[1]["decoded"] == {"value": {"id": "o-7", "qty": -1}}

    out = cli("inspect", name, "-n", namespace, "--decode", "--schema-registry", schema_registry,
              kubeconfig=kubeconfig)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("0/7 "))
    assert lines[at + 1] == '    decoded value {"id":"o-7","qty":-1}'
    assert lines[at - 1].startswith(f"    undecodable: value (schema id {schema_id + 1000}): unknown schema id")
    assert all(len(line) <= 100 for line in lines)

    # Without --schema-registry the consumer's in-cluster URL does not resolve from here.
    out = cli("inspect", name, "-n", namespace, "--decode", kubeconfig=kubeconfig)
    assert out.returncode == 1 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("antidote inspect: --decode: cannot ask the schema registry: schema registry "
                           "http://registry.in-cluster.invalid:8080"), line
    assert "pass --schema-registry URL" in line
    with socket.socket() as sock:  # nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = cli("inspect", name, "-n", namespace, "--decode", "--schema-registry", f"http://127.0.0.1:{port}",
              kubeconfig=kubeconfig)
    assert out.returncode == 1 and f"127.0.0.1:{port}" in out.stderr and len(out.stderr.splitlines()) == 1
