"""The systemic-failure breaker judged while a batch runs: the pure rule on the window plus a
run's figures (driver.systemic), a run's tally of task reports (driver.live_breaker), and
the worker's reporter posting to the driver's endpoint (worker.attempt_reports) through
`worker.process`, the executors' hot loop, without Spark."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from antidote_api.conditions import DisableReason
from antidote_consumer.driver.live_breaker import LiveBreaker, RunTally
from antidote_consumer.driver.systemic import SystemicRule
from antidote_consumer.worker import attempt_reports
from antidote_consumer.worker.attempt_reports import Reporter
from antidote_consumer.worker.executor import INPUT_FIELDS, WorkerConfig, arrow_schema, process


def rule(min_messages: int = 10, threshold: float = 0.5, window_s: float = 300.0) -> SystemicRule:
    return SystemicRule(enabled=True, threshold=threshold, window_s=window_s, min_messages=min_messages)


# --- the pure rule --------------------------------------------------------------------------
def test_live_needs_min_messages_judged_and_the_threshold() -> None:
    r = rule(min_messages=10)
    assert not r.live(9, 9, now=0.0)  # every one failed, but too few judged
    assert r.live(10, 10, now=0.0)
    assert r.live(5, 10, now=0.0)  # at the threshold
    assert not r.live(4, 10, now=0.0)
    assert not r.live(0, 0, now=0.0)


def test_live_counts_the_windows_settled_batches_and_leaves_the_window_alone() -> None:
    r = rule(min_messages=10)
    assert not r.tripped(0, 100, now=0.0)  # a healthy batch of 100
    # 10 failing of 10 judged so far: diluted by the window's 100 successes.
    assert not r.live(10, 10, now=1.0)
    assert not r.live(60, 60, now=1.0)  # 60 / 160
    assert r.live(100, 100, now=1.0)  # 100 / 200: at the threshold
    assert len(r.window) == 1  # read, not changed
    # Past the window the healthy batch no longer counts.
    assert r.live(10, 10, now=302.0)
    assert len(r.window) == 1


def test_live_is_off_when_queue_disable_is() -> None:
    r = rule()
    r.enabled = False
    assert not r.live(100, 100, now=0.0)


def test_disabled_live_is_a_systemic_failure_that_keeps_the_batch() -> None:
    err = rule().disabled_live(12, 12, 41.5)
    assert err.reason is DisableReason.SYSTEMIC_FAILURE
    assert "12 of 12" in err.message and "41.5s" in err.message and "unconsumed" in err.message


# --- a run's tally ---------------------------------------------------------------------------
def test_a_tasks_later_report_replaces_its_earlier_and_tasks_add_up() -> None:
    t = RunTally()
    assert t.add(0, 0, 1, failed=1, judged=1)
    assert t.add(0, 0, 2, failed=3, judged=5)
    assert not t.add(0, 0, 1, failed=1, judged=1)  # late: an older report of the same try
    assert t.add(1, 0, 1, failed=2, judged=2)
    assert t.figures() == (5, 7)
    # Spark's retry of task 0 runs the same messages again: it replaces the first try.
    assert t.add(0, 1, 1, failed=1, judged=1)
    assert not t.add(0, 0, 9, failed=9, judged=9)  # the first try's, still arriving
    assert t.figures() == (3, 3)


def report(b: LiveBreaker, run: str | None, part: int, seq: int, failed: int, judged: int, **over) -> bool:
    return b.report({"secret": b.secret, "run": run, "task": [part, 0], "seq": seq, "failed": failed,
                     "judged": judged, "done": False, **over})


def breaker(min_messages: int = 10) -> tuple[LiveBreaker, list[str]]:
    b = LiveBreaker(rule(min_messages=min_messages), clock=lambda: 100.0)
    b.url = "http://test/attempts"  # begin() needs an endpoint; report() is called directly
    return b, []


def test_reports_trip_the_rule_and_cancel_every_run_in_flight() -> None:
    b, cancelled = breaker()
    run = b.begin(lambda: cancelled.append("job"))
    other = b.begin(lambda: cancelled.append("local"))
    report(b, run, 0, 1, failed=5, judged=5)
    report(b, run, 1, 1, failed=4, judged=4)
    assert b.tripped is None and cancelled == []  # 9 judged: below minMessages
    report(b, run, 1, 2, failed=5, judged=5)
    assert b.tripped is not None and b.tripped.reason is DisableReason.SYSTEMIC_FAILURE
    assert sorted(cancelled) == ["job", "local"]
    assert "10 of 10" in b.tripped.message
    with pytest.raises(type(b.tripped)):
        b.check()
    assert b.end(run) is b.tripped and b.end(other) is b.tripped


def test_a_healthy_run_with_a_few_failures_does_not_trip() -> None:
    b, cancelled = breaker()
    run = b.begin(lambda: cancelled.append("job"))
    for seq in range(1, 30):  # 1 failing message in 10, judged as they come
        report(b, run, 0, seq, failed=seq // 10 + 1, judged=seq)
    assert b.tripped is None and cancelled == []
    b.check()  # nothing to raise


def test_foreign_and_stale_reports_are_dropped() -> None:
    b, cancelled = breaker(min_messages=1)
    run = b.begin(lambda: cancelled.append("job"))
    assert not report(b, run, 0, 1, failed=5, judged=5, secret="guess")  # not ours
    ended = b.begin(lambda: cancelled.append("ended"))
    b.end(ended)
    assert report(b, ended, 0, 1, failed=5, judged=5)  # a finished run's: accepted, ignored
    assert report(b, "nope", 0, 1, failed=5, judged=5)
    assert b.tripped is None and cancelled == []
    report(b, run, 0, 1, failed=1, judged=1)
    assert b.tripped is not None and cancelled == ["job"]


def test_no_endpoint_or_rule_off_means_no_live_run() -> None:
    b = LiveBreaker(rule())
    assert b.begin(lambda: None) is None and b.target() is None
    off = LiveBreaker(SystemicRule(enabled=False, threshold=0.5, window_s=60, min_messages=1))
    off.url = "http://test/attempts"
    assert off.begin(lambda: None) is None


# --- the reporter ------------------------------------------------------------------------------
def test_reporter_figures_count_distinct_messages() -> None:
    from antidote import NonRetryable

    r = Reporter(None)
    r.failed(ConnectionError("down"), n_ok=3)
    r.failed(NonRetryable("bad content"), n_ok=3)  # judged, not failing
    r.failed(TimeoutError("slow"), n_ok=3)
    assert r.figures() == (2, 3 + 2 + 1)  # failing as soon as an attempt failed
    r.failing -= 1  # the timed-out one succeeded on its next attempt (process does this)
    r.close(n_ok=4)
    assert r.figures() == (1, 4 + 1 + 1)


@pytest.fixture
def endpoint():
    b = LiveBreaker(rule(min_messages=3))
    b.start("127.0.0.1", 0, bind="127.0.0.1")
    yield b
    b.stop()


def test_the_endpoint_takes_reports_over_http_and_refuses_others(endpoint: LiveBreaker) -> None:
    import urllib.error

    cancelled = threading.Event()
    run = endpoint.begin(cancelled.set)
    with pytest.raises(urllib.error.HTTPError):  # not ours
        attempt_reports.post(endpoint.url, {"secret": "x", "run": run, "task": [0, 0], "seq": 1,
                                            "failed": 9, "judged": 9})
    attempt_reports.post(endpoint.url, {"secret": endpoint.secret, "run": run, "task": [0, 0], "seq": 1,
                                        "failed": 3, "judged": 3, "done": False})
    assert cancelled.is_set() and endpoint.tripped is not None


def test_a_reporter_never_blocks_on_a_driver_that_is_gone() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = Reporter((f"http://127.0.0.1:{port}/attempts", "s", "run"))
    started = time.monotonic()
    for i in range(1000):
        r.failed(ConnectionError("down"), n_ok=i)
    r.close(1000)
    assert time.monotonic() - started < 0.5  # counters and a wake-up, no I/O in the caller


def batch(values: list[bytes]) -> pa.RecordBatch:
    n = len(values)
    cols = {"key": [b"k%d" % i for i in range(n)], "value": values, "topic": ["src"] * n,
            "partition": [0] * n, "offset": list(range(n)), "ts": [1_700_000_000_000] * n,
            "headers": [None] * n}
    return pa.RecordBatch.from_pydict(cols, schema=arrow_schema(INPUT_FIELDS))


seen_tripped = threading.Event()


def downstream_down(msg):
    """Fails every call, slowly, until the breaker tripped (then the test is done)."""
    if seen_tripped.is_set():
        return msg.value
    time.sleep(0.05)
    raise ConnectionError("downstream unavailable")


def test_process_reports_failing_messages_while_the_task_runs(endpoint: LiveBreaker) -> None:
    """worker.process posts a failing message as its first attempt fails: the breaker trips
    while the task is still running (its later messages then pass once the test says so)."""
    cancelled = threading.Event()
    run = endpoint.begin(lambda: (cancelled.set(), seen_tripped.set()))
    cfg = WorkerConfig(handler=f"{__name__}:downstream_down", source_topic="src", immediate=1, cycles=1,
                       non_retryable=frozenset(), validation=None, sink_kafka=None, emit_outputs=False,
                       reports=endpoint.target(run))
    seen_tripped.clear()
    started = time.monotonic()
    rows = [r for b in process(cfg, iter([batch([b"m%d" % i for i in range(200)])])) for r in b.to_pylist()]
    assert cancelled.is_set() and endpoint.tripped is not None
    failed = [r for r in rows if r["kind"] not in ("summary", "end")]
    # Three failing messages trip it (minMessages 3); a few more fail before the post lands.
    assert 3 <= len(failed) < 30, len(failed)
    assert time.monotonic() - started < 10
    seen_tripped.clear()


# --- where executors reach the endpoint ---------------------------------------------------------
def test_the_driver_pod_serves_reports_on_a_named_port_and_the_dev_runner_on_any() -> None:
    from antidote_devrunner.local import translate
    from antidote_operator.builders import driver as builders
    from antidote_operator.builders.common import RenderOptions

    opts = RenderOptions()
    svc = builders.build_service("orders", opts)
    assert {"name": "reports", "port": 4044, "targetPort": 4044, "protocol": "TCP"} in svc["spec"]["ports"]
    args = builders.consumer_args(opts)
    assert args[args.index("--reports-port") + 1] == "4044"
    # Local drivers of the dev runner share a machine: each takes a free port.
    argv, _ = translate({"command": ["antidote"], "args": args}, settings_path="/s.yaml", metrics_port=4001,
                        master="local[1]")
    assert argv[argv.index("--reports-port") + 1] == "0"


def test_a_taken_port_leaves_the_ratio_to_the_batchs_end() -> None:
    import socket
    from types import SimpleNamespace

    from antidote_consumer.driver.live_breaker import started

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        spark = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"))
        b = started(spark, rule(), taken.getsockname()[1])
    assert b.url is None and b.begin(lambda: None) is None  # no live run; settle still judges
