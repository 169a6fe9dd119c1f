"""Retry cycles planned from offsets (driver.retry_plan) and run by the executors: the plan
of each retry partition, the cap of a batch, Spark's offsets options, where the executors
stop (worker.process's "waiting"), the cut of a bisection, and the spark.antidote.* setting."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from antidote_api import spark_conf
from antidote_consumer.driver.frames import BatchResult
from antidote_consumer.driver.retry_plan import PartitionOffsets, cut_waiting, plan, spark_offsets
from antidote_consumer.kafka import headers as h
from antidote_consumer.worker.executor import INPUT_FIELDS, WorkerConfig, arrow_schema, process

NOW = 1_700_000_000_000
DELAY = 60_000
T = "src.retry-1"


def part(partition: int = 0, *, start: int = 0, low: int = 0, stable: int = 0, found=None,
         high=None, topic: str = T, delay: int = DELAY) -> PartitionOffsets:
    return PartitionOffsets(topic, partition, start=start, low=low, stable=stable, delay=delay,
                            found=found, high=high)


def test_everything_below_the_last_stable_offset_is_due_when_no_record_is_as_new_as_now_minus_delay() -> None:
    p = plan([part(start=10, stable=50)], NOW, 1000)
    assert p.ranges == {(T, 0): (10, 50)}
    assert p.positions == {f"{T}:0": 50}  # past trailing markers too: the executors read up to it
    assert p.records == 40 and p.next_due is None and not p.incomplete


def test_the_first_record_not_old_enough_ends_the_range_and_says_when_the_next_falls_due() -> None:
    ts = NOW - DELAY + 250  # produced 250 ms after the due end: due 250 ms from now
    p = plan([part(start=10, stable=50, found=(30, ts))], NOW, 1000)
    assert p.ranges == {(T, 0): (10, 30)} and p.positions == {f"{T}:0": 30}
    assert p.next_due == ts + DELAY == NOW + 250


def test_the_last_offset_is_read_too_for_it_is_most_often_the_commit_marker() -> None:
    # The marker is stamped when the transaction commits, after its records' settle time.
    p = plan([part(start=10, stable=50, found=(49, NOW - DELAY + 80))], NOW, 1000)
    assert p.ranges == {(T, 0): (10, 50)} and p.positions == {f"{T}:0": 50}


def test_a_partition_with_nothing_due_is_left_out_but_read_for_a_small_cycle() -> None:
    p = plan([part(start=10, stable=50, found=(10, NOW - 5))], NOW, 1000)
    assert p.ranges == {} and p.positions == {}
    # The driver's own read of a small cycle still looks at its head: a Retry(after=...)
    # shorter than the cycle's delay may be due before its timestamp says.
    assert p.reads == {(T, 0): (10, 50)}
    assert p.next_due == NOW - 5 + DELAY


def test_timestamps_out_of_order_never_move_a_range_back() -> None:
    # The first record at or after now - delay lies before the position (a clock stepped):
    # nothing is due by the timestamps, and nothing before the position is read again.
    p = plan([part(start=40, stable=50, found=(12, NOW - 100))], NOW, 1000)
    assert p.ranges == {}


def test_records_lost_to_retention_are_reported_and_passed_once() -> None:
    p = plan([part(start=5, low=20, stable=50)], NOW, 1000)
    assert p.expired == [(T, 0, 5, 20)]
    assert p.ranges == {(T, 0): (20, 50)} and p.positions == {f"{T}:0": 50}
    p = plan([part(start=5, low=20, stable=20)], NOW, 1000)  # lost, and nothing after them
    assert p.expired == [(T, 0, 5, 20)] and p.positions == {f"{T}:0": 20} and p.ranges == {}


def test_an_open_transaction_is_not_idle() -> None:
    assert plan([part(start=50, stable=50, high=53)], NOW, 1000).incomplete
    assert not plan([part(start=50, stable=50, high=50)], NOW, 1000).incomplete


def test_a_batch_is_capped_in_proportion_and_every_partition_moves() -> None:
    p = plan([part(0, start=0, stable=900), part(1, start=100, stable=200), part(2, start=7, stable=8)],
             NOW, 100)
    # 1,001 due: 900, 100 and 1 of them get 89, 9 and (at least) 1 of the 100.
    assert p.ranges == {(T, 0): (0, 89), (T, 1): (100, 109), (T, 2): (7, 8)}
    assert p.positions == {f"{T}:0": 89, f"{T}:1": 109, f"{T}:2": 8}
    assert p.next_due == NOW  # what was cut off is due already
    assert plan([part(start=0, stable=100)], NOW, 100).next_due is None  # not cut


def test_each_topic_is_planned_with_its_own_delay() -> None:
    t2 = "src.retry-2"
    parts = [part(start=0, stable=10, found=(4, NOW - DELAY)),
             part(start=0, stable=10, found=(6, NOW - 4 * DELAY), topic=t2, delay=4 * DELAY)]
    p = plan(parts, NOW, 1000)
    assert p.ranges == {(T, 0): (0, 4), (t2, 0): (0, 6)} and p.next_due == NOW


def test_spark_reads_exactly_the_planned_ranges() -> None:
    opts = spark_offsets({(T, 1): (5, 9), (T, 0): (3, 4), ("src.retry-2", 2): (0, 7)})
    assert json.loads(opts["assign"]) == {T: [0, 1], "src.retry-2": [2]}
    assert json.loads(opts["startingOffsets"]) == {T: {"0": 3, "1": 5}, "src.retry-2": {"2": 0}}
    assert json.loads(opts["endingOffsets"]) == {T: {"0": 4, "1": 9}, "src.retry-2": {"2": 7}}


# --- the executors' side of a planned batch ----------------------------------------------
def retry_headers(due: int, consumer: str = "ns/c") -> list[dict]:
    hdrs = h.failure_headers(origin=h.Origin("src", 0, 7, 1), attempts=1, cycle=1, first_failure=1,
                             last_failure=1, error_class="ValueError", error_message="x", stack=None,
                             consumer=consumer, policy="p", reason=None, due=due)
    return [{"key": k, "value": v} for k, v in hdrs]


def run_retry(records: list[tuple[int, int, int, str]], due_by: int | None) -> list[dict]:
    """process() over retry records (partition, offset, due, consumer), values "ok"."""
    n = len(records)
    cols = {"key": [b"k"] * n, "value": [b"ok"] * n, "topic": [T] * n,
            "partition": [p for p, _, _, _ in records], "offset": [o for _, o, _, _ in records],
            "ts": [1] * n, "headers": [retry_headers(d, c) for _, _, d, c in records]}
    cfg = WorkerConfig(handler="tests.unit.test_consumer_worker:handler", source_topic="src",
                       immediate=0, cycles=1, non_retryable=frozenset(), validation=None,
                       sink_kafka=None, emit_outputs=True, owner="ns/c", due_by=due_by)
    batch = pa.RecordBatch.from_pydict(cols, schema=arrow_schema(INPUT_FIELDS))
    return [r for b in process(cfg, iter([batch])) for r in b.to_pylist()]


def test_the_executors_stop_a_partition_at_its_first_record_not_due_and_pass_over_others() -> None:
    rows = run_retry([(0, 10, NOW - 1, "ns/c"), (0, 11, NOW + 5, "ns/other"), (0, 12, NOW + 9, "ns/c"),
                      (0, 13, NOW - 1, "ns/c"), (1, 20, NOW, "ns/c")], due_by=NOW)
    ok = sorted(r["offset"] for r in rows if r["kind"] == "ok")
    assert ok == [10, 20]  # 11 is another consumer's; 13 waits behind 12, never early
    (waiting,) = [r for r in rows if r["kind"] == "waiting"]
    assert (waiting["topic"], waiting["partition"], waiting["offset"], waiting["last_failure"]) == (T, 0, 12, NOW + 9)
    (summary,) = [r for r in rows if r["kind"] == "summary"]
    assert summary["n_ok"] == 2 and summary["n_attempts"] == 2


def test_without_a_plan_the_worker_runs_what_the_driver_read() -> None:
    rows = run_retry([(0, 10, NOW + 9, "ns/c")], due_by=None)  # the driver's read checked it
    assert [r["offset"] for r in rows if r["kind"] == "ok"] == [10]


def test_results_keep_the_earliest_record_a_partition_waits_on() -> None:
    a, b = BatchResult(), BatchResult()
    a.wait_at((T, 0), 12, NOW + 9)
    b.wait_at((T, 0), 8, NOW + 4)
    b.wait_at((T, 1), 3, NOW + 1)
    assert a.merge(b).waiting == {(T, 0): (8, NOW + 4), (T, 1): (3, NOW + 1)}


def test_a_bisection_runs_only_what_the_whole_batch_would() -> None:
    def hd(due, consumer="ns/c"):
        return [(h.DUE, str(due).encode()), (h.CONSUMER, consumer.encode())]
    rows = [(T, 0, 10, hd(NOW - 1)), (T, 0, 11, hd(NOW + 5, "ns/other")), (T, 0, 12, hd(NOW + 9)),
            (T, 0, 13, hd(NOW - 1)), (T, 1, 4, []), (T, 1, 5, hd(NOW))]
    keys, waiting = cut_waiting(rows, NOW, "src", "ns/c", h.due_of, h.consumer_of)
    # Another consumer's record stays (the executors pass over it); 13 is behind 12.
    assert keys == [(T, 0, 10), (T, 0, 11), (T, 1, 4), (T, 1, 5)]
    assert waiting == {(T, 0): (12, NOW + 9)}


# --- the setting ------------------------------------------------------------------------
KEY = "spark.antidote.retry.localMaxRecords"


def test_the_local_limit_defaults_and_reads_from_spark_conf() -> None:
    assert spark_conf.tunable(None, KEY) == 10_000
    assert spark_conf.tunable({KEY: "0"}, KEY) == 0
    assert spark_conf.tunable({KEY: "250", "spark.sql.shuffle.partitions": "4"}, KEY) == 250


@pytest.mark.parametrize("conf", [{KEY: "-1"}, {KEY: "1e4"}, {KEY: ""}, {KEY: "1000000000"},
                                  {KEY: "٣"}, {"spark.antidote.retry.localMaxRecord": "5"}])
def test_a_bad_setting_is_refused_naming_the_key(conf: dict) -> None:
    from pydantic import ValidationError

    from antidote_api.consumer import Spark

    (key,) = conf
    assert spark_conf.bad_tunables(conf) == [key]
    with pytest.raises(ValidationError, match=key.replace(".", r"\.")):
        Spark.model_validate({"conf": conf})
