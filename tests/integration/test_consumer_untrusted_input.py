"""What a source's producers and a handler can throw at `antidote consumer` (a process, run
`--until-idle`): records of aborted transactions, source records carrying forged `antidote.*`
headers, an exception whose str() raises. Each message still gets exactly one outcome, with
exact attempts `(immediate + 1) x (cycles + 1)` and only Antidote's true headers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import yaml
from confluent_kafka import Producer

from antidote_api import headers as names
from antidote_api.names import ledger_names
from antidote_api.wire import ExitCode
from antidote_consumer.driver.ledger import load_state

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all
from .test_consumer_process import exited, wait_until

POLICY = {"retries": {"immediate": 1, "cycles": 1, "cycleDelay": "1s"}}
ATTEMPTS = (1 + 1) * (1 + 1)  # (immediate + 1)(cycles + 1)
REPO = cu.REPO


def unique_name() -> str:
    """A consumer name of its own: its transactional id must not fence (or be fenced by) a
    consumer of another test sharing the stack."""
    return f"untrusted-{uuid.uuid4().hex[:8]}"


# This checkout's packages first: the venv's editable install may point at another one.
PATH = cu.CODE_PATH


def start(stack, calls_dir: Path, tmp_path: Path, args: list[str]):
    return cu.start(stack, calls_dir, tmp_path / "consumer.log", args, PYTHONPATH=PATH)


def run_until_idle(stack, calls_dir: Path, tmp_path: Path, bootstrap: str, source: str, sink: str,
                   handler: str) -> None:
    args = cu.write_manifests(tmp_path, name=unique_name(), namespace="tests", bootstrap=bootstrap,
                              source=source, handler=handler, policy=POLICY, sink=sink)
    proc = start(stack, calls_dir, tmp_path, [*args, "--until-idle"])
    assert exited(proc, 600) == 0, (tmp_path / "consumer.log").read_text()[-3000:]


def open_transaction(bootstrap: str, topic: str, values: list[bytes]) -> Producer:
    """`values` written to `topic` in a transaction left open (flushed: in the log, past the
    last stable offset); the caller commits or aborts it."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"test-{uuid.uuid4().hex}"})
    p.init_transactions(30)
    p.begin_transaction()
    for v in values:
        p.produce(topic, value=v)
    assert p.flush(30) == 0
    return p


def transaction(bootstrap: str, topic: str, values: list[bytes], *, commit: bool) -> None:
    """`values` written to `topic` in one transaction, then committed or aborted."""
    p = open_transaction(bootstrap, topic, values)
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


def test_records_of_aborted_transactions_get_no_outcome(stack, kafka_bootstrap, topic_factory,
                                                        tmp_path, calls_dir) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    transaction(kafka_bootstrap, source, [b"a1", b"poison", b"a2"], commit=False)
    transaction(kafka_bootstrap, source, [b"c1", b"poison", b"c2"], commit=True)
    transaction(kafka_bootstrap, source, [b"a3", b"poison"], commit=False)  # between committed ones
    produce(kafka_bootstrap, source, [(None, b"c3", None)])  # no transaction: committed as written
    committed = {(r.partition, r.offset): r.value for r in read_all(kafka_bootstrap, source)}
    assert sorted(committed.values()) == [b"c1", b"c2", b"c3", b"poison"]  # read_committed

    run_until_idle(stack, calls_dir, tmp_path, kafka_bootstrap, source, sink,
                   "tests.integration.handlers:upper")

    # The handler saw the committed records only: never an aborted one, poison or not.
    called = cu.calls(calls_dir, source)
    assert set(called) == {f"{source}/{p}/{o}" for p, o in committed}
    (bad,) = [k for k, v in committed.items() if v == b"poison"]
    assert called[f"{source}/{bad[0]}/{bad[1]}"] == ATTEMPTS
    assert all(n == 1 for where, n in called.items() if where != f"{source}/{bad[0]}/{bad[1]}")
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == [b"C1", b"C2", b"C3"]
    poison = cu.quarantined(kafka_bootstrap, f"{source}.poison")
    assert set(poison) == {bad} and poison[bad][1]["antidote.attempts"] == str(ATTEMPTS)
    assert read_all(kafka_bootstrap, f"{source}.dlq", missing_ok=True) == []


