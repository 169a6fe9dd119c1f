"""Redaction of quarantined payloads (PoisonPolicy spec.quarantine, issue 46 item 4) on the
real stack: a consumer in this process on Kafka and Spark's Python workers writes poison and
dead-letter records with the listed fields masked or hashed (or no value), its retry records
keep the value; the reader (in-process and `antidote redrive` as a process) refuses to
redrive them and leaves them for Archive, which writes what it archives redacted too; Avro
values through the stack's Schema Registry stay decodable with the same schema id; `antidote skip`
moves a Fault message to the poison topic redacted."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import subprocess
import sys

import pytest

from antidote_api import headers as hn
from antidote_api.redaction import HASH_PREFIX, MARKER
from antidote_api.wire import ExitCode
from antidote_consumer.reader.rules import ReaderOptions
from antidote_consumer.reader.run import run_reader

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all

KEY = b"0123456789abcdef0123456789abcdef"  # the HMAC key, as a Secret's key file holds it
NAME = "redact-c"  # this slice's consumer name: consumers named alike fence each other


def order(i: int, poison: bool) -> bytes:
    return json.dumps({"id": i, "card": {"number": f"41111111111111{i:02d}", "cvv": 100 + i},
                       "customer": {"email": f"user{i}@example.com", "name": f"Ann {i}"},
                       "note": "poison" if poison else "fine"}).encode()


def mac(text: str) -> str:
    return HASH_PREFIX + hmac.new(KEY, text.encode(), hashlib.sha256).hexdigest()


@pytest.fixture
def hmac_secret(tmp_path, monkeypatch):
    """The Secret `redaction-key` where the driver finds it mounted (ANTIDOTE_SECRETS_DIR)."""
    root = tmp_path / "secrets"
    (root / "redaction-key").mkdir(parents=True)
    (root / "redaction-key" / "key").write_bytes(KEY)
    monkeypatch.setenv("ANTIDOTE_SECRETS_DIR", str(root))
    return root


def _hdrs(rec) -> dict[str, str]:
    return {k: v.decode() for k, v in rec.headers if k.startswith("antidote.")}


def redrive_cli(settings_file, env_root) -> subprocess.CompletedProcess:
    """`antidote redrive --settings FILE -o json` as a process, this checkout's code."""
    env = {**os.environ, "ANTIDOTE_SECRETS_DIR": str(env_root)}
    return subprocess.run([sys.executable, "-c", "import sys; from antidote_cli.main import main; "
                           "sys.exit(main())", "redrive", "--settings", str(settings_file), "-o", "json"],
                          capture_output=True, text=True, timeout=300, env=env)


