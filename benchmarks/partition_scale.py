"""How one Antidote consumer scales with source partitions (docs/scaling.md, "Partitions").

    .venv/bin/python benchmarks/partition_scale.py [--partitions 8,64,512] [--batch 10240]

For each partition count, a source topic of that many partitions on the one broker, filled
round-robin so that every source batch (maxMessagesPerBatch --batch, the same at every size)
holds --batch / partitions messages of each partition; --poison messages in it are spread
over partitions and batches, so retry cycles run and quarantine happens. One Antidote consumer
(exactly-once Kafka sink, the default; the trivial JSON handler; Spark local[2]) runs it to
idle (--tasks-per-core: its spark.antidote.tasksPerCore, 0 for one task per partition). Measured:
- per source batch (the first --skip batches left out: start-up, first fencing): wall time,
  CPU of the driver's Python process and of the JVM (local mode: the driver's scheduler and
  the executors' JVM side), split into the Spark job, the settle (its outcomes and the ledger
  commit), all ledger commits (the "begun" mark and the settle's), offsets handling (the
  ledger floor filter, the query's read positions), sink_state (what the tasks are told and
  learn back), and Spark's own latestOffset and offset/commit log writes;
- the ledger topic afterwards: bytes written per batch by entry kind, and the compacted
  state (entries and bytes by kind: positions, sink:<topic>:<p>, ...);
- a new driver (a new Spark session, so new Python workers, as a new pod has): its ledger
  load, its recovery, and its first batch, whose tasks each fence their partition's
  transactional id and read their entry from the ledger (--restarts times);
- the transactional producers: ids the broker's transaction coordinator holds, producer ids
  in the ledger's and sink's partition state, the executors' Python workers (processes, RSS,
  threads, file descriptors; peak while running), and one producer's cost in a process.
Prints a table of medians and spreads (min-max) per partition count. Uses the stack named
by $ANTIDOTE_STACK_DIR if it runs, else starts its own.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402

from benchmarks import bench_stack, scale_probes as probes  # noqa: E402
from benchmarks.consumer_throughput import log, make_topic, put, settings  # noqa: E402

# One immediate retry, one cycle after 1 s, then the policy's disposition (Move): every poison
# message is retried in its batch, parked, run again by the retry pump and quarantined.
POLICY = {"retries": {"immediate": 1, "cycles": 1, "cycleDelay": "1s"}}
PHASES = ("job", "settle", "commit", "offsets", "sink_state")


def fill(bootstrap: str, topic: str, partitions: int, batch: int, batches: int, poison: int,
         first: int) -> int:
    """`batches` batches' worth of messages, round-robin over the partitions, from message
    number `first`; `poison` of them poison, spread over partitions and batches."""
    bad = {b * batch + (k * partitions) // max(poison, 1)
           for k in range(poison) for b in [k % batches]}
    failed: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 200000,
                  "delivery.report.only.error": True, "on_delivery": lambda err, _m: failed.append(str(err))})
    for i in range(batch * batches):
        doc = {"id": first + i, "qty": i % 7 + 1, "price": 9.99}
        if i in bad:
            doc["poison"] = True
        put(p, i, topic=topic, partition=i % partitions, key=str(first + i).encode(),
            value=json.dumps(doc).encode())
    assert p.flush(120) == 0 and not failed, failed[:1]
    return len(bad)


class Timings:
    """Per source batch: wall, CPU and phase times, recorded by wrapping the Runtime."""

    def __init__(self, consumer, jvm: int):
        self.batches: list[dict] = []
        self.retry_batches = 0
        self.current: dict | None = None
        rt = consumer.runtime
        self.jvm = jvm
        from antidote_consumer.driver import batches as batches_mod

        self._wrap(rt, "_run_job", "job")
        self._wrap(rt.settler, "settle", "settle")
        self._wrap(rt.ledger, "commit", "commit")
        self._wrap(rt, "source_floor", "offsets")
        self._wrap(rt, "_read_up_to", "offsets")
        self._wrap(rt.sink, "current", "sink_state")
        self._wrap(rt.sink, "ran", "sink_state")
        self._wrap(batches_mod, "unaccounted", "offsets", restore=True)
        handle = rt.handle

        def timed_handle(df, **kw):
            if kw.get("batch_id") is None:
                self.retry_batches += 1
                return handle(df, **kw)
            cur = {"batch": kw["batch_id"], **dict.fromkeys(PHASES, 0.0)}
            self.current = cur
            # The batch thread's CPU: the driver's own work for the batch (not the sampler's).
            wall, cpu, jcpu = time.perf_counter(), time.thread_time(), probes.cpu_seconds(self.jvm)
            try:
                result = handle(df, **kw)
            finally:
                self.current = None
            cur.update(wall=time.perf_counter() - wall, cpu=time.thread_time() - cpu,
                       jvm_cpu=probes.cpu_seconds(self.jvm) - jcpu,
                       messages=result.n_ok + len(result.failures), failed=len(result.failures))
            self.batches.append(cur)
            return result

        rt.handle = timed_handle

    def _wrap(self, owner, name: str, phase: str, restore: bool = False) -> None:
        inner = getattr(owner, name)

        def timed(*a, **kw):
            cur = self.current
            t = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                if cur is not None:
                    cur[phase] += time.perf_counter() - t

        setattr(owner, name, timed)
        if restore:
            self.restore = lambda: setattr(owner, name, inner)


def spark_progress(query, batch_ids: set[int]) -> dict[int, dict]:
    return {p["batchId"]: p["durationMs"] for p in query.recentProgress if p["batchId"] in batch_ids}


def run_consumer(spark, s, jvm: int) -> tuple[Timings, dict, float, dict]:
    from antidote_consumer.driver.consumer import Consumer
    from antidote_consumer.driver.metrics import Metrics

    metrics = Metrics(s.namespace, s.consumer)
    t0 = time.perf_counter()
    consumer = Consumer(s, spark, metrics, trigger_interval=0.2)
    made = time.perf_counter() - t0
    timings = Timings(consumer, jvm)
    rt = consumer.runtime
    start: dict[str, float] = {"init": made}
    load, recover = rt.ledger.load, rt.recover

    def timed_load():
        t = time.perf_counter()
        try:
            return load()
        finally:
            start["ledger_load"] = time.perf_counter() - t

    def timed_recover():
        t = time.perf_counter()
        try:
            return recover()
        finally:
            start["recover"] = time.perf_counter() - t

    rt.ledger.load, rt.recover = timed_load, timed_recover
    try:
        with probes.WorkerSampler(jvm, every=3.0) as sampler:
            t = time.perf_counter()
            code = consumer.run(until_idle=True)
            elapsed = time.perf_counter() - t
    finally:
        timings.restore()
    assert int(code) == 0, f"consumer exited {code}"
    progress = spark_progress(consumer.query, {b["batch"] for b in timings.batches})
    for b in timings.batches:
        d = progress.get(b["batch"], {})
        b["spark_offsets"] = (d.get("latestOffset", 0) + d.get("walCommit", 0) + d.get("commitOffsets", 0)) / 1000
    get = metrics.registry.get_sample_value
    counts = {o: int(get("antidote_messages_total", {**metrics.ids, "outcome": o}) or 0)
              for o in ("processed", "retried", "moved")}
    return timings, {**start, **counts, "peak": sampler.peak}, elapsed, counts


def one_size(args, spark_factory, bootstrap: str, admin, workdir: Path, n: int) -> dict:
    from antidote_api.names import ledger_names

    run = uuid.uuid4().hex[:6]
    src = make_topic(admin, f"pscale-{run}-{n}", n)
    sink = make_topic(admin, f"{src}-out", 1)
    total = args.skip + args.batches
    poison = fill(bootstrap, src, n, args.batch, total, args.poison, 0)
    s = settings(bootstrap, src, sink, args.batch, workdir, POLICY)
    s = s.model_copy(update={"spark": s.spark.model_copy(update={"conf": {
        **(s.spark.conf or {}), "spark.sql.streaming.numRecentProgressUpdates": "1000",
        **({} if args.tasks_per_core is None else {"spark.antidote.tasksPerCore": str(args.tasks_per_core)})}})})
    names = ledger_names(s)
    out: dict = {"partitions": n, "poison": poison, "topics": [src, sink], "load_start": probes.load()}
    spark = spark_factory(s)
    jvm = probes.jvm_pid()
    log(f"{n} partitions: {total} batches of {args.batch:,} ({poison} poison), consumer {s.consumer}")
    timings, start, elapsed, counts = run_consumer(spark, s, jvm)
    assert counts["moved"] == poison, f"moved {counts['moved']}, produced {poison} poison"
    assert counts["processed"] == args.batch * total - poison, counts
    steady = [b for b in sorted(timings.batches, key=lambda b: b["batch"])][args.skip:]
    out.update(batches=steady, retry_batches=timings.retry_batches, elapsed=elapsed, peak=start["peak"],
               first=start, source_batches=len(timings.batches))
    out["ledger"] = probes.ledger_stats(bootstrap, names.topic)
    out["positions"] = probes.positions_entries(bootstrap, names.topic)
    prefix = names.transactional_id + "/"
    out["broker"] = probes.broker_transactions(spark, bootstrap, prefix, [(names.topic, 0), (sink, 0)])
    out["derived"] = [*s.topics.retry, s.topics.poison, s.topics.dlq, names.topic]
    # A new driver: a new Spark session (new Python workers, as a new pod has), one batch more.
    out["restarts"] = []
    for r in range(args.restarts):
        spark.stop()
        fill(bootstrap, src, n, args.batch, 1, 0, args.batch * (total + r))
        spark = spark_factory(s)
        jvm = probes.jvm_pid()
        t, st, _, _ = run_consumer(spark, s, jvm)
        first = min(t.batches, key=lambda b: b["batch"])
        out["restarts"].append({**{k: v for k, v in st.items() if k != "peak"}, "first_batch": first})
        log(f"{n} partitions: restart {r + 1}: ledger load {st['ledger_load']:.2f}s, recover "
            f"{st['recover']:.2f}s, first batch {first['wall']:.2f}s (job {first['job']:.2f}s)")
    out["load_end"] = probes.load()
    return out


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3g} ({min(xs):.3g}-{max(xs):.3g})" if xs else "-"


def table(results: list[dict], batch: int, cost: dict | None) -> str:
    cols = [str(r["partitions"]) for r in results]
    rows: list[tuple[str, list[str]]] = []

    def per_batch(label: str, key: str, scale: float = 1.0) -> None:
        rows.append((label, [med([b[key] * scale for b in r["batches"]]) for r in results]))

    rows.append(("source batches measured (+ retry batches)",
                 [f"{len(r['batches'])} (+{r['retry_batches']})" for r in results]))
    per_batch("batch wall, s", "wall")
    per_batch("driver Python CPU (batch thread), s/batch", "cpu")
    per_batch("JVM CPU (driver+executors' JVM), s/batch", "jvm_cpu")
    per_batch("  Spark job (executors, tasks' commits), s", "job")
    per_batch("  settle (outcomes + ledger commit), ms", "settle", 1000)
    per_batch("  ledger commits (begun mark + settle's), ms", "commit", 1000)
    per_batch("  offsets handling (floor, read-up-to), ms", "offsets", 1000)
    per_batch("  sink_state (entries told, learned back), ms", "sink_state", 1000)
    per_batch("  Spark latestOffset+offset/commit logs, ms", "spark_offsets", 1000)
    def written(r: dict, k: str) -> list[int]:
        return r["ledger"]["written"].get(k, [0, 0])

    rows.append(("ledger bytes written per source batch (all kinds)",
                 [f"{sum(v[1] for v in r['ledger']['written'].values()) / r['source_batches']:,.0f}"
                  for r in results]))
    rows.append(("  sink entries per source batch: records, bytes",
                 [f"{written(r, 'sink')[0] / r['source_batches']:,.0f}, "
                  f"{written(r, 'sink')[1] / r['source_batches']:,.0f}" for r in results]))
    rows.append(("  positions entry per settle (source or retry), bytes",
                 [f"{written(r, 'positions')[1] / max(1, written(r, 'positions')[0]):,.0f}" for r in results]))
    rows.append(("ledger offsets per source batch (records + markers)",
                 [f"{r['ledger']['offsets'] / r['source_batches']:,.0f}" for r in results]))
    rows.append(("ledger records / offsets (markers) in topic",
                 [f"{r['ledger']['records']:,} / {r['ledger']['offsets']:,}" for r in results]))
    rows.append(("compacted state: entries, bytes",
                 [f"{sum(v[0] for v in r['ledger']['state'].values())}, "
                  f"{sum(v[1] for v in r['ledger']['state'].values()):,}" for r in results]))
    rows.append(("  positions entry: partitions, bytes",
                 [f"{r['positions']}, {r['ledger']['state'].get('positions', [0, 0])[1]:,}" for r in results]))
    rows.append(("  sink entries: count, bytes",
                 [f"{r['ledger']['state'].get('sink', [0, 0])[0]}, {r['ledger']['state'].get('sink', [0, 0])[1]:,}"
                  for r in results]))
    rows.append(("largest ledger record, bytes", [f"{r['ledger']['largest'][0]:,}" for r in results]))
    rows.append(("new driver: ledger load, s", [med([x["ledger_load"] for x in r["restarts"]]) for r in results]))
    rows.append(("new driver: recover (load + mark), s", [med([x["recover"] for x in r["restarts"]]) for r in results]))
    rows.append(("new driver: Consumer() (topics checked), s", [med([x["init"] for x in r["restarts"]]) for r in results]))
    rows.append(("new driver: first batch wall, s",
                 [med([x["first_batch"]["wall"] for x in r["restarts"]]) for r in results]))
    rows.append(("  its Spark job (fence + read entry per task), s",
                 [med([x["first_batch"]["job"] for x in r["restarts"]]) for r in results]))
    rows.append(("transactional ids at the coordinator (this consumer's sink)",
                 [", ".join(f"{k} {v}" for k, v in sorted(r["broker"]["ids"].items())) for r in results]))
    rows.append(("producer ids in state: ledger / sink partition",
                 [" / ".join(str(v) for v in r["broker"]["producers"].values()) for r in results]))
    rows.append(("Python workers (peak): processes",
                 [str(r["peak"]["processes"]) for r in results]))
    rows.append(("  RSS MB, threads, fds (peak, all workers)",
                 [f"{r['peak']['rss'] / 2**20:,.0f}, {r['peak']['threads']:,}, {r['peak']['fds']:,}" for r in results]))
    rows.append(("load average at start -> end", [f"{r['load_start']} -> {r['load_end']}" for r in results]))
    w = max(len(label) for label, _ in rows) + 2
    cw = max([len(c) for _, cs in rows for c in cs] + [8]) + 2
    lines = [f"{'partitions':<{w}}" + "".join(f"{c:>{cw}}" for c in cols)]
    lines += [f"{label:<{w}}" + "".join(f"{c:>{cw}}" for c in cs) for label, cs in rows]
    lines.append(f"(median (min-max) over the measured batches / restarts; batches of {batch:,} messages)")
    if cost:
        lines.append(f"one transactional producer in a process: {cost['rss'] / 2**20:.1f} MB RSS, "
                     f"{cost['threads']:.1f} threads, {cost['fds']:.1f} fds; init_transactions "
                     f"{cost['init_s'] * 1000:.0f} ms (median of 16)")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", default="8,64,512", help="comma-separated source partition counts")
    ap.add_argument("--batch", type=int, default=10240, help="messages per source batch, at every size")
    ap.add_argument("--batches", type=int, default=5, help="measured source batches per size")
    ap.add_argument("--skip", type=int, default=2, help="first batches left out (start-up)")
    ap.add_argument("--poison", type=int, default=8, help="poison messages per size")
    ap.add_argument("--restarts", type=int, default=3, help="new drivers per size")
    ap.add_argument("--tasks-per-core", type=int, default=None,
                    help="spark.antidote.tasksPerCore (default: the consumer's; 0: a task per partition)")
    ap.add_argument("--keep-topics", action="store_true", help="do not delete the run's topics")
    ap.add_argument("--json", type=Path, help="also write every figure here")
    ap.add_argument("--table-from", type=Path, help="print the table of an earlier run's --json, run nothing")
    args = ap.parse_args()
    if args.table_from:
        done = json.loads(args.table_from.read_text())
        for r in done["results"]:  # runs from before source_batches was recorded: the default skip
            r.setdefault("source_batches", len(r["batches"]) + done.get("skip", 2))
        print(table(done["results"], done.get("batch", args.batch), done["cost"]))
        return 0
    sizes = [int(x) for x in args.partitions.split(",")]
    if any(args.batch % n for n in sizes):
        ap.error(f"--batch {args.batch} must be a multiple of every partition count (equal batches)")
    if os.environ.get("BENCH_VERBOSE"):  # the consumer's per-batch timings
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from confluent_kafka.admin import AdminClient

    st, own_dir = bench_stack.up()
    workdir = Path(tempfile.mkdtemp(prefix="antidote-pscale-"))
    results, failures = [], {}
    bootstrap = st.kafka_bootstrap
    os.environ["ANTIDOTE_SPARK_JARS"] = ",".join(st.spark_jars)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    holder: dict = {}

    def spark_factory(s):
        from antidote_consumer.spark import spark_session

        spark = spark_session(s)
        spark.sparkContext.setLogLevel("ERROR")
        holder["spark"] = spark
        return spark

    cost = probes.producer_cost(bootstrap, f"antidote-bench-probe/{uuid.uuid4().hex[:6]}")
    try:
        for n in sizes:
            out = None
            try:
                out = one_size(args, spark_factory, bootstrap, admin, workdir, n)
                results.append(out)
                log("so far:\n" + table(results, args.batch, cost))
            except Exception as err:  # noqa: BLE001 - the largest size may not fit: say what failed
                failures[n] = "".join(traceback.format_exception_only(err)).strip()
                log(f"{n} partitions FAILED: {failures[n]}\n{traceback.format_exc()}")
            finally:
                if args.json:  # after each size: a later one may not finish
                    args.json.write_text(json.dumps({"results": results, "failures": failures, "cost": cost,
                                                     "batch": args.batch, "skip": args.skip},
                                                    default=str, indent=1))
                if holder.get("spark") is not None:
                    holder.pop("spark").stop()
                if out is not None and not args.keep_topics:
                    for f in admin.delete_topics(out["topics"] + out["derived"]).values():
                        f.result(60)
    finally:
        bench_stack.down(own_dir)
    print(f"\npartition scale: one consumer, exactly-once Kafka sink, Spark local[2], one broker, "
          f"{args.poison} poison messages per size, spark.antidote.tasksPerCore "
          f"{'the default' if args.tasks_per_core is None else args.tasks_per_core}\n")
    if results:
        print(table(results, args.batch, cost))
    for n, why in failures.items():
        print(f"\n{n} partitions FAILED: {why}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
