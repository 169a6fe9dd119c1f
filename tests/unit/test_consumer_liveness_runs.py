"""The liveness counts progress of what may be stuck: a run past its bound (derived from the
settings) stalls the driver whatever the retry pump's idle rounds do; the metrics server
closes a connection that sends nothing."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest

from antidote_consumer.driver.liveness import (RUN_MARGIN_S, Liveness, RunBounds, attempt_bound,
                                               run_bound, task_tries)
from antidote_consumer.driver.metrics import Metrics


def test_an_attempt_is_bounded_by_its_limit_and_the_grace_before_its_worker_ends_itself() -> None:
    # The limit, min(limit, 10 s) to unwind, 5 s for faulthandler's timer (GIL held).
    assert attempt_bound(1) == 1 + 1 + 5
    assert attempt_bound(60) == 60 + 10 + 5


def test_a_run_is_bounded_by_its_rows_attempts_and_task_tries_plus_a_margin() -> None:
    # 5 messages, 2 attempts each (immediate 1), each at most 1 s + 1 s + 5 s, one try.
    assert run_bound(5, 1, 1.0) == 5 * 2 * 7 + RUN_MARGIN_S
    # Spark runs a failed task again: every try may run the rows again.
    assert run_bound(5, 1, 1.0, tries=4) == 4 * 5 * 2 * 7 + RUN_MARGIN_S
    assert run_bound(0, 0, 1.0) == 7 + RUN_MARGIN_S  # never below one attempt


@pytest.mark.parametrize(("master", "conf", "tries"), [
    ("local[2]", {"spark.task.maxFailures": "8"}, 1),  # local mode ignores it
    ("local[2,3]", {}, 3),
    ("local[*, 5]", {}, 5),
    ("k8s://https://api:443", {}, 4),
    ("k8s://https://api:443", {"spark.task.maxFailures": "2"}, 2),
    ("k8s://https://api:443", {"spark.task.maxFailures": "many"}, 4),
])
def test_task_tries_follow_the_master_and_spark_task_max_failures(master, conf, tries) -> None:
    assert task_tries(master, conf) == tries


def test_run_bounds_of_a_job_take_a_whole_batch_and_of_a_local_run_its_rows() -> None:
    b = RunBounds(max_rows=10, immediate=2, attempt_timeout_s=1.0, tries=4)
    assert b.job() == run_bound(10, 2, 1.0, 4)
    assert b.local(3) == run_bound(3, 2, 1.0, 1)


def test_an_idle_pump_does_not_keep_a_run_past_its_bound_alive() -> None:
    now = [0.0]
    beats: list[float] = []
    live = Liveness(600, clock=lambda: now[0], on_beat=lambda: beats.append(now[0]))
    with live.running("a batch's Spark job", 30):
        for _ in range(15):  # the pump's idle rounds, every 2 s: within the bound they count
            now[0] += 2
            assert live.beat()
        assert live.check() == (True, "ok: a batch's Spark job running 30s of its 30s")
        now[0] += 2
        assert not live.beat()  # past the bound: refused, the heartbeat stops at 30 s
        ok, text = live.check()
        assert not ok and text.startswith("stalled: a batch's Spark job has run 32s, past its bound of 30s")
        now[0] += 1000
        assert not live.beat() and not live.check()[0]
        assert max(beats) == 30
    assert live.check()[0] and beats[-1] == now[0]  # it ended: its end is progress


def test_a_run_within_its_bound_is_healthy_while_nothing_else_beats() -> None:
    """The pump waits for the lock a long batch holds: no beats, and that is no stall."""
    now = [0.0]
    live = Liveness(10, clock=lambda: now[0])
    live.beat()
    with live.running("a batch's Spark job", 100):
        now[0] = 99
        assert live.check()[0]
    now[0] = 108
    assert live.check()[0]  # the run's end was a beat
    now[0] = 110
    assert not live.check()[0]  # no run, no beat for 10 s


def test_two_runs_in_flight_the_one_past_its_bound_decides() -> None:
    now = [0.0]
    live = Liveness(600, clock=lambda: now[0])
    with live.running("a retry batch of 3 in the local worker", 10):
        with live.running("a batch's Spark job", 100):
            now[0] = 11
            ok, text = live.check()
            assert not ok and "local worker has run 11s, past its bound of 10s" in text


def test_the_heartbeat_gauge_freezes_with_a_run_past_its_bound() -> None:
    m = Metrics("shop", "orders")
    now = [0.0]
    m.liveness = Liveness(600, clock=lambda: now[0])
    gauge = m.heartbeat.labels(**m.ids)
    with m.running("a batch's Spark job", 5):
        first = gauge._value.get()
        assert first > 0
        now[0] = 6
        time.sleep(0.01)
        m.beat()
        assert gauge._value.get() == first  # the pump's beat did not refresh it
    assert gauge._value.get() > first


def test_the_metrics_server_closes_a_connection_that_sends_nothing() -> None:
    m = Metrics("shop", "orders")
    httpd = m.start(0, idle_timeout=0.5)
    port = httpd.server_address[1]
    try:
        idle = socket.create_connection(("127.0.0.1", port))
        idle.settimeout(10)
        started = time.monotonic()
        assert idle.recv(1) == b""  # closed by the server, not by our timeout (that raises)
        assert time.monotonic() - started < 5
        idle.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
            assert page.status == 200 and b"antidote_heartbeat_timestamp_seconds" in page.read()
    finally:
        httpd.shutdown()
        httpd.server_close()