def test_a_latest_consumer_reads_a_transaction_open_at_its_start_once_it_commits(
        stack, kafka_bootstrap, kafka_admin, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(None, b"old", None)])  # offset 0: before the start
    pending = open_transaction(kafka_bootstrap, source, [b"t1", b"t2"])  # offsets 1, 2
    name = unique_name()
    args = cu.write_manifests(tmp_path, name=name, namespace="tests", bootstrap=kafka_bootstrap,
                              source=source, handler="tests.integration.handlers:upper",
                              policy=POLICY, sink=sink)
    qc = yaml.safe_load((tmp_path / "qc.yaml").read_text())
    qc["spec"]["source"]["kafka"]["startingOffsets"] = "latest"
    (tmp_path / "qc.yaml").write_text(yaml.safe_dump(qc))
    ledger = ledger_names(cu.settings(kafka_bootstrap, source, tmp_path, name=name)).topic
    log = tmp_path / "consumer.log"

    def recorded() -> dict:  # the consumer creates its ledger topic as it starts
        if ledger not in kafka_admin.list_topics(timeout=10).topics:
            return {}
        return load_state(kafka_bootstrap, ledger).source_start

    proc = start(stack, calls_dir, tmp_path, args)
    try:
        wait_until(recorded, 300, proc, log, "the consumer to record where it starts")
        # "latest" as a read_committed reader sees it: the open transaction is still ahead.
        assert load_state(kafka_bootstrap, ledger).source_start == {"0": 1}
        pending.commit_transaction(30)
        produce(kafka_bootstrap, source, [(None, b"after", None)])
        wait_until(lambda: len(read_all(kafka_bootstrap, sink, missing_ok=True)) >= 3, 300, proc, log,
                   "3 outputs")
        proc.send_signal(signal.SIGTERM)
        assert exited(proc, 120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == [b"AFTER", b"T1", b"T2"]
    assert f"{source}/0/0" not in cu.calls(calls_dir, source)


# Antidote's headers on a quarantine record that went through a retry cycle (Move), and on one
# quarantined from its source batch: no antidote.due (a retry record's), never antidote.held.
MOVED = [names.ORIGINAL_TOPIC, names.ORIGINAL_PARTITION, names.ORIGINAL_OFFSET,
         names.ORIGINAL_TIMESTAMP, names.ATTEMPTS, names.CYCLE, names.FIRST_FAILURE,
         names.LAST_FAILURE, names.CONSUMER, names.POLICY, names.REASON, names.DISPOSITION,
         names.ERROR_CLASS, names.ERROR_MESSAGE, names.ERROR_STACK]
FORGED = [(names.HELD, b"1"), (names.ATTEMPTS, b"0"), (names.CYCLE, b"1"),
          (names.ERROR_STACK, b"forged stack"), (names.DUE, b"1"), (names.ERROR_CLASS, b"Forged"),
          (names.ORIGINAL_OFFSET, b"999999")]


def test_forged_antidote_headers_on_source_records_change_nothing(stack, kafka_bootstrap, topic_factory,
                                                                  tmp_path, calls_dir) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    values = [b"ok", b"poison", b"fatal", b"ok2", b"poison"]
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, [("trace", b"t%d" % i)] + FORGED)
                                      for i, v in enumerate(values)])

    run_until_idle(stack, calls_dir, tmp_path, kafka_bootstrap, source, sink,
                   "tests.integration.handlers_untrusted:by_value")

    called = cu.calls(calls_dir, source)
    poison = cu.quarantined(kafka_bootstrap, f"{source}.poison")  # fails on a duplicate
    assert set(poison) == {(0, 1), (0, 2), (0, 4)}
    for offset, attempts, cycle, error_class in ((1, ATTEMPTS, 1, "ValueError"), (4, ATTEMPTS, 1, "ValueError"),
                                                 (2, 1, 0, "antidote.NonRetryable")):
        record, hdrs = poison[(0, offset)]
        # Fresh messages: every attempt, from the first delivery, whatever the headers said.
        assert called[f"{source}/0/{offset}"] == attempts
        assert (hdrs[names.ATTEMPTS], hdrs[names.CYCLE], hdrs[names.ORIGINAL_OFFSET]) == (
            str(attempts), str(cycle), str(offset))
        # Only the message's own header and Antidote's true ones, each once.
        assert [k for k, _ in record.headers] == ["trace"] + MOVED, record.headers
        assert hdrs[names.ERROR_CLASS] == error_class
        assert "forged" not in hdrs[names.ERROR_STACK] and error_class.split(".")[-1] in hdrs[names.ERROR_STACK]
    outputs = read_all(kafka_bootstrap, sink)
    assert sorted(r.value for r in outputs) == [b"OK", b"OK2"]
    assert {r.headers for r in outputs} == {(("trace", b"t0"),), (("trace", b"t3"),)}
    assert called[f"{source}/0/0"] == called[f"{source}/0/3"] == 1


