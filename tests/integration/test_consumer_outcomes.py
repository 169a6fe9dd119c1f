"""Every input offset reaches exactly one outcome, checked against Kafka itself."""

from __future__ import annotations

import pytest

from antidote_consumer.metrics import Metrics
from antidote_consumer.runner import Consumer
from antidote_consumer.runtime import ExitCode

from . import consumer_util as cu
from .kafka_io import produce, read_all


def run(spark, s, **kw) -> tuple[ExitCode, Metrics]:
    metrics = Metrics(s.namespace, s.consumer)
    code = Consumer(s, spark, metrics, trigger_interval=0.2, **kw).run(until_idle=True)
    return code, metrics


def metric(m: Metrics, name: str, **labels) -> float:
    return m.registry.get_sample_value(name, {**m.ids, **labels}) or 0.0


def test_move_retries_through_cycles_then_quarantines_with_exact_attempts(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    values = [b"poison-%d" % i if i % 10 == 3 else b"msg-%d" % i for i in range(100)]
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, [("trace", b"t%d" % i)])
                                      for i, v in enumerate(values)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, sink=sink, policy={
        "retries": {"immediate": 2, "cycles": 2, "cycleDelay": "1s"}})

    code, m = run(spark, s)

    assert code == ExitCode.OK
    src = {(r.partition, r.offset): r for r in read_all(kafka_bootstrap, source)}
    out = read_all(kafka_bootstrap, sink)
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    bad = {k for k, r in src.items() if b"poison" in r.value}
    assert len(bad) == 10
    # The ledger invariant: each offset once, in the sink or in the poison topic.
    assert sorted(r.value for r in out) == sorted(r.value.upper() for k, r in src.items() if k not in bad)
    assert set(poison) == bad
    assert read_all(kafka_bootstrap, s.topics.dlq) == []
    # Exactly (immediate + 1) x (cycles + 1) = 9 attempts of each poison message.
    per_offset = cu.calls(calls_dir, source)
    for (p, o) in bad:
        assert per_offset[f"{source}/{p}/{o}"] == 9
    for (p, o) in set(src) - bad:
        assert per_offset[f"{source}/{p}/{o}"] == 1
    for (p, o), (rec, hdrs) in poison.items():
        orig = src[(p, o)]
        assert rec.key == orig.key and rec.value == orig.value  # byte-identical
        assert ("trace", orig.headers[0][1]) in rec.headers
        assert hdrs["antidote.reason"] == "max-attempts"
        assert hdrs["antidote.attempts"] == "9"
        assert hdrs["antidote.cycle"] == "2"
        assert hdrs["antidote.error.class"] == "ValueError"
        assert hdrs["antidote.error.message"] == f"cannot process offset {o}"
        assert "Traceback" in hdrs["antidote.error.stack"]
        assert hdrs["antidote.original.topic"] == source
        assert hdrs["antidote.original.timestamp"] == str(orig.timestamp)
        assert hdrs["antidote.disposition"] == "Move"
        assert hdrs["antidote.consumer"] == "c" and hdrs["antidote.policy"] == "p"
        assert int(hdrs["antidote.failure.first"]) < int(hdrs["antidote.failure.last"])
    assert metric(m, "antidote_messages_total", outcome="processed") == 90
    assert metric(m, "antidote_messages_total", outcome="moved") == 10
    assert metric(m, "antidote_messages_total", outcome="retried") == 20
    assert metric(m, "antidote_attempts_total") == 90 + 10 * 9
