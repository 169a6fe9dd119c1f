"""A source or retry topic deleted and recreated under a consumer's ledger (issue 43, item 4).

The ledger keeps positions by topic name. Before: a recreated retry topic's new records lay
below the old position and were never read (`--until-idle` exited 0 with messages that had
no outcome); a recreated source topic made Spark's query fail at every start (outside the
crash-loop guard) or, once it had grown past the old offset, skipped the records below it.
Now a start refuses (exit 2, the topic, its ids, positions and ends, and `antidote rebase`),
and after the rebase every record of the new topic gets exactly one outcome."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import yaml
from confluent_kafka.admin import NewTopic

from antidote_consumer.kafka.topics import TopicMisfit

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all

pytestmark = pytest.mark.integration

CODE_PATH = cu.CODE_PATH
CYCLES = {"retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s"}}


def recreate(admin, topic: str, partitions: int) -> None:
    """Delete `topic` and create it again under the same name (a new topic id, offsets from 0)."""
    for fut in admin.delete_topics([topic]).values():
        fut.result(timeout=30)
    deadline = time.monotonic() + 60
    while True:  # the broker refuses the name until the deletion is done
        try:
            for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
                fut.result(timeout=30)
            return
        except Exception as err:  # noqa: BLE001 - TOPIC_ALREADY_EXISTS while it is being deleted
            if "ALREADY_EXISTS" not in str(err) or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def consumer_run(stack, calls_dir, log, settings_file, *extra: str) -> int:
    proc = cu.start(stack, calls_dir, log, ["--settings", str(settings_file), "--until-idle", *extra],
                    PYTHONPATH=CODE_PATH)
    try:
        return proc.wait(300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)


def own_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith("antidote consumer: ")]
    assert lines, text[-3000:]
    return lines[-1]


def test_a_recreated_retry_topic_stops_the_consumer_until_rebased_and_loses_nothing_after(
        stack, kafka_bootstrap, kafka_admin, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=CYCLES, sink=sink)
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(yaml.safe_dump(s.model_dump(mode="json", by_alias=True)))
    retry = s.topics.retry[0]
    log = tmp_path / "consumer.log"
    produce(kafka_bootstrap, source, [(b"k0", b"m0", None), (b"k1", b"poison-1", None), (b"k2", b"m2", None)])
    assert consumer_run(stack, calls_dir, log, settings_file) == 0, log.read_text()[-3000:]
    assert len(read_all(kafka_bootstrap, s.topics.poison)) == 1

    recreate(kafka_admin, retry, 1)
    produce(kafka_bootstrap, source, [(b"k3", b"m3", None), (b"k4", b"poison-4", None), (b"k5", b"m5", None)])
    # Before: exit 0, poison-4 parked at offset 0 of the new topic, below the ledger's position.
    code = consumer_run(stack, calls_dir, log, settings_file)
    assert code == 2, log.read_text()[-3000:]
    line = own_line(log.read_text())
    assert f"topic {retry} was deleted and recreated since the ledger recorded it (topic id " in line
    assert "partition 0: ledger position " in line and "end offset now 0" in line
    assert line.endswith(f"antidote rebase c -n tests --topic {retry}"), line
    assert cu.calls(calls_dir, source)[f"{source}/0/3"] == 0  # refused before reading anything

    def rebase_cli() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "antidote_cli.main", "rebase", "c", "-n", "tests",
                               "--topic", retry, "--settings", str(settings_file)],
                              env={**os.environ, "PYTHONPATH": CODE_PATH}, cwd=cu.REPO,
                              capture_output=True, text=True, timeout=120)

    out = rebase_cli()
    assert out.returncode == 0, out.stderr
    assert "reads it from its beginning: partition 0 from 0" in out.stdout, out.stdout
    again = rebase_cli()  # the ledger has the new topic now: nothing to rebase, nothing fenced
    assert again.returncode == 1 and "nothing to rebase, nothing was changed" in again.stderr, again.stderr
    assert consumer_run(stack, calls_dir, log, settings_file) == 0, log.read_text()[-3000:]

    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)  # fails on a duplicate
    assert set(poison) == {(0, 1), (0, 4)}
    assert all(h["antidote.attempts"] == "2" for _, h in poison.values())
    calls = cu.calls(calls_dir, source)
    assert calls[f"{source}/0/4"] == 2 and calls[f"{source}/0/1"] == 2
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == [b"M0", b"M2", b"M3", b"M5"]


def test_a_recreated_source_topic_is_refused_even_past_the_old_offsets_then_read_whole(
        spark, kafka_bootstrap, kafka_admin, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    s = cu.settings(kafka_bootstrap, source, tmp_path, sink=sink,
                    policy={"retries": {"immediate": 0, "cycles": 0}})
    produce(kafka_bootstrap, source, [(b"k%d" % i, b"m%d" % i, None) for i in range(5)])
    code, _ = cu.run(spark, s)
    assert code == 0

    recreate(kafka_admin, source, 1)
    # The new topic grows past the old position (5): its end alone would not tell; its id does.
    # Before: Spark went on from the checkpoint's offset 5 and n0..n4 never got an outcome.
    produce(kafka_bootstrap, source, [(b"n%d" % i, b"n%d" % i, None) for i in range(8)])
    with pytest.raises(TopicMisfit) as err:  # exit 2 in `antidote consumer`
        cu.run(spark, s)
    assert (f"topic {source} was deleted and recreated since the ledger recorded it (topic id "
            in str(err.value))
    assert "partition 0: ledger position 5, end offset now 8" in str(err.value)
    assert all(cu.calls(calls_dir, source)[f"{source}/0/{o}"] == 0 for o in (5, 6, 7))  # nothing read
    with pytest.raises(TopicMisfit):  # a restart refuses again: nothing changed by itself
        cu.run(spark, s)

    from antidote_consumer.driver.rebase import rebase

    done = rebase(s, source)
    assert done.source and done.starts == {0: 0}
    code, _ = cu.run(spark, s)  # the stale checkpoint removed; read from offset 0
    assert code == 0
    calls = cu.calls(calls_dir, source)  # the old topic's m0..m4, then the new one's n0..n7
    assert [calls[f"{source}/0/{o}"] for o in range(8)] == [2, 2, 2, 2, 2, 1, 1, 1]
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == sorted(
        [b"M%d" % i for i in range(5)] + [b"N%d" % i for i in range(8)])


def test_a_retry_topic_recreated_while_the_consumer_runs_stops_it_with_exit_2(
        stack, kafka_bootstrap, kafka_admin, topic_factory, tmp_path, calls_dir) -> None:
    """Before: the pump went on reading from the old position, past every new record (the
    driver ran on, healthy, and parked messages never came back)."""
    source, sink = topic_factory(), topic_factory("-out")
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=CYCLES, sink=sink)
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(yaml.safe_dump(s.model_dump(mode="json", by_alias=True)))
    retry = s.topics.retry[0]
    produce(kafka_bootstrap, source, [(b"k0", b"poison-0", None), (b"k1", b"m1", None)])
    log = tmp_path / "consumer.log"
    proc = cu.start(stack, calls_dir, log, ["--settings", str(settings_file)], PYTHONPATH=CODE_PATH)
    try:
        deadline = time.monotonic() + 180
        while not read_all(kafka_bootstrap, s.topics.poison, missing_ok=True):  # read retry-1 past 0
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        recreate(kafka_admin, retry, 1)
        code = proc.wait(120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    assert code == 2, log.read_text()[-3000:]
    line = own_line(log.read_text())
    # Found by its new id (the driver looks every 2 s) or by the pump (a position past the end).
    assert line.startswith(f"antidote consumer: topic {retry} was deleted and recreated since the ledger "
                           "recorded it ("), line
    assert "partition 0: ledger position " in line, line
    assert line.endswith(f"antidote rebase c -n tests --topic {retry}"), line


def test_a_ledger_from_before_topic_ids_is_checked_by_end_offsets(
        spark, kafka_bootstrap, kafka_admin, topic_factory, tmp_path, calls_dir) -> None:
    """A ledger an earlier version wrote has positions but no topic ids: a position past the
    end of the recreated topic's partition refuses the start all the same."""
    import json

    from antidote_api.names import ledger_names

    source = topic_factory()
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=CYCLES)
    retry = s.topics.retry[0]
    produce(kafka_bootstrap, source, [(b"k0", b"poison-0", None), (b"k1", b"m1", None)])
    code, _ = cu.run(spark, s)
    assert code == 0 and len(read_all(kafka_bootstrap, s.topics.poison)) == 1
    # As an earlier version left it: the ledger's latest "topics" entry names no id.
    produce(kafka_bootstrap, ledger_names(s).topic, [(b"topics", json.dumps({"ids": {}}).encode(), None)])

    recreate(kafka_admin, retry, 1)
    with pytest.raises(TopicMisfit) as err:  # before: exit 0, whatever parks there next is lost
        cu.run(spark, s)
    line = str(err.value)
    assert f"topic {retry} was deleted and recreated since the ledger recorded it (topic id " in line
    assert "now, none in the ledger; partition 0: ledger position " in line and "end offset now 0" in line


