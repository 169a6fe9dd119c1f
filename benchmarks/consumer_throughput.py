"""Throughput of Antidote's consumer against a plain Spark Kafka->Kafka pipeline.

One command, one broker, the same data and the same trivial handler for every row:

    .venv/bin/python benchmarks/consumer_throughput.py [--messages 1000000]

(a) plain Spark: Kafka source -> mapInArrow(handler) -> Kafka sink, no poison handling;
(b) Antidote at 0%, 0.1% and 1% poison (policy: 2 immediate retries, 1 retry cycle of 1s,
then Move). Prints messages/s and the ratios b(0%)/a (goal >= 0.90) and b(0.1%)/b(0%)
(goal >= 0.85), then the batch re-executions Antidote needs to isolate one message that
crashes the Python worker in a batch of 10,000 (goal <= 30). Uses the stack named by
$ANTIDOTE_STACK_DIR if it runs, else starts its own and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Spark's Python workers import benchmarks.handlers by name; they see the JVM's environment.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from antidote_api.consumer import QueueConsumerSpec  # noqa: E402
from antidote_api.policy import PoisonPolicySpec  # noqa: E402
from antidote_api.semantics import resolve  # noqa: E402
from antidote_devstack import stack as devstack  # noqa: E402
from antidote_devstack.paths import cache_dir  # noqa: E402

POLICY = {"retries": {"immediate": 2, "cycles": 1, "cycleDelay": "1s"}}


def log(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def make_topic(admin: AdminClient, name: str, partitions: int) -> str:
    for fut in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        fut.result(60)
    return name


def produce(bootstrap: str, topic: str, n: int, poison_rate: float, seed: int) -> int:
    rng = random.Random(seed)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10000,
                  "compression.type": "lz4", "queue.buffering.max.messages": 500000})
    poisoned = 0
    for i in range(n):
        doc = {"id": i, "qty": i % 7 + 1, "price": 9.99}
        if poison_rate and rng.random() < poison_rate:
            doc["poison"] = True
            poisoned += 1
        while True:
            try:
                p.produce(topic, key=str(i).encode(), value=json.dumps(doc).encode())
                break
            except BufferError:
                p.poll(0.05)
        if i % 20000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return poisoned


def plain_map(batches):
    import pyarrow as pa

    from antidote_consumer.message import Message
    from benchmarks.handlers import enrich

    schema = pa.schema([("key", pa.binary()), ("value", pa.binary())])
    for b in batches:
        c = {n: b.column(n).to_pylist() for n in ("key", "value", "topic", "partition", "offset", "ts")}
        out = [enrich(Message(c["key"][i], c["value"][i], (), c["topic"][i], c["partition"][i],
                              c["offset"][i], c["ts"][i])) for i in range(b.num_rows)]
        yield pa.RecordBatch.from_pydict({"key": c["key"], "value": out}, schema=schema)


def run_plain(spark, bootstrap: str, source: str, sink: str, batch: int, workdir: Path) -> float:
    from pyspark.sql import functions as F

    # Plain Spark runs with Spark's defaults, not with what an Antidote consumer set.
    for key in ("spark.sql.execution.arrow.maxBytesPerBatch",
                "spark.sql.execution.arrow.maxRecordsPerBatch"):
        spark.conf.unset(key)
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", str(batch)).load()
          .select("key", "value", "topic", "partition", "offset",
                  F.unix_millis("timestamp").alias("ts")))
    started = time.perf_counter()
    q = (df.mapInArrow(plain_map, "key binary, value binary").writeStream.format("kafka")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
         .option("checkpointLocation", str(workdir / f"plain-{uuid.uuid4().hex}"))
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination()
        assert q.exception() is None, q.exception()
        if os.environ.get("BENCH_VERBOSE"):
            for p in q.recentProgress:
                log(f"plain batch {p['batchId']}: {p['numInputRows']} rows, {p['durationMs']}")
    finally:
        q.stop()
    return time.perf_counter() - started


def settings(bootstrap: str, source: str, sink: str, batch: int, workdir: Path, policy: dict,
             handler: str = "enrich"):
    qc = QueueConsumerSpec.model_validate({
        "policyRef": {"name": "bench"},
        "source": {"kafka": {"bootstrapServers": bootstrap, "topic": source, "maxMessagesPerBatch": batch}},
        "handler": f"benchmarks.handlers:{handler}", "sink": {"kafka": {"topic": sink}},
        "checkpoint": {"location": str(workdir / f"antidote-{uuid.uuid4().hex}")}})
    return resolve(qc, PoisonPolicySpec.model_validate(policy), name=f"bench{uuid.uuid4().hex[:6]}",
                   namespace="bench")


def run_antidote(spark, s) -> tuple[float, object]:
    from antidote_consumer.metrics import Metrics
    from antidote_consumer.runner import Consumer

    metrics = Metrics(s.namespace, s.consumer)
    consumer = Consumer(s, spark, metrics, trigger_interval=0.2)
    started = time.perf_counter()
    code = consumer.run(until_idle=True)
    elapsed = time.perf_counter() - started
    assert int(code) == 0, f"consumer exited {code}"
    return elapsed, metrics


def isolation_runs(spark, bootstrap: str, admin, workdir: Path, n: int = 10_000) -> int:
    source = make_topic(admin, f"bench-crash-{uuid.uuid4().hex[:6]}", 1)
    sink = make_topic(admin, source + "-out", 1)
    culprit = random.Random(7).randrange(n)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(n):
        p.produce(source, value=b"crash" if i == culprit else b"m%d" % i)
    assert p.flush(60) == 0
    s = settings(bootstrap, source, sink, n, workdir,
                 {"queueDisable": {"consecutiveBatchFailures": 1}}, handler="crash")
    from antidote_consumer.metrics import Metrics
    from antidote_consumer.runner import Consumer

    metrics = Metrics(s.namespace, s.consumer)
    consumer = Consumer(s, spark, metrics, trigger_interval=0.2)
    consumer.runtime.retry_sleep = 0
    assert int(consumer.run(until_idle=True)) == 0
    return int(metrics.registry.get_sample_value("antidote_isolation_executions_total", metrics.ids))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--batch", type=int, default=100_000, help="maxMessagesPerBatch / maxOffsetsPerTrigger")
    ap.add_argument("--repeat", type=int, default=2, help="runs of (a) and of b(0%%), best kept")
    args = ap.parse_args()

    reuse = os.environ.get("ANTIDOTE_STACK_DIR")
    running = devstack.running(Path(reuse)) if reuse else None
    own_dir = None if running else cache_dir() / "bench-stack"
    st = running or devstack.up(own_dir)
    workdir = Path(tempfile.mkdtemp(prefix="antidote-bench-"))
    spark = None
    try:
        from antidote_consumer.runner import spark_session

        bootstrap = st.kafka_bootstrap
        os.environ["ANTIDOTE_SPARK_JARS"] = ",".join(st.spark_jars)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        run_id = uuid.uuid4().hex[:6]
        topics = {}
        for label, rate in (("0%", 0.0), ("0.1%", 0.001), ("1%", 0.01)):
            t = make_topic(admin, f"bench-{run_id}-{label.replace('%', 'pct')}", args.partitions)
            started = time.perf_counter()
            bad = produce(bootstrap, t, args.messages, rate, seed=len(label))
            log(f"produced {args.messages:,} messages to {t} ({bad} poison) in "
                f"{time.perf_counter() - started:.1f}s")
            topics[label] = (t, bad)
        warm = make_topic(admin, f"bench-{run_id}-warmup", args.partitions)
        produce(bootstrap, warm, 20_000, 0.0, seed=0)

        spark = spark_session(settings(bootstrap, warm, warm + "-o", args.batch, workdir, POLICY))
        spark.sparkContext.setLogLevel("ERROR")
        log("warming up both pipelines")
        run_plain(spark, bootstrap, warm, make_topic(admin, warm + "-plain", args.partitions),
                  args.batch, workdir)
        run_antidote(spark, settings(bootstrap, warm, make_topic(admin, warm + "-ad", args.partitions),
                                     args.batch, workdir, POLICY))

        results: dict[str, tuple[float, int]] = {}
        src0, _ = topics["0%"]
        for r in range(args.repeat):  # alternate, so drift on a busy machine hits both
            sink = make_topic(admin, f"{src0}-plain{r}", args.partitions)
            t = run_plain(spark, bootstrap, src0, sink, args.batch, workdir)
            log(f"(a) plain Spark run {r + 1}: {t:.1f}s")
            results["a"] = min(results.get("a", (t, 0)), (t, 0))
            sink = make_topic(admin, f"{src0}-ad{r}", args.partitions)
            t, _m = run_antidote(spark, settings(bootstrap, src0, sink, args.batch, workdir, POLICY))
            log(f"(b) Antidote 0% run {r + 1}: {t:.1f}s")
            results["b 0%"] = min(results.get("b 0%", (t, 0)), (t, 0))
        for label in ("0.1%", "1%"):
            src, bad = topics[label]
            sink = make_topic(admin, f"{src}-ad", args.partitions)
            s = settings(bootstrap, src, sink, args.batch, workdir, POLICY)
            t, m = run_antidote(spark, s)
            moved = m.registry.get_sample_value("antidote_messages_total", {**m.ids, "outcome": "moved"})
            assert moved == bad, f"{label}: moved {moved}, produced {bad} poison"
            log(f"(b) Antidote {label}: {t:.1f}s, {int(moved)} moved")
            results[f"b {label}"] = (t, bad)

        log("isolating one crashing message in a batch of 10,000")
        runs = isolation_runs(spark, bootstrap, admin, workdir)
    finally:
        if spark is not None:
            spark.stop()
        if own_dir is not None:
            devstack.down(own_dir)

    n = args.messages
    rate = {k: n / t for k, (t, _) in results.items()}
    print(f"\nconsumer throughput: {n:,} JSON messages, {args.partitions} partitions, "
          f"local[2], batches of {args.batch:,}, best of {args.repeat} for (a) and b(0%)\n")
    print(f"{'pipeline':<34}{'seconds':>9}{'msg/s':>10}{'poison':>8}")
    names = {"a": "(a) plain Spark, no handling", "b 0%": "(b) Antidote, 0% poison",
             "b 0.1%": "(b) Antidote, 0.1% poison", "b 1%": "(b) Antidote, 1% poison"}
    for k, label in names.items():
        t, bad = results[k]
        print(f"{label:<34}{t:>9.1f}{rate[k]:>10,.0f}{bad:>8}")
    r1, r2 = rate["b 0%"] / rate["a"], rate["b 0.1%"] / rate["b 0%"]
    print(f"\nb(0%)/a    = {r1:.2f}  (goal >= 0.90: {'met' if r1 >= 0.90 else 'NOT met'})")
    print(f"b(0.1%)/b(0%) = {r2:.2f}  (goal >= 0.85: {'met' if r2 >= 0.85 else 'NOT met'})")
    print(f"b(1%)/b(0%)   = {rate['b 1%'] / rate['b 0%']:.2f}")
    print(f"isolation of 1 crashing message in a batch of 10,000: {runs} re-executions "
          f"(goal <= 30: {'met' if runs <= 30 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
