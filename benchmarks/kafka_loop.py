"""Baseline (c): what a user writes without Spark, run by benchmarks/steady_state.py.

A confluent-kafka consume -> handler -> produce loop with a dead-letter topic, one process
per core, each process assigned its own source partitions. At-least-once, as such a loop is
usually written: a consumed chunk's outputs are flushed before its offsets are committed. A
failing message is tried `immediate` more times at once, then written to the dead-letter
topic; there are no delayed retry cycles (those would need the delay topics and their
reader that Antidote brings). With `handler=None` the loop only copies each value: the
librdkafka consume+produce ceiling on this machine.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from collections.abc import Callable

CHUNK = 10_000  # messages per consume() call, and per offset commit


def _work(bootstrap: str, source: str, sink: str, dlq: str, partitions: list[int], expected: int,
          handler: str | None, immediate: int, out: mp.Queue) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    from antidote_consumer.worker.message import Message
    from benchmarks import handlers

    handle: Callable | None = getattr(handlers, handler) if handler else None
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-loop-{source}-{sink}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 10})
    c.assign([TopicPartition(source, p, 0) for p in partitions])
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4",
                  "queue.buffering.max.messages": 500_000})
    seen, dead, marks, idle_since = 0, 0, [], None
    while seen < expected:
        msgs = c.consume(CHUNK, 0.5)
        if not msgs:
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > 30:
                raise RuntimeError(f"{source} {partitions}: idle at {seen} of {expected}")
            continue
        idle_since = None
        for m in msgs:
            if m.error():
                raise RuntimeError(m.error().str())
            value = m.value()
            if handle is not None:
                msg = Message(m.key(), value, m.headers() or (), m.topic(), m.partition(), m.offset(),
                              m.timestamp()[1])
                for attempt in range(immediate + 1):
                    try:
                        value = handle(msg)
                        break
                    except Exception as err:  # noqa: BLE001 - the handler's failure is the point
                        if attempt == immediate:
                            p.produce(dlq, key=m.key(), value=m.value(),
                                      headers=[("error", str(err).encode())])
                            dead += 1
                            value = None
                if value is None:
                    continue
            while True:
                try:
                    p.produce(sink, key=m.key(), value=value)
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        # At-least-once: the chunk's outputs are on the broker before its offsets commit.
        if p.flush(60):
            raise RuntimeError("outputs not delivered within 60 s")
        c.commit(asynchronous=False)
        seen += len(msgs)
        marks.append((time.time(), len(msgs)))
    c.close()
    out.put((marks, dead))


def run(bootstrap: str, source: str, sink: str, dlq: str, partitions: int, processes: int,
        per_partition: dict[int, int], handler: str | None, immediate: int = 2
        ) -> tuple[list[tuple[float, int]], int]:
    """Run the loop in `processes` processes; returns every chunk's (end time, messages),
    sorted by time, and the dead-lettered count."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = []
    for i in range(processes):
        mine = [q for q in range(partitions) if q % processes == i]
        expected = sum(per_partition[q] for q in mine)
        procs.append(ctx.Process(target=_work, args=(bootstrap, source, sink, dlq, mine, expected,
                                                     handler, immediate, out)))
    for pr in procs:
        pr.start()
    marks, dead, done = [], 0, 0
    while done < len(procs):
        try:
            m, d = out.get(timeout=5)
        except queue.Empty:
            failed = [pr.exitcode for pr in procs if pr.exitcode not in (None, 0)]
            if failed:
                raise RuntimeError(f"loop process exited {failed[0]}") from None
            continue
        marks += m
        dead += d
        done += 1
    for pr in procs:
        pr.join(60)
        if pr.exitcode != 0:
            raise RuntimeError(f"loop process exited {pr.exitcode}")
    return sorted(marks), dead