def test_json_poison_records_are_redacted_retries_keep_the_value_and_redrive_refuses_them(
        spark, kafka_bootstrap, topic_factory, tmp_path, hmac_secret) -> None:
    source = topic_factory(partitions=2)
    values = [order(i, poison=i % 3 == 0) for i in range(9)]
    broken = b'{"card": {"number": "4111111111111199"}, "note": "poison"'  # not JSON: no closing brace
    sent = [(b"k%d" % i, v, [("trace", b"t%d" % i)]) for i, v in enumerate(values)] + [(b"kb", broken, None)]
    produce(kafka_bootstrap, source, sent)
    archive = tmp_path / "archive"
    s = cu.settings(kafka_bootstrap, source, tmp_path, name=NAME, policy={
        "retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s"},
        "quarantine": {"payload": "Redact", "redact": [
            {"path": "$.card.number"}, {"path": "$.customer.email", "mode": "Hash"}, {"path": "$.absent"}],
            "hashKeyRef": {"name": "redaction-key"}},
        "reader": {"action": "Redrive", "archive": {"path": str(archive)}}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    src = {(r.partition, r.offset): r for r in read_all(kafka_bootstrap, source)}
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == {k for k, r in src.items() if b"poison" in r.value}  # 3 orders + broken
    assert len(poison) == 4
    for (p, o), (rec, hdrs) in poison.items():
        original = src[(p, o)]
        assert rec.key == original.key and hdrs["antidote.reason"] == "max-attempts"
        if original.value == broken:  # cannot be parsed for redaction: nothing of it leaks
            assert rec.value is None and hdrs[hn.REDACTED] == "Drop"
            assert hdrs[hn.REDACTED_REASON].startswith("value: not JSON")
            assert "4111" not in json.dumps(hdrs)
            continue
        doc, was = json.loads(rec.value), json.loads(original.value)
        assert doc["card"] == {"number": MARKER, "cvv": was["card"]["cvv"]}  # unlisted fields intact
        assert doc["customer"] == {"email": mac(was["customer"]["email"]), "name": was["customer"]["name"]}
        assert (doc["id"], doc["note"]) == (was["id"], "poison")
        assert hdrs[hn.REDACTED] == "Redact"
        assert json.loads(hdrs[hn.REDACTED_PATHS]) == ["$.card.number", "$.customer.email"]
        assert dict(rec.headers)["trace"] == dict(original.headers)["trace"]  # own headers kept
    # Retry records keep the value: it is processed again.
    retried = read_all(kafka_bootstrap, s.topics.retry[0])
    assert sorted(r.value for r in retried) == sorted(r.value for r in src.values() if b"poison" in r.value)
    assert all(hn.REDACTED not in _hdrs(r) for r in retried)

    # Redrive (the reader as a Job runs it) refuses each, naming it; they stay in place.
    report = run_reader(s, ReaderOptions())
    assert (report.messages, report.redriven, report.refused) == (4, 0, 4)
    assert len(read_all(kafka_bootstrap, source)) == len(sent)  # nothing went back
    # ... as does `antidote redrive`, with the record in its error line.
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(s.model_dump_json(by_alias=True))
    done = redrive_cli(settings_file, hmac_secret)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["refused"] == 4
    masked = next(r for r in read_all(kafka_bootstrap, s.topics.poison) if r.value is not None)
    where = f"{s.topics.poison}/{masked.partition}/{masked.offset}"
    assert (f"cannot redrive {where}: its payload was redacted ($.card.number, $.customer.email "
            "masked or hashed): it cannot be processed again") in done.stderr
    assert "its payload was dropped (antidote.redacted: Drop)" in done.stderr
    assert len(read_all(kafka_bootstrap, source)) == len(sent)

    # Archive still takes them, as they are, with a record quarantined before the policy said
    # Redact (written here as a Keep-era consumer wrote it) redacted on its way to the files.
    old = order(42, poison=True)
    produce(kafka_bootstrap, s.topics.poison, [(b"old", old, [
        (hn.REASON, b"max-attempts"), (hn.ERROR_CLASS, b"ValueError"), (hn.ORIGINAL_TOPIC, source.encode()),
        (hn.ORIGINAL_PARTITION, b"0"), (hn.ORIGINAL_OFFSET, b"999")])])
    report = run_reader(s, ReaderOptions(action="Archive"), spark=spark)
    assert (report.messages, report.archived) == (5, 5)
    rows = spark.read.parquet(str(archive)).collect()
    assert len(rows) == 5
    for r in rows:
        if r.value is None:
            assert bytes(r.key) == b"kb"  # the one Redact could not read
            continue
        doc = json.loads(bytes(r.value))
        assert doc["card"]["number"] == MARKER and doc["customer"]["email"].startswith(HASH_PREFIX)
        assert doc["note"] == "poison" and doc["customer"]["name"].startswith("Ann ")
    old_row = next(r for r in rows if bytes(r.key) == b"old")
    assert (hn.REDACTED, b"Redact") in [(x.key, bytes(x.value)) for x in old_row.headers]


def test_drop_writes_dead_letter_records_without_the_value_and_keeps_the_key(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    source = topic_factory()
    produce(kafka_bootstrap, source, [(b"k%d" % i, order(i, poison=i % 2 == 0), None) for i in range(6)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, name=NAME, policy={
        "retries": {"immediate": 0, "cycles": 0}, "disposition": "Reject",
        "quarantine": {"payload": "Drop"}, "reader": {"disposition": "Drop"}})

    code, _ = cu.run(spark, s)

    assert code == ExitCode.OK
    dlq = cu.quarantined(kafka_bootstrap, s.topics.dlq)
    assert sorted(o for _, o in dlq) == [0, 2, 4]
    for (_, o), (rec, hdrs) in dlq.items():
        assert rec.key == b"k%d" % o and rec.value is None
        assert hdrs[hn.REDACTED] == "Drop" and hn.REDACTED_PATHS not in hdrs
        assert hdrs["antidote.disposition"] == "Reject" and hdrs["antidote.error.class"] == "ValueError"
    report = run_reader(s, ReaderOptions(source="dlq", action="Redrive"))
    assert (report.refused, report.redriven) == (3, 0)
    assert run_reader(s, ReaderOptions(source="dlq", action="Drop")).dropped == 3  # Ack still works


PAY = {"type": "record", "name": "Pay", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"}, {"name": "card", "type": "string"}, {"name": "qty", "type": "int"},
    {"name": "note", "type": "string"}]}


def test_avro_poison_records_are_redacted_and_stay_decodable_with_their_schema_id(
        spark, kafka_bootstrap, topic_factory, tmp_path, schema_registry) -> None:
    import fastavro

    from antidote_api.consumer import KafkaSource
    from antidote_consumer.worker.decode import decode_registered
    from antidote_consumer.worker.registry import Registry
    from antidote_devstack import schema_registry as registry

    from .test_consumer_formats import avro
    from .schema_registry_util import subject

    schema_id = registry.register(schema_registry, subject("redact-avro"), json.dumps(PAY))
    source = topic_factory("-avro")
    records = [avro(schema_id, {"id": f"o-{i}", "card": f"41111111111111{i:02d}", "qty": i,
                                "note": "poison" if i % 2 else "fine"}, PAY) for i in range(6)]
    stray = b'{"card": "4111111111111199", "note": "poison"}'  # written without the registry
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, None) for i, v in enumerate(records + [stray])])
    s = cu.settings(kafka_bootstrap, source, tmp_path, name=f"{NAME}-avro", policy={
        "retries": {"immediate": 0, "cycles": 0},
        "quarantine": {"payload": "Redact", "redact": [{"path": "$.card"}, {"path": "$.qty"}]}})
    src = KafkaSource.model_validate({**s.source.wire(), "valueFormat": "Avro",
                                      "schemaRegistry": {"url": schema_registry}})
    s = s.model_copy(update={"source": src})

    code, _ = cu.run(spark, s)

    assert code == ExitCode.OK
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert sorted(o for _, o in poison) == [1, 3, 5, 6]
    reader = Registry(schema_registry)
    for (_, o), (rec, hdrs) in poison.items():
        if o == 6:  # undecodable: invalid (validation), and under Redact dropped whole, saying why
            assert hdrs["antidote.reason"] == "validation" and rec.value is None
            assert hdrs[hn.REDACTED] == "Drop" and "magic byte is 123" in hdrs[hn.REDACTED_REASON]
            continue
        assert rec.value[:5] == records[o][:5]  # the same schema id
        assert decode_registered("Avro", rec.value, reader, "value") == {
            "id": f"o-{o}", "card": MARKER, "qty": 0, "note": "poison"}
        # ... and any Avro reader with the writer's schema reads it whole (no bytes left over)
        buf = io.BytesIO(rec.value[5:])
        assert fastavro.schemaless_reader(buf, fastavro.parse_schema(PAY), None)["card"] == MARKER
        assert buf.tell() == len(rec.value) - 5
        assert hdrs[hn.REDACTED] == "Redact" and json.loads(hdrs[hn.REDACTED_PATHS]) == ["$.card", "$.qty"]


