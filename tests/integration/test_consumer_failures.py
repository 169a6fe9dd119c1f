"""Failures bigger than one message: Fault, systemic failure, batches that crash the worker."""

from __future__ import annotations

from collections import Counter

from antidote_api.wire import ExitCode

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all


def test_fault_stops_at_the_poison_message_and_leaves_it_unconsumed(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(None, b"m%d" % i if i != 5 else b"poison", None)
                                      for i in range(10)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, sink=sink, policy={
        "retries": {"immediate": 1, "cycles": 0}, "disposition": "Fault"})

    code, m = cu.run(spark, s)

    assert code == ExitCode.FAULT
    assert cu.metric(m, "antidote_queue_disabled", reason="Fault") == 1
    # Nothing at or after the poison message was processed; nothing was quarantined.
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == [b"M%d" % i for i in range(5)]
    assert read_all(kafka_bootstrap, s.topics.poison) == []
    # Where it stopped, for the operator's status and on-call (never the payload).
    assert cu.metric(m, "antidote_last_poison_timestamp_seconds", reason="max-attempts",
                     error_class="ValueError", topic=source) > 0
    assert (cu.metric(m, "antidote_last_poison_partition"), cu.metric(m, "antidote_last_poison_offset")) == (0, 5)
    # It stays unconsumed: a resumed consumer stops at the same message again.
    code, m = cu.run(spark, cu.resumed(s))
    assert code == ExitCode.FAULT
    assert cu.metric(m, "antidote_messages_total", outcome="processed") == 0


def test_systemic_failure_quarantines_nothing_and_leaves_the_batch_unconsumed(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(None, b"m%d" % i, None) for i in range(150)])
    policy = {"retries": {"immediate": 1, "cycles": 1, "cycleDelay": "1s"},
              "queueDisable": {"failureRatio": {"threshold": 0.5, "window": "5m", "minMessages": 100}}}
    down = cu.settings(kafka_bootstrap, source, tmp_path, handler="downstream_down", sink=sink,
                       policy=policy)

    code, m = cu.run(spark, down)

    assert code == ExitCode.SYSTEMIC_FAILURE
    assert cu.metric(m, "antidote_queue_disabled", reason="SystemicFailure") == 1
    for topic in (down.topics.poison, down.topics.dlq, *down.topics.retry, sink):
        assert read_all(kafka_bootstrap, topic) == [], topic
    # A restart alone (a kubelet restarting the container) leaves the queue disabled and the
    # batch unconsumed, even with the downstream service back.
    up = cu.settings(kafka_bootstrap, source, tmp_path, handler="upper", sink=sink, policy=policy)
    code, m = cu.run(spark, up)
    assert code == ExitCode.SYSTEMIC_FAILURE
    assert cu.metric(m, "antidote_queue_disabled", reason="SystemicFailure") == 1
    assert read_all(kafka_bootstrap, sink) == []
    # Resumed, every message is still there to process.
    code, m = cu.run(spark, cu.resumed(up))
    assert code == ExitCode.OK
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == sorted(
        b"M%d" % i for i in range(150))