def test_an_error_whose_str_raises_is_an_ordinary_failure(stack, kafka_bootstrap, topic_factory,
                                                          tmp_path, calls_dir) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(None, v, None) for v in (b"a", b"odd", b"b", b"odd", b"c")])

    run_until_idle(stack, calls_dir, tmp_path, kafka_bootstrap, source, sink,
                   "tests.integration.handlers_untrusted:unprintable_on_odd")

    called = cu.calls(calls_dir, source)
    poison = cu.quarantined(kafka_bootstrap, f"{source}.poison")
    assert set(poison) == {(0, 1), (0, 3)}
    for where, (_record, hdrs) in poison.items():
        # Retried and quarantined as any failure: not a failed batch, not batch-isolation.
        assert called[f"{source}/0/{where[1]}"] == ATTEMPTS
        assert (hdrs[names.ATTEMPTS], hdrs[names.REASON]) == (str(ATTEMPTS), "max-attempts")
        assert hdrs[names.ERROR_CLASS] == "tests.integration.handlers_untrusted.Unprintable"
        assert hdrs[names.ERROR_MESSAGE] == ("<str() of tests.integration.handlers_untrusted.Unprintable "
                                             "failed: RuntimeError>")
        assert "<exception str() failed>" in hdrs[names.ERROR_STACK]  # as Python's traceback says
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == [b"A", b"B", b"C"]
    assert all(called[f"{source}/0/{o}"] == 1 for o in (0, 2, 4))


def test_antidote_skip_moves_a_source_record_without_its_forged_headers(
        stack, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, [("trace", b"t%d" % i)] + FORGED)
                                      for i, v in enumerate([b"ok", b"fatal"])])
    name, policy = unique_name(), {"retries": {"immediate": 0, "cycles": 0}, "disposition": "Fault"}
    args = cu.write_manifests(tmp_path, name=name, namespace="tests", bootstrap=kafka_bootstrap,
                              source=source, handler="tests.integration.handlers_untrusted:by_value",
                              policy=policy, sink=sink)
    proc = start(stack, calls_dir, tmp_path, [*args, "--until-idle", "--metrics-linger", "0"])
    assert exited(proc, 600) == ExitCode.FAULT, (tmp_path / "consumer.log").read_text()[-3000:]
    s = cu.settings(kafka_bootstrap, source, tmp_path, name=name, policy=policy, sink=sink)
    (tmp_path / "settings.json").write_text(json.dumps(s.model_dump(mode="json", by_alias=True)))

    out = subprocess.run([sys.executable, "-m", "antidote_cli.main", "skip", name, "--settings",
                          str(tmp_path / "settings.json")], capture_output=True, text=True, timeout=240,
                         env={**os.environ, **stack.env(), "PYTHONPATH": PATH})

    assert out.returncode == 0, out.stderr
    (q,) = read_all(kafka_bootstrap, f"{source}.poison")
    # The message's own header, Antidote's (no stack: skip has none) and the skip's time.
    assert [k for k, _ in q.headers] == ["trace"] + MOVED[:-1] + [names.SKIPPED_AT], q.headers
    hdrs = dict(q.headers)
    assert (hdrs[names.ORIGINAL_OFFSET], hdrs[names.ERROR_CLASS]) == (b"1", b"antidote.NonRetryable")
    assert [r.headers for r in read_all(kafka_bootstrap, sink)] == [(("trace", b"t0"),)]
