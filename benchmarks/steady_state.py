"""Steady-state throughput: Antidote against plain Spark and a confluent-kafka loop.

    .venv/bin/python benchmarks/steady_state.py [--messages 5300000] [--rounds 3]

Every pipeline reads the same preloaded source topic from the start and runs the same
trivial handler (benchmarks/handlers.py:enrich). What is compared is each pipeline's source
throughput over a steady window: from the end of its first --warmup-batches batches (JIT,
Python workers, connections) to the end of its last source batch. With poison, the retry
cycles (policy: 2 immediate retries, 1 cycle of 1 s, then Move) run during that window, on
the driver's pump beside the source query; the last cycle's drain after the source ends is
reported on its own, as latency.

Before the first round both Spark pipelines run over a warm-up topic, pass after pass, until
Spark's JIT compilers spent less than --warmup-jit of a core during a pass: the pipelines
share one JVM, which otherwise keeps compiling through the first rounds. Each run also
prints the machine's CPU time per source message in its window (all processes: Spark, its
Python workers, the driver, the broker) and how busy the cores were: a slower pipeline
either costs more CPU per message or leaves cores idle. A probe process times a fixed
piece of Python work in CPU time every second (CoreProbe), printed with each run: this
machine's cores do not run at one speed, and a run's cores can be seen beside its figures.
Each ratio is printed again at the probe's speed (msg/s x the probe's reading): a
diagnostic for comparing code while the cores drift, never the goal's verdict.

(a)   plain Spark: Kafka source -> mapInArrow(handler) -> Kafka sink, no poison handling;
(b)   Antidote at 0%, 0.1% and 1% poison;
(c)   a confluent-kafka consume -> handler -> produce loop with a dead-letter topic, one
      process per core (benchmarks/kafka_loop.py), at 0% and 1% poison;
(ceil) the same loop copying values without a handler: librdkafka consume+produce alone.

Not in the default run, for attributing what a poison message costs: "b 1% no cycle" (the
same 1% topic, policy without the retry cycle: the first pass, then Move) and "b 1% at
once" (no immediate retries either: one failed call, then Move). Name them in --only
beside "b 0%" and "b 1%". Nor "b 0% 10k rows" and "b 1% 10k rows": the same messages in
topics that allow records of at most 26,843 bytes, for which the consumer sends 10,000 rows
per Arrow batch from its first batch on, where for the 1 MB topics it starts at 256 and
takes 10,000 once it has seen the records (docs/consumer.md, Performance); name them beside
"a", "b 0%" and "b 1%". Nor "a fs ckpt": plain Spark writing its checkpoint through the
FileSystem API, as an Antidote consumer does on a local directory (docs/consumer.md,
Performance), where (a) keeps Spark's default as a user's pipeline would; name it beside
"a" and "b 0%". Nor "b 0% alo" and "b 1% alo": the same with the Kafka sink at-least-once
(`delivery: AtLeastOnce`), against which "b 0%" and "b 1%" (exactly-once, the default) price
the sink's transactions; name them beside those. Nor "a alike": plain Spark given the tuning
a consumer gives itself (the FileSystem checkpoint manager, Arrow batches of 10,000 rows
without the per-row byte check, the sink producer's linger and compression), the
like-for-like baseline for "b 0%": name it beside "a" and "b 0%". Nor "a avro" and "b avro"
(issue 47's Avro figure, benchmarks/steady_avro.py): the 0% topic's orders again, as Avro in
the Confluent wire format, the schema registered in the stack's Schema Registry (one the
benchmark starts and stops beside a reused stack without one); "b avro" is Antidote with
`valueFormat: Avro` (the handler, handlers.py:enrich_avro, gets the decoded dict as m.data),
"a avro" plain Spark decoding with spark-avro's from_avro after the 5-byte header (the jar
fetched pinned, for this pipeline only: hack/spark-avro/pom.xml), the same handler work in
mapInArrow over the decoded struct; both write the same bytes as enrich. Printed:
b(avro)/a(avro) (goal >= 0.9), and b(avro)/b(0%) (what decoding costs Antidote) with "b 0%"
named too: `--only "a avro,b avro,b 0%"`.

Pipelines alternate within a round, in a rotating order, so that the load of a shared
machine hits each alike; printed are medians, every round's ratios and their spread, and
"too wide to conclude" when the spread exceeds --max-spread. Uses the stack named by
$ANTIDOTE_STACK_DIR if it runs, else starts its own and stops it at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import kafka_loop, steady_avro  # noqa: E402
from benchmarks.consumer_throughput import (POLICY, log, make_topic, produce, settings,  # noqa: E402
                                            start_plain)
from antidote_consumer.spark import ARROW_BATCH_BYTES, checkpoint_files  # noqa: E402

CORES = os.cpu_count() or 1
PIPELINES = {
    "a": "(a) plain Spark, no handling",
    "b 0%": "(b) Antidote, 0% poison",
    "b 0.1%": "(b) Antidote, 0.1% poison",
    "b 1%": "(b) Antidote, 1% poison",
    "c 0%": f"(c) kafka loop x{CORES}, 0% poison",
    "c 1%": f"(c) kafka loop x{CORES}, 1% poison",
    "ceil": f"librdkafka copy x{CORES} (ceiling)",
    # Attribution only (see the docstring): against "b 1%" they price the retry cycle's round
    # trip (retry record written, read back, run in the local worker, settled again) and the
    # immediate retries.
    "b 1% no cycle": "(b) Antidote, 1%, no retry cycle",
    "b 1% at once": "(b) Antidote, 1%, moved at once",
    # What the Arrow batches' memory bound costs: the 0% messages in a topic that allows records
    # of at most 26,843 bytes, for which the consumer sends 10,000 rows per Arrow batch (plain
    # Spark's default) instead of the 256 a topic allowing 1 MB records gets.
    "b 0% 10k rows": "(b) Antidote, 0%, 10k-row Arrow",
    "b 1% 10k rows": "(b) Antidote, 1%, 10k-row Arrow",
    # Plain Spark with the checkpoint file manager an Antidote consumer sets for a local
    # checkpoint (antidote_consumer.spark.checkpoint_files): b(0%) against plain Spark with
    # the same setting, where (a) keeps Spark's default, as a user's pipeline would.
    "a fs ckpt": "(a) plain Spark, FileSystem ckpt",
    # Plain Spark given the tuning an Antidote consumer gives itself (ALIKE): the same
    # checkpoint file manager, Arrow batches without the per-row byte check and at 10,000
    # rows (what a consumer learns for these records), and its producer's linger and
    # compression. b(0%) against it is the like-for-like verdict: what Antidote costs a team
    # that tuned its own Spark job.
    "a alike": "(a) plain Spark, tuned alike",
    # The Kafka sink at-least-once (spec.sink.kafka.delivery AtLeastOnce): against "b 0%" and
    # "b 1%" (exactly-once, the default) they price the sink's transactions.
    "b 0% alo": "(b) Antidote, 0%, at-least-once sink",
    "b 1% alo": "(b) Antidote, 1%, at-least-once sink",
    # Every failure settled by the driver (spark.antidote.taskSettle 0), as before the tasks
    # settled theirs: against "b 1%" it prices where the failures' records are written.
    "b 1% driver": "(b) Antidote, 1%, driver settles",
    # Every retry cycle read and run by the executors (spark.antidote.retry.localMaxRecords 0),
    # so that their tasks settle its failures too: what per-failure work is left on the
    # driver's Python at 1% poison when none of it is the driver's (its column, against b 0%'s).
    "b 1% executors": "(b) Antidote, 1%, cycles on executors",
    # Avro values (issue 47's throughput figure, benchmarks/steady_avro.py): the 0% orders as
    # Avro in the Confluent wire format, decoded by Antidote (valueFormat Avro, the stack's
    # Schema Registry) against plain Spark decoding them with spark-avro's from_avro.
    "a avro": "(a) plain Spark, Avro (from_avro)",
    "b avro": "(b) Antidote, 0%, Avro values",
}
ATTRIBUTION = {"b 1% no cycle": {"retries": {"immediate": 2, "cycles": 0}},
               "b 1% at once": {"retries": {"immediate": 0, "cycles": 0}}}
# Pipelines not in the default run: the attribution ones, the Arrow batches' bound, and plain
# Spark with the checkpoint setting an Antidote consumer makes.
DIAGNOSTIC = [*ATTRIBUTION, "b 0% 10k rows", "b 1% 10k rows", "a fs ckpt", "a alike", "b 0% alo",
              "b 1% alo", "b 1% driver", "b 1% executors", "a avro", "b avro"]
SPARK_CONF = {"b 1% driver": {"spark.antidote.taskSettle": "0"},
              "b 1% executors": {"spark.antidote.retry.localMaxRecords": "0"}}
SMALL_RECORD_BYTES = ARROW_BATCH_BYTES // 10_000  # the largest record for 10,000-row batches
# The topic of a pipeline whose topic is not its name's share of poison ("small": the same
# messages in a topic with SMALL_RECORD_BYTES as its max.message.bytes).
TOPIC_OF = {"a": "0%", "a fs ckpt": "0%", "a alike": "0%", "ceil": "0%", "b 0% 10k rows": "0% small",
            "b 1% 10k rows": "1% small", "a avro": "avro", "b avro": "avro"}


def topic_of(pipeline: str) -> str:
    return TOPIC_OF[pipeline] if pipeline in TOPIC_OF else pipeline.split(" ")[1]


@dataclass
class Run:
    msgs: int  # source messages in the steady window
    start: float  # the window, in epoch seconds
    end: float
    drain: float | None = None  # after the last source batch, until the last retry cycle is done
    retried_in_window: int = 0  # retry records the pump processed within the window
    cpu_us: float = 0.0  # the whole machine's CPU time per source message in the window
    cpu_by: dict | None = None  # the same by kind of process (MachineCpu.KINDS)
    busy: float = 0.0  # the machine's cores busy in the window, as a share of all of them
    jit: float = 0.0  # Spark's JIT compilers during the run, as a share of one core
    probe: float | None = None  # CoreProbe: the cores' speed in the window (us of CPU per unit)

    @property
    def seconds(self) -> float:  # the window's length
        return self.end - self.start

    @property
    def rate(self) -> float:
        return self.msgs / self.seconds


class MachineCpu:
    """The machine's busy CPU time (/proc/stat: every process, the broker's and the API
    server's too) and each kind of process's share of it (/proc/PID/stat), sampled in the
    background, so a window's CPU per message can be read afterwards, whole and by process.
    A pipeline that moves fewer msg/s either spends more CPU per message or leaves cores
    idle (waits: serial driver work, the broker); this says which, and where."""

    KINDS = ("spark jvm", "py workers", "driver", "subprocs", "broker", "probe", "other")

    def __init__(self, period: float = 0.5):
        self.samples: list[tuple[float, int, dict[str, int]]] = []
        self._stop = threading.Event()
        self._period = period
        self.hz = os.sysconf("SC_CLK_TCK")
        self._kind: dict[tuple[int, str], str] = {}
        self._last: dict[tuple[int, str], int] = {}  # a process's ticks when last seen: kept after it ends
        self._thread = threading.Thread(target=self._loop, name="machine-cpu", daemon=True)
        self._thread.start()

    @staticmethod
    def busy_ticks() -> int:
        f = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f[:8])
        return user + nice + system + irq + softirq + steal

    @staticmethod
    def kind_of(pid: int, cmdline: str) -> str:
        if pid == os.getpid():
            return "driver"  # the Spark driver's Python: this process
        if "SparkSubmit" in cmdline:
            return "spark jvm"  # local[2]: Spark's driver JVM and its executor threads
        if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
            return "py workers"
        if "multiprocessing" in cmdline:
            return "subprocs"  # the consumer's local worker; the loop's processes
        if "kafka.Kafka" in cmdline:
            return "broker"
        if PROBE_MARK in cmdline:
            return "probe"  # CoreProbe: measuring, not part of any pipeline
        return "other"

    def _by_kind(self) -> dict[str, int]:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                key = (pid, f[19])  # with its start time: a pid used again is another process
                if key not in self._kind:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    self._kind[key] = self.kind_of(pid, cmd)
            except (FileNotFoundError, ProcessLookupError):
                continue
            if self._kind[key] != "other":  # "other" is what the machine's total leaves (between)
                self._last[key] = int(f[11]) + int(f[12])  # utime + stime
        out = dict.fromkeys(self.KINDS, 0)
        for key, ticks in self._last.items():
            out[self._kind[key]] += ticks
        return out

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self.busy_ticks(), self._by_kind()))
            self._stop.wait(self._period)

    def between(self, start: float, end: float) -> tuple[float, dict[str, float]]:
        """CPU seconds the machine was busy between two times, whole and by kind of process
        (interpolated between samples; "other" also takes the kernel's own time)."""
        def at(t: float) -> tuple[float, dict[str, float]]:
            xs = self.samples
            if t <= xs[0][0]:
                return xs[0][1], dict(xs[0][2])
            for (t0, b0, k0), (t1, b1, k1) in zip(xs, xs[1:]):
                if t0 <= t <= t1:
                    w = (t - t0) / (t1 - t0 or 1)
                    return b0 + (b1 - b0) * w, {k: k0[k] + (k1[k] - k0[k]) * w for k in k0}
            return xs[-1][1], dict(xs[-1][2])
        (b0, k0), (b1, k1) = at(start), at(end)
        kinds = {k: (k1[k] - k0[k]) / self.hz for k in self.KINDS}
        whole = (b1 - b0) / self.hz
        kinds["other"] = max(0.0, whole - sum(kinds.values()))
        return whole, kinds

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


# The probe's fixed work: JSON round trips of a small document, as the handler does.
PROBE_CODE = """
import json, time
doc = {"id": 1, "qty": 3, "price": 9.99, "name": "x" * 40}
while True:
    t = time.thread_time()
    for _ in range(2000):
        d = json.loads(json.dumps(doc))
    print(f"{time.time():.3f} {(time.thread_time() - t) / 2000 * 1e6:.3f}", flush=True)
    time.sleep(1)
"""
PROBE_MARK = "--antidote-core-probe"


class CoreProbe:
    """How fast the cores are right now: a separate process (nice 19) times a fixed piece of
    Python work in CPU time (a JSON round trip of a small document), every second. CPU time
    is not wall time: waiting for a core does not count, but a host that runs other VMs on
    the same cores (shared caches, memory bandwidth; this machine is one of them) makes the
    same work take more of it. Printed with each run beside its figures (over twelve runs it
    did not explain the Python workers' run-to-run variance: docs/performance.md). It takes
    ~1% of a core (its own process kind)."""

    def __init__(self, launch: bool = True):
        self.samples: list[tuple[float, float]] = []  # (epoch, us of CPU per round trip)
        self._proc = None
        if launch:
            self._proc = subprocess.Popen([sys.executable, "-c", PROBE_CODE, PROBE_MARK],
                                          stdout=subprocess.PIPE, text=True,
                                          preexec_fn=lambda: os.nice(19))
            threading.Thread(target=self._read, name="core-probe", daemon=True).start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            t, us = line.split()
            self.samples.append((float(t), float(us)))

    def between(self, start: float, end: float) -> float | None:
        """The median of the samples taken in [start, end]; None without any."""
        inside = [us for t, us in self.samples if start <= t <= end]
        return statistics.median(inside) if inside else None

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()


def jit_ms(spark) -> int:
    """Milliseconds the Spark JVM's JIT compilers have spent so far (JMX): a JVM still compiling
    Spark's code paths is not in its steady state yet (measured: ~45% of a core in its first
    minute, ~10% after three, falling on)."""
    return int(spark._jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
               .getTotalCompilationTime())


def jit_mark(spark) -> tuple[float, int]:
    return time.time(), jit_ms(spark)


def jit_share(spark, mark: tuple[float, int]) -> float:
    """Spark's JIT compile time since `mark` (jit_mark), as a share of one core."""
    t0, j0 = mark
    return (jit_ms(spark) - j0) / 1000 / (time.time() - t0)


def _epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def window_of(progress: list[dict], warmup: int) -> tuple[int, float, float]:
    """(messages, start, end) of a streaming query's batches after the first `warmup`."""
    batches = sorted((p for p in progress if p["numInputRows"]), key=lambda p: p["batchId"])
    if os.environ.get("BENCH_VERBOSE"):  # each batch's Spark timings, for both pipelines alike
        for p in batches:
            log(f"progress batch {p['batchId']}: {p['numInputRows']} rows, {p['durationMs']}")
    if len(batches) <= warmup:
        raise SystemExit(f"only {len(batches)} source batches: raise --messages or lower --batch")
    steady = batches[warmup:]
    start = _epoch(steady[0]["timestamp"])
    last = steady[-1]
    end = _epoch(last["timestamp"]) + last["durationMs"]["triggerExecution"] / 1000
    return sum(p["numInputRows"] for p in steady), start, end


def alike(workdir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Pipeline "a alike": the Spark conf and the Kafka sink's options that give plain Spark
    what an Antidote consumer sets for itself on these records (antidote_consumer.spark's
    checkpoint_files and arrow_batching with the row bound it learns, worker/sink.py's
    PRODUCER_CONF linger and compression)."""
    from antidote_consumer.spark import ARROW_BYTES_CONF, ARROW_ROWS_CONF, MAX_ARROW_ROWS
    from antidote_consumer.worker.sink import PRODUCER_CONF

    conf = {**checkpoint_files(str(workdir)), ARROW_BYTES_CONF: str(2**31 - 1),
            ARROW_ROWS_CONF: str(MAX_ARROW_ROWS)}
    options = {f"kafka.{k}": str(PRODUCER_CONF[k]) for k in ("linger.ms", "compression.type")}
    return conf, options


def run_plain(spark, bootstrap: str, source: str, sink: str, batch: int, workdir: Path,
              warmup: int, conf: dict[str, str] | None = None,
              sink_options: dict[str, str] | None = None, avro_schema: str | None = None) -> Run:
    q = start_plain(spark, bootstrap, source, sink, batch, workdir, conf, sink_options, avro_schema)
    try:
        q.awaitTermination()
        assert q.exception() is None, q.exception()
        msgs, start, end = window_of(q.recentProgress, warmup)
    finally:
        q.stop()
    return Run(msgs, start, end)


def run_antidote(spark, s, warmup: int, poison: int) -> Run:
    from antidote_consumer.driver.metrics import Metrics
    from antidote_consumer.driver.consumer import Consumer

    metrics = Metrics(s.namespace, s.consumer)
    consumer = Consumer(s, spark, metrics, trigger_interval=0.2)
    pumped: list[tuple[float, int]] = []  # (end time, records) of every retry batch
    pump_once = consumer.pump_once

    def observed_pump():
        n, next_due = pump_once()
        if n:
            pumped.append((time.time(), n))
        return n, next_due

    consumer.pump_once = observed_pump
    code = consumer.run(until_idle=True)
    done = time.time()
    assert int(code) == 0, f"consumer exited {code}"
    moved = metrics.registry.get_sample_value("antidote_messages_total", {**metrics.ids, "outcome": "moved"})
    assert moved == poison, f"moved {moved}, produced {poison} poison"
    msgs, start, end = window_of(consumer.query.recentProgress, warmup)
    within = sum(n for t, n in pumped if start <= t <= end)
    return Run(msgs, start, end, drain=done - end if poison else None, retried_in_window=within)


def run_loop(bootstrap: str, admin, source: str, per_partition: dict[int, int], partitions: int,
             handler: str | None, warm_msgs: int, poison: int) -> Run:
    tag = uuid.uuid4().hex[:6]
    sink = make_topic(admin, f"{source}-loop-{tag}", partitions)
    dlq = make_topic(admin, f"{source}-loop-{tag}-dlq", partitions)
    marks, dead = kafka_loop.run(bootstrap, source, sink, dlq, partitions, CORES, per_partition, handler)
    assert dead == (poison if handler else 0), f"dead-lettered {dead}, produced {poison} poison"
    seen, i = 0, 0
    while seen < warm_msgs:  # the window starts once as many messages as Spark's warm-up are done
        seen += marks[i][1]
        i += 1
    start, end = marks[i - 1][0], marks[-1][0]
    return Run(sum(n for _, n in marks[i:]), start, end)


def partition_counts(admin_consumer, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    out = {}
    for p in range(partitions):
        low, high = admin_consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        out[p] = high - low
    return out


def spread(xs: list[float]) -> float:
    """(max - min) / median of a figure's per-round values."""
    return (max(xs) - min(xs)) / statistics.median(xs) if len(xs) > 1 else float("inf")


def main() -> int:
    # Long on purpose: a benchmark script's flags and its measured steps in the order they run.
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=None,
                    help="per source topic (default: 5,000,000 in the steady window, plus the warm-up batches)")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--batch", type=int, default=100_000, help="maxMessagesPerBatch / maxOffsetsPerTrigger")
    ap.add_argument("--warmup-batches", type=int, default=3)
    # All Spark pipelines share one JVM, which kept getting faster through a session (its CPU
    # per 100,000 messages fell from ~0.55 to ~0.21 s over the runs of one session when the
    # warm-up was 20,000 messages), so whichever pipeline ran first paid for it.
    ap.add_argument("--warmup-messages", type=int, default=1_000_000,
                    help="messages each Spark pipeline runs over once before the first round")
    ap.add_argument("--warmup-jit", type=float, default=0.10,
                    help="warm up until Spark's JIT compiled less than this share of one core during "
                         "a warm-up pass (or --warmup-max-seconds passed)")
    ap.add_argument("--warmup-max-seconds", type=float, default=240)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-spread", type=float, default=0.20,
                    help="a ratio whose per-round spread ((max-min)/median) exceeds this is not concluded")
    ap.add_argument("--only", default=",".join(k for k in PIPELINES if k not in DIAGNOSTIC),
                    help="comma-separated pipelines to run, of: " + ", ".join(PIPELINES).replace("%", "%%")
                    + " (default: all but " + ", ".join(DIAGNOSTIC).replace("%", "%%") + ")")
    args = ap.parse_args()
    if args.messages is None:  # the window is what is measured: 5M messages in it, not before it
        args.messages = 5_000_000 + args.warmup_batches * args.batch
    if os.environ.get("BENCH_VERBOSE"):  # the consumer's per-batch timings, for profiling
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    chosen = [k for k in PIPELINES if k in args.only.split(",")]

    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka.admin import AdminClient

    from benchmarks import bench_stack

    st, own_dir = bench_stack.up()
    workdir = Path(tempfile.mkdtemp(prefix="antidote-steady-"))
    spark = None
    cpu = MachineCpu()
    probe = CoreProbe()
    runs: dict[str, list[Run]] = {k: [] for k in chosen}
    loads: list[str] = []
    extras = contextlib.ExitStack()  # the Avro pipelines' Schema Registry, when the benchmark started one
    try:
        from antidote_consumer.spark import spark_session

        bootstrap = st.kafka_bootstrap
        avro = any(topic_of(k) == "avro" for k in chosen)
        registry_url = extras.enter_context(steady_avro.schema_registry(st, own_dir is not None)) if avro else ""
        os.environ["ANTIDOTE_SPARK_JARS"] = ",".join(steady_avro.spark_jars(st.spark_jars) if avro
                                                     else st.spark_jars)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        watermarks = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
        run_id = uuid.uuid4().hex[:6]
        topics = {}
        for label, rate in (("0%", 0.0), ("0.1%", 0.001), ("1%", 0.01), ("0% small", 0.0),
                            ("1% small", 0.01), ("avro", 0.0)):
            if label not in {topic_of(k) for k in chosen}:
                continue
            name = f"steady-{run_id}-{label.replace('%', 'pct').replace(' ', '-')}"
            small = label.endswith(" small")
            t = make_topic(admin, name, args.partitions,
                           config={"max.message.bytes": str(SMALL_RECORD_BYTES)} if small else None)
            started = time.perf_counter()
            # The same messages as the topic of the same share (the seed is of that label); the
            # Avro topic's are the 0% topic's, as Avro.
            bad = produce(bootstrap, t, args.messages, rate, seed=len(label.split(" ")[0]),
                          max_batch_bytes=SMALL_RECORD_BYTES if small else None,
                          encode=steady_avro.registered(registry_url, t) if label == "avro" else None)
            log(f"produced {args.messages:,} messages to {t} ({bad} poison) in "
                f"{time.perf_counter() - started:.1f}s")
            topics[label] = (t, bad, partition_counts(watermarks, t, args.partitions))
        warm = make_topic(admin, f"steady-{run_id}-warmup", args.partitions)
        produce(bootstrap, warm, args.warmup_messages, 0.0, seed=0)
        # With the Avro pipelines, the warm-up runs them too, over an Avro topic of its own: their
        # code in the JVM (from_avro, the struct's Arrow columns) is not the JSON pipelines'.
        warm_avro = None
        if avro:
            warm_avro = make_topic(admin, f"steady-{run_id}-warmup-avro", args.partitions)
            produce(bootstrap, warm_avro, args.warmup_messages, 0.0, seed=0,
                    encode=steady_avro.registered(registry_url, warm_avro))
        # With a poison pipeline in the run, the warm-up also runs Antidote over 1% poison: the
        # failed rows' way back through the JVM (Arrow columns of strings and headers that a 0%
        # batch leaves empty) is code a 0% warm-up never compiles, and Spark's JIT took 10-24%
        # of a core during the first b(1%) rounds after one (docs/performance.md).
        warm_bad = None
        if any(k.startswith("b") and not topic_of(k).startswith(("0%", "avro")) for k in chosen):
            warm_poison = make_topic(admin, f"steady-{run_id}-warmup-1pct", args.partitions)
            warm_bad = (warm_poison, produce(bootstrap, warm_poison, args.warmup_messages, 0.01, seed=0))

        spark = spark_session(settings(bootstrap, warm, warm + "-o", args.batch, workdir, POLICY))
        spark.sparkContext.setLogLevel("ERROR")
        # Every batch's progress is kept for the window (Spark keeps the last 100 by default).
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
        log("warming up the Spark pipelines")
        warm_started, passes = time.time(), 0
        while True:
            # Both Spark pipelines over the warm-up topic, again until the JVM's JIT has settled:
            # in a JVM still compiling, whichever pipeline runs later runs on faster code.
            mark = jit_mark(spark)
            run_plain(spark, bootstrap, warm, make_topic(admin, f"{warm}-plain-{passes}", args.partitions),
                      args.batch, workdir, warmup=0)
            run_antidote(spark, settings(bootstrap, warm, make_topic(admin, f"{warm}-ad-{passes}",
                                                                     args.partitions),
                                         args.batch, workdir, POLICY), warmup=0, poison=0)
            if warm_bad is not None:
                run_antidote(spark, settings(bootstrap, warm_bad[0], make_topic(
                    admin, f"{warm_bad[0]}-ad-{passes}", args.partitions), args.batch, workdir, POLICY),
                    warmup=0, poison=warm_bad[1])
            if warm_avro is not None:
                run_plain(spark, bootstrap, warm_avro, make_topic(admin, f"{warm_avro}-plain-{passes}",
                                                                  args.partitions),
                          args.batch, workdir, warmup=0, avro_schema=steady_avro.SCHEMA)
                run_antidote(spark, settings(bootstrap, warm_avro, make_topic(
                    admin, f"{warm_avro}-ad-{passes}", args.partitions), args.batch, workdir, POLICY,
                    handler=steady_avro.HANDLER, source_extra=steady_avro.source_extra(registry_url)),
                    warmup=0, poison=0)
            passes += 1
            share = jit_share(spark, mark)
            log(f"warm-up pass {passes}: Spark's JIT compiled {share:.0%} of a core")
            if share < args.warmup_jit or time.time() - warm_started > args.warmup_max_seconds:
                break

        warm_msgs = args.warmup_batches * args.batch
        for r in range(args.rounds):
            loads.append(Path("/proc/loadavg").read_text().split()[0])
            for k in chosen[r % len(chosen):] + chosen[:r % len(chosen)]:
                label = topic_of(k)
                src, bad, per_partition = topics[label]
                mark = jit_mark(spark)
                if k.startswith("a"):
                    sink = make_topic(admin, f"{src}-{k.replace(' ', '-')}-{r}", args.partitions)
                    conf, options = ((checkpoint_files(str(workdir)), None) if k == "a fs ckpt" else
                                     alike(workdir) if k == "a alike" else (None, None))
                    run = run_plain(spark, bootstrap, src, sink, args.batch, workdir, args.warmup_batches,
                                    conf, options, steady_avro.SCHEMA if k == "a avro" else None)
                elif k.startswith("b"):
                    named = k.replace(" ", "-").replace("%", "pct")  # one sink per pipeline and round
                    sink = make_topic(admin, f"{src}-{named}-{r}", args.partitions)
                    avro_source = {"handler": steady_avro.HANDLER,
                                   "source_extra": steady_avro.source_extra(registry_url)} if k == "b avro" else {}
                    run = run_antidote(spark, settings(bootstrap, src, sink, args.batch, workdir,
                                                       ATTRIBUTION.get(k, POLICY),
                                                       delivery="AtLeastOnce" if k.endswith(" alo") else "ExactlyOnce",
                                                       spark_conf=SPARK_CONF.get(k), **avro_source),
                                       args.warmup_batches, bad)
                else:
                    run = run_loop(bootstrap, admin, src, per_partition, args.partitions,
                                   None if k == "ceil" else "enrich", warm_msgs, bad)
                run.jit = jit_share(spark, mark)
                busy, by_kind = cpu.between(run.start, run.end)
                run.cpu_us, run.busy = busy / run.msgs * 1e6, busy / run.seconds / CORES
                run.cpu_by = {kind: v / run.msgs * 1e6 for kind, v in by_kind.items()}
                run.probe = probe.between(run.start, run.end)
                runs[k].append(run)
                drain = f", last cycle drained {run.drain:.1f}s after" if run.drain is not None else ""
                retried = f", {run.retried_in_window} retries in the window" if k.startswith("b") and bad else ""
                log(f"round {r + 1}: {PIPELINES[k]}: {run.rate:,.0f} msg/s over {run.seconds:.1f}s "
                    f"({run.msgs:,} msgs){retried}{drain}; machine CPU {run.cpu_us:.2f} us/msg ("
                    + ", ".join(f"{kind} {v:.2f}" for kind, v in run.cpu_by.items() if v >= 0.005)
                    + f"), {run.busy:.0%} busy; Spark's JIT {run.jit:.0%} of a core; core probe "
                    + (f"{run.probe:.2f} us" if run.probe is not None else "-"))
        loads.append(Path("/proc/loadavg").read_text().split()[0])
    finally:
        cpu.close()
        probe.close()
        if spark is not None:
            spark.stop()
        extras.close()
        bench_stack.down(own_dir)

    report(runs, args, loads)
    return 0


