"""Throughput of the poison-queue reader's Redrive against a plain consume -> produce copy.

One command, one broker:

    .venv/bin/python benchmarks/reader_redrive.py [--messages 200000] [--rounds 3]

Every round writes --messages poison records (the headers the consumer writes: original
coordinates, reason, error class, message and stack, plus two user headers) to a fresh
poison topic, then, in a rotating order:
(r) the reader (`antidote reader --action Redrive`, unthrottled) redrives them back to their
    source topic: read_committed, one transaction per chunk with its progress and the
    group's offsets, exactly as on a cluster;
(c) the baseline: a plain confluent-kafka loop copies the same topic to another one
    (consume in batches, produce, one flush at the end, offsets committed once; no
    transactions, no header rewrite).
Each run is checked: exactly --messages records arrive (read back read_committed).
Then --rate-rounds runs of the reader with rateLimit --rate over --rate-messages records:
the achieved rate is taken from the redriven records' own timestamps (first to last) and,
end to end, from the run's wall time. Prints medians, the spread and the per-round ratio
r/c; `--profile` adds a cProfile of one unthrottled reader run. Uses the stack named by
$ANTIDOTE_STACK_DIR if it runs, else starts its own and stops it at the end.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import logging
import os
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from antidote_api.consumer import QueueConsumerSpec  # noqa: E402
from antidote_api.policy import PoisonPolicySpec  # noqa: E402
from antidote_api.semantics import resolve  # noqa: E402
from antidote_consumer.kafka import headers as h  # noqa: E402
from benchmarks import bench_stack  # noqa: E402
from benchmarks.consumer_throughput import log, make_topic, put  # noqa: E402

GOAL_RATE = 20_000  # msg/s, unthrottled (docs/performance.md)
GOAL_ACCURACY = 0.05


def fill_poison(bootstrap: str, source: str, topic: str, n: int, partitions: int) -> None:
    """`n` records as the consumer quarantines them (kafka.headers.failure_headers)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 500000})
    now = int(time.time() * 1000)
    stack = "Traceback (most recent call last):\n  File \"handler.py\", line 12, in handle\nValueError"
    for i in range(n):
        part = i % partitions
        hdrs = [("trace", b"t%d" % i), ("tenant", b"acme")] + h.failure_headers(
            origin=h.Origin(source, part, i // partitions, now - 60_000), attempts=3, cycle=1,
            first_failure=now - 2000, last_failure=now, reason="max-attempts",
            error_class="ValueError", error_message=f"order {i} cannot be priced", stack=stack,
            consumer="bench", policy="bench", disposition="Move")
        value = b'{"id":%d,"qty":3,"price":9.99,"poison":true}' % i
        put(p, i, topic=topic, key=b"%d" % i, value=value, headers=hdrs, partition=part)
    assert p.flush(120) == 0


def count(bootstrap: str, topic: str) -> tuple[int, list[int]]:
    """(records, their timestamps) in `topic` as a read_committed consumer sees them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-count-{uuid.uuid4().hex}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        n, stamps = 0, []
        for batch in to_the_end(c, topic, 10000):
            n += len(batch)
            stamps += [msg.timestamp()[1] for msg in batch]
        return n, stamps
    finally:
        c.close()


def to_the_end(c: Consumer, topic: str, batch: int) -> Iterator[list]:
    """Every partition of `topic` from its start to its end, `batch` records at a time."""
    md = c.list_topics(topic, timeout=30).topics[topic]
    c.assign([TopicPartition(topic, q, 0) for q in md.partitions])
    left = set(md.partitions)
    while left:
        # A short timeout: with 5 s, librdkafka's batch consume waited ~50 ms per call
        # here (8,900 msg/s instead of ~75,000 for the read alone).
        out = []
        for msg in c.consume(batch, 0.1):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    left.discard(msg.partition())
                    continue
                raise RuntimeError(msg.error())
            out.append(msg)
        yield out


def settings(bootstrap: str, source: str, workdir: Path, rate: int | None = None):
    reader = {"action": "Redrive", **({"rateLimit": rate} if rate else {})}
    qc = QueueConsumerSpec.model_validate({
        "policyRef": {"name": "bench"},
        "source": {"kafka": {"bootstrapServers": bootstrap, "topic": source}},
        "handler": "benchmarks.handlers:enrich",
        "checkpoint": {"location": str(workdir / f"ckpt-{uuid.uuid4().hex}")}})
    return resolve(qc, PoisonPolicySpec.model_validate({"reader": reader}),
                   name=f"rr{uuid.uuid4().hex[:6]}", namespace="bench")


def run_reader(s) -> tuple[float, object]:
    from antidote_consumer.reader.rules import ReaderOptions
    from antidote_consumer.reader.run import run_reader as reader

    started = time.perf_counter()
    report = reader(s, ReaderOptions(action="Redrive"), log_every=3600)
    return time.perf_counter() - started, report


def run_copy(bootstrap: str, topic: str, target: str) -> float:
    """What one writes without Antidote: consume, produce, flush once, commit once."""
    started = time.perf_counter()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-copy-{uuid.uuid4().hex}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    try:
        for batch in to_the_end(c, topic, 1000):
            for msg in batch:
                while True:
                    try:
                        p.produce(target, msg.value(), msg.key(), headers=msg.headers())
                        break
                    except BufferError:
                        p.poll(0.05)
            p.poll(0)
        assert p.flush(60) == 0
        c.commit(asynchronous=False)
    finally:
        c.close()
    return time.perf_counter() - started


def spread(xs: list[float]) -> float:
    """(max - min) / median, the runs' spread."""
    return (max(xs) - min(xs)) / statistics.median(xs) if xs else 0.0


def main() -> int:
    # Long on purpose: a benchmark script's flags and its measured steps in the order they run.
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=int, default=1000, help="the reader's rateLimit, msg/s")
    ap.add_argument("--rate-messages", type=int, default=10_000)
    ap.add_argument("--rate-rounds", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="cProfile one unthrottled reader run")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    st, own_dir = bench_stack.up()
    workdir = Path(tempfile.mkdtemp(prefix="antidote-bench-"))
    load = [os.getloadavg()[0]]
    n, parts = args.messages, args.partitions
    times: dict[str, list[float]] = {"reader": [], "copy": []}
    paced: list[float] = []
    paced_e2e: list[float] = []
    profile_text = None
    try:
        bootstrap = st.kafka_bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        run_id = uuid.uuid4().hex[:6]

        def fresh(tag: str, records: int):
            source = make_topic(admin, f"bench-rr-{run_id}-{tag}", parts)
            make_topic(admin, f"{source}.poison", parts)
            started = time.perf_counter()
            fill_poison(bootstrap, source, f"{source}.poison", records, parts)
            log(f"wrote {records:,} poison records to {source}.poison in {time.perf_counter() - started:.1f}s")
            return source

        log("warming up (a small redrive and a small copy)")
        warm = fresh("warm", 5000)
        run_reader(settings(bootstrap, warm, workdir))
        run_copy(bootstrap, f"{warm}.poison", make_topic(admin, f"{warm}.copy", parts))

        for r in range(args.rounds):
            source = fresh(f"r{r}", n)
            for k in (("reader", "copy") if r % 2 == 0 else ("copy", "reader")):
                if k == "reader":
                    t, report = run_reader(settings(bootstrap, source, workdir))
                    assert report.redriven == n and report.failed == 0, report
                    got, _ = count(bootstrap, source)
                else:
                    target = make_topic(admin, f"{source}.copy", parts)
                    t = run_copy(bootstrap, f"{source}.poison", target)
                    got, _ = count(bootstrap, target)
                assert got == n, f"{k}: {got} records arrived, {n} expected"
                times[k].append(t)
                load.append(os.getloadavg()[0])
                log(f"round {r + 1}: {k}: {n:,} in {t:.2f}s = {n / t:,.0f} msg/s")

        for r in range(args.rate_rounds):
            source = fresh(f"rate{r}", args.rate_messages)
            t, report = run_reader(settings(bootstrap, source, workdir, rate=args.rate))
            got, stamps = count(bootstrap, source)
            assert report.redriven == args.rate_messages == got, (report, got)
            span = (max(stamps) - min(stamps)) / 1000
            paced.append((got - 1) / span)
            paced_e2e.append(got / t)
            load.append(os.getloadavg()[0])
            log(f"rate round {r + 1}: {got:,} redriven at {paced[-1]:,.1f} msg/s (records' timestamps), "
                f"{paced_e2e[-1]:,.1f} msg/s end to end ({t:.2f}s)")

        if args.profile:
            source = fresh("profile", n)
            prof = cProfile.Profile()
            s = settings(bootstrap, source, workdir)
            prof.enable()
            t, report = run_reader(s)
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
            profile_text = f"profiled run: {n:,} in {t:.2f}s = {n / t:,.0f} msg/s\n{out.getvalue()}"
    finally:
        bench_stack.down(own_dir)

    rate = {k: [n / t for t in v] for k, v in times.items()}
    med = {k: statistics.median(v) for k, v in rate.items()}
    print(f"\nreader Redrive: {n:,} poison records, {parts} partitions, median of {args.rounds} rounds; "
          f"load average (1 min) {min(load):.2f}-{max(load):.2f}\n")
    print(f"{'pipeline':<46}{'median msg/s':>13}{'spread':>8}   every round (msg/s)")
    for k, label in (("reader", "(r) reader Redrive, unthrottled"),
                     ("copy", "(c) confluent-kafka consume->produce copy")):
        print(f"{label:<46}{med[k]:>13,.0f}{spread(rate[k]):>8.0%}   "
              + " ".join(f"{x:,.0f}" for x in rate[k]))
    ratios = [c / rd for rd, c in zip(times["reader"], times["copy"])]
    print(f"\nr/c = {statistics.median(ratios):.2f} median of rounds "
          f"{' '.join(f'{x:.2f}' for x in ratios)}")
    ok = med["reader"] >= GOAL_RATE
    print(f"reader unthrottled: {med['reader']:,.0f} msg/s (goal >= {GOAL_RATE:,}: {'met' if ok else 'NOT met'})")
    if paced:
        acc = statistics.median(paced)
        off = abs(acc - args.rate) / args.rate
        print(f"reader at rateLimit {args.rate:,}/s over {args.rate_messages:,}: {acc:,.1f} msg/s by the records' "
              f"timestamps ({off:.1%} off; goal within {GOAL_ACCURACY:.0%}: "
              f"{'met' if off <= GOAL_ACCURACY else 'NOT met'}), {statistics.median(paced_e2e):,.1f} msg/s "
              f"end to end; rounds " + " ".join(f"{x:,.1f}" for x in paced))
    if max(spread(v) for v in rate.values()) > 0.25:
        print("spread above 25%: the machine was busy; too wide to conclude on the ratio")
    if profile_text:
        print("\n" + profile_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
