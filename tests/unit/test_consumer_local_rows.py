"""The local worker's form of a retry batch: rows in with headers as (key, value) pairs, result
columns out (pickled as they are), and the driver's namedtuples made from them. It must give
exactly what the executors' Arrow form gives for the same records."""

from __future__ import annotations

import pyarrow as pa

from antidote_consumer.driver.frames import Failure, batch_result, results_of
from antidote_consumer.kafka import headers as h
from antidote_consumer.worker.executor import (INPUT_FIELDS, RESULT_FIELDS, ResultRow, WorkerConfig,
                                               arrow_schema, process)
from antidote_consumer.worker.local import _run

from .test_consumer_worker import calls

ORIGIN = h.Origin("src", 1, 7, 1_700_000_000_000)
CFG = WorkerConfig(handler="tests.unit.test_consumer_worker:handler", source_topic="src", immediate=2,
                   cycles=2, non_retryable=frozenset({"Fatal"}), validation=None, sink_kafka=None,
                   emit_outputs=False)  # a consumer with a path sink has no local worker
# Times the loop sets to its own clock: compared apart.
CLOCK = {"first_failure", "last_failure"}


def retry_headers(cycle: int, **user: bytes) -> list[tuple[str, bytes | None]]:
    return list(user.items()) + h.failure_headers(
        origin=ORIGIN, attempts=3, cycle=cycle, first_failure=5, last_failure=6, reason=None,
        error_class="ValueError", error_message="always", stack="Traceback ...", consumer="ns/c",
        policy="p", due=9)


def records() -> list[tuple]:
    """Retry records of both cycles (one malformed), and a source record with a header."""
    return [
        (b"k0", b"ok:0", "src-retry-1", 0, 10, 1, retry_headers(1, trace=b"t0")),
        (b"k1", b"bad:1", "src-retry-1", 0, 11, 1, retry_headers(1)),
        (b"k2", b"bad:2", "src-retry-2", 1, 12, 1, retry_headers(2, trace=b"t2")),
        (b"k3", b"ok:3", "src-retry-2", 1, 13, 1, [("antidote.cycle", b"x")]),  # not ours
        (b"k4", b"bad:4", "src", 0, 14, 1, [("trace", None)]),
    ]


def as_arrow(rows: list[tuple]) -> pa.RecordBatch:
    cols = {name: [r[i] for r in rows] for i, (name, _) in enumerate(INPUT_FIELDS)}
    cols["headers"] = [[{"key": k, "value": v} for k, v in hs] for hs in cols["headers"]]
    return pa.RecordBatch.from_pydict(cols, schema=arrow_schema(INPUT_FIELDS))


def comparable(row: dict) -> dict:
    """A result row with its headers as pairs, without the loop's clock, and without the
    largest record read: only Arrow batches report it (the source's bound, spark.ArrowRows)."""
    hs = row["headers"]
    return {**{k: v for k, v in row.items() if k not in CLOCK and k != "largest"},
            "headers": None if hs is None else [(x["key"], x["value"]) if isinstance(x, dict) else tuple(x)
                                                for x in hs]}


def test_the_local_form_gives_what_the_arrow_form_gives() -> None:
    calls.clear()
    spark_rows = [r for b in process(CFG, iter([as_arrow(records())])) for r in b.to_pylist()]
    calls.clear()
    columns = _run(CFG, records())
    local_rows = [dict(zip(RESULT_FIELDS, r)) for cols in columns
                  for r in zip(*(cols[name] for name in RESULT_FIELDS))]
    assert [comparable(r) for r in local_rows] == [comparable(r) for r in spark_rows]
    assert [r["largest"] for r in local_rows if r["kind"] == "summary"] == [0]
    assert [r["largest"] for r in spark_rows if r["kind"] == "summary"][0] > 0
    kinds = sorted(r["kind"] for r in local_rows)
    assert kinds == ["end", "end", "end", "final", "final", "retry", "retry", "summary"]
    # The user's headers come back as pairs, Antidote's own stripped from a retried message.
    retried = {r["key"]: r["headers"] for r in local_rows if r["kind"] == "retry"}
    assert retried == {b"k1": [], b"k4": [("trace", None)]}
    (moved,) = [r for r in local_rows if r["key"] == b"k2"]
    assert (moved["kind"], moved["headers"], moved["otopic"], moved["ooffset"]) == ("final", [("trace", b"t2")],
                                                                                  "src", 7)


