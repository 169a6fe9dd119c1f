"""Handler-chosen outcomes: `antidote.Retry` and `antidote.NonRetryable` in a pass, parsing
`after`, the bound of the delay, and what the systemic-failure breaker counts."""

from __future__ import annotations

import pickle
from datetime import timedelta
from types import SimpleNamespace

import pytest

from antidote import NonRetryable, Retry
from antidote import parse_after
from antidote_api.duration import Duration
from antidote_api.semantics import EffectiveRetries, longest_retry_delay, retry_after_bound
from antidote_consumer.worker.attempts import Plan, Reason, run_pass
from antidote_consumer.worker.verdict import Verdict
from antidote_consumer.worker.chosen import CHOSE_NON_RETRYABLE, CHOSE_RETRY, retry_delay_ms, systemic_signal
from antidote_consumer.worker.message import Message

MSG = Message(b"k", b"v", (), "orders", 2, 41, 1_700_000_000_000)


def raising(err_factory):
    calls = []

    def handler(msg):
        calls.append(msg)
        raise err_factory()
    handler.calls = calls
    return handler


@pytest.mark.parametrize("after, ms", [
    ("10m", 600_000), ("1h30m", 5_400_000), ("250ms", 250), (" 30s ", 30_000), (0, 0), (1.5, 1500),
    (timedelta(minutes=2), 120_000), (None, None)])
def test_after_is_a_duration_seconds_or_a_timedelta(after, ms) -> None:
    assert parse_after(after) == (ms, None)
    assert Retry(after=after).after_ms == ms


@pytest.mark.parametrize("after, says", [
    ("10 minutes", "'10 minutes' is not a duration"), ("", "is not a duration"),
    (-1, "-1 is not a delay"), (float("nan"), "nan is not a delay"), (True, "bool is not a delay"),
    ([10], "list is not a delay"), (timedelta(seconds=-5), "is not a delay")])
def test_a_bad_after_is_described_not_raised(after, says) -> None:
    err = Retry(after=after)  # raising in the constructor would hide the handler's own line
    assert err.after_ms is None and says in err.problem


def test_retry_skips_the_attempts_left_and_carries_its_delay() -> None:
    h = raising(lambda: Retry(after="10m"))
    out = run_pass(MSG, h, Plan(immediate=5, cycles=2), cycle=0)
    assert len(h.calls) == 1 and out.attempts == 1
    assert (out.verdict, out.reason, out.chosen, out.retry_after) == (Verdict.RETRY, None, CHOSE_RETRY, 600_000)
    assert out.error_class == "antidote.Retry" and out.error_message == "retry requested after 10m"


def test_retry_from_the_hot_loops_first_attempt() -> None:
    # The worker makes the first attempt itself and hands its error to run_pass.
    h = raising(lambda: Retry(after=5, message="rate limited"))
    out = run_pass(MSG, h, Plan(immediate=5, cycles=2), cycle=1, failed=Retry(after=5, message="rate limited"))
    assert h.calls == [] and out.verdict is Verdict.RETRY and out.retry_after == 5000
    assert out.error_message == "rate limited"


def test_retry_without_after_uses_the_policys_delay() -> None:
    out = run_pass(MSG, raising(Retry), Plan(immediate=3, cycles=1), cycle=0)
    assert out.verdict is Verdict.RETRY and out.retry_after is None and out.chosen == CHOSE_RETRY


def test_retry_in_the_last_cycle_gets_the_disposition() -> None:
    out = run_pass(MSG, raising(lambda: Retry(after="1m")), Plan(immediate=3, cycles=2), cycle=2)
    assert (out.verdict, out.reason, out.attempts) == (Verdict.FINAL, Reason.MAX_ATTEMPTS, 1)
    assert out.error_message == "retry requested after 1m (no retry cycle left: the policy has 2, all used)"


def test_a_bad_after_is_an_ordinary_failure_naming_the_message_and_the_value() -> None:
    h = raising(lambda: Retry(after="soon"))
    out = run_pass(MSG, h, Plan(immediate=2, cycles=1), cycle=0)
    assert len(h.calls) == 3  # the policy's own path: every immediate attempt, then a cycle
    assert out.verdict is Verdict.RETRY and out.chosen is None and out.retry_after is None
    assert out.error_message.startswith("Retry(after='soon') on orders/2/41: 'soon' is not a duration")
    assert out.error_message.endswith("the attempt counts as an ordinary failure")
    last = run_pass(MSG, raising(lambda: Retry(after="soon")), Plan(immediate=0, cycles=1), cycle=1)
    assert last.verdict is Verdict.FINAL and last.reason is Reason.MAX_ATTEMPTS
    assert "orders/2/41" in last.error_message


def test_non_retryable_goes_to_the_disposition_at_once_with_its_cause() -> None:
    def handler(msg):
        try:
            raise KeyError("customer")
        except KeyError as err:
            raise NonRetryable("unknown customer") from err
    out = run_pass(MSG, handler, Plan(immediate=5, cycles=2), cycle=0)
    assert (out.verdict, out.reason, out.attempts, out.chosen) == (
        Verdict.FINAL, Reason.NON_RETRYABLE, 1, CHOSE_NON_RETRYABLE)
    assert out.error_class == "antidote.NonRetryable" and out.error_message == "unknown customer"
    assert "KeyError: 'customer'" in out.stack and "direct cause" in out.stack


