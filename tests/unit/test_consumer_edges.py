"""Edges of the consumer's pure parts: fitting a record to a topic's size limit, malformed
retry records, derived topics that cannot hold the policy, the retry pump's outage log,
the last-poison metric's series, and what the handler is shown."""

from __future__ import annotations

import json
import logging

import pytest
from prometheus_client import generate_latest

from antidote_consumer.kafka import headers as h
from antidote_consumer.driver.metrics import Metrics
from antidote_consumer.driver.outage_log import OutageLog
from antidote_consumer.kafka.topics import DAY_MS, misfits

from .test_consumer_worker import run

ORIGIN = h.Origin("orders", 2, 41, 1_700_000_000_000)


def failure(message: str = "boom", stack: str | None = "Traceback ...\nValueError: boom", **kw) -> h.Headers:
    args = dict(origin=ORIGIN, attempts=3, cycle=0, first_failure=10, last_failure=20,
                reason="max-attempts", error_class="ValueError", error_message=message, stack=stack,
                consumer="shop/orders", policy="p", disposition="Move")
    return h.failure_headers(**{**args, **kw})


def test_texts_are_capped_in_utf8_bytes_without_splitting_a_character() -> None:
    hdrs = dict(failure(message="é" * 5000, stack="ß" * 9000, error_class="C" * 1000))
    assert len(hdrs[h.ERROR_MESSAGE]) <= h.MAX_MESSAGE and hdrs[h.ERROR_MESSAGE].endswith(b"[truncated]")
    assert len(hdrs[h.ERROR_STACK]) <= h.MAX_STACK and hdrs[h.ERROR_STACK].startswith(b"[truncated]")
    assert len(hdrs[h.ERROR_CLASS]) <= h.MAX_CLASS
    for v in hdrs.values():
        v.decode("utf-8")  # valid UTF-8: no character cut in half
    # The whole budget: Antidote's headers stay well under 6 KiB whatever the exception says.
    assert h.record_size(None, None, failure(message="é" * 5000, stack="ß" * 9000)) < 6 * 1024


def test_a_record_that_fits_keeps_every_header() -> None:
    hdrs = [("trace", b"t")] + failure()
    assert h.fit_record(b"k", b"v" * 100, hdrs, 1_000_000) == hdrs


@pytest.mark.parametrize("value_size", range(0, 6000, 97))
def test_fitting_shortens_the_stack_then_the_message_and_never_the_record(value_size: int) -> None:
    limit = 8000
    hdrs = [("trace", b"t" * 200)] + failure(message="m" * 2000, stack="s" * 5000)
    value = b"v" * value_size
    fitted = h.fit_record(b"key", value, hdrs, limit)
    assert fitted is not None  # the texts alone can always make room here
    assert h.record_size(b"key", value, fitted) <= limit
    names = [k for k, _ in fitted]
    # Everything but the two texts is there, unchanged and in order.
    keep = [(k, v) for k, v in hdrs if k not in (h.ERROR_STACK, h.ERROR_MESSAGE)]
    assert [(k, v) for k, v in fitted if k not in (h.ERROR_STACK, h.ERROR_MESSAGE)] == keep
    message = dict(fitted)[h.ERROR_MESSAGE]
    if h.ERROR_STACK in names and len(dict(fitted)[h.ERROR_STACK]) < len(dict(hdrs)[h.ERROR_STACK]):
        assert message == dict(hdrs)[h.ERROR_MESSAGE]  # the stack gives way first
    assert len(message) >= h.MIN_MESSAGE


def test_a_record_too_large_even_without_texts_does_not_fit() -> None:
    hdrs = failure(message="m" * 2000, stack="s" * 5000)
    base = h.record_size(b"k", b"", [(k, v) for k, v in hdrs if k not in (h.ERROR_STACK, h.ERROR_MESSAGE)])
    limit = 10_000
    assert h.fit_record(b"k", b"v" * (limit - base), hdrs, limit) is None
    assert h.fit_record(b"k", b"v" * (limit - base - 200), hdrs, limit) is not None


@pytest.mark.parametrize("bad", [
    {h.CYCLE: b"0"}, {h.CYCLE: b"-3"}, {h.ATTEMPTS: b"-1"}, {h.ORIGINAL_PARTITION: b"-1"},
    {h.ORIGINAL_OFFSET: b"-5"}, {h.ORIGINAL_TOPIC: b""}, {h.DUE: b"soon"}, {h.CYCLE: None},
    {h.ATTEMPTS: b"\xff\xfe"}])
def test_a_malformed_retry_record_is_refused_by_name(bad: dict) -> None:
    hdrs = [(k, bad.get(k, v)) for k, v in failure(cycle=1, due=5, reason=None, disposition=None)]
    with pytest.raises(ValueError, match="not an Antidote retry record"):
        h.retry_state(hdrs)
    assert h.retry_state_or_none(hdrs) is None
    assert h.retry_state_or_none(failure(cycle=1, due=5)) is not None