def test_a_source_topic_recreated_while_the_consumer_runs_ends_in_exit_2_not_a_crash_loop(
        stack, kafka_bootstrap, kafka_admin, topic_factory, tmp_path, calls_dir) -> None:
    """Before: Spark's query failed on the offsets that went back, the driver exited 1, and
    every restart failed the same way (a crash loop the crash-loop guard never counts: no
    batch had begun). Now the driver's look at the topic ids stops it with exit 2, or the
    query fails first and the restart refuses with exit 2: the line says what to do."""
    source, sink = topic_factory(), topic_factory("-out")
    s = cu.settings(kafka_bootstrap, source, tmp_path, sink=sink, policy={"retries": {"immediate": 0, "cycles": 0}})
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(yaml.safe_dump(s.model_dump(mode="json", by_alias=True)))
    produce(kafka_bootstrap, source, [(b"k%d" % i, b"m%d" % i, None) for i in range(5)])
    log = tmp_path / "consumer.log"
    proc = cu.start(stack, calls_dir, log, ["--settings", str(settings_file)], PYTHONPATH=CODE_PATH)
    try:
        deadline = time.monotonic() + 180
        while len(read_all(kafka_bootstrap, sink)) < 5:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        recreate(kafka_admin, source, 1)
        codes = [proc.wait(120)]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    if codes[0] == 1:  # the query failed first: the Deployment restarts the driver
        codes.append(consumer_run(stack, calls_dir, log, settings_file))
    assert codes[-1] == 2, (codes, log.read_text()[-3000:])
    line = own_line(log.read_text())
    assert f"topic {source} was deleted and recreated since the ledger recorded it (topic id " in line, line
    assert line.endswith(f"antidote rebase c -n tests --topic {source}"), line
