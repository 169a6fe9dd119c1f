"""An Avro sink through the local Schema Registry (spec.sink.kafka.valueFormat): the handler's
dicts written in the Confluent wire format with the latest schema of `<sink>-value`, read back
and decoded with the schema the registry has under the id each record names; a dict the schema
refuses is that message's failure (non-retryable at once, antidote.SerializationError, its
input's bytes intact, redriven unchanged); a registry that is away while encoding is an outage
(the queue disabled), never a reason to quarantine."""

from __future__ import annotations

import io
import json
import socket
import struct
import urllib.request
import uuid

import fastavro

from antidote_api.consumer import QueueConsumerSpec
from antidote_api.formats import SERIALIZATION_ERROR, sink_subject
from antidote_api.policy import PoisonPolicySpec
from antidote_api.semantics import resolve
from antidote_api.wire import ExitCode
from antidote_consumer.reader.rules import ReaderOptions
from antidote_consumer.reader.run import run_reader
from antidote_devstack import schema_registry as registry
from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all

from .test_consumer_formats import ORDER


def sink_settings(bootstrap: str, source: str, sink: str, tmp_path, *, registry_url: str, name: str,
                  policy: dict):
    """A consumer (a name of its own: the stack is shared) of Json values, whose handler
    `order_out` returns them as dicts to an Avro sink with its own registry, resolved as the
    operator resolves it."""
    qc = QueueConsumerSpec.model_validate({
        "policyRef": {"name": "p"},
        "source": {"kafka": {"bootstrapServers": bootstrap, "topic": source, "valueFormat": "Json"}},
        "handler": "tests.integration.handlers_formats:order_out",
        "sink": {"kafka": {"topic": sink, "valueFormat": "Avro", "schemaRegistry": {"url": registry_url}}},
        "checkpoint": {"location": str(tmp_path / f"ckpt-{name}")}})
    return resolve(qc, PoisonPolicySpec.model_validate(policy), name=f"{name}-{uuid.uuid4().hex[:6]}",
                   namespace="tests")


def schema_by_id(url: str, schema_id: int) -> dict:
    """The registry's schema for `schema_id`, over its REST API (not the consumer's client)."""
    with urllib.request.urlopen(f"{url}/schemas/ids/{schema_id}", timeout=30) as resp:
        return json.loads(json.loads(resp.read())["schema"])


def decoded(url: str, data: bytes) -> tuple[int, dict]:
    assert data[0] == 0, data  # the magic byte
    schema_id = struct.unpack(">I", data[1:5])[0]
    schema = fastavro.parse_schema(schema_by_id(url, schema_id))
    return schema_id, fastavro.schemaless_reader(io.BytesIO(data[5:]), schema, None)


def test_an_avro_sink_is_read_back_with_the_registrys_schema_and_a_refused_dict_is_non_retryable(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir, schema_registry) -> None:
    source, sink = topic_factory("-in"), topic_factory("-avro-out")
    schema_id = registry.register(schema_registry, sink_subject(sink), json.dumps(ORDER))
    values = [json.dumps({"id": f"o-{i}", "qty": i}).encode() for i in range(6)]
    refused = json.dumps({"id": "o-refused", "qty": "many"}).encode()  # qty is an int in the schema
    values.insert(3, refused)
    produce(kafka_bootstrap, source, [(None, v, None) for v in values])
    s = sink_settings(kafka_bootstrap, source, sink, tmp_path, registry_url=schema_registry, name="sinkfmt",
                      policy={"retries": {"immediate": 2, "cycles": 1}, "reader": {"action": "Redrive"}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    out = [decoded(schema_registry, r.value) for r in read_all(kafka_bootstrap, sink)]
    assert {i for i, _ in out} == {schema_id}
    assert sorted((d for _, d in out), key=lambda d: d["qty"]) == [{"id": f"o-{i}", "qty": i} for i in range(6)]
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert list(poison) == [(0, 3)]
    rec, hdrs = poison[(0, 3)]
    assert rec.value == refused  # the input's bytes, not the refused output
    assert (hdrs["antidote.reason"], hdrs["antidote.error.class"], hdrs["antidote.attempts"]) == \
        ("non-retryable", SERIALIZATION_ERROR, "1")
    assert hdrs["antidote.error.message"].startswith(
        f"the handler's return value does not fit {sink_subject(sink)} (schema id {schema_id}): "
        "shop.Order.qty: 'many' is not an int"), hdrs["antidote.error.message"]
    per = cu.calls(calls_dir, source)
    assert per[f"{source}/0/3"] == 1  # no immediate retry of a refused value
    for topic in (s.topics.dlq, *s.topics.retry):
        assert read_all(kafka_bootstrap, topic) == [], topic
    assert cu.metric(m, "antidote_messages_total", outcome="moved") == 1

    # Redrive copies it back unchanged.
    report = run_reader(s, ReaderOptions())
    assert (report.messages, report.redriven) == (1, 1)
    assert read_all(kafka_bootstrap, source)[-1].value == refused


def test_a_registry_away_while_encoding_disables_the_queue_and_quarantines_nothing(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    with socket.socket() as sock:  # a registry that is not there: a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        away = f"http://127.0.0.1:{sock.getsockname()[1]}"
    source, sink = topic_factory("-in"), topic_factory("-avro-out")
    policy = {"retries": {"immediate": 1, "cycles": 1, "cycleDelay": "1s"},
              "queueDisable": {"failureRatio": {"threshold": 0.5, "window": "5m", "minMessages": 100}}}
    produce(kafka_bootstrap, source, [(None, json.dumps({"id": f"a-{i}", "qty": i}).encode(), None)
                                      for i in range(150)])
    s = sink_settings(kafka_bootstrap, source, sink, tmp_path, registry_url=away, name="sinkfmt-away",
                      policy=policy)

    code, m = cu.run(spark, s)

    assert code == ExitCode.SYSTEMIC_FAILURE
    assert cu.metric(m, "antidote_queue_disabled", reason="SystemicFailure") == 1
    for topic in (s.topics.poison, s.topics.dlq, *s.topics.retry):
        assert read_all(kafka_bootstrap, topic, missing_ok=True) == [], topic
    assert read_all(kafka_bootstrap, sink, missing_ok=True) == []