def test_the_worker_gives_a_malformed_retry_record_an_outcome() -> None:
    # cycle 7 of a policy with 1 cycle: it would index past the retry topics.
    hdrs = failure(cycle=7, due=0, reason=None, disposition=None)
    summary, [row] = run([b"ok:1"], topic="src-retry-1", headers=[[{"key": k, "value": v} for k, v in hdrs]])
    assert (row["kind"], row["reason"], row["error_class"]) == ("final", "validation", "antidote.ValidationError")
    assert "antidote.cycle 7" in row["error_message"] and row["otopic"] == "src-retry-1"
    assert summary["n_attempts"] == 0  # the handler never saw it


def test_the_handler_never_sees_antidote_headers_on_a_source_record() -> None:
    hdrs = [("trace", b"t"), (h.REASON, b"max-attempts"), (h.REDRIVE_COUNT, b"1"), (h.DUE, b"9")]
    _summary, [row] = run([b"dict:1"], headers=[[{"key": k, "value": v} for k, v in hdrs]])
    assert json.loads(row["output"])["headers"] == ["trace", h.REDRIVE_COUNT]
    # Dropped before anything reads them: the sink gets the headers the handler was shown.
    assert [x["key"] for x in row["headers"]] == ["trace", h.REDRIVE_COUNT]


def test_derived_topics_that_cannot_hold_the_policy() -> None:
    hour = 3_600_000
    ok = {"retention.ms": str(7 * DAY_MS), "cleanup.policy": "delete"}
    assert misfits(3, 3, ok, retry=True, longest_delay_ms=hour) == []
    assert misfits(3, 3, {"retention.ms": "-1"}, retry=True, longest_delay_ms=30 * DAY_MS) == []
    assert misfits(5, 3, ok, retry=True, longest_delay_ms=hour) == []  # more partitions: fine
    (why,) = misfits(2, 3, ok, retry=False, longest_delay_ms=hour)
    assert "2 partition(s), fewer than the source's 3" in why
    (why,) = misfits(3, 3, {"retention.ms": str(hour)}, retry=True, longest_delay_ms=hour)
    assert f"retention.ms is {hour}" in why and str(hour + DAY_MS) in why
    (why,) = misfits(3, 3, {**ok, "cleanup.policy": "compact,delete"}, retry=True, longest_delay_ms=hour)
    assert "cleanup.policy" in why
    # The poison and dead-letter topics are not held to the cycle delays.
    assert misfits(3, 3, {"retention.ms": "1000"}, retry=False, longest_delay_ms=hour) == []


def test_the_pump_logs_an_outage_once_then_rarely_then_its_end(caplog) -> None:
    now = [0.0]
    out = OutageLog("retry pump", every=60, clock=lambda: now[0], logger=logging.getLogger("t.outage"))
    caplog.set_level(logging.INFO, logger="t.outage")

    def fail() -> None:
        try:
            raise RuntimeError("retry topic x: KafkaError{code=_TRANSPORT}\n  at frame 1\n  at frame 2")
        except RuntimeError as err:
            out.failed(err)

    for _ in range(30):  # a minute of failures every 2 s
        fail()
        now[0] += 2
    fail()  # 60 s after the first: one reminder
    now[0] += 5
    out.ok()
    out.ok()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("ERROR", "retry pump failed (trying again every few seconds): RuntimeError: retry topic x: "
                  "KafkaError{code=_TRANSPORT}"),
        ("ERROR", "retry pump still failing after 60s (31 rounds): RuntimeError: retry topic x: "
                  "KafkaError{code=_TRANSPORT}"),
        ("WARNING", "retry pump works again after 65s (31 failed rounds)")]
    assert not any(r.exc_info for r in caplog.records)  # no traceback above DEBUG


def test_the_last_poison_metric_is_one_series_whatever_the_offsets() -> None:
    m = Metrics("shop", "orders")
    for offset in range(100):
        m.set_last_poison("max-attempts", "ValueError", "orders", offset % 3, offset, 1000.0 + offset)
    text = generate_latest(m.registry).decode()
    series = [line for line in text.splitlines() if line.startswith("antidote_last_poison")]
    assert len(series) == 3, series  # timestamp, partition, offset: one each
    assert m.registry.get_sample_value("antidote_last_poison_offset", m.ids) == 99
    assert m.registry.get_sample_value("antidote_last_poison_partition", m.ids) == 0
    assert m.registry.get_sample_value("antidote_last_poison_timestamp_seconds", {
        **m.ids, "reason": "max-attempts", "error_class": "ValueError", "topic": "orders"}) == 1099
