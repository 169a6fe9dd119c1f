"""The Avro pipelines of the steady-state benchmark (steady_state.py's "a avro" and "b avro"):
the 0% topic's orders again, as Avro values in the Confluent wire format (a magic byte 0, the
schema's id in 4 bytes, the body), the schema registered in the stack's Schema Registry under
`<topic>-value`.

- "b avro": Antidote with `spec.source.kafka.valueFormat: Avro` and that registry; the handler
  (benchmarks/handlers.py:enrich_avro) gets the decoded dict as `m.data`.
- "a avro": plain Spark, the Kafka source, spark-avro's `from_avro` on the value with the
  wire format's 5-byte header cut off (`substring(value, 6)`), the same schema, the same
  handler in mapInArrow over the decoded struct, the same Kafka sink.

The values are written as confluent-kafka's AvroSerializer writes them (fastavro's
schemaless_writer behind the wire-format header): the serializer itself is not used because
confluent_kafka.schema_registry needs authlib and httpx, which the project does not pin.
spark-avro is a jar set of its own (dev/antidote_devstack/build.py JAR_SETS "avro",
hack/spark-avro/pom.xml), fetched only when these pipelines run.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The orders of consumer_throughput.produce ({"id", "qty", "price"}) as an Avro record. No
# poison field: the Avro topic carries 0% poison only.
ORDER = {"type": "record", "name": "Order", "namespace": "bench.orders", "fields": [
    {"name": "id", "type": "long"}, {"name": "qty", "type": "int"}, {"name": "price", "type": "double"}]}
SCHEMA = json.dumps(ORDER)
HEADER = 5  # the wire format's magic byte and schema id, before the Avro body
HANDLER = "enrich_avro"


def subject(topic: str) -> str:
    return f"{topic}-value"  # TopicNameStrategy, as a Confluent producer registers it


def encoder(schema_id: int):
    """An order (dict) -> its value in the Confluent wire format, as AvroSerializer writes it."""
    import fastavro

    parsed = fastavro.parse_schema(ORDER)
    head = b"\0" + schema_id.to_bytes(4, "big")

    def encode(doc: dict) -> bytes:
        out = io.BytesIO()
        out.write(head)
        fastavro.schemaless_writer(out, parsed, doc)
        return out.getvalue()

    return encode


def registered(registry_url: str, topic: str):
    """The encoder of `topic`'s orders (consumer_throughput.produce's `encode`), the schema
    registered under the topic's subject first, as a Confluent producer does."""
    from antidote_devstack import schema_registry as registry

    return encoder(registry.register(registry_url, subject(topic), SCHEMA))


def source_extra(registry_url: str) -> dict:
    """What "b avro" adds to spec.source.kafka."""
    return {"valueFormat": "Avro", "schemaRegistry": {"url": registry_url}}


def spark_jars(stack_jars: list[str]) -> list[str]:
    """The stack's Spark jars and spark-avro's (fetched from Maven Central when the cache has
    none), for the session "a avro" runs in."""
    from antidote_devstack import build

    return [*stack_jars, *(str(p) for p in sorted(build.build_jars("avro").glob("*.jar")))]


@contextmanager
def schema_registry(stack, own_stack: bool) -> Iterator[str]:
    """The registry's URL: the stack's own (`antidote dev up --with schema-registry`), one
    added to a stack the benchmark started (stopped with it), or, beside a reused stack
    without one, one the benchmark starts and stops, leaving that stack as it found it."""
    from antidote_devstack import schema_registry as registry, stack as devstack
    from antidote_devstack.paths import cache_dir
    from antidote_devstack.procs import Supervisor

    if stack.schema_registry_url:
        yield stack.schema_registry_url
        return
    if own_stack:
        yield devstack.add_schema_registry(Path(stack.dir)).schema_registry_url
        return
    sup = Supervisor(cache_dir() / "bench-schema-registry")
    registry.stop(sup)  # what a crashed earlier run left
    try:
        yield registry.start(sup, registry.build(), stack.host)
    finally:
        registry.stop(sup)


def value_from_avro(schema: str):
    """The value column decoded by spark-avro: the body after the wire format's header."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    return from_avro(F.expr(f"substring(value, {HEADER + 1})"), schema)


def plain_map_avro(batches):
    """Pipeline "a avro"'s mapInArrow: enrich_avro on each decoded struct (a dict, as the
    Arrow struct column gives it)."""
    import pyarrow as pa

    from antidote_consumer.worker.message import Message
    from benchmarks.handlers import enrich_avro

    schema = pa.schema([("key", pa.binary()), ("value", pa.binary())])
    for b in batches:
        c = {n: b.column(n).to_pylist() for n in ("key", "value", "topic", "partition", "offset", "ts")}
        out = [enrich_avro(Message(c["key"][i], None, (), c["topic"][i], c["partition"][i], c["offset"][i],
                                   c["ts"][i], data=c["value"][i])) for i in range(b.num_rows)]
        yield pa.RecordBatch.from_pydict({"key": c["key"], "value": out}, schema=schema)
