"""The steady-state benchmark's Avro pipelines (benchmarks/steady_avro.py): the Avro topic's
values are what Antidote's decoder reads back to the 0% topic's orders, the Avro handler gives
the JSON handler's output bytes for the same order (the pipelines compare like with like), and
spark-avro is a benchmark-only jar set that adds no second copy of what pyspark ships."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyspark
import pytest

from antidote_consumer.worker import decode as d
from antidote_consumer.worker import registry as r
from antidote_consumer.worker.message import Message
from antidote_devstack import build
from benchmarks import steady_avro
from benchmarks.handlers import enrich, enrich_avro

ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "hack" / build.JAR_SETS["avro"]


class Given(r.Registry):
    """The registry's answer for schema id 42 (the Avro topic's), given in-process."""

    def __init__(self) -> None:
        super().__init__("http://registry.test")
        self._schemas = {42: r.Schema(42, "AVRO", steady_avro.SCHEMA)}

    def _fetch(self, schema_id: int) -> r.Schema:
        raise r.UnknownSchema(schema_id)


def orders(n: int = 50) -> list[dict]:
    return [{"id": i, "qty": i % 7 + 1, "price": 9.99} for i in range(n)]  # consumer_throughput.produce's


def test_the_avro_values_are_in_the_wire_format_and_decode_to_the_orders() -> None:
    encode = steady_avro.encoder(42)
    for doc in orders():
        value = encode(doc)
        assert value[:5] == b"\0\0\0\0\x2a"  # magic byte 0, schema id 42 big-endian
        assert d.decode_registered("Avro", value, Given(), "value") == doc


def test_the_avro_handler_writes_the_json_handlers_bytes_for_the_same_order() -> None:
    encode = steady_avro.encoder(42)
    for doc in orders():
        raw = json.dumps(doc).encode()
        decoded = d.decode_registered("Avro", encode(doc), Given(), "value")
        assert enrich_avro(Message(None, encode(doc), (), "t", 0, 0, 0, data=decoded)) == \
            enrich(Message(None, raw, (), "t", 0, 0, 0))


def test_the_avro_handler_refuses_poison_as_the_json_one_does() -> None:
    with pytest.raises(ValueError, match="order 3 cannot be priced"):
        enrich_avro(Message(None, b"", (), "t", 0, 0, 0, data={"id": 3, "qty": 1, "price": 1.0, "poison": True}))


def test_spark_avro_is_pyspark_s_version_and_fetched_for_the_benchmark_only() -> None:
    text = POM.joinpath("pom.xml").read_text()
    assert f"<spark.version>{pyspark.__version__}</spark.version>" in text
    assert "<artifactId>spark-avro_2.13</artifactId>" in text
    # Without transitive dependencies: each must already be in pyspark's jars/.
    assert text.count("<dependency>") == text.count("<artifactId>*</artifactId>") == 1
    assert "avro" not in build.DEFAULT_JAR_SETS and "avro" not in build.S3_JAR_SETS
    assert "spark-avro" not in (ROOT / "hack/spark/pom.xml").read_text()


@pytest.mark.parametrize("jar", [r"avro-1\.[0-9.]+\.jar", r"avro-mapred-1\.[0-9.]+\.jar", r"xz-1\.12\.jar",
                                 r"spark-tags_2\.13-.+\.jar", r"scala-parallel-collections_2\.13-1\.2\.0\.jar"])
def test_what_spark_avro_needs_at_run_time_pyspark_ships(jar: str) -> None:
    """spark-avro 4.2.0's compile dependencies (xz 1.12, spark-tags, scala-parallel-collections
    1.2.0) and Avro (through spark-core), which the pom leaves out."""
    shipped = [p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")]
    assert any(re.fullmatch(jar, name) for name in shipped), jar
