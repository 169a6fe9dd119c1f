"""`antidote consumer` as a process: killed with SIGKILL at the worst moments, stopped with
SIGTERM, restarted; nothing is lost, nothing is quarantined twice, attempts stay exact."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import yaml

from antidote_api.names import ledger_topic
from antidote_consumer.driver.ledger import load_state
from antidote_devstack.procs import free_port

from antidote_testkit import consumers as cu
from antidote_testkit.consumers import start
from .cut_short import Committed, abort_open_transaction
from antidote_testkit.kafka_io import produce, read_all

def manifests(tmp_path: Path, bootstrap: str, source: str, sink: str, handler: str,
              policy: dict, max_batch: int = 1000) -> list[str]:
    return cu.write_manifests(tmp_path, name="proc", namespace="tests", bootstrap=bootstrap, source=source,
                              handler=f"tests.integration.handlers:{handler}", policy=policy, sink=sink,
                              max_batch=max_batch)


def wait_until(check, timeout: float, proc: subprocess.Popen, log: Path, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            pytest.fail(f"consumer exited {proc.returncode} while waiting for {what}:\n"
                        + log.read_text()[-3000:])
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"timed out waiting for {what}:\n" + log.read_text()[-3000:])
        time.sleep(0.3)


def kill9(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def exited(proc: subprocess.Popen, timeout: float) -> int:
    """Its exit code; killed (with its Spark JVM) if it has not exited by then."""
    try:
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            kill9(proc)


def jvm_started(proc: subprocess.Popen) -> bool:
    """Spark's JVM runs in the consumer's session (start_new_session: its id is the pid)."""
    return subprocess.run(["pgrep", "-s", str(proc.pid), "java"], capture_output=True).returncode == 0


def finish(stack, calls_dir, log, args) -> None:
    proc = start(stack, calls_dir, log, [*args, "--until-idle"])
    assert exited(proc, 300) == 0, log.read_text()[-3000:]


def test_sigkill_between_retry_cycles_keeps_attempts_exact(stack, kafka_bootstrap, topic_factory,
                                                           tmp_path, calls_dir) -> None:
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    poison_at = {3, 17, 29, 41, 48}
    produce(kafka_bootstrap, source, [(b"k%d" % i, b"poison" if i in poison_at else b"m%d" % i, None)
                                      for i in range(50)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy={
        "retries": {"immediate": 2, "cycles": 2, "cycleDelay": "10s"}})
    args = manifests(tmp_path, kafka_bootstrap, source, sink, "upper",
                     {"retries": {"immediate": 2, "cycles": 2, "cycleDelay": "10s"}})
    log = tmp_path / "consumer.log"

    proc = start(stack, calls_dir, log, args)
    # Killed while the poison messages wait in retry-1 for their due time.
    wait_until(lambda: len(read_all(kafka_bootstrap, s.topics.retry[0], missing_ok=True)) == 5, 120, proc, log,
               "5 records parked in retry-1")
    kill9(proc)
    finish(stack, calls_dir, log, args)

    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert len(poison) == 5
    assert all(h["antidote.attempts"] == "9" for _, h in poison.values())
    per_offset = cu.calls(calls_dir, source)
    for (p, o) in poison:
        assert per_offset[f"{source}/{p}/{o}"] == 9, (p, o)
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == sorted(
        b"M%d" % i for i in range(50) if i not in poison_at)


def test_sigkill_mid_batch_loses_nothing_and_quarantines_once(stack, kafka_bootstrap, topic_factory,
                                                              tmp_path, calls_dir) -> None:
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    n, gate = 300, 150
    produce(kafka_bootstrap, source, [
        (b"k%d" % i, b"poison" if i % 30 == 7 else b"m%d gate" % i if i == gate else b"m%d" % i, None)
        for i in range(n)])
    policy = {"retries": {"immediate": 1, "cycles": 1, "cycleDelay": "1s"}}
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=policy, name="proc")
    args = manifests(tmp_path, kafka_bootstrap, source, sink, "gated_slow_upper", policy, max_batch=40)
    log = tmp_path / "consumer.log"
    src = {(r.partition, r.offset): r for r in read_all(kafka_bootstrap, source)}
    (at,) = [where for where, r in src.items() if b"gate" in r.value]
    held = calls_dir / f"{source}.gate"  # the batch holding message 150 waits while it exists
    held.touch()

    proc = start(stack, calls_dir, log, args, ANTIDOTE_TEST_DELAY="0.02")

    def cut_mid_batch() -> bool:
        # The held batch has begun (150 called), and the task of its other partition has
        # committed its outputs (exactly-once: with its ledger entry) that the driver has not
        # settled: the kill falls between the executors' commits and the driver's.
        if not cu.calls(calls_dir, source)[f"{source}/{at[0]}/{at[1]}"]:
            return False
        floor = load_state(kafka_bootstrap, ledger_topic(source, s.namespace, s.consumer)).positions
        out = {r.value for r in read_all(kafka_bootstrap, sink)}
        return any(r.value.upper() in out and w[1] >= floor.get(f"{source}:{w[0]}", 0) for w, r in src.items())
    wait_until(cut_mid_batch, 180, proc, log, "the held batch's other partition's outputs")
    kill9(proc)
    held.unlink()
    # What the killed run committed, and what it did beyond (its calls, its outputs).
    abort_open_transaction(kafka_bootstrap, s)
    before = Committed.read(kafka_bootstrap, s, sink, calls_dir, list(src))
    assert before.covered  # the kill cut a batch whose outputs were partly committed
    finish(stack, calls_dir, log, [*args])

    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)  # fails on a duplicate
    bad = {k for k, r in src.items() if r.value == b"poison"}
    assert set(poison) == bad and len(bad) == 10
    # Attempts are exact: a pass cut by the kill was never committed, and runs again whole.
    assert {h["antidote.attempts"] for _, h in poison.values()} == {"4"}  # (1 + 1) x (1 + 1)
    # Handler calls are exact too: the policy's, plus those of the pass the kill cut short.
    calls = cu.calls(calls_dir, source)
    assert {w: calls[f"{source}/{w[0]}/{w[1]}"] for w in src} == {
        w: before.expected_calls(s, w, w in bad) for w in src}
    # Each output exactly once (the sink is exactly-once, read read_committed): the replay
    # passed over the outputs the executors had committed before the kill.
    outputs = Counter(r.value for r in read_all(kafka_bootstrap, sink))
    assert outputs == Counter(r.value.upper() for w, r in src.items() if w not in bad)
    assert outputs == before.expected_outputs({w: r.value.upper() for w, r in src.items() if w not in bad})
    state = load_state(kafka_bootstrap, ledger_topic(source, s.namespace, s.consumer))
    assert state.counts == {"processed": n - 10, "retried": 10, "moved": 10, "rejected": 0, "dropped": 0}


def test_sigterm_stops_cleanly_and_a_restart_resumes(stack, kafka_bootstrap, topic_factory,
                                                     tmp_path, calls_dir) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    n = 200
    produce(kafka_bootstrap, source, [(None, b"poison" if i % 50 == 1 else b"m%d" % i, None)
                                      for i in range(n)])
    policy = {"retries": {"immediate": 0, "cycles": 0}}
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=policy)
    args = manifests(tmp_path, kafka_bootstrap, source, sink, "slow_upper", policy, max_batch=20)
    log = tmp_path / "consumer.log"
    port = free_port()

    proc = start(stack, calls_dir, log, [*args, "--metrics-port", str(port)],
                 ANTIDOTE_TEST_DELAY="0.02")
    wait_until(lambda: len(read_all(kafka_bootstrap, sink)) >= 40, 180, proc, log, "40 outputs")
    scraped = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'antidote_messages_total{consumer="proc",namespace="tests",outcome="processed"}' in scraped
    proc.send_signal(signal.SIGTERM)
    assert exited(proc, 90) == 0, log.read_text()[-3000:]
    assert "stop requested" in log.read_text()
    # It finishes the batch it found running, and starts no other: the backlog's next batches
    # (the trigger fires again as soon as one ends) ran on until the stop's limit before.
    after = log.read_text().split("stop requested", 1)[1]
    assert len(re.findall(r"INFO antidote\.consumer: batch \d+: \d+ messages", after)) <= 1, after[-3000:]

    finish(stack, calls_dir, log, args)
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert len(poison) == 4
    outputs = [r.value for r in read_all(kafka_bootstrap, sink)]
    assert set(outputs) == {b"M%d" % i for i in range(n) if i % 50 != 1}
    assert len(outputs) == n - 4  # a graceful stop finishes its batch: no duplicates


def test_sigterm_while_spark_starts_exits_0_having_read_nothing(stack, kafka_bootstrap, topic_factory,
                                                                tmp_path, calls_dir) -> None:
    """A SIGTERM before the consumer's query runs is not lost: in its pod the driver is PID 1,
    and the kernel drops a signal PID 1 has no handler for, so such a driver ran on until the
    grace period's SIGKILL. It exits 0 once Spark is up, before reading the source."""
    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(None, b"m%d" % i, None) for i in range(5)])
    args = manifests(tmp_path, kafka_bootstrap, source, sink, "upper", {"retries": {"immediate": 0, "cycles": 0}})
    log = tmp_path / "consumer.log"

    proc = start(stack, calls_dir, log, args)
    # Spark's JVM is starting, seconds before the consumer exists.
    wait_until(lambda: jvm_started(proc), 60, proc, log, "the JVM")
    proc.send_signal(signal.SIGTERM)
    assert exited(proc, 60) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "stopped while starting" in text, text[-3000:]
    assert not re.search(r"antidote\.consumer: batch \d+:", text), text[-3000:]
    assert read_all(kafka_bootstrap, sink, missing_ok=True) == []
    assert not cu.calls(calls_dir, source)


