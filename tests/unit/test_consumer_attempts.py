"""One message's pass under the policy: validation, immediate retries, verdicts."""

from __future__ import annotations

import json
import os

import pytest

from antidote_consumer.kafka import headers as h
from antidote_consumer.worker.attempts import Plan, Reason, class_name, is_non_retryable, run_pass
from antidote_consumer.worker.verdict import Verdict
from antidote_consumer.worker.handler import HandlerLoadError, check_handler, encode_output, load_handler
from antidote_consumer.worker.message import Message

MSG = Message(b"k", b'{"id": 1}', (("trace", b"t"),), "orders", 2, 41, 1_700_000_000_000)


class Flaky:
    """Fails `n` times, then succeeds."""

    def __init__(self, n: int, err: Exception = ValueError("boom")):
        self.n, self.err, self.calls = n, err, 0

    def __call__(self, msg: Message):
        self.calls += 1
        if self.calls <= self.n:
            # A fresh exception per call, as real handlers raise (re-raising one instance
            # would grow its traceback on every raise).
            raise type(self.err)(*self.err.args)
        return msg.value


def test_success_on_first_attempt() -> None:
    out = run_pass(MSG, lambda m: {"id": 1}, Plan(immediate=5, cycles=2), cycle=0)
    assert out.verdict is Verdict.OK and out.attempts == 1 and out.output == b'{"id":1}'


def test_message_attempt_counts_every_call_immediate_retries_included() -> None:
    seen: list[int] = []

    def fails_until_4(m: Message):
        seen.append(m.attempt)
        if m.attempt < 4:
            raise ConnectionError("not yet")
        return m.value

    plan = Plan(immediate=1, cycles=2)
    first = Message(b"k", b"v", (), "orders", 0, 1, 0)
    assert run_pass(first, fails_until_4, plan, cycle=0).verdict is Verdict.RETRY
    # The next cycle's pass starts after the 2 calls of the first (the worker sets attempt).
    again = Message(b"k", b"v", (), "orders", 0, 1, 0, attempt=3)
    out = run_pass(again, fails_until_4, plan, cycle=1)
    assert seen == [1, 2, 3, 4] and out.verdict is Verdict.OK and out.attempts == 2
    # The worker's hot loop makes the first call itself and hands its error over.
    seen.clear()
    hot = Message(b"k", b"v", (), "orders", 0, 1, 0)
    assert run_pass(hot, fails_until_4, plan, cycle=0, failed=ConnectionError("1st")).attempts == 2
    assert seen == [2]


def test_immediate_retries_then_success() -> None:
    f = Flaky(3)
    out = run_pass(MSG, f, Plan(immediate=5, cycles=2), cycle=0)
    assert out.verdict is Verdict.OK and out.attempts == 4 and f.calls == 4


@pytest.mark.parametrize("cycle, verdict, reason", [(0, Verdict.RETRY, None), (1, Verdict.RETRY, None),
                                                    (2, Verdict.FINAL, Reason.MAX_ATTEMPTS)])
def test_exhausted_attempts_retry_until_the_last_cycle(cycle, verdict, reason) -> None:
    f = Flaky(100)
    out = run_pass(MSG, f, Plan(immediate=2, cycles=2), cycle=cycle)
    assert (out.verdict, out.reason, out.attempts, f.calls) == (verdict, reason, 3, 3)
    assert out.error_class == "ValueError" and out.error_message == "boom"
    assert "Traceback" in out.stack and "ValueError: boom" in out.stack


def test_non_retryable_by_simple_qualified_or_base_class_name() -> None:
    class Custom(KeyError):
        pass

    for names in ({"KeyError"}, {"LookupError"}, {class_name(Custom)}):
        f = Flaky(100, Custom("missing"))
        out = run_pass(MSG, f, Plan(immediate=5, cycles=2, non_retryable=frozenset(names)), cycle=0)
        assert (out.verdict, out.reason, f.calls) == (Verdict.FINAL, Reason.NON_RETRYABLE, 1), names
    assert not is_non_retryable(ValueError(), frozenset({"KeyError"}))


def test_validation_fails_fast_without_calling_the_handler() -> None:
    f = Flaky(0)
    out = run_pass(MSG, f, Plan(immediate=5, cycles=2, check=lambda v: "value is not JSON"), cycle=0)
    assert (out.verdict, out.reason, out.attempts, f.calls) == (Verdict.FINAL, Reason.VALIDATION, 0, 0)
    assert out.error_message == "value is not JSON"


def test_a_bad_return_type_is_a_failure_of_the_message() -> None:
    out = run_pass(MSG, lambda m: 42, Plan(immediate=1, cycles=0), cycle=0)
    assert out.verdict is Verdict.FINAL and out.error_class == "TypeError"
    assert "handler returned int" in out.error_message


@pytest.mark.parametrize("value, expected", [(None, None), (b"x", b"x"), (bytearray(b"y"), b"y"),
                                             ("é", "é".encode()), ([1, {"a": None}], b'[1,{"a":null}]')])
def test_encode_output(value, expected) -> None:
    assert encode_output(value) == expected


