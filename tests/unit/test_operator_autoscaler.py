"""`autoscaler.step`: the executor decision folded into a reconcile's Decision (settings,
status.executors, Events, when to decide again) — pure, with the operator's own types."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from antidote_operator import autoscaler
from antidote_operator.builders import driver as builders
from antidote_operator.state import ConsumerState
from antidote_operator.observations import DeploymentView, LastPoisonSample, Sample
from antidote_operator.status import Inputs, decide, status_patch

T0 = datetime(2026, 11, 23, 22, 0, tzinfo=timezone.utc)
AUTOSCALE = {"min": 1, "max": 6, "targetLagPerExecutor": 100, "scaleUpCooldown": "1m",
             "scaleDownCooldown": "5m"}
SPEC = {"policyRef": {"name": "p"},
        "source": {"kafka": {"bootstrapServers": "kafka:9092", "topic": "orders"}},
        "handler": "shop.handlers:charge", "checkpoint": {"location": "/ckpt"},
        "spark": {"autoscale": AUTOSCALE}}


def sample(at, *parts, consecutive=0, last_poison=None) -> Sample:
    return Sample(at=at, consecutive=consecutive, partitions=tuple(parts), last_poison=last_poison)


def run(st, now, status=None, spec=SPEC, paused=False):
    d = decide(Inputs(name="orders", namespace="shop", generation=1, spec={**spec, "paused": paused},
                      annotations={}, status=status or {}, policy={}, now=now, sample=st.sample))
    autoscaler.step(st, d, status, now)
    return d


def instances(d) -> str:
    conf = builders.spark_defaults(d.settings, builders.RenderOptions())
    return conf["spark.executor.instances"]


def test_a_backlog_that_moves_scales_up_once_with_an_event_and_the_new_count_in_the_conf() -> None:
    st = ConsumerState("shop", "orders")
    st.sample = sample(T0, (0, 10, 0), (1, 20, 0), (2, 5, 0))
    d = run(st, T0)
    assert d.status["executors"] == {"current": 1, "desired": 1, "reason": "Steady",
                                     "message": "The lag fits 1 executor(s)."}
    assert instances(d) == "1" and d.events == []
    # A backlog arrives: not counted until the first batch moves it.
    st.sample = sample(T0 + timedelta(seconds=2), (0, 10, 500), (1, 20, 500), (2, 5, 500))
    d = run(st, T0 + timedelta(seconds=2), d.status)
    assert d.status["executors"]["reason"] == "LagBlocked" and instances(d) == "1"
    st.sample = sample(T0 + timedelta(seconds=4), (0, 60, 450), (1, 70, 450), (2, 55, 450))
    up = run(st, T0 + timedelta(seconds=4), d.status)
    ex = up.status["executors"]
    assert (ex["current"], ex["desired"], ex["reason"]) == (3, 3, "ScaledUp")
    assert ex["lastScaleTime"] == "2026-11-23T22:00:04Z"
    assert instances(up) == "3" and up.settings.spark.executor.instances == 3
    assert [(e.type, e.reason) for e in up.events] == [("Normal", "ScaledUp")]
    assert "from 1 to 3" in up.events[0].message and "1350 record(s) of lag" in up.events[0].message
    # Decided again on the stored status while the driver restarts: kept at 3, no second
    # Event; once the new driver moves the partitions, Steady; then no status write.
    again = run(st, T0 + timedelta(seconds=5), up.status)
    assert again.events == [] and again.status["executors"]["reason"] == "LagBlocked"
    assert again.status["executors"]["current"] == 3
    st.sample = sample(T0 + timedelta(seconds=6), (0, 110, 400), (1, 120, 400), (2, 105, 400))
    third = run(st, T0 + timedelta(seconds=6), again.status)
    assert third.events == [] and third.status["executors"]["reason"] == "Steady"
    st.sample = sample(T0 + timedelta(seconds=8), (0, 160, 350), (1, 170, 350), (2, 155, 350))
    fourth = run(st, T0 + timedelta(seconds=8), third.status)
    assert fourth.events == [] and status_patch(third.status, fourth.status) == {}


def test_a_cool_down_holds_the_change_and_asks_to_decide_again_when_it_ends() -> None:
    st = ConsumerState("shop", "orders")
    stored = {"executors": {"current": 4, "desired": 4, "reason": "ScaledUp", "message": "",
                            "lastScaleTime": "2026-11-23T21:58:00Z"}}
    st.sample = sample(T0, (0, 10, 0))
    d = run(st, T0, stored)
    ex = d.status["executors"]
    assert (ex["current"], ex["desired"], ex["reason"]) == (4, 1, "ScaleDownCoolingDown")
    assert instances(d) == "4" and d.recheck_at == T0 + timedelta(minutes=3)


def test_a_failing_batch_or_a_fault_leaves_the_lag_out() -> None:
    st = ConsumerState("shop", "orders")
    st.sample = sample(T0, (0, 10, 0), (1, 10, 0))
    run(st, T0)
    st.sample = sample(T0 + timedelta(seconds=2), (0, 20, 900), (1, 20, 900))
    run(st, T0 + timedelta(seconds=2))  # moving: would scale up ...
    st.sample = sample(T0 + timedelta(seconds=3), (0, 20, 900), (1, 20, 900), consecutive=1)
    d = run(st, T0 + timedelta(seconds=3))  # ... but batches fail now
    assert d.status["executors"]["reason"] == "LagBlocked" and "(batch failing)" in d.status["executors"]["message"]
    fault = LastPoisonSample(time=T0, reason="max-attempts", error_class=None, topic="orders",
                             partition=0, offset=20, disposition="Fault")
    st.sample = sample(T0 + timedelta(seconds=3), (0, 20, 900), (1, 30, 0), last_poison=fault)
    d = run(st, T0 + timedelta(seconds=3))
    assert d.status["executors"]["reason"] == "LagBlocked" and "0 (Fault)" in d.status["executors"]["message"]


def test_paused_keeps_the_count_and_no_autoscale_writes_no_executors() -> None:
    st = ConsumerState("shop", "orders")
    stored = {"executors": {"current": 3, "desired": 3, "reason": "Steady", "message": ""}}
    st.sample = sample(T0, (0, 10, 5000), (1, 10, 5000))
    d = run(st, T0, stored, paused=True)
    assert d.replicas == 0 and d.status["executors"]["reason"] == "NotRunning" and instances(d) == "3"
    plain = {k: v for k, v in SPEC.items() if k != "spark"}
    d = run(st, T0, stored, spec=plain)
    assert "executors" not in d.status and status_patch(stored, d.status)["executors"] is None
    assert instances(d) == "1"


def test_the_watcher_reads_the_partitions_from_a_scrape_and_from_promql() -> None:
    from antidote_operator.watcher import parse_metrics, parse_promql

    ids = 'consumer="orders",namespace="shop"'
    text = "\n".join([
        f'antidote_source_partition_offset{{{ids},partition="0",topic="orders"}} 120.0',
        f'antidote_source_partition_offset{{{ids},partition="1",topic="orders"}} 80.0',
        f'antidote_source_partition_lag_records{{{ids},partition="1",topic="orders"}} 7.0',
        f'antidote_source_partition_lag_records{{{ids},partition="0",topic="orders"}} 0.0',
        f'antidote_source_partition_lag_records{{{ids},partition="x",topic="orders"}} 3.0',
    ])
    assert parse_metrics(text, "shop", "orders", T0).partitions == ((0, 120, 0), (1, 80, 7))
    assert parse_metrics("", "shop", "orders", T0).partitions is None
    series = [{"metric": {"__name__": "antidote_source_partition_offset", "namespace": "shop",
                          "consumer": "orders", "partition": "2"}, "value": [0, "5"]},
              {"metric": {"__name__": "antidote_source_partition_lag_records", "namespace": "shop",
                          "consumer": "orders", "partition": "2"}, "value": [0, "9"]}]
    assert parse_promql(series, [], T0)[("shop", "orders")].partitions == ((2, 5, 9),)


def test_a_partition_that_stopped_moving_counts_as_stopped_when_its_cool_down_ends() -> None:
    st = ConsumerState("shop", "orders")
    stored = {"executors": {"current": 1, "desired": 1, "reason": "Steady", "message": "",
                            "lastScaleTime": "2026-11-23T21:59:30Z"}}
    st.sample = sample(T0, (0, 10, 100), (1, 10, 100))
    run(st, T0, stored)
    st.sample = sample(T0 + timedelta(seconds=2), (0, 60, 900), (1, 60, 900))
    d = run(st, T0 + timedelta(seconds=2), stored)
    assert d.status["executors"]["reason"] == "ScaleUpCoolingDown"
    # The batch hangs: no new reading (the page does not change); when the cool-down ends,
    # 2 minutes later, the partitions have not moved for longer than the stall window (60 s).
    d = run(st, T0 + timedelta(minutes=2), stored)
    assert d.status["executors"]["reason"] == "LagBlocked" and "(not moving)" in d.status["executors"]["message"]


def test_the_restart_a_change_causes_is_not_a_stall_that_scales_back() -> None:
    """Found on the node: a scale-up restarts the driver pod, whose start-up (scheduling, the
    JVM, executor pods, the first batch) outlasts the stall windows measured from the old
    driver's batches (the old driver's last batch, on SIGTERM, moves them once more). One
    partition's window ended first, the other one's lag alone asked for 1 executor, and the
    down cool-down scaled the consumer straight back to 1. The count is kept while the
    driver is not available and until the new driver moves the partitions."""
    st = ConsumerState("shop", "orders")
    spec = {**SPEC, "spark": {"autoscale": {**AUTOSCALE, "scaleUpCooldown": "0s",
                                            "scaleDownCooldown": "10s"}}}
    st.deployment = DeploymentView(replicas=1, available=1)
    # The old driver: partition 0 moves every 2 s, partition 1 (fewer records per batch) at
    # 2 s only; the backlog scales up to 2 (one per partition) at 4 s.
    for at, p0, p1 in ((0, 10, 10), (2, 110, 60), (4, 210, 60)):
        st.sample = sample(T0 + timedelta(seconds=at), (0, p0, 3000), (1, p1, 3000))
        d = run(st, T0 + timedelta(seconds=at), spec=spec)
    ex = d.status["executors"]
    assert (ex["reason"], ex["current"]) == ("ScaledUp", 2), ex
    stored = {"executors": ex}
    # Nothing moved since the change: kept, however long.
    st.sample = sample(T0 + timedelta(seconds=5), (0, 210, 3000), (1, 60, 3000))
    d = run(st, T0 + timedelta(seconds=5), stored, spec=spec)
    assert "0 (not seen moving since the driver restarted)" in d.status["executors"]["message"]
    # The old driver's last batch moves both; then its pod is gone and the new one not ready.
    st.sample = sample(T0 + timedelta(seconds=6), (0, 310, 2900), (1, 110, 2950))
    run(st, T0 + timedelta(seconds=6), stored, spec=spec)
    st.deployment = DeploymentView(replicas=1, available=0)
    # 11 s on: partition 0's window (3 × 2 s, at least 10 s) has ended, partition 1's (3 × 4 s)
    # has not, the down cool-down (10 s) is over: without the driver, every partition is kept.
    d = run(st, T0 + timedelta(seconds=17), stored, spec=spec)
    ex = d.status["executors"]
    assert (ex["current"], ex["reason"]) == (2, "LagBlocked"), ex
    # The new driver is ready at 40 s; its first batch has not ended at 52 s: still kept.
    st.deployment, st.driver_ready_at = DeploymentView(replicas=1, available=1), T0 + timedelta(seconds=40)
    d = run(st, T0 + timedelta(seconds=52), stored, spec=spec)
    ex = d.status["executors"]
    assert (ex["current"], ex["reason"]) == (2, "LagBlocked"), ex
    assert "1 (not seen moving since the driver restarted)" in ex["message"], ex
    # Its first batch moves both partitions: their lag counts again, and 2 it stays.
    st.sample = sample(T0 + timedelta(seconds=55), (0, 1310, 1900), (1, 1110, 1950))
    d = run(st, T0 + timedelta(seconds=55), stored, spec=spec)
    ex = d.status["executors"]
    assert (ex["current"], ex["reason"]) == (2, "Steady"), ex
