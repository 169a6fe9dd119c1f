"""The executor's hot loop (`worker.process`) on an Arrow batch, without Spark or Kafka.

The loop makes each message's first attempt itself and hands over to `run_pass` only on a
validation refusal or a failure; these tests pin that the verdicts, attempt counts and
outputs are exactly what `run_pass` alone gives.
"""

from __future__ import annotations

import collections
import contextlib
import faulthandler
import io
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from antidote_consumer.kafka import headers as h
from antidote_consumer.worker.attempts import Plan, run_pass
from antidote_consumer.worker.message import Message
from antidote_consumer.worker.executor import INPUT_COLUMNS, INPUT_FIELDS, WorkerConfig, arrow_schema, process

calls: collections.Counter = collections.Counter()


class Fatal(Exception):
    pass


def handler(msg: Message):
    """Behaves by the message's value: ok, flaky (fails once), bad, fatal, int, none, dict."""
    kind = msg.value.decode().split(":")[0]
    calls[msg.value] += 1
    if kind == "flaky" and calls[msg.value] == 1:
        raise ConnectionError("once")
    if kind == "bad":
        raise ValueError("always")
    if kind == "fatal":
        raise Fatal("no point retrying")
    if kind == "int":
        return 42  # not an output type: a failure of the message
    if kind == "none":
        return None  # nothing to write, still a success
    if kind == "dict":
        return {"v": msg.value.decode(), "headers": [k for k, _ in msg.headers]}
    if kind == "exit":
        raise SystemExit(3)  # ends the task, not a failure of the message
    if kind == "muted":  # a handler that silences stderr (a logging library does) and is slow
        with contextlib.redirect_stderr(io.StringIO()):
            time.sleep(5)
        return msg.value
    if kind == "hang":  # sleeps past any limit, and its own retry loop swallows Exceptions
        while True:
            try:
                time.sleep(3600)
            except Exception:  # noqa: BLE001 - what a careless handler does
                continue
    return msg.value.upper()


def batch(values: list[bytes], topic: str = "src", headers: list | None = None) -> pa.RecordBatch:
    n = len(values)
    cols = {"key": [b"k%d" % i for i in range(n)], "value": values, "topic": [topic] * n,
            "partition": [0] * n, "offset": list(range(100, 100 + n)), "ts": [1_700_000_000_000] * n,
            "headers": headers or [None] * n}
    return pa.RecordBatch.from_pydict(cols, schema=arrow_schema(INPUT_FIELDS))


