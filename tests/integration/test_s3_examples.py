"""The `s3a://` QueueConsumer examples of examples/ run for real: queueconsumer-files.yaml
(its Parquet sink and its checkpoint on `s3a://`) and queueconsumer-minimal.yaml (its
checkpoint there, outputs discarded), with the PoisonPolicy they name
(poisonpolicy-minimal.yaml), applied to the API server and run by the operator's dev runner
against the local S3 server; and the handler project template's manifest
(handler-project/deploy/orders.yaml: its PoisonPolicy and QueueConsumer) with the template's
own handler, its checkpoint on `s3a://` too; and queueconsumer-full.yaml under
poisonpolicy-full.yaml, every field of each; and queueconsumer-avro.yaml through the local
Schema Registry.
Only what cannot be the same here is changed: the broker's address and the topic, the handler
(a test handler instead of the team's `lake.clicks:to_row`), `paused`, the S3 server's
endpoint in `spec.spark.conf`, and a folder of the test's own in each bucket."""

from __future__ import annotations

import base64
import json
import os
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
import yaml

from antidote_api.formats import sink_subject
from antidote_api.headers import ERROR_CLASS, REASON
from antidote_devstack import s3 as s3server
from antidote_devstack import schema_registry as registry

from antidote_testkit.kafka_io import produce, read_all
from antidote_testkit.operators import Cluster, install_crds, operator, wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _doc(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def _in_folder(url: str, folder: str) -> str:
    """s3a://bucket/key -> s3a://bucket/folder/key (the bucket stays the example's)."""
    bucket, key = url.removeprefix("s3a://").split("/", 1)
    return f"s3a://{bucket}/{folder}/{key}"


@pytest.mark.parametrize("example", ["queueconsumer-files.yaml", "queueconsumer-minimal.yaml"])
def test_an_s3a_example_writes_its_checkpoint_and_sink_to_s3_on_the_dev_runner(
        api_client, namespace, stack, s3, kubeconfig, kafka_bootstrap, topic_factory, tmp_path,
        calls_dir, example) -> None:
    install_crds(api_client)
    k = Cluster(api_client, namespace)
    qc = _doc(example)
    spec = qc["spec"]
    urls = [spec["checkpoint"]["location"]] + ([spec["sink"]["path"]] if "sink" in spec else [])
    assert all(url.startswith("s3a://") for url in urls)
    folder = f"t-{uuid.uuid4().hex[:8]}"
    for url in urls:
        try:  # the example's buckets, on the local server (made once per server)
            s3server.make_bucket(s3.server, url.removeprefix("s3a://").split("/", 1)[0])
        except OSError as err:
            assert "already" in str(err).lower(), err
    source = topic_factory()
    spec["paused"] = False  # files: paused until its sink is ready
    spec["source"]["kafka"].update(bootstrapServers=kafka_bootstrap, topic=source)
    spec["handler"] = "tests.integration.handlers:upper"
    if "sink" in spec:
        spec["sink"]["path"] = _in_folder(spec["sink"]["path"], folder)
    spec["checkpoint"]["location"] = _in_folder(spec["checkpoint"]["location"], folder)
    spec.setdefault("spark", {}).setdefault("conf", {}).update(s3.spark_conf())
    pp = _doc("poisonpolicy-minimal.yaml")
    assert qc["spec"]["policyRef"]["name"] == pp["metadata"]["name"]
    k.create(pp)
    k.create(qc)
    name = qc["metadata"]["name"]
    ckpt = spec["checkpoint"]["location"].removeprefix("s3a://")

    env = {**s3.env(stack), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "ANTIDOTE_TEST_CALLS_DIR": str(calls_dir)}
    args = ("--dev-runner", "--dev-runner-dir", str(tmp_path / "dev-runner"), "--dev-runner-master", "local[1]")
    with operator(kubeconfig, namespace, tmp_path, *args, env=env) as op:
        # files: startingOffsets latest. Spark has written where it starts (the source's
        # initial offsets) into the checkpoint on S3 before it reads: what comes after is read.
        wait_for(lambda: any("/sources/" in key for key in s3.keys(ckpt)),
                 "the checkpoint's initial offsets on S3", timeout=300)
        values = [b"click-%d" % i for i in range(30)]
        produce(kafka_bootstrap, source, [(None, v, None) for v in values])
        wait_for(lambda: ((k.qc(name) or {}).get("status") or {}).get("counts", {}).get("processed") == 30,
                 "30 processed", timeout=300)
        if "sink" in spec:
            out = spec["sink"]["path"].removeprefix("s3a://")
            assert Counter(s3.parquet_values(out)) == Counter(v.upper() for v in values), op.log()[-3000:]
        assert any("/commits/" in key for key in s3.keys(ckpt))

PROJECT = EXAMPLES / "handler-project"


@pytest.mark.slow  # `make test-slow` (docs/testing.md): ~1 min each on the S3 worker
def test_the_handler_projects_manifest_runs_its_own_handler_with_its_checkpoint_on_s3(
        api_client, namespace, stack, s3, kubeconfig, kafka_bootstrap, topic_factory, tmp_path) -> None:
    """examples/handler-project/deploy/orders.yaml (its PoisonPolicy and QueueConsumer), with
    the template's own handler (orders_handlers.handler:handle, on the path as its image puts
    it), on the dev runner against the local S3 server: valid orders priced to the sink, an
    order with no items quarantined as the policy's nonRetryable InvalidOrder, a value that is
    not JSON by the policy's validation; the checkpoint committed on `s3a://`. Changed: the
    broker, the topics, the S3 endpoint in `spec.spark.conf`, a folder of the test's own."""
    install_crds(api_client)
    k = Cluster(api_client, namespace)
    docs = {d["kind"]: d for d in yaml.safe_load_all((PROJECT / "deploy/orders.yaml").read_text()) if d}
    pp, qc = docs["PoisonPolicy"], docs["QueueConsumer"]
    assert qc["spec"]["policyRef"]["name"] == pp["metadata"]["name"]
    spec = qc["spec"]
    assert spec["checkpoint"]["location"].startswith("s3a://")
    folder = f"t-{uuid.uuid4().hex[:8]}"
    try:
        s3server.make_bucket(s3.server, spec["checkpoint"]["location"].removeprefix("s3a://").split("/", 1)[0])
    except OSError as err:
        assert "already" in str(err).lower(), err
    source, sink = topic_factory(), topic_factory("-priced")
    spec["source"]["kafka"].update(bootstrapServers=kafka_bootstrap, topic=source)
    spec["sink"]["kafka"]["topic"] = sink
    spec["checkpoint"]["location"] = _in_folder(spec["checkpoint"]["location"], folder)
    spec.setdefault("spark", {}).setdefault("conf", {}).update(s3.spark_conf())
    ckpt = spec["checkpoint"]["location"].removeprefix("s3a://")

    orders = [{"id": f"o{i}", "items": [{"quantity": i + 1, "unitCents": 250}]} for i in range(20)]
    values = [json.dumps(o).encode() for o in orders]
    empty, not_json = b'{"id": "o-empty", "items": []}', b"not json at all"
    produce(kafka_bootstrap, source, [(None, v, None) for v in [*values, empty, not_json]])
    k.create(pp)
    k.create(qc)
    name = qc["metadata"]["name"]

    # The project's package on the path, as its Dockerfile installs it into the image.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH"), str(PROJECT)]))
    env = {**s3.env(stack), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": path}
    args = ("--dev-runner", "--dev-runner-dir", str(tmp_path / "dev-runner"), "--dev-runner-master", "local[1]")
    with operator(kubeconfig, namespace, tmp_path, *args, env=env) as op:
        wait_for(lambda: _counts(k, name) == (20, 2), "20 processed and 2 quarantined", timeout=300)
        outputs = read_all(kafka_bootstrap, sink)
        assert sorted(json.loads(r.value)["totalCents"] for r in outputs) == \
            sorted((i + 1) * 250 for i in range(20)), op.log()[-3000:]
        poison = read_all(kafka_bootstrap, f"{source}.poison")
        got = {r.value: {h: (v or b"").decode() for h, v in r.headers if h in (REASON, ERROR_CLASS)}
               for r in poison}
        assert got[empty][REASON] == "non-retryable" and got[empty][ERROR_CLASS].endswith("InvalidOrder"), got
        assert got[not_json][REASON] == "validation", got
        assert len(poison) == 2, got
        assert any("/commits/" in key for key in s3.keys(ckpt))


def _counts(k: Cluster, name: str) -> tuple[int, int]:
    counts = ((k.qc(name) or {}).get("status") or {}).get("counts", {})
    return counts.get("processed", 0), counts.get("poisoned", 0)


@pytest.mark.slow  # `make test-slow` (docs/testing.md): ~1 min each on the S3 worker
def test_the_full_examples_run_with_their_checkpoint_on_s3_and_the_handler_gets_their_env(
        api_client, namespace, stack, s3, kubeconfig, kafka_bootstrap, topic_factory, tmp_path) -> None:
    """queueconsumer-full.yaml (every field: its Kafka Secret, env and envFrom, volumes,
    placement, autoscale, ordering) under poisonpolicy-full.yaml (every field: validation by
    JSON Schema, nonRetryable, Reject to its dead-letter topic, payload redaction) on the dev
    runner, its checkpoint on the local S3 server: the handler gets the example's env, a
    ValueError goes to the dead-letter topic, an order its schema refuses to its validation
    route's topic, the rest to the sink. Changed besides the broker, topics, handler and S3 endpoint: the Secrets and the
    ConfigMap the example names are made here (the Kafka one says PLAINTEXT, the stack's)."""
    install_crds(api_client)
    k = Cluster(api_client, namespace)
    qc, pp = _doc("queueconsumer-full.yaml"), _doc("poisonpolicy-full.yaml")
    assert qc["spec"]["policyRef"]["name"] == pp["metadata"]["name"]
    spec = qc["spec"]
    password, region = f"pw-{uuid.uuid4().hex[:8]}", f"eu-{uuid.uuid4().hex[:6]}"
    secrets = {"kafka-credentials": {"security.protocol": "PLAINTEXT"}, "orders-db": {"password": password},
               "orders-client-tls": {"tls.crt": "not a certificate"}}
    for name, data in secrets.items():
        k.core.create_namespaced_secret(namespace, {"metadata": {"name": name}, "stringData": data})
    k.core.create_namespaced_config_map(namespace, {"metadata": {"name": "orders-config"}, "data": {"region": region}})
    key_ref = pp["spec"]["quarantine"]["hashKeyRef"]  # the redaction's HMAC key, as a team makes it
    k.core.create_namespaced_secret(namespace, {"metadata": {"name": key_ref["name"]},
                                                "data": {key_ref["key"]: base64.b64encode(os.urandom(32)).decode()}})

    assert spec["checkpoint"]["location"].startswith("s3a://")
    folder = f"t-{uuid.uuid4().hex[:8]}"
    try:
        s3server.make_bucket(s3.server, spec["checkpoint"]["location"].removeprefix("s3a://").split("/", 1)[0])
    except OSError as err:
        assert "already" in str(err).lower(), err
    source, sink = topic_factory(partitions=2), topic_factory("-enriched")
    spec["source"]["kafka"].update(bootstrapServers=kafka_bootstrap, topic=source)
    spec["sink"]["kafka"]["topic"] = sink
    spec["handler"] = "tests.integration.handlers_examples:enrich"
    spec["checkpoint"]["location"] = _in_folder(spec["checkpoint"]["location"], folder)
    spec["spark"]["conf"].update(s3.spark_conf())
    ckpt = spec["checkpoint"]["location"].removeprefix("s3a://")
    topics = pp["spec"]["topics"]  # the example's names, made the test's own
    pp["spec"]["topics"] = {"retry": [f"{source}.{t}" for t in topics["retry"]],
                            "poison": f"{source}.poison", "dlq": f"{source}.dlq"}
    pp["spec"]["routes"][0]["topic"] = f"{source}.declined"  # validation's route (Reject)

    orders = [{"orderId": f"o{i}", "amount": i} for i in range(20)]
    refused, no_amount = {"orderId": "refused", "amount": 1}, {"orderId": "o-no-amount"}
    produce(kafka_bootstrap, source, [(o["orderId"].encode(), json.dumps(o).encode(), None)
                                      for o in [*orders, refused, no_amount]])
    k.create(pp)
    k.create(qc)
    name = qc["metadata"]["name"]

    env = {**s3.env(stack), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    args = ("--dev-runner", "--dev-runner-dir", str(tmp_path / "dev-runner"), "--dev-runner-master", "local[1]")
    with operator(kubeconfig, namespace, tmp_path, *args, env=env) as op:
        wait_for(lambda: _counts(k, name) == (20, 2), "20 processed and 2 rejected", timeout=300)
        outputs = [json.loads(r.value) for r in read_all(kafka_bootstrap, sink)]
        assert sorted(o["orderId"] for o in outputs) == sorted(o["orderId"] for o in orders), op.log()[-3000:]
        assert {json.dumps(o["env"], sort_keys=True) for o in outputs} == {json.dumps(
            {"DB_PASSWORD": password, "REGION": region, "LOG_LEVEL": "info", "CFG_region": region}, sort_keys=True)}
        # The ValueError (nonRetryable) to the dead-letter topic; the order the schema refuses
        # to its route's topic (routes: validation, Reject), both counted as rejected.
        dlq = read_all(kafka_bootstrap, f"{source}.dlq")
        assert [dict(r.headers)[REASON].decode() for r in dlq] == ["non-retryable"]
        declined = read_all(kafka_bootstrap, f"{source}.declined")
        assert [dict(r.headers)[REASON].decode() for r in declined] == ["validation"]
        assert ((k.qc(name) or {}).get("status") or {}).get("counts", {}).get("rejected") == 2
        assert any("/commits/" in key for key in s3.keys(ckpt))


@pytest.mark.slow  # `make test-slow` (docs/testing.md): ~1 min each on the S3 worker
def test_the_avro_example_decodes_and_encodes_through_the_registry_with_its_checkpoint_on_s3(
        api_client, namespace, stack, s3, schema_registry, kubeconfig, kafka_bootstrap, topic_factory,
        tmp_path) -> None:
    """queueconsumer-avro.yaml (Avro values from the Schema Registry, an Avro sink) under the
    policy it names (poisonpolicy-minimal.yaml) on the dev runner, its checkpoint on the local
    S3 server, its registry the local one (its credentials Secret made here; the local
    registry asks for none): the handler gets each decoded record and its dict is written with
    the sink subject's latest schema; a value not in the wire format is quarantined as
    `validation`. Changed: the broker, the topics, the registry's URL, the handler (the
    test's `order_out` for the team's `payments.handlers:settle`), the S3 endpoint."""
    from .test_consumer_formats import ORDER, avro
    from .test_consumer_sink_formats import decoded

    install_crds(api_client)
    k = Cluster(api_client, namespace)
    qc, pp = _doc("queueconsumer-avro.yaml"), _doc("poisonpolicy-minimal.yaml")
    assert qc["spec"]["policyRef"]["name"] == pp["metadata"]["name"]
    spec = qc["spec"]
    registry_secret = spec["source"]["kafka"]["schemaRegistry"]["secretRef"]["name"]
    k.core.create_namespaced_secret(namespace, {"metadata": {"name": registry_secret},
                                                "stringData": {"username": "payments", "password": "unused"}})
    assert spec["checkpoint"]["location"].startswith("s3a://")
    folder = f"t-{uuid.uuid4().hex[:8]}"
    try:
        s3server.make_bucket(s3.server, spec["checkpoint"]["location"].removeprefix("s3a://").split("/", 1)[0])
    except OSError as err:
        assert "already" in str(err).lower(), err
    source, sink = topic_factory(), topic_factory("-settled")
    source_id = registry.register(schema_registry, sink_subject(source), json.dumps(ORDER))
    sink_id = registry.register(schema_registry, sink_subject(sink), json.dumps(ORDER))
    spec["source"]["kafka"].update(bootstrapServers=kafka_bootstrap, topic=source)
    spec["source"]["kafka"]["schemaRegistry"]["url"] = schema_registry
    spec["sink"]["kafka"]["topic"] = sink
    spec["handler"] = "tests.integration.handlers_formats:order_out"
    spec["checkpoint"]["location"] = _in_folder(spec["checkpoint"]["location"], folder)
    spec.setdefault("spark", {}).setdefault("conf", {}).update(s3.spark_conf())
    ckpt = spec["checkpoint"]["location"].removeprefix("s3a://")

    records = [{"id": f"p{i}", "qty": i} for i in range(10)]
    produce(kafka_bootstrap, source, [(None, v, None) for v in
                                      [*(avro(source_id, r) for r in records), b"not avro"]])
    k.create(pp)
    k.create(qc)
    name = qc["metadata"]["name"]

    env = {**s3.env(stack), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    args = ("--dev-runner", "--dev-runner-dir", str(tmp_path / "dev-runner"), "--dev-runner-master", "local[1]")
    with operator(kubeconfig, namespace, tmp_path, *args, env=env) as op:
        wait_for(lambda: _counts(k, name) == (10, 1), "10 processed and 1 quarantined", timeout=300)
        out = [decoded(schema_registry, r.value) for r in read_all(kafka_bootstrap, sink)]
        assert {i for i, _ in out} == {sink_id}, op.log()[-3000:]
        assert sorted((d for _, d in out), key=lambda d: d["qty"]) == records
        (poison,) = read_all(kafka_bootstrap, f"{source}.poison")
        assert poison.value == b"not avro" and dict(poison.headers)[REASON] == b"validation"
        assert any("/commits/" in key for key in s3.keys(ckpt))