def test_skip_moves_the_fault_message_to_the_poison_topic_redacted(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    from antidote_consumer.reader.skip import skip_fault

    source = topic_factory()
    values = [order(i, poison=i == 2) for i in range(4)]
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, None) for i, v in enumerate(values)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, name=f"{NAME}-skip", policy={
        "retries": {"immediate": 0, "cycles": 0}, "disposition": "Fault",
        "quarantine": {"payload": "Redact", "redact": [{"path": "$.card"}, {"path": "$.customer.email"}]}})

    code, _ = cu.run(spark, s)
    assert code == ExitCode.FAULT and read_all(kafka_bootstrap, s.topics.poison, missing_ok=True) == []

    done = skip_fault(s)

    assert (done.offset, done.poison_topic) == (2, s.topics.poison)
    (rec,) = read_all(kafka_bootstrap, s.topics.poison)
    doc, hdrs = json.loads(rec.value), _hdrs(rec)
    was = json.loads(values[2])
    assert doc["card"] == MARKER and doc["customer"] == {"email": MARKER, "name": was["customer"]["name"]}
    assert (rec.key, doc["note"], hdrs["antidote.disposition"]) == (b"k2", "poison", "Fault")
    assert hdrs[hn.REDACTED] == "Redact" and json.loads(hdrs[hn.REDACTED_PATHS]) == ["$.card", "$.customer.email"]
