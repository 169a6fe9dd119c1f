"""What the ledger accounts for, by source position: the pure parts."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from antidote_consumer.driver.ledger import BATCH, LedgerState
from antidote_consumer.driver.consumer import starting_offsets
from antidote_consumer.driver.frames import BatchResult, HandlerMap, caught_up, floor_condition
from antidote_consumer.worker.executor import WorkerConfig
from antidote_consumer.worker.input_notes import note_ends as _note_ends, note_one_partition as _note_one_partition


def test_a_consumer_the_ledger_knows_nothing_of_starts_as_its_policy_says() -> None:
    assert starting_offsets("t", "earliest", 3, {}, {}) == "earliest"
    assert starting_offsets("t", "latest", 3, {}, {}) == "latest"


def test_each_partition_starts_where_the_ledger_accounting_ends() -> None:
    got = json.loads(starting_offsets("t", "earliest", 3, {0: 12, 2: 7}, {}))
    # A partition that never delivered a record starts at its earliest, as Spark starts a
    # partition it has not seen.
    assert got == {"t": {"0": 12, "1": -2, "2": 7}}


def test_a_latest_consumer_starts_where_it_first_started_until_a_partition_delivers() -> None:
    got = json.loads(starting_offsets("t", "latest", 2, {1: 40}, {0: 5, 1: 30}))
    assert got == {"t": {"0": 5, "1": 40}}


def test_partitions_the_ledger_knows_beyond_the_count_are_kept() -> None:
    assert json.loads(starting_offsets("t", "earliest", 1, {0: 1, 3: 9}, {})) == {"t": {"0": 1, "3": 9}}


def _cols(rows: list[tuple[str, int, int]]) -> tuple[list, list, list]:
    """The topic, partition and offset columns of rows, as the worker's loop holds them."""
    return [t for t, _, _ in rows], [p for _, p, _ in rows], [o for _, _, o in rows]


def test_the_floor_is_one_sql_condition_with_long_offsets_and_no_floor_for_unknown_partitions() -> None:
    # Evaluated by Spark (the consumer integration tests replay batches through it); here its
    # text: every partition the ledger knows, offsets as BIGINT literals (beyond 2^31 too), and
    # a partition it does not know kept whole (floor 0).
    assert floor_condition({1: 3_000_000_001, 0: 5}) == (
        "offset >= coalesce(map(0, 5L, 1, 3000000001L)[partition], 0L)")


def test_a_query_is_caught_up_only_once_it_has_read_to_the_floor_in_every_partition_the_floor_names() -> None:
    # Nothing accounted for yet: nothing to pass over.
    assert caught_up({}, {})
    # A query that has read nothing yet (just started, from any checkpoint) may replay.
    assert not caught_up({0: 10, 1: 4}, {})
    # A replay spanning several batches: partition 0 is still below its floor.
    assert not caught_up({0: 10, 1: 4}, {0: 6, 1: 9})
    # A partition the query has not read, say an idle one, may start below its floor.
    assert not caught_up({0: 10, 1: 4}, {0: 10})
    # Read to the floor (the offset after the last record equals it) or past it everywhere.
    assert caught_up({0: 10, 1: 4}, {0: 10, 1: 4})
    assert caught_up({0: 10, 1: 4}, {0: 12, 1: 4, 2: 1})


class _Udf:
    made = 0

    def __init__(self, cfg) -> None:
        _Udf.made += 1


def test_the_handler_udf_is_made_again_only_when_the_worker_config_changes(monkeypatch) -> None:
    from antidote_consumer.driver import frames

    monkeypatch.setattr(frames, "_handler_udf", lambda cfg: _Udf(cfg))
    monkeypatch.setattr(frames, "_map_in_arrow", lambda df, udf: (df, udf))
    cfg = WorkerConfig(handler="m:f", source_topic="t", immediate=0, cycles=0,
                       non_retryable=frozenset(), validation=None, sink_kafka={"topic": "o"},
                       emit_outputs=False)
    m, before = HandlerMap({"spark.antidote.tasksPerCore": "0"}), _Udf.made
    first = m("df1", cfg)[1]
    assert m("df2", dataclasses.replace(cfg))[1] is first  # equal: the same UDF
    assert m("df3", dataclasses.replace(cfg, due_by=5))[1] is not first
    assert _Udf.made - before == 2


class _Frame:
    """A DataFrame's coalesce, and the parallelism its session reports."""

    def __init__(self, cores: int) -> None:
        self.sparkSession = SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=cores))
        self.coalesced: int | None = None

    def coalesce(self, n: int) -> "_Frame":
        self.coalesced = n
        return self


