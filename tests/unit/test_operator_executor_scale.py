"""The executor-count decision (operator/antidote_operator/executor_scale.py), as data."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from antidote_api import autoscale as reasons
from antidote_api.autoscale import Autoscale
from antidote_operator.executor_scale import (BATCH_FAILING, FAULT, NOT_SEEN_MOVING, STALLED, Partition,
                                              Progress, ScaleInputs, blocked_partitions, decide_executors,
                                              track)

T0 = datetime(2026, 11, 23, 22, 0, tzinfo=timezone.utc)
SPEC = Autoscale(min=1, max=8, target_lag_per_executor=1000, scale_up_cooldown="2m",
                 scale_down_cooldown="10m")


def parts(*lags: int, blocked: dict[int, str] | None = None) -> tuple[Partition, ...]:
    blocked = blocked or {}
    return tuple(Partition(p, lag, blocked.get(p)) for p, lag in enumerate(lags))


def decide(partitions, current=1, last_change=None, now=T0, spec=SPEC, cores=1, running=True):
    return decide_executors(ScaleInputs(spec=spec, current=current, last_change=last_change, now=now,
                                        partitions=partitions, cores=cores, running=running))


def test_lag_spread_over_many_partitions_scales_up() -> None:
    d = decide(parts(*[1000] * 8))
    assert (d.executors, d.desired, d.reason) == (8, 8, reasons.SCALED_UP)
    assert d.changed and "from 1 to 8" in d.message and "8000 record(s) of lag in 8 partition(s)" in d.detail


def test_a_partition_stuck_on_one_poison_message_does_not_scale_up() -> None:
    # keda#3904: one partition stuck, its lag growing; the others drained.
    d = decide(parts(250_000, 0, 0, 0, blocked={0: FAULT}))
    assert (d.executors, d.desired, d.reason) == (1, 1, reasons.BLOCKED)
    assert not d.changed and "0 (Fault)" in d.message
    # A batch that keeps failing holds every partition: all their lag is blocked.
    d = decide(parts(*[50_000] * 8, blocked={p: BATCH_FAILING for p in range(8)}), current=2)
    assert (d.executors, d.reason) == (2, reasons.BLOCKED)


def test_blocked_lag_is_left_out_of_the_count() -> None:
    # 2 healthy partitions with 1500 records between them; the stuck one's 90 000 do not count.
    d = decide(parts(90_000, 1000, 500, blocked={0: STALLED}))
    assert (d.executors, d.reason) == (2, reasons.SCALED_UP)
    assert "1500 record(s) of lag in 2 partition(s)" in d.detail and "0 (not moving)" in d.message


def test_one_deep_partition_is_one_task_whatever_its_lag() -> None:
    d = decide(parts(1_000_000, 0, 0))
    assert (d.executors, d.desired, d.reason) == (1, 1, reasons.STEADY)
    # Two cores per executor: 8 busy partitions keep 4 executors busy, not 8.
    assert decide(parts(*[5000] * 8), cores=2).executors == 4


def test_bounds() -> None:
    assert decide(parts(*[10_000] * 20)).executors == 8  # max
    spec = SPEC.model_copy(update={"min": 3})
    d = decide(parts(0, 0), current=1, last_change=T0, spec=spec)  # min raised: at once
    assert (d.executors, d.reason) == (3, reasons.SCALED_UP)
    d = decide(parts(0, 0), current=12, last_change=T0, spec=spec, running=False)  # max lowered
    assert (d.executors, d.reason) == (8, reasons.SCALED_DOWN)
    assert decide(parts(0, 0), current=3, last_change=T0, spec=spec).reason == reasons.STEADY
    with pytest.raises(ValidationError, match="min must not exceed max"):
        Autoscale(min=5, max=2)


def test_autoscale_refuses_spark_conf_that_sets_the_count() -> None:
    from antidote_api.base import explain
    from antidote_api.consumer import Spark

    Spark.model_validate({"conf": {"spark.executor.instances": "3"}})  # fine without autoscale
    with pytest.raises(ValidationError) as err:
        Spark.model_validate({"autoscale": {"max": 4}, "conf": {"spark.dynamicAllocation.enabled": "true"}})
    assert explain(err.value) == ["conf: with autoscale the operator sets the executor count: conf "
                                  "may not set spark.executor.instances or spark.dynamicAllocation.enabled"]


def test_scale_up_waits_for_its_cool_down() -> None:
    last = T0 - timedelta(seconds=90)
    d = decide(parts(*[1000] * 4), current=2, last_change=last)
    assert (d.executors, d.desired, d.reason) == (2, 4, reasons.UP_COOLING)
    d = decide(parts(*[1000] * 4), current=2, last_change=last, now=T0 + timedelta(seconds=30))
    assert (d.executors, d.reason) == (4, reasons.SCALED_UP)


def test_lag_falling_scales_down_only_after_the_cool_down() -> None:
    last = T0 - timedelta(minutes=5)
    d = decide(parts(100, 0, 0, 0), current=4, last_change=last)
    assert (d.executors, d.desired, d.reason) == (4, 1, reasons.DOWN_COOLING)
    d = decide(parts(100, 0, 0, 0), current=4, last_change=last, now=T0 + timedelta(minutes=5))
    assert (d.executors, d.reason) == (1, reasons.SCALED_DOWN)


def test_hysteresis_keeps_the_count_near_the_boundary() -> None:
    # 3 executors scaled up for 3000 records; at 2100 (ceil(2100/1000) = 3) nothing to do; at
    # 1700 two would do at the target but be 85 % full: kept; at 1600 (80 %) down to 2.
    long_ago = T0 - timedelta(hours=1)
    assert decide(parts(700, 700, 700), current=3, last_change=long_ago).reason == reasons.STEADY
    assert decide(parts(600, 600, 500), current=3, last_change=long_ago).executors == 3
    d = decide(parts(600, 500, 500), current=3, last_change=long_ago)
    assert (d.executors, d.reason) == (2, reasons.SCALED_DOWN)
    # And back up only above the target, not at the first record more.
    assert decide(parts(700, 700, 500), current=2, last_change=long_ago).executors == 2


def test_no_reading_or_not_running_keeps_the_count() -> None:
    assert decide(None, current=3).reason == reasons.NO_LAG_YET
    d = decide(parts(*[9000] * 8), current=3, running=False)
    assert (d.executors, d.reason) == (3, reasons.NOT_RUNNING)


# --- blocked partitions from readings ---------------------------------------------------------

def reading(prog, positions, at):
    prog = track(prog, positions, at)
    return prog, blocked_partitions(positions, prog, now=at, failing=False, fault=None)


def test_lag_counts_once_the_partition_is_seen_moving() -> None:
    prog, b = reading({}, {0: (100, 0), 1: (50, 0)}, T0)
    assert [p.blocked for p in b] == [None, None]
    # A backlog arrives: not counted until a batch moves it.
    prog, b = reading(prog, {0: (100, 5000), 1: (50, 5000)}, T0 + timedelta(seconds=2))
    assert [p.blocked for p in b] == [NOT_SEEN_MOVING, NOT_SEEN_MOVING]
    prog, b = reading(prog, {0: (600, 4500), 1: (50, 5100)}, T0 + timedelta(seconds=4))
    assert [p.blocked for p in b] == [None, NOT_SEEN_MOVING]
    # Moving every 2 s; then partition 0 stops: not moving after 3 steps (at least 10 s).
    prog, _ = reading(prog, {0: (1100, 4000), 1: (550, 4600)}, T0 + timedelta(seconds=6))
    prog, b = reading(prog, {0: (1100, 4100), 1: (1050, 4100)}, T0 + timedelta(seconds=12))
    assert [p.blocked for p in b] == [None, None]
    prog, b = reading(prog, {0: (1100, 4200), 1: (1550, 3600)}, T0 + timedelta(seconds=17))
    assert [p.blocked for p in b] == [STALLED, None]
    assert prog[0] == Progress(1100, 4200, T0 + timedelta(seconds=6), timedelta(seconds=2))


def test_a_failing_batch_and_a_fault_block() -> None:
    prog = {0: Progress(10, 5, T0, None), 1: Progress(7, 5, T0, None)}
    positions = {0: (10, 500), 1: (7, 500), 2: (3, 0)}
    b = blocked_partitions(positions, prog, now=T0, failing=True, fault=None)
    assert [p.blocked for p in b] == [BATCH_FAILING, BATCH_FAILING, None]
    b = blocked_partitions(positions, prog, now=T0, failing=False, fault=(1, 7))
    assert [p.blocked for p in b] == [None, FAULT, None]
    # Skipped past it: the partition moves on and counts again.
    b = blocked_partitions({**positions, 1: (8, 500)}, prog, now=T0, failing=False, fault=(1, 7))
    assert b[1].blocked is None


def test_a_new_backlog_behind_a_caught_up_partition_must_be_seen_moving_again() -> None:
    # Warm-up: partition 0 worked off a record a moment ago; then a hanging message and a
    # backlog arrive behind it: the earlier move does not make the new lag movable.
    prog, _ = reading({}, {0: (0, 1)}, T0)
    prog, b = reading(prog, {0: (1, 0)}, T0 + timedelta(seconds=2))
    assert prog[0].moved_at == T0 + timedelta(seconds=2)
    prog, b = reading(prog, {0: (1, 4000)}, T0 + timedelta(seconds=4))
    assert b[0].blocked == NOT_SEEN_MOVING
    prog, b = reading(prog, {0: (1, 4000)}, T0 + timedelta(minutes=5))
    assert b[0].blocked == NOT_SEEN_MOVING
    prog, b = reading(prog, {0: (201, 3800)}, T0 + timedelta(minutes=5, seconds=2))
    assert b[0].blocked is None


def test_the_status_message_does_not_change_with_every_reading() -> None:
    a, b = decide(parts(1000, 1000), current=2), decide(parts(1200, 900), current=2)
    assert a.reason == b.reason == reasons.STEADY and a.message == b.message and a.detail != b.detail


def test_a_topic_of_many_partitions_keeps_the_message_short() -> None:
    from antidote_api.autoscale import ExecutorScale

    d = decide(parts(*[500] * 300, blocked={p: NOT_SEEN_MOVING for p in range(300)}))
    assert d.reason == reasons.BLOCKED and d.message.count("(not seen moving yet)") == 12
    assert "and 288 more" in d.message
    ExecutorScale(current=1, desired=1, reason=d.reason, message=d.message)  # fits status
