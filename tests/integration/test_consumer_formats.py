"""Avro and Protobuf values through the local Schema Registry: the handler sees them decoded,
each kind of undecodable value is quarantined as `validation` with its bytes intact, and a
registry that is away is an outage (the queue disabled), never a reason to quarantine."""

from __future__ import annotations

import io
import json
import struct
import uuid

import fastavro

from antidote_api.consumer import KafkaSource
from antidote_api.formats import DESERIALIZATION_ERROR
from antidote_api.wire import ExitCode
from antidote_devstack import schema_registry as registry
from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all

from .schema_registry_util import own_registry, subject

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]}
PROTO = """syntax = "proto3";
package shop;
message Order { string id = 1; int32 qty = 2; }
message Refund { string order_id = 1; int64 cents = 2; }
"""


def framed(schema_id: int, body: bytes) -> bytes:
    """The Confluent wire format: magic byte 0, the schema id (4 bytes, big-endian), the body."""
    return b"\0" + struct.pack(">I", schema_id) + body


def avro(schema_id: int, record: dict, schema: dict = ORDER) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return framed(schema_id, out.getvalue())


def protobuf_refund(schema_id: int, order_id: str, cents: int) -> bytes:
    """A shop.Refund (the .proto's second message: indexes [1]), encoded by hand as the
    protobuf wire format has it (field 1 a string, field 2 a varint)."""
    body = b"\x0a" + bytes([len(order_id)]) + order_id.encode() + b"\x10" + bytes([cents])
    return framed(schema_id, b"\x02\x02" + body)  # one index, 1 (zigzag varints)


def formats_settings(bootstrap: str, source: str, tmp_path, *, registry_url: str, value_format: str,
                     name: str, **kw):
    """cu.settings with the source's valueFormat and registry, the `seen` handler, and a
    consumer name of its own (the stack is shared)."""
    s = cu.settings(bootstrap, source, tmp_path, name=f"{name}-{uuid.uuid4().hex[:6]}", **kw)
    src = KafkaSource.model_validate({**s.source.wire(), "valueFormat": value_format,
                                      "schemaRegistry": {"url": registry_url}})
    return s.model_copy(update={"source": src, "handler": "tests.integration.handlers_formats:seen"})