def report(runs: dict[str, list[Run]], args, loads: list[str]) -> None:
    fmt = "JSON" + (" (Avro in the Avro topic)" if "a avro" in runs or "b avro" in runs else "")
    print(f"\nsteady state: {args.messages:,} {fmt} messages per topic, {args.partitions} partitions, "
          f"Spark local[2] and {CORES} loop processes on {CORES} cores, batches of {args.batch:,}, "
          f"window after {args.warmup_batches} batches; {args.rounds} rounds; "
          f"1-min load at each round's start and at the end: {' '.join(loads)}\n")
    print(f"{'pipeline':<36}{'median msg/s':>13}{'per core':>10}{'window s':>10}{'drain s':>9}"
          f"{'CPU us/msg':>11}{'busy':>6}   every round (msg/s; core probe, us)")
    med = {}
    for k, rs in runs.items():
        med[k] = statistics.median(r.rate for r in rs)
        drains = [r.drain for r in rs if r.drain is not None]
        drain = f"{statistics.median(drains):>9.1f}" if drains else f"{'-':>9}"
        short = "" if min(r.seconds for r in rs) >= 60 or min(r.msgs for r in rs) >= 5_000_000 else \
            "  (window < 60 s and < 5M msgs)"
        print(f"{PIPELINES[k]:<36}{med[k]:>13,.0f}{med[k] / CORES:>10,.0f}"
              f"{statistics.median(r.seconds for r in rs):>10.1f}{drain}"
              f"{statistics.median(r.cpu_us for r in rs):>11.2f}{statistics.median(r.busy for r in rs):>6.0%}   "
              + " ".join(f"{r.rate:,.0f}" for r in rs) + "; "
              + " ".join(f"{r.probe:.2f}" if r.probe is not None else "-" for r in rs) + short)
    print(f"\nmachine CPU per source message in the window, by process (us, medians of the rounds):\n"
          f"{'pipeline':<36}" + "".join(f"{k:>12}" for k in MachineCpu.KINDS))
    for k, rs in runs.items():
        print(f"{PIPELINES[k]:<36}" + "".join(
            f"{statistics.median((r.cpu_by or {}).get(kind, 0.0) for r in rs):>12.2f}" for kind in MachineCpu.KINDS))
    print()
    for name, num, den, goal in (
            ("b(0%)/a", "b 0%", "a", 1.00), ("b(0.1%)/b(0%)", "b 0.1%", "b 0%", 0.95),
            ("b(1%)/b(0%)", "b 1%", "b 0%", 0.85), ("b(0%)/c(0%)", "b 0%", "c 0%", None),
            ("b(1%, no cycle)/b(0%)", "b 1% no cycle", "b 0%", None),
            ("b(1%, at once)/b(0%)", "b 1% at once", "b 0%", None),
            ("b(0%, 10k rows)/b(0%)", "b 0% 10k rows", "b 0%", None),
            ("b(0%, 10k rows)/a", "b 0% 10k rows", "a", None),
            ("b(0%)/a(fs ckpt)", "b 0%", "a fs ckpt", None),
            ("a(fs ckpt)/a", "a fs ckpt", "a", None),
            ("b(0%)/a(alike)", "b 0%", "a alike", None), ("a(alike)/a", "a alike", "a", None),
            ("b(0%)/b(0%, at-least-once)", "b 0%", "b 0% alo", None),
            ("b(avro)/a(avro)", "b avro", "a avro", 0.90), ("b(avro)/b(0%)", "b avro", "b 0%", None),
            ("a(avro)/a", "a avro", "a", None),
            ("b(1%)/b(1%, at-least-once)", "b 1%", "b 1% alo", None),
            ("b(1%)/b(1%, driver settles)", "b 1%", "b 1% driver", None),
            ("b(1%, driver settles)/b(0%)", "b 1% driver", "b 0%", None),
            ("b(1%, cycles on executors)/b(1%)", "b 1% executors", "b 1%", None),
            ("b(1%)/b(0%), 10k rows", "b 1% 10k rows", "b 0% 10k rows", None),
            ("b(1%)/c(1%)", "b 1%", "c 1%", None), ("c(0%)/ceiling", "c 0%", "ceil", None),
            ("b(0%)/ceiling", "b 0%", "ceil", None)):
        if num not in runs or den not in runs:
            continue
        # Paired within a round: the two runs were adjacent, under the same load.
        paired = [n.rate / d.rate for n, d in zip(runs[num], runs[den])]
        r, sp = statistics.median(paired), spread(paired)
        if len(paired) < 2:
            verdict = "  one round: no spread, nothing to conclude"
        elif sp > args.max_spread:
            verdict = f"  spread {sp:.0%} > {args.max_spread:.0%}: too wide to conclude"
        elif goal is None:
            verdict = f"  spread {sp:.0%}"
        else:
            met = "met" if min(paired) >= goal else "NOT met" if max(paired) < goal else "not settled"
            verdict = f"  spread {sp:.0%}; goal >= {goal:.2f}: {met}"
        print(f"{name:<21} = {r:.2f}  rounds {' '.join(f'{x:.2f}' for x in paired)}{verdict}")
        # The same at the cores' speed the probe saw in each window (msg/s x its us per unit):
        # a diagnostic for comparing code, never the goal's verdict. Runs of one pipeline on
        # this kind of machine moved +-15% with the probe; but a poison run's extra processes
        # may slow the probe too, and then this takes some of that run's own cost away with
        # the machine's (not shown either way so far: docs/performance.md, 2026-11-27).
        if all(x.probe for x in runs[num] + runs[den]):
            adj = [n.rate * n.probe / (d.rate * d.probe) for n, d in zip(runs[num], runs[den])]
            print(f"{'':<21}   at the probe's speed {statistics.median(adj):.2f}  rounds "
                  f"{' '.join(f'{x:.2f}' for x in adj)}  spread {spread(adj):.0%}")


if __name__ == "__main__":
    sys.exit(main())
