"""Throughput of Antidote's consumer against a plain Spark Kafka->Kafka pipeline.

One command, one broker, the same data and the same trivial handler for every row:

    .venv/bin/python benchmarks/consumer_throughput.py [--messages 1000000]

(a) plain Spark: Kafka source -> mapInArrow(handler) -> Kafka sink, no poison handling;
(b) Antidote at 0%, 0.1% and 1% poison (policy: 2 immediate retries, 1 retry cycle of 1s,
then Move), each run --rounds times in a rotating order. Prints the median messages/s and
the per-round ratios b(0%)/a (goal >= 0.90) and b(0.1%)/b(0%) (goal >= 0.85) with their
medians, then the batch re-executions Antidote needs to isolate one message that
crashes the Python worker in a batch of 10,000 (goal <= rollbacks + ceil(log2 n) + 2;
`--isolation-only` measures just that). Uses the stack named by $ANTIDOTE_STACK_DIR if it
runs, else starts its own and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
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
from antidote_consumer.spark import CHECKPOINT_MANAGER_CONF  # noqa: E402
from benchmarks import bench_stack  # noqa: E402

POLICY = {"retries": {"immediate": 2, "cycles": 1, "cycleDelay": "1s"}}
PIPELINES = {"a": "(a) plain Spark, no handling", "b 0%": "(b) Antidote, 0% poison",
             "b 0.1%": "(b) Antidote, 0.1% poison", "b 1%": "(b) Antidote, 1% poison"}


def log(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def make_topic(admin: AdminClient, name: str, partitions: int, config: dict | None = None) -> str:
    for fut in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})]).values():
        fut.result(60)
    return name


def put(p: Producer, i: int, **record) -> None:
    """Record `i` of a fill: produced once librdkafka's queue has room, delivery reports
    served every 20,000 records."""
    while True:
        try:
            p.produce(**record)
            break
        except BufferError:
            p.poll(0.05)
    if i % 20000 == 0:
        p.poll(0)


def produce(bootstrap: str, topic: str, n: int, poison_rate: float, seed: int,
            max_batch_bytes: int | None = None, encode=None) -> int:
    """Fill `topic` with `n` JSON orders (a share `poison_rate` of them poison); fails unless
    every one was delivered. `max_batch_bytes`: the topic's max.message.bytes, when below
    the producer's batches (the broker refuses a larger batch whole). `encode`: the order
    (a dict) to a value's bytes, instead of JSON (the Avro topic: steady_avro.py)."""
    encode = encode or (lambda doc: json.dumps(doc).encode())
    rng = random.Random(seed)
    failed: list[str] = []
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10000,
            "compression.type": "lz4", "queue.buffering.max.messages": 500000,
            "delivery.report.only.error": True, "on_delivery": lambda err, _m: failed.append(str(err))}
    if max_batch_bytes:
        conf["batch.size"] = max_batch_bytes - 1024  # room for the batch's own framing
    p = Producer(conf)
    poisoned = 0
    for i in range(n):
        doc = {"id": i, "qty": i % 7 + 1, "price": 9.99}
        if poison_rate and rng.random() < poison_rate:
            doc["poison"] = True
            poisoned += 1
        put(p, i, topic=topic, key=str(i).encode(), value=encode(doc))
    assert p.flush(120) == 0
    assert not failed, f"{len(failed)} of {n} messages to {topic} not delivered: {failed[0]}"
    return poisoned


def plain_map(batches):
    import pyarrow as pa

    from antidote_consumer.worker.message import Message
    from benchmarks.handlers import enrich

    schema = pa.schema([("key", pa.binary()), ("value", pa.binary())])
    for b in batches:
        c = {n: b.column(n).to_pylist() for n in ("key", "value", "topic", "partition", "offset", "ts")}
        out = [enrich(Message(c["key"][i], c["value"][i], (), c["topic"][i], c["partition"][i],
                              c["offset"][i], c["ts"][i])) for i in range(b.num_rows)]
        yield pa.RecordBatch.from_pydict({"key": c["key"], "value": out}, schema=schema)


