"""What every part of `make chaos` uses (chaos.py, chaos_restarts.py): the stream's poison and
flaky messages, the source writer, the consumer's manifests and process, and the audit of
every source offset. Its own module so the parts import it and none of them another part."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from antidote_consumer.kafka.retry import retrying
from benchmarks.handlers import FLAKY_FAILS
from antidote_testkit.consumers import write_manifests
from antidote_testkit.kafka_io import read_all

REPO = Path(__file__).resolve().parents[1]

IMMEDIATE, CYCLES = 1, 2
POLICY = {"retries": {"immediate": IMMEDIATE, "cycles": CYCLES, "cycleDelay": "2s"}}
PARTITIONS = 3


def log(text: str) -> None:
    print(f"[chaos] {text}", file=sys.stderr, flush=True)


def is_poison(i: int, rate: float) -> bool:
    every = max(1, round(1 / rate)) if rate else 0
    return bool(every) and i % every == every // 2


def is_flaky(i: int, rate: float) -> bool:
    """As many flaky messages as poison ones, between them (never the same message)."""
    every = max(2, round(1 / rate)) if rate else 0
    return bool(every) and i % every == 0


def write_source(bootstrap: str, topic: str, n: int, rate: float, first: int = 0) -> int:
    """Messages `first` .. `first + n - 1`; returns how many of them are poison."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for i in range(first, first + n):
        value = (b"poison-%d" % i if is_poison(i, rate) else b"flaky-%d" % i if is_flaky(i, rate)
                 else b"m%d" % i)
        while True:
            try:
                p.produce(topic, value, str(i).encode())
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    return sum(1 for i in range(first, first + n) if is_poison(i, rate))


@dataclass
class Audit:
    offsets: int = 0
    poison_expected: int = 0
    flaky_expected: int = 0
    lost: list = field(default_factory=list)
    flaky_wrong: list = field(default_factory=list)
    duplicated_quarantine: list = field(default_factory=list)
    wrong_attempts: list = field(default_factory=list)
    both: list = field(default_factory=list)
    sink_duplicates: int = 0
    processed: int = 0
    quarantined: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated_quarantine or self.wrong_attempts or self.both
                    or self.flaky_wrong or self.sink_duplicates)

    def lines(self) -> list[str]:
        return [
            f"source offsets: {self.offsets} ({self.poison_expected} poison, {self.flaky_expected} flaky)",
            f"processed: {self.processed}, quarantined: {self.quarantined}",
            f"lost: {len(self.lost)}" + (f" e.g. {self.lost[:5]}" if self.lost else ""),
            f"duplicated quarantine: {len(self.duplicated_quarantine)}"
            + (f" e.g. {self.duplicated_quarantine[:5]}" if self.duplicated_quarantine else ""),
            f"wrong attempts: {len(self.wrong_attempts)}"
            + (f" e.g. {self.wrong_attempts[:5]}" if self.wrong_attempts else ""),
            f"in the sink and quarantined: {len(self.both)}",
            f"flaky wrong (quarantined, or succeeded at an attempt other than {FLAKY_FAILS + 1}): "
            f"{len(self.flaky_wrong)}" + (f" e.g. {self.flaky_wrong[:5]}" if self.flaky_wrong else ""),
            f"sink duplicates (exactly-once, read_committed): {self.sink_duplicates}",
        ]


def audit(bootstrap: str, source: str, sink: str, poison: str) -> Audit:
    a = Audit()
    src = {(m.partition, m.offset): m.value for m in read_all(bootstrap, source)}
    a.offsets = len(src)
    a.poison_expected = sum(1 for v in src.values() if v.startswith(b"poison"))
    flaky = {w for w, v in src.items() if v.startswith(b"flaky")}
    a.flaky_expected = len(flaky)
    outputs = Counter()
    for m in read_all(bootstrap, sink):
        part, off, attempt, _ = m.value.split(b":", 3)
        where = (int(part), int(off))
        outputs[where] += 1
        # Every copy of a flaky message's output (a replayed batch writes it again) comes from
        # the attempt that succeeded: the 4th, whatever was killed in between.
        if where in flaky and int(attempt) != FLAKY_FAILS + 1:
            a.flaky_wrong.append((where, f"succeeded at attempt {int(attempt)}"))
    a.sink_duplicates = sum(n - 1 for n in outputs.values())
    a.processed = len(outputs)
    want = (IMMEDIATE + 1) * (CYCLES + 1)
    quarantined = Counter()
    for m in read_all(bootstrap, poison):
        h = {k: v.decode() for k, v in m.headers if k.startswith("antidote.")}
        where = (int(h["antidote.original.partition"]), int(h["antidote.original.offset"]))
        quarantined[where] += 1
        if int(h["antidote.attempts"]) != want:
            a.wrong_attempts.append((where, h["antidote.attempts"]))
    a.quarantined = len(quarantined)
    a.duplicated_quarantine = sorted(w for w, n in quarantined.items() if n > 1)
    a.lost = sorted(w for w in src if w not in outputs and w not in quarantined)
    a.both = sorted(w for w in src if w in outputs and w in quarantined)
    a.flaky_wrong += sorted((w, "quarantined") for w in flaky if w in quarantined)
    return a


def manifests(folder: Path, bootstrap: str, source: str, sink: str, max_batch: int) -> list[str]:
    return write_manifests(folder, name="chaos", namespace="chaos", bootstrap=bootstrap, source=source,
                           handler="benchmarks.handlers:tagged", policy=POLICY, sink=sink, max_batch=max_batch)


def written(c: Consumer, topics: list[str]) -> int:
    """Records in `topics` up to their high watermarks (transactions still open included):
    grows as soon as a consumer writes anything."""
    total = 0
    for topic in topics:
        md = c.list_topics(topic, timeout=30).topics.get(topic)
        if md is None or md.error is not None:
            continue
        for p in md.partitions:
            tp = TopicPartition(topic, p)  # a topic just created may have no leader yet
            total += retrying(lambda tp=tp: c.get_watermark_offsets(tp, timeout=30), f"{topic}: offsets")[1]
    return total


CRASH_LOOP = 3  # ExitCode.CONSECUTIVE_BATCH_FAILURES


def start(env: dict, args: list[str], out, resume: bool = False) -> subprocess.Popen:
    # A session of its own, so SIGKILL reaches the Spark JVM as well as the Python driver.
    return subprocess.Popen([sys.executable, "-m", "antidote_cli.main", "consumer",
                             "--trigger-interval", "0.3", "--until-idle", *args,
                             *(["--resume"] if resume else [])], cwd=REPO, env=env,
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
