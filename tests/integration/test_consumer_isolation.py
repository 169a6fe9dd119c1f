"""What isolating a crasher costs, counted by the consumer itself on the real stack."""

from __future__ import annotations

import math

from antidote_api.wire import ExitCode

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all


def test_one_crasher_in_a_batch_of_n_costs_at_most_rollbacks_plus_ceil_log2_n_plus_2(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    # 1,000 messages over 2 partitions, the crasher near the start of the batch's order
    # (partition 0, offset 3): there the left half fails at every level, which is where the
    # earlier bisection ran both halves (about 2 * log2 n re-executions; this test failed
    # with it).
    n, per_partition, culprit = 1000, 500, (0, 3)
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    for p in (0, 1):
        produce(kafka_bootstrap, source, [
            (b"k%d-%d" % (p, i), b"crash" if (p, i) == culprit else b"m%d-%d" % (p, i), None)
            for i in range(per_partition)], partition=p)
    s = cu.settings(kafka_bootstrap, source, tmp_path, handler="crash_on_crash", sink=sink,
                    max_batch=n, policy={"queueDisable": {"consecutiveBatchFailures": 2}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    rollbacks = cu.metric(m, "antidote_batch_failures_total")
    runs = cu.metric(m, "antidote_isolation_executions_total")
    assert rollbacks == 2
    # Re-executions of the batch or its parts after its first failure: the rollback's one,
    # then the bisection's.
    assert (rollbacks - 1) + runs <= rollbacks + math.ceil(math.log2(n)) + 2, runs
    assert 0 < runs <= math.ceil(math.log2(n)) + 2, runs
    # Only the crasher was quarantined, and every other message reached the sink.
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == {culprit}
    assert poison[culprit][1]["antidote.reason"] == "batch-isolation"
    for topic in (s.topics.dlq, *s.topics.retry):
        assert read_all(kafka_bootstrap, topic) == [], topic
    assert {r.value for r in read_all(kafka_bootstrap, sink)} == {
        b"m%d-%d" % (p, i) for p in (0, 1) for i in range(per_partition) if (p, i) != culprit}
    assert cu.metric(m, "antidote_messages_total", outcome="processed") == n - 1
    assert cu.metric(m, "antidote_consecutive_batch_failures") == 0