def start_plain(spark, bootstrap: str, source: str, sink: str, batch: int, workdir: Path,
                conf: dict[str, str] | None = None, sink_options: dict[str, str] | None = None,
                avro_schema: str | None = None):
    """Pipeline (a): the handler as a plain mapInArrow from the source topic to the sink, no
    poison handling, with Spark's own defaults for Arrow batches and checkpoint files, not
    those an Antidote consumer sets; `conf`: settings of its own instead (a diagnostic);
    `sink_options`: the Kafka sink's producer settings (`kafka.`-prefixed options);
    `avro_schema`: the values are Avro in the Confluent wire format, decoded by spark-avro's
    from_avro with this schema (benchmarks/steady_avro.py) and handled by enrich_avro."""
    from pyspark.sql import functions as F

    for key in ("spark.sql.execution.arrow.maxBytesPerBatch",
                "spark.sql.execution.arrow.maxRecordsPerBatch", CHECKPOINT_MANAGER_CONF):
        spark.conf.unset(key)
    for key, value in (conf or {}).items():
        spark.conf.set(key, value)
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", str(batch)).load())
    mapper = plain_map
    if avro_schema is not None:
        from benchmarks.steady_avro import plain_map_avro, value_from_avro

        df, mapper = df.withColumn("value", value_from_avro(avro_schema)), plain_map_avro
    df = df.select("key", "value", "topic", "partition", "offset", F.unix_millis("timestamp").alias("ts"))
    # Python workers of its own, as a Spark application of its own would have: Spark keeps a
    # pool of workers per UDF environment, and a worker that ran Antidote's tasks keeps
    # Antidote's collector settings (antidote_consumer.worker.collector).
    env = spark.sparkContext.environment
    env["ANTIDOTE_BENCH_PIPELINE"] = "plain"
    try:
        mapped = df.mapInArrow(mapper, "key binary, value binary")
    finally:
        del env["ANTIDOTE_BENCH_PIPELINE"]
    return (mapped.writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
            .options(**(sink_options or {}))
            .option("checkpointLocation", str(workdir / f"plain-{uuid.uuid4().hex}"))
            .trigger(availableNow=True).start())


def run_plain(spark, bootstrap: str, source: str, sink: str, batch: int, workdir: Path) -> float:
    started = time.perf_counter()
    q = start_plain(spark, bootstrap, source, sink, batch, workdir)
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
             handler: str = "enrich", delivery: str = "ExactlyOnce", source_extra: dict | None = None,
             spark_conf: dict | None = None):
    """`source_extra`: more of spec.source.kafka (valueFormat and schemaRegistry for Avro);
    `spark_conf`: spec.spark.conf (Antidote's tunables)."""
    qc = QueueConsumerSpec.model_validate({
        **({"spark": {"conf": spark_conf}} if spark_conf else {}),
        "policyRef": {"name": "bench"},
        "source": {"kafka": {"bootstrapServers": bootstrap, "topic": source, "maxMessagesPerBatch": batch,
                             **(source_extra or {})}},
        "handler": f"benchmarks.handlers:{handler}", "sink": {"kafka": {"topic": sink, "delivery": delivery}},
        "checkpoint": {"location": str(workdir / f"antidote-{uuid.uuid4().hex}")}})
    return resolve(qc, PoisonPolicySpec.model_validate(policy), name=f"bench{uuid.uuid4().hex[:6]}",
                   namespace="bench")


def run_antidote(spark, s) -> tuple[float, object]:
    from antidote_consumer.driver.metrics import Metrics
    from antidote_consumer.driver.consumer import Consumer

    metrics = Metrics(s.namespace, s.consumer)
    consumer = Consumer(s, spark, metrics, trigger_interval=0.2)
    started = time.perf_counter()
    code = consumer.run(until_idle=True)
    elapsed = time.perf_counter() - started
    assert int(code) == 0, f"consumer exited {code}"
    return elapsed, metrics


def isolation_runs(spark, bootstrap: str, admin, workdir: Path, n: int = 10_000) -> tuple[int, int]:
    """(rollbacks, re-executions after them) to isolate one crasher in a batch of `n`, as
    the consumer's own metrics count them."""
    source = make_topic(admin, f"bench-crash-{uuid.uuid4().hex[:6]}", 1)
    sink = make_topic(admin, source + "-out", 1)
    culprit = random.Random(7).randrange(n)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(n):
        p.produce(source, value=b"crash" if i == culprit else b"m%d" % i)
    assert p.flush(60) == 0
    s = settings(bootstrap, source, sink, n, workdir,
                 {"queueDisable": {"consecutiveBatchFailures": 1}}, handler="crash")
    from antidote_consumer.driver.metrics import Metrics
    from antidote_consumer.driver.consumer import Consumer

    metrics = Metrics(s.namespace, s.consumer)
    consumer = Consumer(s, spark, metrics, trigger_interval=0.2)
    consumer.runtime.retry_sleep = 0
    assert int(consumer.run(until_idle=True)) == 0
    get = metrics.registry.get_sample_value
    assert get("antidote_messages_total", {**metrics.ids, "outcome": "processed"}) == n - 1
    assert get("antidote_messages_total", {**metrics.ids, "outcome": "moved"}) == 1
    # consecutiveBatchFailures 1: the first failure is the only rollback, and the batch is
    # never run whole again; every re-execution is a bisection segment.
    return (int(get("antidote_batch_failures_total", metrics.ids)),
            int(get("antidote_isolation_executions_total", metrics.ids)))


