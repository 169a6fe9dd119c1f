"""What partition_scale.py reads besides the driver's own timings: the ledger topic's records,
the executors' Python worker processes, the broker's transactional state and one
transactional producer's cost in a process. Read-only probes, no decision of the consumer's."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


# --- the ledger topic ---------------------------------------------------------------------

def kind(key: str) -> str:
    """The ledger entry's kind: batch, counts, positions, skips, topics, sink, held."""
    return key.split(":", 1)[0] if ":" in key else key


def ledger_stats(bootstrap: str, topic: str) -> dict:
    """Every committed record of the ledger topic (read_committed, before compaction has run
    on the active segment), by entry kind: records and bytes (key + value) written; the
    compacted state (the last value of each key): entries and bytes by kind; the largest
    record; offsets taken by transaction markers."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-scale-probe",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    written: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    last: dict[str, int] = {}
    largest = (0, "")
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        c.assign([TopicPartition(topic, 0, low)])
        seen = 0
        while high > low:
            msg = c.poll(30)
            if msg is None:
                raise TimeoutError(f"ledger {topic}: no answer")
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise RuntimeError(f"ledger {topic}: {msg.error()}")
            key = msg.key().decode()
            size = len(msg.key()) + len(msg.value() or b"")
            written[kind(key)][0] += 1
            written[kind(key)][1] += size
            last[key] = size if msg.value() is not None else 0
            largest = max(largest, (size, key))
            seen += 1
    finally:
        c.close()
    state: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key, size in last.items():
        if size:
            state[kind(key)][0] += 1
            state[kind(key)][1] += size
    return {"written": dict(written), "state": dict(state), "largest": largest,
            "offsets": high - low, "records": seen}


def positions_entries(bootstrap: str, topic: str) -> int:
    """How many partitions the last `positions` entry names (source and retry topics)."""
    from antidote_consumer.driver.ledger import load_state

    return len(load_state(bootstrap, topic).positions)


# --- processes ------------------------------------------------------------------------------

def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            out[ppid].append(int(d.name))
    return out


def descendants(pid: int) -> list[int]:
    kids, out, todo = _children(), [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def proc_figures(pid: int) -> tuple[int, int, int]:
    """(RSS bytes, threads, open file descriptors) of one process."""
    status = (Path(f"/proc/{pid}") / "status").read_text()
    rss = threads = 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss, threads, len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def jvm_pid() -> int:
    """The Spark JVM this Python process started (local mode: driver and executors); not the
    broker's, which is a java process under it too when the benchmark started its own stack."""
    mine = os.getpid()
    for pid in descendants(mine):
        try:
            if (Path(f"/proc/{pid}/comm").read_text().strip() == "java"
                    and b"org.apache.spark" in Path(f"/proc/{pid}/cmdline").read_bytes()):
                return pid
        except OSError:
            continue
    raise RuntimeError("no Spark JVM under this process")


def _argvs():
    """(pid, argv) of every process now running."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                yield int(entry.name), Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue


def processes_with(*marks: str) -> list[int]:
    """Processes whose command line holds every one of `marks`."""
    wanted = [m.encode() for m in marks]
    return [pid for pid, argv in _argvs() if all(m in b" ".join(argv) for m in wanted)]


def txn_writers(daemons: list[int]) -> list[int]:
    """The executors' transactional writers (worker.txn_writer) started for these Python
    daemons: found by the daemon's pid they are started with, since they leave the workers'
    session (and may outlive the worker that started them)."""
    pids = {str(pid).encode() for pid in daemons}
    return [pid for pid, argv in _argvs()
            if b"antidote_consumer.worker.txn_writer" in argv and argv[-2] in pids]


def python_workers(jvm: int) -> list[int]:
    """The executors' Python worker processes (pyspark.daemon and its forked workers), and
    their transactional writer (which holds the exactly-once sink's producers)."""
    out = []
    for pid in descendants(jvm):
        try:
            if b"pyspark" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            continue
    return out + txn_writers(out)


class WorkerSampler:
    """The executors' Python workers sampled every `every` s while a run goes on: the largest
    number of processes, and the largest total RSS, threads and file descriptors seen."""

    def __init__(self, jvm: int, every: float = 1.0):
        self.jvm, self.every = jvm, every
        self.peak = {"processes": 0, "rss": 0, "threads": 0, "fds": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="worker-sampler")

    def __enter__(self) -> WorkerSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def sample(self) -> None:
        total = [0, 0, 0]
        pids = python_workers(self.jvm)
        for pid in pids:
            try:
                for i, x in enumerate(proc_figures(pid)):
                    total[i] += x
            except OSError:
                continue  # a worker that ended meanwhile
        for k, v in zip(("processes", "rss", "threads", "fds"), (len(pids), *total)):
            self.peak[k] = max(self.peak[k], v)


def producer_cost(bootstrap: str, prefix: str, n: int = 16) -> dict:
    """What one initialized transactional producer costs a process, as the executors' Python
    workers keep them (worker.sink_txn): RSS, threads and file descriptors per producer, and
    init_transactions' time, from `n` producers made in this process."""
    from confluent_kafka import Producer

    before = proc_figures(os.getpid())
    producers, inits = [], []
    for i in range(n):
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{prefix}/{i}",
                      "enable.idempotence": True})
        # Connected first, so that init_transactions alone is timed: else librdkafka may ask
        # for the producer id again only 500 ms later (the executor's writer calls it in
        # steps instead: txn_writer.init_producer).
        p.list_topics(timeout=60)
        t = time.perf_counter()
        p.init_transactions(60)
        inits.append(time.perf_counter() - t)
        producers.append(p)
    time.sleep(0.5)  # librdkafka's broker threads connect in the background
    after = proc_figures(os.getpid())
    del producers
    return {"rss": (after[0] - before[0]) / n, "threads": (after[1] - before[1]) / n,
            "fds": (after[2] - before[2]) / n, "init_s": sorted(inits)[n // 2]}


# --- the broker's transactional state ---------------------------------------------------------

def broker_transactions(spark, bootstrap: str, prefix: str, partitions: list[tuple[str, int]]) -> dict:
    """Through the Kafka admin client on Spark's JVM (kafka-clients): the transactional ids
    under `prefix` the transaction coordinator holds, by state, and the producer ids the
    broker keeps state for in each of `partitions` (DescribeProducers)."""
    jvm = spark._jvm
    props = jvm.java.util.Properties()
    props.put("bootstrap.servers", bootstrap)
    admin = jvm.org.apache.kafka.clients.admin.Admin.create(props)
    try:
        listing = admin.listTransactions().all().get()
        states: dict[str, int] = defaultdict(int)
        total = 0
        for t in listing.toArray():
            total += 1
            if t.transactionalId().startswith(prefix):
                states[str(t.state())] += 1
        tps = jvm.java.util.ArrayList()
        for topic, p in partitions:
            tps.add(jvm.org.apache.kafka.common.TopicPartition(topic, p))
        described = admin.describeProducers(tps).all().get()
        producers = {f"{tp.topic()}:{tp.partition()}": described.get(tp).activeProducers().size()
                     for tp in described.keySet().toArray()}
    finally:
        admin.close()
    return {"ids": dict(states), "all_ids": total, "producers": producers}


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def dumps(x) -> str:
    return json.dumps(x, sort_keys=True, default=str)
