"""Retry cycles read and run by the executors (planned from offsets, docs/scaling.md design 1)
on the real stack: Kafka, Spark's Kafka batch source and Python workers, the ledger."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from antidote_api.names import ledger_names
from antidote_api.wire import ExitCode
from antidote_consumer.driver.ledger import load_state

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all


def _ends(bootstrap: str, topic: str, partitions: int) -> dict[str, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-ends"})
    try:
        return {f"{topic}:{p}": c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        c.close()


def test_a_cycle_above_the_local_limit_is_read_and_run_by_the_executors_exactly_once(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    """600 messages: 100 that always fail, 100 that fail their first delivery only, 400 fine
    (a third failing: below the systemic threshold); 2 cycles of 1 s, local limit 20. Cycle 1
    holds 200 records, cycle 2 100: above the limit, so the executors read them (Spark's
    Kafka batch source over the planned offsets)."""
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    kinds = {0: b"poison", 1: b"flaky-1"}
    values = [b"%s-%d" % (kinds.get(i % 6, b"fine"), i) for i in range(600)]
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, None) for i, v in enumerate(values)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, sink=sink, handler="flaky_upper",
                    spark_conf={"spark.antidote.retry.localMaxRecords": "20"},
                    policy={"retries": {"immediate": 0, "cycles": 2, "cycleDelay": "1s"}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    # The executor path was taken, for most of the 300 retry records (a small first slice
    # of a cycle may still be read by the driver, in the milliseconds its records are due by
    # their antidote.due but not yet by their timestamps), and every retry record ran once.
    by_path = {p: cu.metric(m, "antidote_retry_records_total", path=p) for p in ("local", "executors")}
    assert by_path["local"] + by_path["executors"] == 200 + 100, by_path
    assert by_path["executors"] >= 150, by_path
    assert cu.metric(m, "antidote_retry_batches_total", path="executors") >= 2
    # Nothing lost, nothing twice: every offset once in the sink or the poison topic.
    src = {(r.partition, r.offset): r for r in read_all(kafka_bootstrap, source)}
    bad = {k for k, r in src.items() if r.value.startswith(b"poison")}
    flaky = {k for k, r in src.items() if r.value.startswith(b"flaky")}
    out = [r.value for r in read_all(kafka_bootstrap, sink)]
    assert sorted(out) == sorted(r.value.upper() for k, r in src.items() if k not in bad)
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == bad and len(bad) == 100
    # Attempts counted across the cycles, whoever ran them: 3 for the poison messages
    # (first delivery + 2 cycles), 2 for the flaky ones, 1 for the rest.
    per = cu.calls(calls_dir, source)
    for (p, o) in src:
        assert per[f"{source}/{p}/{o}"] == (3 if (p, o) in bad else 2 if (p, o) in flaky else 1), (p, o)
    for rec, hdrs in poison.values():
        assert (hdrs["antidote.attempts"], hdrs["antidote.cycle"], hdrs["antidote.reason"]) == (
            "3", "2", "max-attempts")
        assert hdrs["antidote.consumer"] == "tests/c"
    assert cu.metric(m, "antidote_messages_total", outcome="processed") == 500
    assert cu.metric(m, "antidote_messages_total", outcome="moved") == 100
    assert cu.metric(m, "antidote_messages_total", outcome="retried") == 200 + 100
    assert cu.metric(m, "antidote_attempts_total") == 400 + 100 * 2 + 100 * 3
    # The ledger accounts for every retry offset: each retry partition's position is its end
    # (past the last transaction's marker), committed with the batches' outcomes.
    state = load_state(kafka_bootstrap, ledger_names(s).topic)
    for topic in s.topics.retry:
        ends = _ends(kafka_bootstrap, topic, 2)
        assert {k: v for k, v in state.positions.items() if k.startswith(f"{topic}:")} == ends