def main() -> int:
    # Long on purpose: a benchmark script's flags and its measured steps in the order they run.
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--batch", type=int, default=100_000, help="maxMessagesPerBatch / maxOffsetsPerTrigger")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of every pipeline; medians and per-round ratios are reported")
    ap.add_argument("--isolation-only", action="store_true",
                    help="only the re-executions to isolate a crasher in 10,000 (no throughput rounds)")
    args = ap.parse_args()
    if args.isolation_only:
        args.rounds = 0

    st, own_dir = bench_stack.up()
    workdir = Path(tempfile.mkdtemp(prefix="antidote-bench-"))
    spark = None
    try:
        from antidote_consumer.spark import spark_session

        bootstrap = st.kafka_bootstrap
        os.environ["ANTIDOTE_SPARK_JARS"] = ",".join(st.spark_jars)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        run_id = uuid.uuid4().hex[:6]
        topics = {}
        for label, rate in (("0%", 0.0), ("0.1%", 0.001), ("1%", 0.01)) if args.rounds else ():
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
        if args.rounds:
            log("warming up both pipelines")
            run_plain(spark, bootstrap, warm, make_topic(admin, warm + "-plain", args.partitions),
                      args.batch, workdir)
            run_antidote(spark, settings(bootstrap, warm, make_topic(admin, warm + "-ad", args.partitions),
                                         args.batch, workdir, POLICY))

        # Rounds of every pipeline, in a rotating order, so that drift on this machine
        # (2 cores, page cache, JIT) hits each one alike; medians and paired ratios.
        times: dict[str, list[float]] = {k: [] for k in PIPELINES}
        order = list(PIPELINES)
        for r in range(args.rounds):
            for k in order[r % len(order):] + order[:r % len(order)]:
                label = k.split(" ", 1)[-1]
                src, bad = topics["0%" if k == "a" else label]
                sink = make_topic(admin, f"{src}-{k.replace(' ', '').replace('%', 'pct')}-{r}",
                                  args.partitions)
                if k == "a":
                    t = run_plain(spark, bootstrap, src, sink, args.batch, workdir)
                else:
                    t, m = run_antidote(spark, settings(bootstrap, src, sink, args.batch, workdir, POLICY))
                    moved = m.registry.get_sample_value("antidote_messages_total",
                                                        {**m.ids, "outcome": "moved"})
                    assert moved == bad, f"{k}: moved {moved}, produced {bad} poison"
                times[k].append(t)
                log(f"round {r + 1}: {PIPELINES[k]}: {t:.1f}s")

        log("isolating one crashing message in a batch of 10,000")
        rollbacks, runs = isolation_runs(spark, bootstrap, admin, workdir)
    finally:
        if spark is not None:
            spark.stop()
        bench_stack.down(own_dir)

    bound = rollbacks + math.ceil(math.log2(10_000)) + 2
    isolation = (f"isolation of 1 crashing message in a batch of 10,000: {runs} re-executions after "
                 f"{rollbacks} rollback(s) (goal <= rollbacks + ceil(log2 n) + 2 = {bound}: "
                 f"{'met' if runs <= bound else 'NOT met'})")
    if not args.rounds:
        print(isolation)
        return 0
    n = args.messages
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\nconsumer throughput: {n:,} JSON messages, {args.partitions} partitions, "
          f"local[2], batches of {args.batch:,}; median of {args.rounds} rounds\n")
    print(f"{'pipeline':<34}{'median s':>9}{'msg/s':>10}{'poison':>8}   every round (s)")
    for k, label in PIPELINES.items():
        bad = topics["0%" if k == "a" else k.split(" ", 1)[1]][1]
        rounds = " ".join(f"{t:.1f}" for t in times[k])
        print(f"{label:<34}{med[k]:>9.1f}{n / med[k]:>10,.0f}{bad:>8}   {rounds}")

    print()
    for name, num, den, goal in (("b(0%)/a", "b 0%", "a", 0.90), ("b(0.1%)/b(0%)", "b 0.1%", "b 0%", 0.85),
                                 ("b(1%)/b(0%)", "b 1%", "b 0%", None)):
        # Throughput ratios are inverse time ratios, paired within a round (adjacent runs).
        paired = [d / u for u, d in zip(times[num], times[den])]
        r = statistics.median(paired)
        verdict = "" if goal is None else f"  (goal >= {goal:.2f}: {'met' if r >= goal else 'NOT met'})"
        print(f"{name:<15} = {r:.2f} median of rounds {' '.join(f'{x:.2f}' for x in paired)}{verdict}")
    print(isolation)
    return 0


if __name__ == "__main__":
    sys.exit(main())
