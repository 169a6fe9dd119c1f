"""The driver's liveness follows the batch, not the retry pump (issue 43, item 10): a batch
whose Python worker makes no progress (frozen: nothing in it runs, as with C code that holds
the GIL) turns /healthz to 503 and stops the heartbeat within the run's bound, derived from
the settings; the local worker's wait has the same bound."""

from __future__ import annotations

import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from antidote_consumer.driver.liveness import run_bound
from antidote_consumer.worker.executor import WorkerConfig
from antidote_devstack.procs import free_port

from antidote_testkit import consumers as cu
from antidote_testkit.consumers import start
from antidote_testkit.kafka_io import produce
from .test_consumer_process import kill9, wait_until

HANDLER = "tests.integration.handlers_liveness:freeze_on_freeze"
# The worktree's packages first (the venv's editable install may point at another checkout).
PYTHONPATH = cu.CODE_PATH


def _health(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _heartbeat(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("antidote_heartbeat_timestamp_seconds{"):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def _thaw(calls_dir: Path) -> None:
    pids = calls_dir / "frozen.pid"
    for pid in (pids.read_text().split() if pids.exists() else []):
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.slow  # `make test-slow` (docs/testing.md)
def test_a_frozen_batch_fails_the_liveness_within_its_bound_though_the_pump_is_idle(
        stack, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    """Retry cycles on, so the retry pump runs its idle rounds (every 2 s) all along; before,
    they kept the heartbeat fresh and /healthz at 200 for as long as the batch hung."""
    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(None, v, None) for v in (b"m0", b"freeze", b"m2")])
    policy = {"retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s", "attemptTimeout": "1s"}}
    args = cu.write_manifests(tmp_path, name="live", namespace="tests", bootstrap=kafka_bootstrap,
                              source=source, handler=HANDLER, policy=policy, sink=sink, max_batch=3)
    # The job's bound: 3 rows x 1 attempt x (1 s + 1 s grace + 5 s) x 1 try (local mode) + 60 s.
    bound = run_bound(3, 0, 1.0, tries=1)
    log = tmp_path / "consumer.log"
    port = free_port()
    proc = start(stack, calls_dir, log, [*args, "--metrics-port", str(port)], PYTHONPATH=PYTHONPATH)
    try:
        wait_until(lambda: cu.calls(calls_dir, source)[f"{source}/0/1"] >= 1, 180, proc, log,
                   "the handler to freeze its worker")
        frozen_at = time.monotonic()
        assert _health(port)[0] == 200
        wait_until(lambda: _health(port)[0] == 503, bound + 30, proc, log, "/healthz to fail")
        took = time.monotonic() - frozen_at
        status, text = _health(port)
        assert status == 503 and text.startswith("stalled: a batch's Spark job has run"), text
        assert f"past its bound of {bound:.0f}s" in text
        assert took <= bound + 5, took  # the job started before the freeze: within its bound
        # The heartbeat stopped with the run: the pump's idle rounds no longer refresh it.
        beat = _heartbeat(port)
        assert time.time() - beat >= took - bound - 1
        wait_until(lambda: time.time() - beat > 4, 30, proc, log, "two idle pump rounds")
        assert _heartbeat(port) == beat
        print(f"/healthz failed {took:.1f}s after the freeze; bound {bound:.0f}s")
    finally:
        _thaw(calls_dir)
        kill9(proc)


def test_the_local_worker_kills_a_frozen_retry_batch_at_its_bound(tmp_path, monkeypatch) -> None:
    """LocalWorker.run waited on its result for ever; now for the run's bound, then the
    process is killed and the batch goes to a Spark job (Runtime._run_local)."""
    from antidote_consumer.worker.local import LocalWorker, LocalWorkerStuck

    monkeypatch.setenv("ANTIDOTE_TEST_CALLS_DIR", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", PYTHONPATH)
    cfg = WorkerConfig(handler=HANDLER, source_topic="src", immediate=0, cycles=0, non_retryable=frozenset(),
                       validation=None, sink_kafka=None, emit_outputs=False, attempt_timeout=1.0)
    row = (None, b"freeze", "src", 0, 7, 0, [])
    worker = LocalWorker()
    try:
        started = time.monotonic()
        with pytest.raises(LocalWorkerStuck, match=r"retry batch of 1 message\(s\) for 3s, past its bound"):
            worker.run(cfg, [row], timeout=3.0)
        assert 3.0 <= time.monotonic() - started < 20
        assert (tmp_path / "frozen.pid").exists()  # it did run, and froze
        # A fresh process runs the next batch.
        ok = worker.run(cfg, [(None, b"fine", "src", 0, 8, 0, [])], timeout=60)
        assert sum(r.n_ok for r in ok if r.kind == "summary") == 1
    finally:
        worker.close()
        _thaw(tmp_path)


@pytest.mark.slow  # `make test-slow` (docs/testing.md): ~100 s
def test_a_handler_holding_the_gil_ends_its_worker_and_is_isolated(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    """C code holding the GIL: neither the SIGUSR1 handler nor the watchdog thread runs, so
    before, the task (and the batch) hung for ever. faulthandler's timer, pushed back by the
    watchdog every round, ends the worker at limit + grace + 5 s; the batch fails as a whole
    and bisection isolates the message, like one that does not unwind."""
    from antidote_api.wire import ExitCode

    from antidote_testkit.kafka_io import read_all

    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(b"k%d" % i, b"gil" if i == 2 else b"m%d" % i, None) for i in range(6)])
    # A name of its own: its ledger's transactional id is not fenced by another test's.
    s = cu.settings(kafka_bootstrap, source, tmp_path, handler="gil_on_gil", sink=sink, name="gil", policy={
        "retries": {"immediate": 0, "cycles": 0, "attemptTimeout": "1s"},
        "queueDisable": {"consecutiveBatchFailures": 1}})
    s = s.model_copy(update={"handler": "tests.integration.handlers_liveness:gil_on_gil"})

    code, m = cu.run(spark, s, deadline=240)

    assert code == ExitCode.OK
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == {(0, 2)}
    _, hdrs = poison[(0, 2)]
    assert (hdrs["antidote.reason"], hdrs["antidote.error.class"]) == ("batch-isolation",
                                                                       "antidote.BatchFailure")
    assert {r.value for r in read_all(kafka_bootstrap, sink)} == {b"M%d" % i for i in range(6) if i != 2}