def test_load_handler_errors_name_the_handler() -> None:
    assert load_handler("json:dumps") is json.dumps
    with pytest.raises(HandlerLoadError, match="'nope.mod:f': cannot import nope.mod"):
        load_handler("nope.mod:f")
    with pytest.raises(HandlerLoadError, match="'json:nothing': json has no callable 'nothing'"):
        load_handler("json:nothing")
    with pytest.raises(HandlerLoadError, match="expected 'package.module:function'"):
        load_handler("json.dumps")


def test_message_header_returns_the_last_value() -> None:
    m = Message(None, None, (("a", b"1"), ("a", b"2")), "t", 0, 0, 0)
    assert m.header("a") == b"2" and m.header("b") is None


def test_failure_headers_round_trip_and_truncate() -> None:
    origin = h.Origin("orders", 2, 41, 1_700_000_000_000)
    hdrs = h.failure_headers(origin=origin, attempts=6, cycle=1, first_failure=10, last_failure=20,
                             reason=None, error_class="ValueError", error_message="x" * 5000,
                             stack="s" * 10000, consumer="c", policy="p", due=30)
    state = h.retry_state(hdrs + [("trace", b"t")])
    assert state == h.RetryState(origin, attempts=6, cycle=1, first_failure=10, due=30)
    values = dict(hdrs)
    assert len(values[h.ERROR_MESSAGE]) <= h.MAX_MESSAGE
    assert len(values[h.ERROR_STACK]) <= h.MAX_STACK
    assert values[h.ERROR_MESSAGE].endswith(b"[truncated]")
    assert values[h.ERROR_STACK].startswith(b"[truncated] ...") and values[h.ERROR_STACK].endswith(b"s")
    assert h.user_headers(hdrs + [("trace", b"t")]) == [("trace", b"t")]
    assert h.due_of(hdrs) == 30 and h.due_of([]) == 0


def test_a_record_without_antidote_headers_is_not_a_retry_record() -> None:
    with pytest.raises(ValueError, match="not an Antidote retry record"):
        h.retry_state([("trace", b"t")])


def test_check_handler_names_the_handler_and_the_import_error(tmp_path, monkeypatch) -> None:
    (tmp_path / "broken_at_import.py").write_text("raise RuntimeError('no config file\\nsecond line')\n")
    (tmp_path / "hangs_at_import.py").write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}")
    assert check_handler("json:dumps") is None
    assert check_handler("nope.mod:f") == "handler 'nope.mod:f': cannot import nope.mod: No module named 'nope'"
    assert check_handler("json:nothing") == "handler 'json:nothing': json has no callable 'nothing'"
    assert check_handler("broken_at_import:f") == ("handler 'broken_at_import:f': importing broken_at_import "
                                                   "failed: RuntimeError: no config file")
    assert check_handler("hangs_at_import:f", timeout=1) == (
        "handler 'hangs_at_import:f': importing it did not finish in 1s")


def _lookup(doc: dict) -> int:
    return doc["order"]["total"] + 1


def test_the_stack_is_the_standard_traceback_without_the_caret_lines() -> None:
    import traceback

    from antidote_consumer.worker.attempts import stack_text

    try:
        try:
            _lookup({"order": {}})
        except KeyError as err:
            raise ValueError("order cannot be priced") from err
    except ValueError as err:
        caught = err
    standard = "".join(traceback.format_exception(type(caught), caught, caught.__traceback__))
    assert "^^^" in standard  # Python's own marks what failed on the line
    without = "".join(line for line in standard.splitlines(keepends=True)
                      if line.strip().strip("^~") != "" or not line.strip())
    assert stack_text(caught) == without
    assert "KeyError: 'total'" in without and "direct cause" in without


def test_the_stack_of_an_implicit_chain_and_of_a_suppressed_one_reads_as_pythons() -> None:
    import traceback

    from antidote_consumer.worker.attempts import stack_text

    def standard(e: BaseException) -> str:
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        return "".join(line for line in text.splitlines(keepends=True)
                       if line.strip().strip("^~") != "" or not line.strip())

    for suppress in (False, True):
        try:
            try:
                _lookup({})
            except KeyError:
                if suppress:
                    raise RuntimeError("lookup failed") from None
                raise RuntimeError("lookup failed")
        except RuntimeError as err:
            caught = err
        assert stack_text(caught) == standard(caught)
        assert ("During handling" in stack_text(caught)) is not suppress
    assert stack_text(ValueError("never raised")) == "ValueError: never raised\n"


class _BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


class _Odd(Exception):
    pass


_Odd.__module__ = None  # type: ignore[assignment] - a class whose module is not a string


def test_the_error_line_reads_as_pythons_for_every_kind_of_error() -> None:
    import traceback

    from antidote_consumer.worker.attempts import _exception_line

    noted = ValueError("with a note")
    noted.add_note("first line\nsecond line")
    errors = [ValueError("plain"), ValueError(), KeyError("k"), KeyError(), _BadStr("x"), _Odd("odd"),
              OSError(2, "No such file"), UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"),
              SyntaxError("bad syntax", ("f.py", 3, 5, "x = = 1\n", 3, 6)), noted,
              ExceptionGroup("two", [ValueError("a"), KeyError("b")]), SystemExit(3),
              ValueError("multi\nline")]
    for err in errors:
        assert _exception_line(err) == "".join(traceback.format_exception_only(type(err), err)), err
