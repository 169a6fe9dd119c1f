"""The driver's own ceilings: what one Antidote driver can do however many executors it has.

    .venv/bin/python benchmarks/driver_ceilings.py

1. Ledger commits/s: Ledger.commit of a state with --partitions source positions and no
   records, back to back (a source batch costs two: the "begun" mark and the settle).
2. Per-batch fixed cost: Antidote and plain Spark over a 0% source in batches of --tiny
   messages; the median batch duration is what a batch costs however small it is.
3. The driver's settle of a source batch: failed records/s it turns into retry records and
   commits with the ledger (every failure of every executor passes here).
4. The retry pump: a source with --pump-share poison and one retry cycle whose delay
   (--cycle-delay) outlasts the source phase, so the pump then drains the retry topic
   alone. Each round plans from offsets (RetryReader.plan); a cycle of fewer due records
   than --local-max (spark.antidote.retry.localMaxRecords) is read by the driver
   (RetryReader.read_due) and run in its local worker, a larger one is read and run by the
   executors (Spark's Kafka batch source). Reported: the plan's time per round, records/s
   the driver reads (local rounds only), records/s run and committed (Runtime.handle), and
   all of a working round together; the local worker's one-off start-up is left out. Of a
   round, the Spark jobs (Runtime._run_job: the executors' work and the transfer of their
   result rows) are also reported apart: what is left is the driver's own share, the
   pump's ceiling however many executors there are (on this machine the executors share
   the driver's 2 cores, so the end-to-end figure is theirs as much as the driver's).

Uses the stack named by $ANTIDOTE_STACK_DIR if it runs, else starts its own.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.consumer_throughput import POLICY, log, make_topic, produce, settings  # noqa: E402
from benchmarks.steady_state import _epoch  # noqa: E402


def ledger_commits(bootstrap: str, admin, partitions: int, n: int) -> float:
    from antidote_consumer.driver.ledger import Ledger, LedgerState

    topic = make_topic(admin, f"ceil-ledger-{uuid.uuid4().hex[:6]}", 1)
    ledger = Ledger(bootstrap, topic, f"ceil-{uuid.uuid4().hex}")
    state = LedgerState()
    state.positions = {f"src:{p}": 0 for p in range(partitions)}
    ledger.commit(state)  # the producer's first transaction pays for its coordinator lookup
    started = time.perf_counter()
    for i in range(n):
        s = copy.deepcopy(ledger.state)
        s.positions = {k: i for k in s.positions}
        ledger.commit(s)
    rate = n / (time.perf_counter() - started)
    ledger.close()
    return rate


def batch_costs(spark, bootstrap: str, admin, partitions: int, tiny: int, batches: int,
                workdir: Path) -> tuple[float, float]:
    from antidote_consumer.driver.metrics import Metrics
    from antidote_consumer.driver.consumer import Consumer

    src = make_topic(admin, f"ceil-tiny-{uuid.uuid4().hex[:6]}", partitions)
    produce(bootstrap, src, tiny * batches, 0.0, seed=0)
    plain = make_topic(admin, src + "-plain", partitions)
    from pyspark.sql import functions as F

    from benchmarks.consumer_throughput import plain_map

    q = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", src).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", str(tiny)).load()
         .select("key", "value", "topic", "partition", "offset", F.unix_millis("timestamp").alias("ts"))
         .mapInArrow(plain_map, "key binary, value binary").writeStream.format("kafka")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", plain)
         .option("checkpointLocation", str(workdir / f"tiny-{uuid.uuid4().hex}"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    q.stop()
    q_progress = [p["durationMs"]["triggerExecution"] for p in q.recentProgress if p["numInputRows"]]
    s = settings(bootstrap, src, make_topic(admin, src + "-ad", partitions), tiny, workdir, POLICY)
    metrics = Metrics(s.namespace, s.consumer)
    consumer = Consumer(s, spark, metrics, trigger_interval=0.2)
    assert int(consumer.run(until_idle=True)) == 0
    a_progress = [p["durationMs"]["triggerExecution"] for p in consumer.query.recentProgress
                  if p["numInputRows"]]
    # The first batches pay for start-up; the median of the rest is the fixed cost.
    return statistics.median(q_progress[3:]) / 1000, statistics.median(a_progress[3:]) / 1000


def pump(spark, bootstrap: str, admin, partitions: int, messages: int, share: float, batch: int,
         delay: str, workdir: Path, local_max: int | None) -> dict:
    from antidote_consumer.driver.metrics import Metrics
    from antidote_consumer.driver.consumer import Consumer

    src = make_topic(admin, f"ceil-pump-{uuid.uuid4().hex[:6]}", partitions)
    bad = produce(bootstrap, src, messages, share, seed=3)
    policy = {"retries": {"immediate": 0, "cycles": 1, "cycleDelay": delay},
              # share < threshold: a poison share this high is still no systemic outage
              "queueDisable": {"failureRatio": {"threshold": 1.0}}}
    s = settings(bootstrap, src, make_topic(admin, src + "-out", partitions), batch, workdir, policy)
    if local_max is not None:
        s = s.model_copy(update={"spark": s.spark.model_copy(update={
            "conf": {**(s.spark.conf or {}), "spark.antidote.retry.localMaxRecords": str(local_max)}})})
    metrics = Metrics(s.namespace, s.consumer)
    consumer = Consumer(s, spark, metrics, trigger_interval=0.2)
    # (seconds, records) of each driver read; (start, seconds, records, path) of each retry
    # batch run and committed; the plan and read time of the round that led to each batch.
    reads, rounds, planning, jobs = [], [], [], []
    pending = [0.0, 0.0]  # this round's plan and read time so far; the Spark jobs of its batch
    plan, read_due, handle = consumer.retry.plan, consumer.retry.read_due, consumer.runtime.handle
    run_job = consumer.runtime._run_job

    def timed_job(df):
        t = time.perf_counter()
        try:
            return run_job(df)
        finally:
            pending[1] += time.perf_counter() - t

    def timed_plan(*a, **kw):
        t = time.perf_counter()
        planned = plan(*a, **kw)
        pending[0] = time.perf_counter() - t  # a new round: an idle one's time is dropped
        return planned

    def timed_read(*a, **kw):
        t = time.perf_counter()
        due = read_due(*a, **kw)
        reads.append((time.perf_counter() - t, len(due.rows)))
        pending[0] += reads[-1][0]
        return due

    def timed_handle(df, *, batch_id=None, positions=None, local_rows=None, due_by=None, **kw):
        t, started = time.time(), time.perf_counter()
        pending[1] = 0.0
        result = handle(df, batch_id=batch_id, positions=positions, local_rows=local_rows, due_by=due_by, **kw)
        if batch_id is None:  # a retry batch: run and commit
            rounds.append((t, time.perf_counter() - started, result.n_ok + len(result.failures),
                           "local" if due_by is None else "executors"))
            planning.append(pending[0])
            jobs.append(pending[1])
        return result

    settles = []  # (seconds, failed records) of each source batch's settle
    settle = consumer.runtime._settle

    def timed_settle(result, isolated, batch_id, positions):
        started = time.perf_counter()
        settle(result, isolated, batch_id, positions)
        if batch_id is not None and result.failures:
            settles.append((time.perf_counter() - started, len(result.failures)))

    consumer.retry.plan, consumer.retry.read_due, consumer.runtime.handle = timed_plan, timed_read, timed_handle
    consumer.runtime._run_job = timed_job
    consumer.runtime._settle = timed_settle
    assert int(consumer.run(until_idle=True)) == 0
    progress = [p for p in consumer.query.recentProgress if p["numInputRows"]]
    source_end = max(_epoch(p["timestamp"]) + p["durationMs"]["triggerExecution"] / 1000 for p in progress)
    pumped = sum(n for _, _, n, _ in rounds)
    assert pumped == bad, f"pumped {pumped}, produced {bad} poison"
    read_n = sum(n for _, n in reads)
    read_s = sum(t for t, n in reads if n)
    return {
        "records": pumped,
        "overlapped": sum(n for t, _, n, _ in rounds if t < source_end),
        "plan_ms": 1000 * statistics.median(planning),
        "read_per_s": read_n / read_s if read_s else None,
        "run_per_s": pumped / sum(t for _, t, _, _ in rounds),
        # The local worker's start-up (once per driver) is not in it: the pump waits for it
        # outside these calls.
        "pump_per_s": pumped / (sum(planning) + sum(t for _, t, _, _ in rounds)),
        "jobs_s": sum(jobs),
        "driver_per_s": pumped / (sum(planning) + sum(t for _, t, _, _ in rounds) - sum(jobs)),
        "settle_per_s": sum(n for _, n in settles) / sum(s for s, _ in settles),
        "batches": len(rounds),
        "mean_batch": pumped / len(rounds),
        "paths": {path: (sum(1 for *_, p in rounds if p == path), sum(n for _, _, n, p in rounds if p == path))
                  for path in ("local", "executors")},
    }


def main() -> int:
    # Long on purpose: a benchmark script's flags and its measured steps in the order they run.
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--commits", type=int, default=300)
    ap.add_argument("--tiny", type=int, default=100, help="messages per batch for the fixed cost")
    ap.add_argument("--tiny-batches", type=int, default=30)
    ap.add_argument("--pump-messages", type=int, default=200_000)
    ap.add_argument("--pump-share", type=float, default=0.25)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--cycle-delay", default="60s")
    ap.add_argument("--local-max", type=int, default=None,
                    help="spark.antidote.retry.localMaxRecords for the pump (default: the consumer's)")
    args = ap.parse_args()

    from confluent_kafka.admin import AdminClient

    from benchmarks import bench_stack

    st, own_dir = bench_stack.up()
    workdir = Path(tempfile.mkdtemp(prefix="antidote-ceil-"))
    spark = None
    load = [Path("/proc/loadavg").read_text().split()[0]]
    try:
        from antidote_consumer.spark import spark_session

        bootstrap = st.kafka_bootstrap
        os.environ["ANTIDOTE_SPARK_JARS"] = ",".join(st.spark_jars)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        log("ledger commits")
        commits = ledger_commits(bootstrap, admin, args.partitions, args.commits)
        warm = make_topic(admin, f"ceil-warm-{uuid.uuid4().hex[:6]}", args.partitions)
        spark = spark_session(settings(bootstrap, warm, warm, args.batch, workdir, POLICY))
        spark.sparkContext.setLogLevel("ERROR")
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
        log("per-batch fixed cost")
        plain_s, antidote_s = batch_costs(spark, bootstrap, admin, args.partitions, args.tiny,
                                          args.tiny_batches, workdir)
        log("retry pump")
        p = pump(spark, bootstrap, admin, args.partitions, args.pump_messages, args.pump_share,
                 args.batch, args.cycle_delay, workdir, args.local_max)
        load.append(Path("/proc/loadavg").read_text().split()[0])
    finally:
        if spark is not None:
            spark.stop()
        bench_stack.down(own_dir)

    print(f"\ndriver ceilings ({args.partitions} partitions, Spark local[2]; 1-min load at start "
          f"and end: {' '.join(load)})\n")
    print(f"ledger commits (state of {args.partitions} positions, no records): {commits:,.0f}/s "
          f"-> at 2 per source batch, {commits / 2:,.0f} source batches/s")
    print(f"per-batch fixed cost, batches of {args.tiny}: plain Spark {plain_s:.2f}s, "
          f"Antidote {antidote_s:.2f}s (median batch after the first 3)")
    paths = ", ".join(f"{path} {b} batches / {n:,} records" for path, (b, n) in p["paths"].items())
    reads = f"{p['read_per_s']:,.0f} records/s" if p["read_per_s"] is not None else "none (no local round)"
    print(f"retry pump, {p['records']:,} records in {p['batches']} batches "
          f"(mean {p['mean_batch']:,.0f}; {p['overlapped']:,} while the source still ran; {paths}): "
          f"plan {p['plan_ms']:.0f} ms a round (median), driver reads {reads}, "
          f"runs+commits {p['run_per_s']:,.0f} records/s, end to end {p['pump_per_s']:,.0f} records/s; "
          f"of which Spark jobs {p['jobs_s']:.1f}s, the driver's own share {p['driver_per_s']:,.0f} records/s")
    print(f"source batches' failures quarantined by the driver (settle: headers, retry records, "
          f"ledger, one transaction): {p['settle_per_s']:,.0f} records/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