def test_avro_and_protobuf_values_are_decoded_and_undecodable_ones_are_invalid(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir, schema_registry) -> None:
    order_id = registry.register(schema_registry, subject("fmt-avro"), json.dumps(ORDER))
    refund_id = registry.register(schema_registry, subject("fmt-proto"), PROTO, "PROTOBUF")
    unknown = max(order_id, refund_id) + 1000
    for fmt, records, bad in [
        ("Avro", [avro(order_id, {"id": f"o-{i}", "qty": i}) for i in range(5)],
         {"magic byte": b'{"id": "o-9", "qty": 9}',                # a producer that skipped the registry
          "unknown schema id": framed(unknown, b"\x02a\x02"),
          "truncated": avro(order_id, {"id": "o-truncated", "qty": 7})[:-4]}),
        ("Protobuf", [protobuf_refund(refund_id, f"o-{i}", 10 + i) for i in range(5)],
         {"magic byte": b"\x08\x01\x12\x04abcd",                 # plain protobuf, no header
          "unknown schema id": framed(unknown, b"\x00"),
          "truncated": protobuf_refund(refund_id, "o-truncated", 1)[:-3]}),
    ]:
        source, sink = topic_factory(f"-{fmt.lower()}"), topic_factory(f"-{fmt.lower()}-out")
        produce(kafka_bootstrap, source, [(None, v, None) for v in records + list(bad.values())])
        s = formats_settings(kafka_bootstrap, source, tmp_path, registry_url=schema_registry,
                             value_format=fmt, name=f"fmt-{fmt.lower()}", sink=sink,
                             policy={"retries": {"immediate": 2, "cycles": 1}})

        code, m = cu.run(spark, s)

        assert code == ExitCode.OK, fmt
        out = sorted((json.loads(r.value) for r in read_all(kafka_bootstrap, sink)),
                     key=lambda d: d["data"].get("id") or d["data"].get("orderId"))
        if fmt == "Avro":
            assert [o["data"] for o in out] == [{"id": f"o-{i}", "qty": i} for i in range(5)]
        else:
            assert [o["data"] for o in out] == [{"type": "shop.Refund", "orderId": f"o-{i}", "cents": str(10 + i)}
                                                for i in range(5)]
        assert [o["raw"] for o in out] == [len(v) for v in records]
        poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
        assert set(poison) == {(0, 5), (0, 6), (0, 7)}, fmt
        for offset, (kind, value) in enumerate(bad.items(), start=5):
            rec, hdrs = poison[(0, offset)]
            assert rec.value == value, (fmt, kind)  # the bytes as produced
            assert hdrs["antidote.reason"] == "validation", (fmt, kind)
            assert hdrs["antidote.error.class"] == DESERIALIZATION_ERROR, (fmt, kind)
            assert hdrs["antidote.attempts"] == "0", (fmt, kind)
            text = hdrs["antidote.error.message"]
            if kind == "magic byte":
                assert text.startswith("value: magic byte is "), text
            elif kind == "unknown schema id":
                assert text.startswith(f"value (schema id {unknown}): unknown schema id {unknown}"), text
            else:
                schema_id = order_id if fmt == "Avro" else refund_id
                assert text.startswith(f"value (schema id {schema_id}): {fmt} body does not decode: "), text
        per = cu.calls(calls_dir, source)
        assert [per[f"{source}/0/{o}"] for o in range(8)] == [1] * 5 + [0] * 3, fmt  # no call for the invalid
        for topic in (s.topics.dlq, *s.topics.retry):
            assert read_all(kafka_bootstrap, topic) == [], topic
        assert cu.metric(m, "antidote_messages_total", outcome="moved") == 3


def test_a_registry_outage_disables_the_queue_and_quarantines_nothing(
        spark, stack, kafka_bootstrap, topic_factory, tmp_path) -> None:
    """A registry of the test's own, taken away between two runs of one consumer: its first
    schema is in the workers' cache, the second is not, and cannot be fetched."""
    source, sink = topic_factory(), topic_factory("-out")
    policy = {"retries": {"immediate": 1, "cycles": 1, "cycleDelay": "1s"},
              "queueDisable": {"failureRatio": {"threshold": 0.5, "window": "5m", "minMessages": 100}}}
    v2 = {**ORDER, "fields": [*ORDER["fields"], {"name": "note", "type": "string", "default": ""}]}
    with own_registry(stack) as (url, sup):
        first = registry.register(url, subject("fmt-outage"), json.dumps(ORDER))
        second = registry.register(url, subject("fmt-outage2"), json.dumps(v2))
        s = formats_settings(kafka_bootstrap, source, tmp_path, registry_url=url, value_format="Avro",
                             name="fmt-outage", sink=sink, policy=policy)
        produce(kafka_bootstrap, source, [(None, avro(first, {"id": f"a-{i}", "qty": i}), None) for i in range(10)])
        code, m = cu.run(spark, s)
        assert code == ExitCode.OK
        assert len(read_all(kafka_bootstrap, sink)) == 10

        assert registry.stop(sup)  # the registry goes away
        produce(kafka_bootstrap, source, [(None, avro(second, {"id": f"b-{i}", "qty": i, "note": "n"}, v2), None)
                                          for i in range(150)])
        code, m = cu.run(spark, s)

    assert code == ExitCode.SYSTEMIC_FAILURE
    assert cu.metric(m, "antidote_queue_disabled", reason="SystemicFailure") == 1
    for topic in (s.topics.poison, s.topics.dlq, *s.topics.retry):
        assert read_all(kafka_bootstrap, topic, missing_ok=True) == [], topic
    assert len(read_all(kafka_bootstrap, sink)) == 10  # nothing of the second schema