@pytest.mark.parametrize(("conf", "cores", "tasks"), [
    (None, 2, 8),  # the default: 4 tasks per core
    ({"spark.antidote.tasksPerCore": "1"}, 40, 40),
    ({"spark.antidote.tasksPerCore": "0"}, 2, None),  # one task per partition: Spark's own
])
def test_a_batch_runs_at_most_tasks_per_core_times_the_cores_tasks(monkeypatch, conf, cores, tasks) -> None:
    from antidote_consumer.driver import frames

    monkeypatch.setattr(frames, "_handler_udf", lambda cfg: _Udf(cfg))
    monkeypatch.setattr(frames, "_map_in_arrow", lambda df, udf: df)
    cfg = WorkerConfig(handler="m:f", source_topic="t", immediate=0, cycles=0,
                       non_retryable=frozenset(), validation=None, sink_kafka={"topic": "o"},
                       emit_outputs=False)
    assert HandlerMap(conf, partitions=512)(_Frame(cores), cfg).coalesced == tasks


def test_a_topic_within_the_bound_is_not_coalesced(monkeypatch) -> None:
    from antidote_consumer.driver import frames

    monkeypatch.setattr(frames, "_handler_udf", lambda cfg: _Udf(cfg))
    monkeypatch.setattr(frames, "_map_in_arrow", lambda df, udf: df)
    cfg = WorkerConfig(handler="m:f", source_topic="t", immediate=0, cycles=0,
                       non_retryable=frozenset(), validation=None, sink_kafka={"topic": "o"},
                       emit_outputs=False)
    assert HandlerMap(None, partitions=8)(_Frame(2), cfg).coalesced is None  # 8 tasks already
    assert HandlerMap(None, partitions=9)(_Frame(2), cfg).coalesced == 8


def test_the_ends_are_the_last_offset_read_per_topic_and_partition() -> None:
    ends: dict = {}
    _note_ends(*_cols([("a", 0, 5), ("a", 0, 9), ("a", 1, 2), ("b", 0, 4)]), ends)
    _note_ends(*_cols([("a", 0, 7), ("a", 0, 11)]), ends)
    _note_ends(*_cols([]), ends)
    _note_ends(*_cols([("a", 1, 1)]), ends)  # one group, behind what is known: kept
    assert ends == {("a", 0): 11, ("a", 1): 2, ("b", 0): 4}
    _note_ends(*_cols([("b", 0, 6), ("c", 0, 3)]), ends)  # one partition, two topics
    assert ends == {("a", 0): 11, ("a", 1): 2, ("b", 0): 6, ("c", 0): 3}


def test_a_batch_of_one_partition_is_noted_from_its_lists_and_a_mixed_one_is_not() -> None:
    ends: dict = {("a", 0): 20}
    assert _note_one_partition(["a", "a", "a"], [1, 1, 1], [4, 9, 7], ends)
    assert _note_one_partition(["a"], [0], [12], ends)  # behind what is known: kept
    assert _note_one_partition([], [], [], ends)
    assert ends == {("a", 0): 20, ("a", 1): 9}
    assert not _note_one_partition(["a", "a"], [0, 1], [30, 31], ends)
    assert not _note_one_partition(["a", "b"], [0, 0], [30, 31], ends)
    assert ends == {("a", 0): 20, ("a", 1): 9}  # left to _note_ends


def test_merged_results_keep_the_largest_end() -> None:
    a = BatchResult(n_ok=1, ends={("t", 0): 5, ("t", 1): 9})
    b = BatchResult(n_ok=2, ends={("t", 0): 8})
    m = a.merge(b)
    assert (m.n_ok, m.ends) == (3, {("t", 0): 8, ("t", 1): 9})


def test_a_ledger_written_before_in_batch_existed_still_says_a_batch_was_cut_short() -> None:
    old = LedgerState()
    old.apply(BATCH, {"committed": 4, "started": 5})
    assert old.in_batch
    done = LedgerState()
    done.apply(BATCH, {"committed": 5, "started": 5})
    assert not done.in_batch
    # Batch ids start at 0 again with a new checkpoint: the flag, not the ids, says it.
    new = LedgerState()
    new.apply(BATCH, {"committed": 57, "started": 0, "inBatch": True, "sourceStart": {"0": 3}})
    assert new.in_batch and new.source_start == {"0": 3}
    again = LedgerState()
    again.apply(BATCH, new.entries()[BATCH])
    assert again.entries() == new.entries()