def test_the_driver_keeps_the_local_rows_as_they_come() -> None:
    rows = [ResultRow._make(r) for cols in _run(CFG, records())
            for r in zip(*(cols[name] for name in RESULT_FIELDS))]
    result = batch_result(rows)
    assert result.n_ok == 1 and len(result.failures) == 4
    assert all(type(f) is Failure for f in result.failures)
    assert {f.key: f.headers for f in result.failures}[b"k4"] == [("trace", None)]
    assert result.ends == {("src-retry-1", 0): 11, ("src-retry-2", 1): 13, ("src", 0): 14}


def test_an_empty_retry_batch_gives_only_its_summary() -> None:
    (cols,) = _run(CFG, [])
    assert cols["kind"] == ["summary"] and cols["n_ok"] == [0]


def test_retry_state_reads_the_last_value_of_a_header_and_passes_over_empty_ones() -> None:
    hdrs = retry_headers(1) + [(h.ATTEMPTS, b"8"), (h.CYCLE, None)]
    state = h.retry_state(hdrs)
    assert (state.attempts, state.cycle, state.origin) == (8, 1, ORIGIN)


def test_record_size_counts_a_header_name_in_utf8_bytes() -> None:
    ascii_size = h.record_size(b"k", b"vv", [("ab", b"xyz"), ("n", None)])
    assert ascii_size == h.BATCH_OVERHEAD + 3 + 2 * h.HEADER_OVERHEAD + 2 + 3 + 1
    assert h.record_size(b"k", b"vv", [("é", b"xyz"), ("n", None)]) == ascii_size  # "é" is 2 bytes
    assert h.record_size(None, None, iter([("ab", b"")])) == h.BATCH_OVERHEAD + h.HEADER_OVERHEAD + 2


def test_the_executors_arrow_results_give_the_local_form() -> None:
    """collect_results turns the executors' Arrow batches into the namedtuples the local
    worker's columns make: headers as (key, value) pairs, binary as bytes."""
    calls.clear()
    batches = list(process(CFG, iter([as_arrow(records())])))
    from_arrow = results_of(batches)
    calls.clear()
    local = [ResultRow._make(r) for cols in _run(CFG, records())
             for r in zip(*(cols[name] for name in RESULT_FIELDS))]
    assert all(type(r) is ResultRow for r in from_arrow)
    # (The largest record read is reported from Arrow batches only: see comparable.)
    clockless = [{k: v for k, v in r._asdict().items() if k not in CLOCK and k != "largest"}
                 for r in from_arrow]
    assert clockless == [{k: v for k, v in r._asdict().items() if k not in CLOCK and k != "largest"}
                         for r in local]
    assert {r.key: r.headers for r in from_arrow if r.kind == "retry"} == {b"k1": [], b"k4": [("trace", None)]}
    assert batch_result(from_arrow).ends == {("src-retry-1", 0): 11, ("src-retry-2", 1): 13, ("src", 0): 14}


def test_arrow_results_of_a_sliced_batch_keep_each_rows_headers() -> None:
    """Arrow may hand over a slice of a batch: each row keeps its own headers, and a row
    without a header list keeps None."""
    batch = next(iter(process(CFG, iter([as_arrow(records())]))))
    rows = batch.to_pylist()
    assert [r.kind for r in results_of([batch.slice(1, 3)])] == [r["kind"] for r in rows[1:4]]
    assert [r.headers for r in results_of([batch.slice(1, 3)])] == [
        None if r["headers"] is None else [(x["key"], x["value"]) for x in r["headers"]] for r in rows[1:4]]
    assert results_of([]) == []
