"""Bisection across an outage that ends while it runs (issue 43, item 5): the runs made while
the sink was down say nothing about their messages, so no innocent message is dropped.
Real broker, real local Spark; the outage is a handler that kills its Python worker."""

from __future__ import annotations

from collections import Counter

from antidote_api.wire import ExitCode

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all


def test_an_outage_that_ends_during_the_bisection_drops_only_the_real_crasher(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir, caplog) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    # One batch of 8 messages; 5 kills its Python worker whenever it runs (a real culprit).
    values = {i: b"crash" if i == 5 else b"m%d" % i for i in range(8)}
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, None) for i, v in values.items()])
    # The sink is down for the first 8 handler calls, each the first of its run: the batch's
    # run and its rollback, then the bisection's [0..3], [0, 1], [0] (0 fails alone), what it
    # set aside, [1..7], then [1..3] and [1] (1 fails alone). It is back from the 9th run on.
    flag = calls_dir / f"{source}.outage"
    flag.write_text("8")
    s = cu.settings(kafka_bootstrap, source, tmp_path, handler="crash_during_outage", sink=sink,
                    name="outage", max_batch=8, policy={"retries": {"immediate": 0, "cycles": 0}, "disposition": "Drop",
                                         "queueDisable": {"consecutiveBatchFailures": 2}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    assert not flag.exists()  # the outage ended, where the test said
    # Only 5 is dropped: 0 and 1 failed alone while nothing succeeded, and succeeded when run
    # again after a part of the batch had (the old bisection dropped them: 3 dropped).
    assert cu.metric(m, "antidote_messages_total", outcome="dropped") == 1
    assert cu.metric(m, "antidote_messages_total", outcome="processed") == 7
    assert cu.metric(m, "antidote_batch_failures_total") == 2
    assert cu.metric(m, "antidote_consecutive_batch_failures") == 0
    cleared = [r.getMessage() for r in caplog.records if r.getMessage().startswith("not culprits")]
    assert cleared == [f"not culprits, they succeeded when run again: [('{source}', 0, 0), ('{source}', 0, 1)]"]
    (isolated,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("isolated ")]
    assert isolated.endswith(f": {source}/0/5"), isolated
    # Exact handler calls. After the outage: [2..7] fails on 5 (2, 3 and 4 ran), [2, 3, 4]
    # succeeds, [5] fails alone (after a success: a culprit), [6, 7] succeeds, then 0 and 1
    # alone again. A job that died on a stale Python worker ran none of its messages.
    calls = cu.calls(calls_dir, source)
    assert calls == Counter({f"{source}/0/{i}": n for i, n in
                             {0: 6, 1: 4, 2: 2, 3: 2, 4: 2, 5: 2, 6: 1, 7: 1}.items()}), calls
    stale = sum(1 for r in caplog.records if "failed on a stale Python worker" in r.getMessage())
    # [0..3] [0,1] [0] [1..7] [1..3] [1] [2..7] [2,3,4] [5] [6,7] [0] [1]
    assert cu.metric(m, "antidote_isolation_executions_total") == 12 + stale
    # Nothing quarantined (Drop), and every other message reached the sink exactly once
    # (read_committed): the run that died on 5 committed nothing, and the bisection's
    # outputs were written with the driver's settle, once.
    for topic in (s.topics.poison, s.topics.dlq):
        assert read_all(kafka_bootstrap, topic) == [], topic
    out = Counter(r.value for r in read_all(kafka_bootstrap, sink))
    assert out == Counter(v for i, v in values.items() if i != 5), out
