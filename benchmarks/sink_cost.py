"""CPU per output of the Kafka sink's deliveries, apart from Spark and the handler.

One command, one broker:

    .venv/bin/python benchmarks/sink_cost.py [--outputs 400000] [--rounds 5]

Each round runs, in a rotating order, one process that plays an executor's Python worker
writing --outputs outputs of one source partition (keyed orders of ~160 bytes) to a sink
topic, the way worker/executor.py writes them:
(alo) at-least-once: the executor's idempotent producer (worker/sink.py), one produce per
      output, delivery waited for at the end;
(eos) exactly-once: worker/sink_txn.py's PartitionSink with the executor's transactional
      writer process (worker/txn_writer.py): 2 MB chunks committed with their ledger
      entries while the "task" goes on, the last waited for at its end;
(own) exactly-once with the process's own transactional producer (the driver's local
      worker's way: 8 MB chunks, each committed before the task goes on).
The CPU counted is what the worker process, the writer process and the broker spent in the
run (rusage; /proc/PID/stat), per output: what a sink costs the machine, which on a
CPU-bound executor is its throughput. Each run is checked: a read_committed reader gets
exactly --outputs records. Prints each kind's median and every round, and eos/alo and
own/alo per round (alo's CPU over the other's: a throughput ratio), with the spread.
Uses the stack named by $ANTIDOTE_STACK_DIR if it runs, else starts its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

KINDS = ("alo", "eos", "own")


def _orders(n: int) -> tuple[list[bytes], list[bytes]]:
    keys = [b"customer-%d" % (i % 5000) for i in range(n)]
    values = [json.dumps({"order": i, "customer": i % 5000, "item": "widget-%d" % (i % 97), "quantity": 1 + i % 9,
                          "price": round(4.5 + i % 300 * 0.37, 2), "currency": "EUR",
                          "placed": "2026-11-28T20:00:00Z"}).encode() for i in range(n)]
    return keys, values


def worker(kind: str, bootstrap: str, sink_topic: str, ledger: str, writer_id: str, n: int, chunk: int) -> None:
    """One task's outputs, written as executor.py writes them; prints its CPU and wall."""
    from antidote_consumer.worker import sink, sink_txn, txn_writer

    keys, values = _orders(n)
    conf = {"bootstrap.servers": bootstrap, "topic": sink_topic}
    sink_txn.in_spark_task()  # imports pyspark, loaded in every executor's worker before a task
    cpu0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    if kind == "alo":
        topic, producer = sink.producer_for(conf)
        for offset, (key, value) in enumerate(zip(keys, values)):
            try:
                producer.produce(topic, value, key)
            except BufferError:
                sink.produce(producer, topic, key, value, None)
            if offset % 1000 == 0:
                producer.poll(0)
        sink.delivered(producer, topic)
    else:
        eos = sink_txn.ExactlyOnce(ledger, writer_id, fresh=frozenset({"src:0"}))
        part = sink_txn.PartitionSink.open(eos, conf, "src", 0, retried_task=False)
        if kind == "eos":  # as in a Spark task (sink_txn.in_spark_task)
            part._shared, part.limit = txn_writer.client(), chunk or sink_txn.SHARED_CHUNK_BYTES
        for offset, (key, value) in enumerate(zip(keys, values)):
            if part.due():
                part.commit(offset)
            part.add(offset, key, value, None)
        sink_txn.finish({("src", 0): part}, {("src", 0): n - 1}, True)
    wall = time.perf_counter() - wall0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"cpu": cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, "wall": wall}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--outputs", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-spread", type=float, default=0.20)
    ap.add_argument("--eos-chunk-bytes", type=int, default=0,
                    help="the exactly-once chunk size to try (default: the executor's, SHARED_CHUNK_BYTES)")
    ap.add_argument("--worker", nargs=7, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        kind, bootstrap, sink_topic, ledger, writer_id, n, chunk = args.worker
        worker(kind, bootstrap, sink_topic, ledger, writer_id, int(n), int(chunk))
        return 0

    from confluent_kafka.admin import AdminClient

    from antidote_devstack.paths import code_path
    from antidote_testkit import kafka_io
    from benchmarks import bench_stack
    from benchmarks.scale_probes import cpu_seconds, processes_with, txn_writers
    from benchmarks.consumer_throughput import log, make_topic

    st, own_dir = bench_stack.up()
    brokers = processes_with("kafka.Kafka", st.dir)
    run_id = uuid.uuid4().hex[:6]
    writer_id = f"antidote/bench/sink-cost-{run_id}"
    env = {**os.environ, "PYTHONPATH": code_path()}
    per_output: dict[str, list[float]] = {k: [] for k in KINDS}
    split: dict[str, dict[str, list[float]]] = {k: {"worker": [], "writer": [], "broker": []} for k in KINDS}
    try:
        bootstrap = st.kafka_bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        ledger = make_topic(admin, f"bench-sink-{run_id}.ledger", 1, {"cleanup.policy": "compact"})

        def run(kind: str, n: int, tag: str) -> float:
            topic = make_topic(admin, f"bench-sink-{run_id}-{tag}-{kind}", 1)
            writers = txn_writers([os.getpid()])  # this process is the workers' "daemon"
            before = {p: cpu_seconds(p) for p in brokers + writers}
            out = subprocess.run([sys.executable, __file__, "--worker", kind, bootstrap, topic, ledger,
                                  f"{writer_id}-{kind}", str(n), str(args.eos_chunk_bytes)],
                                 # Not a pipe for stderr: the writer process it starts inherits
                                 # it and outlives it (as in an executor).
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                 check=True)
            mine = json.loads(out.stdout.strip().splitlines()[-1])
            writers = txn_writers([os.getpid()])
            broker = sum(cpu_seconds(p) - before.get(p, 0) for p in brokers)
            writer = sum(cpu_seconds(p) - before.get(p, 0) for p in writers)
            got = len(kafka_io.read_all(bootstrap, topic, timeout=120))  # read_committed: librdkafka's default
            if got != n:
                raise SystemExit(f"{kind}: a read_committed reader got {got:,} records of {n:,}")
            for part, cpu in (("worker", mine["cpu"]), ("writer", writer), ("broker", broker)):
                split[kind][part].append(cpu / n * 1e6)
            return (mine["cpu"] + writer + broker) / n * 1e6

        log("warming up: each kind once (the writer process starts, producers are made)")
        for kind in KINDS:
            run(kind, 20_000, "warm")
        for r in range(args.rounds):
            order = KINDS[r % 3:] + KINDS[:r % 3]
            for kind in order:
                per_output[kind].append(run(kind, args.outputs, f"r{r}"))
            log(f"round {r + 1}: " + "  ".join(f"{k} {per_output[k][-1]:.2f}" for k in KINDS) + " us/output")
    finally:
        for pid in txn_writers([os.getpid()]):
            os.kill(pid, 9)
        bench_stack.down(own_dir)

    print(f"\nsink cost: CPU per output (worker + writer + broker), {args.outputs:,} outputs a round, "
          f"{args.rounds} rounds, load {os.getloadavg()[0]:.2f}")
    for kind in KINDS:
        xs = per_output[kind]
        parts = ", ".join(f"{part} {statistics.median(v[len(v) - len(xs):]):.2f}" for part, v in split[kind].items())
        print(f"  {kind:4} median {statistics.median(xs):6.2f} us ({parts})   rounds "
              + " ".join(f"{x:.2f}" for x in xs))
    for kind in ("eos", "own"):
        ratios = [a / b for a, b in zip(per_output["alo"], per_output[kind])]
        med = statistics.median(ratios)
        spread = (max(ratios) - min(ratios)) / med
        verdict = "" if spread <= args.max_spread else "  (too wide to conclude)"
        print(f"  alo/{kind} (throughput ratio) = {med:.2f}  rounds " + " ".join(f"{x:.2f}" for x in ratios)
              + f"  spread {spread:.0%}{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