def test_a_subclass_of_non_retryable_keeps_its_own_class_name() -> None:
    class Declined(NonRetryable):
        pass
    out = run_pass(MSG, raising(lambda: Declined("card declined")), Plan(immediate=5, cycles=2), cycle=0)
    assert out.reason is Reason.NON_RETRYABLE and out.chosen == CHOSE_NON_RETRYABLE
    assert out.error_class.endswith("Declined")


def test_both_pickle_with_their_arguments() -> None:
    # Whatever carries them between processes (a handler's own pool, a worker) keeps them whole.
    r = pickle.loads(pickle.dumps(Retry(after="10m", message="rate limited")))
    assert (r.after, r.after_ms, r.message, str(r)) == ("10m", 600_000, "rate limited", "rate limited")
    n = pickle.loads(pickle.dumps(NonRetryable("why")))
    assert isinstance(n, NonRetryable) and str(n) == "why"


def _retries(delays, max_cycle_delay=None) -> EffectiveRetries:
    return EffectiveRetries(immediate=0, cycles=len(delays), max_attempts=len(delays) + 1,
                            cycle_delays=[Duration.parse(d) for d in delays], non_retryable=[],
                            max_cycle_delay=Duration.parse(max_cycle_delay) if max_cycle_delay else None)


def test_the_bound_is_max_cycle_delay_else_the_longest_cycle_delay() -> None:
    assert retry_after_bound(_retries(["30s", "1m"], "1h")) == Duration.parse("1h")
    assert retry_after_bound(_retries(["30s", "1m"])) == Duration.parse("1m")
    assert retry_after_bound(_retries([])) is None
    # Retention is sized by what a record may wait, the bound included.
    assert longest_retry_delay(_retries(["30s", "1m"], "1h")) == Duration.parse("1h")
    assert longest_retry_delay(_retries(["30s", "1m"])) == Duration.parse("1m")
    assert longest_retry_delay(_retries([], "1h")) == Duration(0)


@pytest.mark.parametrize("asked, policy, bound, delay", [
    (None, 30_000, 60_000, 30_000), (10_000, 30_000, 60_000, 10_000), (0, 30_000, 60_000, 0),
    (600_000, 30_000, 60_000, 60_000), (600_000, 30_000, None, 600_000)])
def test_retry_delay_is_the_asked_one_within_the_bound(asked, policy, bound, delay) -> None:
    assert retry_delay_ms(asked, policy, bound) == delay


def test_the_breaker_does_not_count_validation_nor_a_handlers_non_retryable() -> None:
    row = lambda reason, chosen=None: SimpleNamespace(reason=reason, chosen=chosen)  # noqa: E731
    assert systemic_signal(row(None))                      # a retried failure
    assert systemic_signal(row("max-attempts"))
    assert systemic_signal(row(None, CHOSE_RETRY))         # the downstream said "later"
    assert systemic_signal(row("non-retryable"))           # a class listed in the policy
    assert not systemic_signal(row("validation"))
    assert not systemic_signal(row("non-retryable", CHOSE_NON_RETRYABLE))


def choosing(msg: Message):
    """For the hot loop test below: by value."""
    if msg.value == b"later":
        raise Retry(after="10m")
    if msg.value == b"never":
        raise NonRetryable("no such customer")
    return msg.value


def test_the_hot_loop_reports_the_choice_in_its_result_rows() -> None:
    import pyarrow as pa

    from antidote_consumer.worker.executor import INPUT_FIELDS, WorkerConfig, arrow_schema, process

    values = [b"ok", b"later", b"never"]
    cols = {"key": [None] * 3, "value": values, "topic": ["src"] * 3, "partition": [0] * 3,
            "offset": [5, 6, 7], "ts": [0] * 3, "headers": [None] * 3}
    cfg = WorkerConfig(handler=f"{__name__}:choosing", source_topic="src", immediate=4, cycles=1,
                       non_retryable=frozenset(), validation=None, sink_kafka=None, emit_outputs=False)
    rows = [r for b in process(cfg, iter([pa.RecordBatch.from_pydict(cols, schema=arrow_schema(INPUT_FIELDS))]))
            for r in b.to_pylist() if r["kind"] in ("retry", "final")]
    by = {r["value"]: r for r in rows}
    assert set(by) == {b"later", b"never"}
    assert (by[b"later"]["kind"], by[b"later"]["chosen"], by[b"later"]["retry_after"],
            by[b"later"]["attempts"]) == ("retry", CHOSE_RETRY, 600_000, 1)
    assert (by[b"never"]["kind"], by[b"never"]["reason"], by[b"never"]["chosen"],
            by[b"never"]["attempts"]) == ("final", "non-retryable", CHOSE_NON_RETRYABLE, 1)


def test_held_rows_are_neither_failures_nor_attempts_of_the_failure_ratio() -> None:
    from types import SimpleNamespace as Row

    from antidote_consumer.worker.chosen import judged

    failed = Row(kind="retry", reason=None, chosen=None)
    invalid = Row(kind="final", reason="validation", chosen=None)
    held = [Row(kind="held", reason=None, chosen=None)] * 30 + [Row(kind="overflow", reason="held-overflow", chosen=None)]
    assert judged(10, [failed, *held]) == (1, 11)
    assert judged(0, [failed, invalid]) == (1, 2)
    assert judged(5, []) == (0, 5)