def test_a_handler_that_cannot_be_imported_exits_2_before_spark_naming_spec_handler(
        stack, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    args = manifests(tmp_path, kafka_bootstrap, source, sink, "upper", {})
    qc = yaml.safe_load((tmp_path / "qc.yaml").read_text())
    qc["spec"]["handler"] = "shop_handlers_missing.orders:handle"
    (tmp_path / "qc.yaml").write_text(yaml.safe_dump(qc))
    log = tmp_path / "consumer.log"

    started = time.monotonic()
    proc = start(stack, calls_dir, log, args)
    code = exited(proc, 60)
    took = time.monotonic() - started

    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert code == 2, lines
    assert lines == ["antidote consumer: spec.handler 'shop_handlers_missing.orders:handle': cannot "
                     "import shop_handlers_missing.orders: No module named 'shop_handlers_missing'"]
    assert took < 20, took  # no Spark session, no ledger, no batch: refused at start
    assert read_all(kafka_bootstrap, sink) == []


def test_sigterm_does_not_wait_on_a_hung_handler_longer_than_its_limit(
        stack, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    """The hung message's batch would take (immediate + 1) x 6 s = 36 s; a SIGTERM cuts it
    6 s after it is sent, and a restart (here with a policy that gives up sooner) processes
    the batch again: nothing lost."""
    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(None, b"hang" if i == 1 else b"m%d" % i, None) for i in range(5)])
    policy = {"retries": {"immediate": 5, "cycles": 0, "attemptTimeout": "6s"}}
    args = manifests(tmp_path, kafka_bootstrap, source, sink, "hang_on_hang", policy)
    log = tmp_path / "consumer.log"
    port = free_port()

    proc = start(stack, calls_dir, log, [*args, "--metrics-port", str(port)])
    wait_until(lambda: cu.calls(calls_dir, source)[f"{source}/0/1"] >= 1, 180, proc, log,
               "the handler to hang")
    health = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
    assert health.status == 200 and health.read().startswith(b"ok")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert exited(proc, 60) == 0, log.read_text()[-3000:]
    took = time.monotonic() - sent
    assert "finishing the current batch (at most 6s)" in log.read_text()
    assert took < 6 + 15, took  # the limit, then stopping Spark
    assert cu.calls(calls_dir, source)[f"{source}/0/1"] < 6  # the batch was cut short

    quick = {"retries": {"immediate": 0, "cycles": 0, "attemptTimeout": "1s"}}
    finish(stack, calls_dir, log, manifests(tmp_path, kafka_bootstrap, source, sink, "hang_on_hang", quick))
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=quick)
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == {(0, 1)} and poison[(0, 1)][1]["antidote.error.class"] == "antidote.AttemptTimeout"
    assert {r.value for r in read_all(kafka_bootstrap, sink)} == {b"M0", b"M2", b"M3", b"M4"}
