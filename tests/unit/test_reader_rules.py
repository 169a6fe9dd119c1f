"""The reader's pure parts: plan (options over the policy), filters, redrive headers,
resolved offsets, the rate limiter, the report, and option parsing."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from antidote_api.policy import Reader
from antidote_consumer.kafka import headers as h
from antidote_consumer.reader.options import parse_options
from antidote_consumer.reader.rules import (Filter, Progress, RateLimiter, ReaderError,
                                            ReaderOptions, ReaderReport, original_partition, plan,
                                            redrive_count, redrive_headers)

FAIL = h.failure_headers(origin=h.Origin("src", 2, 7, 1000), attempts=3, cycle=1, first_failure=10,
                         last_failure=2000, reason="max-attempts", error_class="ValueError",
                         error_message="bad", stack="tb", consumer="c", policy="p", disposition="Move")


def test_redrive_headers_keep_user_headers_byte_identical_and_count():
    user = [("trace", b"\x00\xff"), ("dup", b"1"), ("dup", None)]
    first = redrive_headers(user + FAIL)
    assert first == user + [(h.REDRIVE_COUNT, b"1")]
    again = redrive_headers(first + FAIL)  # redriven, failed again, quarantined again
    assert again == user + [(h.REDRIVE_COUNT, b"2")]
    assert redrive_count(again) == 2 and redrive_count(user) == 0
    assert redrive_count([(h.REDRIVE_COUNT, b"junk")]) == 0
    assert original_partition(FAIL) == 2 and original_partition(user) is None


def test_user_headers_keep_the_redrive_count_through_retry_cycles():
    hdrs = [("a", b"1"), (h.REDRIVE_COUNT, b"3")] + FAIL
    assert h.user_headers(hdrs) == [("a", b"1"), (h.REDRIVE_COUNT, b"3")]


def test_filter_by_class_reason_and_window():
    assert Filter().matches(FAIL, 0)
    assert Filter(error_classes=frozenset({"ValueError"})).matches(FAIL, 0)
    assert not Filter(error_classes=frozenset({"KeyError"})).matches(FAIL, 0)
    assert not Filter(reasons=frozenset({"validation"})).matches(FAIL, 0)
    assert Filter(since_ms=2000, until_ms=2001).matches(FAIL, 0)  # since inclusive
    assert not Filter(until_ms=2000).matches(FAIL, 0)  # until exclusive
    assert Filter(since_ms=50).matches([("x", b"y")], record_ts=60)  # no header: record time
    assert not Filter(error_classes=frozenset({"ValueError"})).matches([], 0)


def test_plan_merges_flags_over_the_policy():
    reader = Reader.model_validate({"action": "Drop", "rateLimit": 10, "maxRedrives": 4,
                                    "filter": {"reasons": ["validation"]}})
    p = plan(reader, ReaderOptions())
    assert (p.action, p.rate, p.max_redrives, p.filter.reasons, p.disposition) == (
        "Drop", 10, 4, frozenset({"validation"}), "Reject")
    p = plan(reader, ReaderOptions(action="Redrive", rate=3, reasons=("max-attempts",),
                                   since=datetime(2024, 1, 1)))
    assert (p.action, p.rate, p.filter.reasons) == ("Redrive", 3, frozenset({"max-attempts"}))
    assert p.filter.since_ms == int(datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)


@pytest.mark.parametrize("reader, options, field", [
    (Reader.model_construct(**{**Reader().__dict__, "disposition": "Move"}), ReaderOptions(),
     "spec.reader.disposition"),
    (Reader(), ReaderOptions(action="Archive"), "spec.reader.archive"),
    (Reader(), ReaderOptions(source="dlq"), "spec.reader.disposition"),  # Reject into itself
    (Reader(), ReaderOptions(source="retry 1"), "--from"),  # not a topic name (a route's topic is one)
    (Reader(), ReaderOptions(action="Move"), "--action"),
    (Reader(), ReaderOptions(rate=0), "--rate"),
    (Reader(), ReaderOptions(since=datetime(2024, 2, 1), until=datetime(2024, 1, 1)), "--until"),
])
def test_plan_refuses_with_the_field_named(reader, options, field):
    with pytest.raises(ReaderError, match=field.replace(".", r"\.")):
        plan(reader, options)


def test_progress_resolves_ranges_and_advances_its_watermark():
    p = Progress()
    p.add(5, 9)
    assert (p.next, p.done) == (0, [[5, 9]]) and p.is_done(7) and not p.is_done(4)
    p.add(0, 3)
    assert (p.next, p.done) == (4, [[5, 9]])
    p.add(4, 4)
    assert (p.next, p.done) == (10, [])
    p.add(12, 12)
    p.add(14, 20)
    assert Progress.from_json(json.loads(json.dumps(p.to_json()))).done == [[12, 12], [14, 20]]
    p.add(2, 3)  # below the watermark: nothing changes
    assert p.next == 10


def test_rate_limiter_schedules_messages_evenly():
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    lim = RateLimiter(50, clock=lambda: now[0], sleep=sleep)
    for _ in range(200):
        lim.acquire()
    assert now[0] == pytest.approx(199 / 50)
    unlimited = RateLimiter(None, clock=lambda: 0.0, sleep=lambda s: pytest.fail("slept"))
    for _ in range(10):
        unlimited.acquire()


def test_rate_limiter_does_not_burst_after_a_stall():
    now = [0.0]
    lim = RateLimiter(10, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    lim.acquire()
    now[0] += 30  # a 30 s stall
    lim.acquire()
    t = now[0]
    lim.acquire()
    assert now[0] - t == pytest.approx(0.1)  # back on a 10/s schedule, not 300 at once


def test_report_json_keys_and_size():
    r = ReaderReport(action="Redrive", dryRun=False, source="poison", messages=3, redriven=2,
                     parked=1, faultAt="t.poison/0/12")
    doc = json.loads(r.dumps())
    assert list(doc) == ["action", "dryRun", "from", "messages", "redriven", "parked", "archived",
                         "dropped", "held", "rejected", "skippedByFilter", "failed", "refused", "archivePath",
                         "faultAt"]
    assert doc["from"] == "poison" and doc["faultAt"] == "t.poison/0/12"
    assert len(r.dumps()) < 4096
    assert "2 redriven" in r.summary() and "Fault" in r.summary()


def test_parse_options_from_job_flags():
    o = parse_options(["--from", "dlq", "--action", "Drop", "--rate", "5", "--error-class", "A",
                       "--error-class", "B", "--reason", "validation", "--since",
                       "2024-01-01T00:00:00Z", "--dry-run"])
    assert (o.source, o.action, o.rate, o.error_classes, o.reasons, o.dry_run) == (
        "dlq", "Drop", 5, ("A", "B"), ("validation",), True)
    assert o.since == datetime(2024, 1, 1, tzinfo=timezone.utc)
    with pytest.raises(ReaderError, match="--since"):
        parse_options(["--since", "yesterday"])
    with pytest.raises(ReaderError):
        parse_options(["--action", "Move"])