@pytest.fixture(autouse=True)
def _no_process_ending(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """These tests run the worker in pytest's own process: the watchdog's last resort (ending
    a process whose attempt does not unwind within the grace, and faulthandler's timer after
    it) would end the pytest worker, which happened on a loaded machine with 0.2-0.3 s
    limits. Here the grace is a minute; the test of the last resort runs in a subprocess."""
    from antidote_consumer.worker import deadline

    monkeypatch.setattr(deadline, "kill_grace", lambda _limit: 60.0)
    yield
    # The watchdog's thread outlives the test (a daemon, as in a Python worker) and re-arms
    # faulthandler's process-ending timer every round at hard_deadline(limit): left at these
    # tests' 0.2-0.3 s limits, any later stall of ~6 s ended the pytest worker ("node down"
    # near the end of `make test`). An hour from now on.
    if deadline._watchdog is not None:
        deadline._watchdog.limit = 3600.0
    faulthandler.cancel_dump_traceback_later()


def run(values: list[bytes], *, validation: dict | None = None, immediate: int = 2,
        topic: str = "src", headers: list | None = None, attempt_timeout: float = 60.0,
        non_retryable: frozenset[str] = frozenset({"Fatal"})) -> tuple[dict, list[dict]]:
    calls.clear()
    cfg = WorkerConfig(handler=f"{__name__}:handler", source_topic="src", immediate=immediate,
                       cycles=1, non_retryable=non_retryable, validation=validation,
                       sink_kafka=None, emit_outputs=True, attempt_timeout=attempt_timeout)
    rows = [r for b in process(cfg, iter([batch(values, topic, headers)])) for r in b.to_pylist()]
    summary = next(r for r in rows if r["kind"] == "summary")
    (end,) = [r for r in rows if r["kind"] == "end"]  # one partition read
    assert (end["topic"], end["partition"], end["offset"]) == (topic, 0, 100 + len(values) - 1)
    return summary, [r for r in rows if r["kind"] not in ("summary", "end")]


def test_each_message_gets_the_verdict_and_attempts_run_pass_gives() -> None:
    values = [b"ok:1", b"flaky:2", b"bad:3", b"fatal:4", b"int:5", b"none:6", b"dict:7"]
    summary, rows = run(values)
    by_value = {r["value"]: r for r in rows}
    plan = Plan(2, 1, frozenset({"Fatal"}))
    for i, v in enumerate(values):
        calls.clear()
        expected = run_pass(Message(b"k%d" % i, v, (), "src", 0, 100 + i, 0), handler, plan, 0)
        row = by_value.get(v)
        if expected.verdict.value == "ok":
            if expected.output is None:
                assert row is None, v  # a success with nothing to write
                continue
            assert (row["kind"], row["output"], row["attempts"]) == ("ok", expected.output,
                                                                   expected.attempts), v
        else:
            assert (row["kind"], row["reason"], row["error_class"], row["attempts"]) == (
                expected.verdict.value, expected.reason.value if expected.reason else None,
                expected.error_class, expected.attempts), v
    # ok, flaky (2 calls), none and dict succeed; bad 3 calls, fatal 1, int 3.
    assert (summary["n_ok"], summary["n_attempts"]) == (4, 1 + 2 + 3 + 1 + 3 + 1 + 1)
    assert by_value[b"flaky:2"]["output"] == b"FLAKY:2"
    assert json.loads(by_value[b"dict:7"]["output"]) == {"v": "dict:7", "headers": []}
    assert by_value[b"int:5"]["error_message"].startswith("handler returned int")
    # The stack is the last attempt's alone, not chained to the earlier attempts' errors.
    stack = by_value[b"bad:3"]["stack"]
    assert stack.count("Traceback") == 1 and "During handling" not in stack


def test_validation_refuses_without_a_handler_call() -> None:
    summary, rows = run([b"ok:1", b"\xff\xfe"], validation={"format": "utf8"})
    [row] = rows[1:]
    assert (row["kind"], row["reason"], row["attempts"]) == ("final", "validation", 0)
    assert calls[b"\xff\xfe"] == 0
    assert (summary["n_ok"], summary["n_attempts"]) == (1, 1)


@pytest.mark.parametrize("immediate", [0, 3])
def test_immediate_retries_count_the_inline_first_attempt(immediate: int) -> None:
    summary, [row] = run([b"bad:1"], immediate=immediate)
    assert row["attempts"] == calls[b"bad:1"] == immediate + 1
    assert summary["n_attempts"] == immediate + 1


def test_a_retry_record_counts_attempts_from_its_headers_and_shows_user_headers() -> None:
    origin = h.Origin("src", 3, 7, 1_600_000_000_000)
    hdrs = [("trace", b"t1")] + h.failure_headers(
        origin=origin, attempts=3, first_failure=1, last_failure=2, error_class="ValueError",
        error_message="x", stack=None, consumer="ns/c", policy="p", cycle=1, reason=None, due=0)
    arrow_hdrs = [[{"key": k, "value": v} for k, v in hdrs]] * 2
    summary, rows = run([b"bad:1", b"dict:2"], topic="src-retry-1", headers=arrow_hdrs)
    bad, ok = rows
    assert (bad["kind"], bad["attempts"], bad["otopic"], bad["ooffset"]) == ("final", 6, "src", 7)
    assert json.loads(ok["output"])["headers"] == ["trace"]  # no antidote.* header shown
    assert ok["attempts"] == 4  # three before, and this one


def test_an_attempt_past_the_time_limit_fails_with_attempt_timeout_and_the_others_go_on() -> None:
    start = time.monotonic()
    summary, rows = run([b"ok:1", b"hang:2", b"ok:3"], immediate=1, attempt_timeout=0.3)
    took = time.monotonic() - start
    [row] = [r for r in rows if r["kind"] != "ok"]
    assert (row["value"], row["kind"], row["error_class"], row["attempts"]) == (
        b"hang:2", "retry", "antidote.AttemptTimeout", 2)
    assert "attemptTimeout" in row["error_message"] and "time.sleep" in row["stack"]
    assert calls[b"hang:2"] == 2 and (summary["n_ok"], summary["n_attempts"]) == (2, 4)
    # Two attempts of 0.3 s each, ended by the watchdog: the handler's own sleep is an hour.
    # The upper bound only proves that (a tight one failed on a loaded machine: no timing here).
    assert 0.6 <= took < 60, took


def test_the_limit_holds_for_a_handler_that_replaces_sys_stderr() -> None:
    """The watchdog's thread arms faulthandler's timer every round: on sys.stderr, it raised
    once a handler swapped sys.stderr for an object without a file descriptor, and the thread
    died; this 5 s attempt then ran to its end (and a later hung one for ever)."""
    _, [row] = run([b"muted:1"], immediate=0, attempt_timeout=0.3)
    assert (row["kind"], row["error_class"], row["attempts"]) == ("retry", "antidote.AttemptTimeout", 1)
    from antidote_consumer.worker import deadline

    assert deadline._watchdog is not None and deadline._watchdog.thread.is_alive()


def test_attempt_timeout_can_be_listed_as_non_retryable() -> None:
    _, [_, row] = run([b"ok:1", b"hang:2"], immediate=3, attempt_timeout=0.2,
                      non_retryable=frozenset({"antidote.AttemptTimeout"}))
    assert (row["kind"], row["reason"], row["attempts"]) == ("final", "non-retryable", 1)


def test_an_attempt_that_ends_the_task_leaves_no_attempt_for_the_watchdog() -> None:
    """The Python worker may run the next task: a stale start time would time it out."""
    from antidote_consumer.worker.deadline import watchdog

    with pytest.raises(SystemExit):
        run([b"ok:1", b"exit:2"], attempt_timeout=0.2)
    assert watchdog(0.2).started == 0.0


def test_a_handler_that_does_not_unwind_ends_its_process() -> None:
    """Stuck past the limit and its grace (here it swallows even AttemptTimeout): the worker
    process ends itself with KILLED_EXIT, naming the message, as Spark's worker would."""
    code = textwrap.dedent('''
        import time, pyarrow as pa
        from antidote_consumer.worker.executor import INPUT_FIELDS, WorkerConfig, arrow_schema, process

        def stubborn(msg):
            while True:
                try:
                    time.sleep(3600)
                except BaseException:
                    pass

        cols = {"key": [b"k"], "value": [b"v"], "topic": ["src"], "partition": [2],
                "offset": [41], "ts": [0], "headers": [None]}
        b = pa.RecordBatch.from_pydict(cols, schema=arrow_schema(INPUT_FIELDS))
        cfg = WorkerConfig(handler="__main__:stubborn", source_topic="src", immediate=0, cycles=0,
                           non_retryable=frozenset(), validation=None, sink_kafka=None,
                           emit_outputs=True, attempt_timeout=0.3)
        print("started", time.monotonic(), flush=True)
        list(process(cfg, iter([b])))
        print("not reached")
    ''')
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    ended = time.monotonic()
    assert proc.returncode == 124, proc.stderr
    assert "not reached" not in proc.stdout
    assert "the attempt on src/2/41 is still running" in proc.stderr
    assert "spec.retries.attemptTimeout 0.3s" in proc.stderr
    # From the attempt's start, not the interpreter's (imports take seconds on a loaded
    # machine): the limit and its grace, not an hour. CLOCK_MONOTONIC is the machine's.
    started = float(proc.stdout.split()[1])
    assert ended - started < 8


def test_failures_of_many_input_batches_come_back_in_few_batches_bounded_by_the_input() -> None:
    """Each batch sent back costs a fixed amount (see process): the failures of a task's
    Arrow batches are gathered, never more rows in one than the largest input batch."""
    cfg = WorkerConfig(handler=f"{__name__}:handler", source_topic="src", immediate=0, cycles=1,
                       non_retryable=frozenset(), validation=None, sink_kafka=None,
                       emit_outputs=False)
    # 12 input batches of 10 messages, 2 failures each: 24 failures, plus the summary and end.
    inputs = [batch([b"bad:%d" % i if i % 5 == 0 else b"ok:%d" % i for i in range(j * 10, j * 10 + 10)])
              for j in range(12)]
    out = list(process(cfg, iter(inputs)))
    rows = [r for b in out for r in b.to_pylist()]
    failed = sorted(r["value"] for r in rows if r["kind"] == "retry")
    assert failed == sorted(b"bad:%d" % i for i in range(0, 120, 5))  # every failure, once
    assert [r["kind"] for r in rows].count("summary") == 1
    assert len(out) < 12 and all(b.num_rows <= 10 for b in out[:-1])
    # With an output row per message (a path sink), a batch sent back never holds more
    # rows than an input batch.
    emitting = WorkerConfig(handler=f"{__name__}:handler", source_topic="src", immediate=0, cycles=1,
                            non_retryable=frozenset(), validation=None, sink_kafka=None,
                            emit_outputs=True)
    out = list(process(emitting, iter(inputs)))
    assert sum(r["kind"] in ("ok", "retry") for b in out for r in b.to_pylist()) == 120
    assert all(b.num_rows <= 10 for b in out[:-1])


def test_the_summary_reports_the_largest_record_of_the_task_with_its_headers() -> None:
    values = [b"ok:1", b"ok:" + b"x" * 5000, b"ok:3"]
    headers = [[{"key": "trace", "value": b"t" * 40}], None,
               [{"key": "a", "value": b"1"}, {"key": "bb", "value": None}]]
    summary, _ = run(values, headers=headers)
    # The second row's value (5,003 bytes) and key (2), and the first row's headers (5 + 40):
    # the largest of each, added up, never less than the largest record.
    assert summary["largest"] == 5003 + 2 + 45
    other = [r for b in process(WorkerConfig(handler=f"{__name__}:handler", source_topic="src",
                                             immediate=0, cycles=1, non_retryable=frozenset(),
                                             validation=None, sink_kafka=None, emit_outputs=False),
                                iter([batch([b"ok:1"]).slice(0, 0)])) for r in b.to_pylist()]
    assert next(r for r in other if r["kind"] == "summary")["largest"] == 0  # nothing read