def test_a_message_that_crashes_the_worker_is_isolated_by_bisection(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    source, sink = topic_factory(), topic_factory("-out")
    n = 400
    produce(kafka_bootstrap, source, [(b"k%d" % i, b"crash" if i == 137 else b"m%d" % i, None)
                                      for i in range(n)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, handler="crash_on_crash", sink=sink,
                    max_batch=n, policy={"queueDisable": {"consecutiveBatchFailures": 2}})

    code, m = cu.run(spark, s)

    assert code == ExitCode.OK
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == {(0, 137)}
    rec, hdrs = poison[(0, 137)]
    assert rec.value == b"crash" and rec.key == b"k137"
    assert hdrs["antidote.reason"] == "batch-isolation"
    assert hdrs["antidote.error.class"] == "antidote.BatchFailure"
    # Every other message reached the sink, exactly once (read_committed): the tasks that died
    # committed nothing, and the bisection's outputs were written with the driver's settle.
    assert Counter(r.value for r in read_all(kafka_bootstrap, sink)) == Counter(
        b"m%d" % i for i in range(n) if i != 137)
    assert cu.metric(m, "antidote_batch_failures_total") == 2
    assert 0 < cu.metric(m, "antidote_isolation_executions_total") <= 2 * 9 + 1
    assert cu.metric(m, "antidote_consecutive_batch_failures") == 0


def test_a_batch_that_always_fails_disables_the_queue(spark, kafka_bootstrap, topic_factory,
                                                      tmp_path) -> None:
    source = topic_factory()
    produce(kafka_bootstrap, source, [(None, b"crash", None)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, handler="crash_on_crash",
                    policy={"queueDisable": {"consecutiveBatchFailures": 2}})
    code, m = cu.run(spark, s)
    assert code == ExitCode.CONSECUTIVE_BATCH_FAILURES
    assert cu.metric(m, "antidote_queue_disabled", reason="ConsecutiveBatchFailures") == 1
    # A lone message that fails on its own is not blamed: nothing else proves the
    # environment works, so nothing is quarantined.
    assert read_all(kafka_bootstrap, s.topics.poison) == []


def test_a_driver_that_dies_in_every_batch_disables_the_queue_on_restart(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    from antidote_consumer.driver.ledger import Ledger
    from antidote_api.names import ledger_topic

    source, sink = topic_factory(), topic_factory()
    produce(kafka_bootstrap, source, [(None, b"m%d" % i, None) for i in range(5)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, sink=sink,
                    policy={"queueDisable": {"consecutiveBatchFailures": 2}})
    code, _ = cu.run(spark, s)  # creates the ledger, processes the 5 messages
    assert code == ExitCode.OK
    produce(kafka_bootstrap, source, [(None, b"late", None)])
    # What two driver crashes inside batch 7 leave in the ledger: started > committed, and
    # one failure already counted by the first restart.
    ledger = Ledger(kafka_bootstrap, ledger_topic(source, s.namespace, s.consumer), "antidote-test-crashloop")
    state = ledger.load()
    state.started_batch, state.in_batch, state.consecutive_failures = state.committed_batch + 1, True, 1
    ledger.commit(state, keys=("batch",))
    ledger.close()

    code, m = cu.run(spark, s)
    assert code == ExitCode.CONSECUTIVE_BATCH_FAILURES
    assert cu.metric(m, "antidote_queue_disabled", reason="ConsecutiveBatchFailures") == 1
    assert cu.metric(m, "antidote_consecutive_batch_failures") == 2
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == [b"M%d" % i for i in range(5)]


def test_skip_moves_the_fault_message_to_poison_and_a_restart_goes_past_it(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    import pytest

    from antidote_consumer.kafka import headers as h
    from antidote_consumer.reader.skip import SkipError, skip_fault

    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(b"k%d" % i, b"m%d" % i if i != 5 else b"poison", [("trace", b"t%d" % i)])
                                      for i in range(10)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, sink=sink, policy={
        "retries": {"immediate": 1, "cycles": 0}, "disposition": "Fault"})
    code, _ = cu.run(spark, s)
    assert code == ExitCode.FAULT

    assert skip_fault(s, dry_run=True).offset == 5
    assert read_all(kafka_bootstrap, s.topics.poison) == []  # a dry run changes nothing
    skipped = skip_fault(s)
    assert (skipped.topic, skipped.partition, skipped.offset, skipped.reason) == (source, 0, 5, "max-attempts")
    (q,) = read_all(kafka_bootstrap, s.topics.poison)
    assert (q.key, q.value) == (b"k5", b"poison")
    hdrs = dict(q.headers)
    assert hdrs["trace"] == b"t5" and hdrs[h.ORIGINAL_OFFSET] == b"5" and h.SKIPPED_AT in hdrs
    assert hdrs[h.ATTEMPTS] == b"2" and hdrs[h.ERROR_CLASS] == b"ValueError"

    code, m = cu.run(spark, cu.resumed(s))  # the resume: past the skipped message, everything else
    assert code == ExitCode.OK
    assert {r.value for r in read_all(kafka_bootstrap, sink)} == {b"M%d" % i for i in range(10) if i != 5}
    assert len(read_all(kafka_bootstrap, s.topics.poison)) == 1
    assert cu.metric(m, "antidote_messages_total", outcome="moved") == 1
    with pytest.raises(SkipError, match="not stopped at a poison message"):
        skip_fault(s)


def test_a_fenced_ledger_says_so_and_never_writes_again(kafka_bootstrap, topic_factory) -> None:
    import copy

    import pytest

    from antidote_consumer.driver.ledger import Ledger, LedgerFenced, load_state

    ledger_topic, poison = topic_factory("-ledger", config={"cleanup.policy": "compact"}), topic_factory("-poison")
    tid = f"antidote-test-{ledger_topic}"
    old = Ledger(kafka_bootstrap, ledger_topic, tid)
    first = copy.deepcopy(old.load())
    first.committed_batch = 1
    old.commit(first, keys=("batch",))

    newer = Ledger(kafka_bootstrap, ledger_topic, tid)  # a second driver of the same consumer
    second = copy.deepcopy(first)
    second.committed_batch = 2
    # Before, the zombie's failed abort hid why: "Conflicting commit_transaction API call is
    # already in progress", and every later batch failed the same way.
    with pytest.raises(LedgerFenced, match=f"newer instance.*{tid}"):
        old.commit(second, [(poison, None, b"k", b"v", [])], keys=("batch",))
    assert old.state.committed_batch == 1
    with pytest.raises(LedgerFenced):
        old.commit(second, keys=("batch",))

    assert read_all(kafka_bootstrap, poison) == []
    assert load_state(kafka_bootstrap, ledger_topic).committed_batch == 1
    newer.load()
    newer.commit(second, keys=("batch",))
    newer.close()
    assert load_state(kafka_bootstrap, ledger_topic).committed_batch == 2


def test_consumers_whose_names_join_alike_do_not_fence_each_other(kafka_bootstrap, topic_factory) -> None:
    """`team-a/orders` and `team/a-orders` both joined to "team-a-orders" once, so the second
    to start fenced the first, for good."""
    import copy

    from antidote_api.names import transactional_id
    from antidote_consumer.driver.ledger import Ledger, load_state

    ledgers = {}
    for namespace, name in (("team-a", "orders"), ("team", "a-orders")):
        topic = topic_factory(f"-{namespace}", config={"cleanup.policy": "compact"})
        ledgers[topic] = Ledger(kafka_bootstrap, topic, transactional_id(namespace, name))
    assert len({ledger.transactional_id for ledger in ledgers.values()}) == 2
    for batch in (1, 2):  # both running at once, each committing in turn
        for ledger in ledgers.values():
            state = copy.deepcopy(ledger.state)
            state.committed_batch = batch
            ledger.commit(state, keys=("batch",))
    for topic, ledger in ledgers.items():
        ledger.close()
        assert load_state(kafka_bootstrap, topic).committed_batch == 2


def test_a_consumer_fenced_by_a_newer_instance_exits_6_and_loses_nothing(
        spark, kafka_bootstrap, topic_factory, tmp_path) -> None:
    from antidote_api.names import transactional_id
    from antidote_consumer.driver.ledger import Ledger, load_state

    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(None, b"m%d" % i if i != 3 else b"poison", None) for i in range(6)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, sink=sink,
                    policy={"retries": {"immediate": 0, "cycles": 0}})
    newer: list = []

    def take_over(consumer) -> None:  # right after the first driver has loaded its ledger
        newer.append(Ledger(kafka_bootstrap, consumer.runtime.ledger.topic,
                            transactional_id(s.namespace, s.consumer)))

    code, m = cu.run(spark, s, recovered=take_over, deadline=120)
    newer[0].close()

    assert code == ExitCode.FENCED
    # The zombie committed nothing: no quarantine record, no batch, no counts.
    assert read_all(kafka_bootstrap, s.topics.poison) == []
    state = load_state(kafka_bootstrap, newer[0].topic)
    assert (state.committed_batch, state.counts["processed"], state.counts["moved"]) == (-1, 0, 0)
    assert cu.metric(m, "antidote_poison_messages_total", reason="max-attempts", disposition="Move") == 0

    code, m = cu.run(spark, s)  # the newer instance's run: everything, once

    assert code == ExitCode.OK
    assert set(cu.quarantined(kafka_bootstrap, s.topics.poison)) == {(0, 3)}
    assert load_state(kafka_bootstrap, newer[0].topic).counts["processed"] == 5


def test_a_handler_that_hangs_times_out_and_the_message_follows_its_policy(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    """Each attempt on the hanging message ends at attemptTimeout with antidote.AttemptTimeout,
    in the Spark worker (first delivery) and in the local worker (the retry cycle):
    (immediate + 1) x (cycles + 1) = 4 attempts, then poison; the others are processed."""
    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(b"k%d" % i, b"hang" if i == 3 else b"m%d" % i, None)
                                      for i in range(8)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, handler="hang_on_hang", sink=sink, policy={
        "retries": {"immediate": 1, "cycles": 1, "cycleDelay": "1s", "attemptTimeout": "1s"}})

    code, m = cu.run(spark, s, deadline=120)

    assert code == ExitCode.OK
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == {(0, 3)}
    rec, hdrs = poison[(0, 3)]
    assert (rec.key, rec.value) == (b"k3", b"hang")
    assert hdrs["antidote.error.class"] == "antidote.AttemptTimeout"
    assert hdrs["antidote.reason"] == "max-attempts" and hdrs["antidote.attempts"] == "4"
    assert "attemptTimeout" in hdrs["antidote.error.message"]
    assert cu.calls(calls_dir, source)[f"{source}/0/3"] == 4
    assert sorted(r.value for r in read_all(kafka_bootstrap, sink)) == sorted(
        b"M%d" % i for i in range(8) if i != 3)
    assert cu.metric(m, "antidote_batch_failures_total") == 0  # a failure of one message only


def test_a_handler_that_does_not_unwind_ends_its_worker_and_is_isolated(
        spark, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    """One that swallows the timeout too: its Python worker ends itself after the grace, the
    batch fails as a whole, and the rollbacks and bisection isolate the message."""
    source, sink = topic_factory(), topic_factory("-out")
    produce(kafka_bootstrap, source, [(b"k%d" % i, b"hang" if i == 2 else b"m%d" % i, None)
                                      for i in range(6)])
    s = cu.settings(kafka_bootstrap, source, tmp_path, handler="stubborn_on_hang", sink=sink, policy={
        "retries": {"immediate": 0, "cycles": 0, "attemptTimeout": "1s"},
        "queueDisable": {"consecutiveBatchFailures": 1}})

    code, m = cu.run(spark, s, deadline=180)

    assert code == ExitCode.OK
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == {(0, 2)}
    _, hdrs = poison[(0, 2)]
    assert (hdrs["antidote.reason"], hdrs["antidote.error.class"]) == ("batch-isolation",
                                                                       "antidote.BatchFailure")
    assert {r.value for r in read_all(kafka_bootstrap, sink)} == {b"M%d" % i for i in range(6) if i != 2}
    assert cu.metric(m, "antidote_batch_failures_total") == 1
