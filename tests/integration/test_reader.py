"""The poison-queue reader on the real broker and a real local Spark: redrive (rate, loop
guard, byte-identical records), archive, filters, dry-run, kill and resume, dispositions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition

from antidote_consumer.kafka import headers as h
from antidote_consumer.reader.run import group_id, parking_topic, run_reader
from antidote_consumer.reader.rules import ReaderError, ReaderOptions

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
NOW = int(time.time() * 1000)


def poison_records(source: str, n: int, *, partitions: int = 1, error_class="ValueError",
                   reason="max-attempts", last_failure: int = NOW, start: int = 0,
                   redrives: int | None = None, value_size: int | None = None):
    """Records as the consumer writes them to the poison topic (failure_headers)."""
    out = []
    for i in range(start, start + n):
        user = [("trace", f"t{i}".encode()), ("bin", bytes([0, 255, i % 256]))]
        if redrives is not None:
            user.append((h.REDRIVE_COUNT, str(redrives).encode()))
        hdrs = user + h.failure_headers(
            origin=h.Origin(source, i % partitions, i, NOW - 60_000), attempts=3, cycle=0,
            first_failure=last_failure - 1000, last_failure=last_failure, reason=reason,
            error_class=error_class, error_message=f"bad {i}", stack="Traceback ...", consumer="c",
            policy="p", disposition="Move")
        value = (b"x" * value_size) if value_size else f"value-{i}".encode() + bytes([0, 200])
        out.append((f"key-{i}".encode(), value, hdrs))
    return out


def make(bootstrap, topic_factory, tmp_path, *, partitions=1, reader=None, policy=None,
         source_config=None):
    source = topic_factory(partitions=partitions, config=source_config)
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(f"{source}.poison", partitions, 1)]).values():
        fut.result(30)
    pol = {**(policy or {}), "reader": {**(reader or {})}}
    return cu.settings(bootstrap, source, tmp_path, policy=pol)


def committed(bootstrap, settings, topic, partitions=1) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id(settings)})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)],
                                                timeout=30)]
    finally:
        c.close()


def manifests(tmp_path: Path, settings, reader: dict) -> list[str]:
    """QueueConsumer and PoisonPolicy manifests for the CLI, equivalent to `settings`."""
    qc = {"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer",
          "metadata": {"name": settings.consumer, "namespace": settings.namespace},
          "spec": {"policyRef": {"name": "p"}, "handler": settings.handler,
                   "source": {"kafka": {"bootstrapServers": settings.source.bootstrap_servers,
                                        "topic": settings.source.topic}},
                   "checkpoint": {"location": str(tmp_path / "ckpt")}}}
    pp = {"apiVersion": "antidote.dev/v1alpha1", "kind": "PoisonPolicy",
          "metadata": {"name": "p", "namespace": settings.namespace}, "spec": {"reader": reader}}
    (tmp_path / "qc.yaml").write_text(yaml.safe_dump(qc))
    (tmp_path / "pp.yaml").write_text(yaml.safe_dump(pp))
    return ["--consumer", str(tmp_path / "qc.yaml"), "--policy", str(tmp_path / "pp.yaml")]


def cli(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / ".venv/bin/antidote"), *args], capture_output=True,
                          text=True, timeout=300, **kw)


# --- redrive ------------------------------------------------------------------------------

def test_redrive_after_a_real_consumer_then_loop_guard_parks(kafka_bootstrap, topic_factory,
                                                               tmp_path, spark, calls_dir):
    """Poison from a real consumer run, redriven byte-identical; the consumer treats the
    redriven messages as fresh; past maxRedrives they go to the parking topic instead."""
    source = topic_factory(partitions=2)
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy={
        "retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s"},
        "reader": {"action": "Redrive", "maxRedrives": 1}})
    hdrs = [("trace", b"abc"), ("bin", bytes([0, 1, 255]))]
    sent = [(f"k{i}".encode(), (b"poison-%d" % i) if i % 5 == 0 else b"ok-%d" % i, hdrs)
            for i in range(20)]
    produce(kafka_bootstrap, source, sent)
    code, _ = cu.run(spark, s)
    assert code == 0
    first = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert len(first) == 4

    report = run_reader(s, ReaderOptions())
    assert (report.messages, report.redriven, report.parked, report.faultAt) == (4, 4, 0, None)
    everything = read_all(kafka_bootstrap, source)
    redriven = [r for r in everything if h.REDRIVE_COUNT in dict(r.headers)]
    assert len(everything) == 24 and len(redriven) == 4
    by_key = {k: (v, hd) for k, v, hd in sent}
    for r in redriven:
        value, user = by_key[r.key]
        assert r.value == value  # byte-identical
        assert list(r.headers) == user + [(h.REDRIVE_COUNT, b"1")]  # failure headers gone
    original = {rec.key: p for (p, _), (rec, _) in first.items()}
    assert {r.key: r.partition for r in redriven} == original  # same partition as before
    assert run_reader(s, ReaderOptions()).messages == 0  # nothing twice

    # The consumer reads them as fresh messages: they fail again (through a retry cycle,
    # which must keep the redrive count) and return to the poison topic.
    code, _ = cu.run(spark, s)
    assert code == 0
    poison = read_all(kafka_bootstrap, s.topics.poison)
    again = [r for r in poison if h.REDRIVE_COUNT in dict(r.headers)]
    assert len(poison) == 8 and len(again) == 4
    assert all(dict(r.headers)[h.REDRIVE_COUNT] == b"1" for r in again)
    assert all(dict(r.headers)["antidote.cycle"] == b"1" for r in again)

    report = run_reader(s, ReaderOptions())
    assert (report.messages, report.redriven, report.parked) == (4, 0, 4)
    parked = read_all(kafka_bootstrap, parking_topic(source))
    assert sorted(r.key for r in parked) == sorted(r.key for r in again)
    assert all(dict(r.headers)["antidote.error.class"] == b"ValueError" for r in parked)
    assert len(read_all(kafka_bootstrap, source)) == 24  # nothing redriven this time
    # The parking topic is made like the source: same partitions and max.message.bytes.
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert len(md[parking_topic(source)].partitions) == 2


def test_rate_limit_is_honored_within_ten_percent(kafka_bootstrap, topic_factory, tmp_path):
    s = make(kafka_bootstrap, topic_factory, tmp_path, reader={"action": "Redrive", "rateLimit": 50})
    produce(kafka_bootstrap, s.topics.poison, poison_records(s.topics.source, 200))
    started = time.monotonic()
    report = run_reader(s, ReaderOptions())
    elapsed = time.monotonic() - started
    assert report.redriven == 200
    stamps = sorted(r.timestamp for r in read_all(kafka_bootstrap, s.topics.source))
    assert len(stamps) == 200
    rate = 199 / ((stamps[-1] - stamps[0]) / 1000)
    print(f"redrive rate {rate:.1f} msg/s (limit 50), run {elapsed:.2f}s")
    assert 45 <= rate <= 55
    assert elapsed >= 199 / 55


# --- archive ------------------------------------------------------------------------------

def test_archive_is_complete_readable_by_spark_and_pandas_and_idempotent(
        kafka_bootstrap, topic_factory, tmp_path, spark):
    import pandas as pd
    import pyarrow.parquet as pq

    path = tmp_path / "archive"
    s = make(kafka_bootstrap, topic_factory, tmp_path, partitions=2,
             reader={"action": "Archive", "archive": {"path": str(path)}})
    recs = (poison_records(s.topics.source, 30, partitions=2)
            + poison_records(s.topics.source, 20, partitions=2, error_class="json.JSONDecodeError",
                             reason="non-retryable", start=30))
    produce(kafka_bootstrap, s.topics.poison, recs)
    report = run_reader(s, ReaderOptions(), spark=spark)
    assert (report.messages, report.archived, report.archivePath) == (50, 50, str(path))
    day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    classes = sorted(p.name for p in (path / f"date={day}").iterdir())
    assert classes == ["error_class=ValueError", "error_class=json.JSONDecodeError"]

    df = spark.read.parquet(str(path))
    rows = df.collect()
    assert len(rows) == 50
    got = {bytes(r.key): r for r in rows}
    for key, value, hdrs in recs:
        r = got[key]
        assert bytes(r.value) == value
        assert [(x.key, bytes(x.value)) for x in r.headers] == hdrs
        assert r.original_topic == s.topics.source and r.attempts == 3
        assert r.error_class in ("ValueError", "json.JSONDecodeError")
        assert r.reason == ("max-attempts" if r.error_class == "ValueError" else "non-retryable")
        assert r.last_failure is not None and r.error_message.startswith("bad ")
    table = pq.read_table(str(path))
    frame = pd.read_parquet(str(path))
    assert table.num_rows == 50 and len(frame) == 50
    assert set(frame["key"].map(bytes)) == {k for k, _, _ in recs}
    assert set(frame["error_class"].astype(str)) == {"ValueError", "json.JSONDecodeError"}

    # A second run finds nothing new; new arrivals are archived in a slice of their own.
    assert run_reader(s, ReaderOptions(), spark=spark).archived == 0
    produce(kafka_bootstrap, s.topics.poison, poison_records(s.topics.source, 5, start=50))
    assert run_reader(s, ReaderOptions(), spark=spark).archived == 5
    assert spark.read.parquet(str(path)).count() == 55
    keys = [bytes(r.key) for r in spark.read.parquet(str(path)).select("key").collect()]
    assert len(keys) == len(set(keys))


def test_archive_slice_of_a_killed_run_is_replaced_not_duplicated(
        kafka_bootstrap, topic_factory, tmp_path, spark):
    """Files written, offsets not committed (the reader died in between): the next run
    removes the pending slice and archives its messages once."""
    from antidote_consumer.reader import run as reader_mod

    path = tmp_path / "archive"
    s = make(kafka_bootstrap, topic_factory, tmp_path,
             reader={"action": "Archive", "archive": {"path": str(path), "format": "json"}})
    produce(kafka_bootstrap, s.topics.poison, poison_records(s.topics.source, 10))

    class Killed(BaseException):
        pass

    real = reader_mod._Run._commit

    def dies_after_files(self, progress, **pending):
        if progress and "pending" in pending and pending["pending"] is None:
            raise Killed()  # between the archive write and the commit
        return real(self, progress, **pending)

    reader_mod._Run._commit = dies_after_files
    try:
        with pytest.raises(Killed):
            run_reader(s, ReaderOptions(), spark=spark)
    finally:
        reader_mod._Run._commit = real
    assert spark.read.json(str(path)).count() == 10  # written, not committed
    report = run_reader(s, ReaderOptions(), spark=spark)
    assert report.archived == 10
    assert spark.read.json(str(path)).count() == 10


# --- filters and dry-run ------------------------------------------------------------------

def test_filters_by_class_reason_and_window_leave_the_rest_alone(kafka_bootstrap, topic_factory,
                                                                   tmp_path):
    s = make(kafka_bootstrap, topic_factory, tmp_path, reader={"action": "Redrive"})
    old = NOW - 3 * 3600_000
    produce(kafka_bootstrap, s.topics.poison,
            poison_records(s.topics.source, 3, error_class="ValueError")
            + poison_records(s.topics.source, 4, error_class="KeyError", reason="non-retryable", start=3)
            + poison_records(s.topics.source, 5, error_class="TypeError", last_failure=old, start=7))

    r1 = run_reader(s, ReaderOptions(error_classes=("KeyError",)))
    assert (r1.messages, r1.redriven, r1.skippedByFilter) == (4, 4, 8)
    r2 = run_reader(s, ReaderOptions(reasons=("max-attempts",),
                                     until=datetime.now(timezone.utc) - timedelta(hours=1)))
    assert (r2.messages, r2.redriven, r2.skippedByFilter) == (5, 5, 3)
    keys = sorted(r.key for r in read_all(kafka_bootstrap, s.topics.source))
    assert keys == sorted([b"key-%d" % i for i in range(3, 12)])
    # What no filter took is still there for the next run; nothing is read twice.
    r3 = run_reader(s, ReaderOptions(since=datetime.now(timezone.utc) - timedelta(hours=1)))
    assert (r3.messages, r3.redriven, r3.skippedByFilter) == (3, 3, 0)
    assert len(read_all(kafka_bootstrap, s.topics.source)) == 12
    assert committed(kafka_bootstrap, s, s.topics.poison) == [12]  # everything resolved


def test_hold_counts_and_commits_nothing(kafka_bootstrap, topic_factory, tmp_path):
    s = make(kafka_bootstrap, topic_factory, tmp_path)  # the default action is Hold
    produce(kafka_bootstrap, s.topics.poison, poison_records(s.topics.source, 6))
    for _ in range(2):
        r = run_reader(s, ReaderOptions())
        assert (r.action, r.messages, r.held) == ("Hold", 6, 6)
    assert committed(kafka_bootstrap, s, s.topics.poison) == [-1001]  # no offset committed


def test_dry_run_changes_nothing(kafka_bootstrap, topic_factory, tmp_path, spark):
    path = tmp_path / "archive"
    s = make(kafka_bootstrap, topic_factory, tmp_path,
             reader={"action": "Redrive", "maxRedrives": 2, "archive": {"path": str(path)}})
    produce(kafka_bootstrap, s.topics.poison, poison_records(s.topics.source, 5)
            + poison_records(s.topics.source, 3, redrives=2, start=5))
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    # Kafka's internal topics (__consumer_offsets appears with a broker's first group) aside.
    def topics():
        return {t for t in admin.list_topics(timeout=10).topics if not t.startswith("__")}

    before = topics()
    r = run_reader(s, ReaderOptions(dry_run=True))
    assert (r.dryRun, r.messages, r.redriven, r.parked) == (True, 8, 5, 3)
    r = run_reader(s, ReaderOptions(dry_run=True, action="Archive"), spark=spark)
    assert (r.messages, r.archived) == (8, 8)
    assert read_all(kafka_bootstrap, s.topics.source) == []
    assert committed(kafka_bootstrap, s, s.topics.poison) == [-1001]
    assert topics() == before  # no parking, no ledger topic
    assert not path.exists()
    # And the real run afterwards does exactly what the dry run said.
    r = run_reader(s, ReaderOptions())
    assert (r.messages, r.redriven, r.parked) == (8, 5, 3)


# --- crash and resume ---------------------------------------------------------------------

def test_a_killed_reader_resumes_without_duplicates(kafka_bootstrap, topic_factory, tmp_path):
    s = make(kafka_bootstrap, topic_factory, tmp_path, partitions=2)
    produce(kafka_bootstrap, s.topics.poison, poison_records(s.topics.source, 150, partitions=2))
    args = manifests(tmp_path, s, {"action": "Redrive", "rateLimit": 40})
    proc = subprocess.Popen([str(REPO / ".venv/bin/antidote"), "reader", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # kill it once part of the work is committed
        time.sleep(0.3)
        if len(read_all(kafka_bootstrap, s.topics.source)) >= 40:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    partial = len(read_all(kafka_bootstrap, s.topics.source))
    assert 40 <= partial < 150, partial

    report_file = tmp_path / "report.json"
    done = cli("reader", *args, "--rate", "1000", "-o", "json", "--report-file", str(report_file))
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report == json.loads(report_file.read_text())
    assert report["redriven"] == 150 - partial
    keys = [r.key for r in read_all(kafka_bootstrap, s.topics.source)]
    assert len(keys) == 150 and len(set(keys)) == 150


# --- refusals and dispositions ------------------------------------------------------------

def test_move_is_refused(kafka_bootstrap, topic_factory, tmp_path):
    s = make(kafka_bootstrap, topic_factory, tmp_path)
    doc = json.loads(s.model_dump_json(by_alias=True))
    doc["reader"]["disposition"] = "Move"
    (tmp_path / "settings.json").write_text(json.dumps(doc))
    out = cli("reader", "--settings", str(tmp_path / "settings.json"))
    assert out.returncode == 2
    assert "disposition" in out.stderr and "Move" in out.stderr
    # run_reader refuses it too, when handed settings built without validation.
    bad = s.model_copy(update={"reader": s.reader.model_copy(update={"disposition": "Move"})})
    with pytest.raises(ReaderError, match="spec.reader.disposition"):
        run_reader(bad, ReaderOptions())
    (tmp_path / "good.json").write_text(s.model_dump_json(by_alias=True))
    out = cli("reader", "--settings", str(tmp_path / "good.json"), "--rate", "0")
    assert out.returncode == 2 and "--rate" in out.stderr
    out = cli("reader", "--settings", str(tmp_path / "good.json"), "--since", "yesterday")
    assert out.returncode == 2 and "--since" in out.stderr


@pytest.fixture
def oversized(kafka_bootstrap, topic_factory, tmp_path):
    """A source that takes records of 2000 bytes at most, and a poison topic holding one of
    5000 between small ones: redriving it fails however often it is tried."""
    def build(disposition: str):
        s = make(kafka_bootstrap, topic_factory, tmp_path,
                 reader={"action": "Redrive", "disposition": disposition, "retries": {"immediate": 1}},
                 source_config={"max.message.bytes": "2000"})
        produce(kafka_bootstrap, s.topics.poison,
                poison_records(s.topics.source, 3) + poison_records(s.topics.source, 1, start=3, value_size=5000)
                + poison_records(s.topics.source, 3, start=4))
        return s
    return build


def test_reader_disposition_reject(kafka_bootstrap, oversized):
    s = oversized("Reject")
    r = run_reader(s, ReaderOptions())
    assert (r.messages, r.redriven, r.failed, r.rejected, r.faultAt) == (7, 6, 1, 1, None)
    dlq = read_all(kafka_bootstrap, s.topics.dlq)
    assert [x.key for x in dlq] == [b"key-3"] and len(dlq[0].value) == 5000
    hd = dict(dlq[0].headers)
    assert hd["antidote.reader.error.class"] == b"Redrive"
    assert b"size too large" in hd["antidote.reader.error.message"].lower()
    assert hd["antidote.error.class"] == b"ValueError"  # its own headers kept
    assert sorted(x.key for x in read_all(kafka_bootstrap, s.topics.source)) == [
        b"key-%d" % i for i in (0, 1, 2, 4, 5, 6)]


def test_reader_disposition_drop(kafka_bootstrap, oversized):
    s = oversized("Drop")
    r = run_reader(s, ReaderOptions())
    assert (r.messages, r.redriven, r.failed, r.dropped, r.rejected) == (7, 6, 1, 1, 0)
    assert run_reader(s, ReaderOptions()).messages == 0


def test_reader_disposition_fault_exits_5(kafka_bootstrap, oversized, tmp_path):
    s = oversized("Fault")
    args = manifests(tmp_path, s, {"action": "Redrive", "disposition": "Fault",
                                   "retries": {"immediate": 1}})
    out = cli("reader", *args, "-o", "json")
    assert out.returncode == 5, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["faultAt"] == f"{s.topics.poison}/0/3" and report["failed"] == 1
    assert "x" * 100 not in out.stdout + out.stderr  # never the payload
    assert sorted(x.key for x in read_all(kafka_bootstrap, s.topics.source)) == [
        b"key-0", b"key-1", b"key-2"]  # it stopped at the message, the rest waits
    assert committed(kafka_bootstrap, s, s.topics.poison) == [3]
