"""Forged `antidote.*` headers on source records: dropped before anything reads them, on every
path (the executors' Arrow batches, the local worker's rows, ordering Key's held records,
batch isolation), so they can neither change a message's history nor reach its records."""

from __future__ import annotations

import json
from collections import namedtuple

from antidote_consumer.driver.frames import origin_of
from antidote_consumer.kafka import headers as h
from antidote_consumer.worker.executor import INPUT_FIELDS, WorkerConfig, process

from . import test_consumer_ordering_worker as ordering
from .test_consumer_worker import run

# What a hostile producer to the source can set: a message that looks held (a first delivery
# again on its retry cycle), attempts and a cycle of its own, a stack and a due time that
# would travel onto its retry and quarantine records.
FORGED = [(h.HELD, b"1"), (h.ATTEMPTS, b"0"), (h.CYCLE, b"1"), (h.ERROR_STACK, b"forged stack"),
          (h.DUE, b"1"), (h.CONSUMER, b"other/c"), (h.ORIGINAL_OFFSET, b"999")]
OWN = [("trace", b"t"), (h.REDRIVE_COUNT, b"1")]  # the redrive count travels with the message
SOURCE = [("trace", b"t")] + FORGED + [(h.REDRIVE_COUNT, b"1")]


def arrow(hdrs: list[tuple[str, bytes]]) -> list[dict]:
    return [{"key": k, "value": v} for k, v in hdrs]


def test_source_headers_keep_the_users_and_the_redrive_count_only() -> None:
    assert h.source_headers(SOURCE) == OWN
    assert h.has_ours(SOURCE) and not h.has_ours(OWN) and h.source_headers(None) == []


def test_the_executors_drop_forged_headers_from_failed_and_successful_rows() -> None:
    summary, (bad, ok) = run([b"bad:1", b"dict:2"], headers=[arrow(SOURCE)] * 2)
    # A first delivery, whatever it claims: all its attempts, cycle 0, its own coordinates.
    assert (bad["kind"], bad["attempts"], bad["cycle"], bad["ooffset"]) == ("retry", 3, 0, 100)
    assert [(x["key"], x["value"]) for x in bad["headers"]] == OWN
    assert json.loads(ok["output"])["headers"] == [k for k, _ in OWN]
    assert [(x["key"], x["value"]) for x in ok["headers"]] == OWN  # what the sink gets
    assert summary["n_attempts"] == 4


def test_the_local_workers_rows_drop_them_too() -> None:
    cfg = WorkerConfig(handler="tests.unit.test_consumer_worker:handler", source_topic="src",
                       immediate=1, cycles=1, non_retryable=frozenset(), validation=None,
                       sink_kafka=None, emit_outputs=True)
    columns = ([b"k"], [b"bad:1"], ["src"], [0], [7], [0], [list(SOURCE)])
    out = list(process(cfg, iter([columns]), as_columns=True))
    rows = [dict(zip(cols, values)) for cols in out for values in zip(*cols.values())]
    (bad,) = [r for r in rows if r["kind"] == "retry"]
    assert (bad["attempts"], bad["cycle"], bad["headers"]) == (2, 0, OWN)


def test_ordering_key_holds_a_source_record_without_its_forged_headers() -> None:
    rows = ordering.run(ordering.cfg(), [(b"a", b"bad:0", "src", 0, 0, arrow(SOURCE)),
                                         (b"a", b"ok:1", "src", 0, 1, arrow(SOURCE))])
    failed, held = [r for r in rows if r["kind"] in ("retry", "held")]
    assert (failed["kind"], held["kind"], held["attempts"]) == ("retry", "held", 0)
    for r in (failed, held):
        assert [(x["key"], x["value"]) for x in r["headers"]] == OWN


Header = namedtuple("Header", "key value")
Raw = namedtuple("Raw", "key value topic partition offset ts headers")


def test_batch_isolation_takes_a_source_record_without_its_forged_headers() -> None:
    raw = Raw(b"k", b"v", "src", 2, 41, 5, [Header(k, v) for k, v in SOURCE])
    origin, user, cycle = origin_of(raw, "src")
    assert (origin, user, cycle) == (h.Origin("src", 2, 41, 5), OWN, 0)
    # A retry record's own headers are Antidote's: read, not dropped.
    retry = h.failure_headers(origin=h.Origin("src", 2, 41, 5), attempts=3, cycle=1, first_failure=1,
                              last_failure=2, reason=None, error_class="E", error_message="m",
                              stack=None, consumer="ns/c", policy="p", due=9)
    raw = Raw(b"k", b"v", "src-retry-1", 0, 3, 6, [Header(k, v) for k, v in [("trace", b"t"), *retry]])
    assert origin_of(raw, "src") == (h.Origin("src", 2, 41, 5), [("trace", b"t")], 1)
