"""The ledger's whole-topic readers (the driver's load_state at every start, a task's
read_entry after a restart or a failed job) end at the log's end without waiting there for
more: librdkafka's default fetch.wait.max.ms held each scan 0.5 s at the end
(benchmarks/partition_scale.py: a new driver's first batch paid it once per source partition)."""

from __future__ import annotations

from antidote_consumer.kafka.sink_entries import SCAN_FETCH_WAIT_MS, scan_conf


def test_a_ledger_scan_reads_committed_records_to_the_end_without_waiting_there() -> None:
    conf = scan_conf({"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL",
                      "sasl.username": "u", "fetch.wait.max.ms": 500}, "t.ledger-ns.c-loader")
    assert conf["fetch.wait.max.ms"] == SCAN_FETCH_WAIT_MS <= 50  # librdkafka's default: 500
    assert conf["isolation.level"] == "read_committed" and conf["enable.partition.eof"] is True
    assert conf["enable.auto.commit"] is False and conf["group.id"] == "t.ledger-ns.c-loader"
    # The source's client settings (its credentials) are kept.
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.username"] == "u"
    assert conf["bootstrap.servers"] == "b:9092"
