"""A consumer fenced by a newer instance mid-stream (issue 43): after some batches were
committed, while retry records wait in a retry topic, and while it is inside a batch that it
then finishes. `antidote consumer` as a process on the real broker; the newer instance is a
second writer with the consumer's transactional id, as a second driver would be."""

from __future__ import annotations

import os
import signal
from collections import Counter

from antidote_api.names import ledger_names
from antidote_api.wire import ExitCode
from antidote_consumer.driver.ledger import Ledger, load_state

from antidote_testkit import consumers as cu
from antidote_testkit.consumers import start
from .cut_short import Committed
from antidote_testkit.kafka_io import produce, read_all
from .test_consumer_process import exited, finish, wait_until


def test_a_consumer_fenced_mid_stream_exits_6_and_nothing_is_lost_or_written_twice(
        stack, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    n, gate = 300, 100
    produce(kafka_bootstrap, source, [
        (b"k%d" % i, b"poison" if i % 30 == 7 else b"m%d gate" % i if i == gate else b"m%d" % i, None)
        for i in range(n)])
    # Poison messages wait 20 s in retry-1: none is due before the fence.
    policy = {"retries": {"immediate": 1, "cycles": 1, "cycleDelay": "20s"}}
    # A name of its own: its transactional id is no other test's.
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=policy, name="fenced")
    names = ledger_names(s)
    args = cu.write_manifests(tmp_path, name="fenced", namespace="tests", bootstrap=kafka_bootstrap,
                              source=source, handler="tests.integration.handlers:gated_slow_upper",
                              policy=policy, sink=sink, max_batch=40)
    log = tmp_path / "consumer.log"
    src = {(r.partition, r.offset): r for r in read_all(kafka_bootstrap, source)}
    (at,) = [where for where, r in src.items() if b"gate" in r.value]
    held = calls_dir / f"{source}.gate"  # the batch holding message 100 waits while it exists
    held.touch()

    proc = start(stack, calls_dir, log, args, ANTIDOTE_TEST_DELAY="0.02")
    wait_until(lambda: cu.calls(calls_dir, source)[f"{source}/{at[0]}/{at[1]}"] == 1, 180, proc, log,
               "the batch holding message 100")
    newer = Ledger(kafka_bootstrap, names.topic, names.transactional_id)  # fences the running one
    try:
        at_fence = load_state(kafka_bootstrap, names.topic)
        parked = {topic: cu.quarantined(kafka_bootstrap, topic) for topic in s.topics.retry}
        # Mid-stream: batches committed, retry records written and not run yet.
        assert at_fence.committed_batch >= 1, at_fence.committed_batch
        retry1 = s.topics.retry[0]
        assert any(r.offset >= at_fence.positions.get(f"{retry1}:{r.partition}", 0)
                   for r in read_all(kafka_bootstrap, retry1)), "no retry record pending"

        # The zombie finishes its batch (the gate opens), and its commit is refused: it exits
        # 6, and nothing it wrote after the fence is committed.
        held.unlink()
        assert exited(proc, 120) == ExitCode.FENCED, log.read_text()[-3000:]
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its Spark JVM and workers, if any are left
        except ProcessLookupError:
            pass
        assert "newer instance" in log.read_text()
        after = load_state(kafka_bootstrap, names.topic)
        assert (after.positions, after.counts, after.committed_batch) == (
            at_fence.positions, at_fence.counts, at_fence.committed_batch)
        assert {t: cu.quarantined(kafka_bootstrap, t).keys() for t in s.topics.retry} == {
            t: parked[t].keys() for t in s.topics.retry}
        assert read_all(kafka_bootstrap, s.topics.poison, missing_ok=True) == []
        before = Committed.read(kafka_bootstrap, s, sink, calls_dir, list(src))
    finally:
        newer.close()
    # The zombie's executors committed their partitions' outputs after the driver was fenced,
    # message 100's among them (an exactly-once sink's transactions are each partition's own:
    # the successor's tasks fence those ids, and pass over what the entries cover).
    assert before.outputs[src[at].value.upper()] == 1

    # The newer instance (here: the same command again) runs everything left, once.
    finish(stack, calls_dir, log, args)

    bad = {k for k, r in src.items() if r.value == b"poison"}
    assert len(bad) == 10
    for topic in s.topics.retry:
        assert set(cu.quarantined(kafka_bootstrap, topic)) == bad, topic  # each once per cycle
    poison = cu.quarantined(kafka_bootstrap, s.topics.poison)
    assert set(poison) == bad
    assert {h["antidote.attempts"] for _, h in poison.values()} == {"4"}  # (1 + 1) x (1 + 1)
    assert read_all(kafka_bootstrap, s.topics.dlq, missing_ok=True) == []
    calls = cu.calls(calls_dir, source)
    assert {w: calls[f"{source}/{w[0]}/{w[1]}"] for w in src} == {
        w: before.expected_calls(s, w, w in bad) for w in src}
    outputs = Counter(r.value for r in read_all(kafka_bootstrap, sink))
    assert outputs == before.expected_outputs({w: r.value.upper() for w, r in src.items() if w not in bad})
    assert outputs[src[at].value.upper()] == 1  # the zombie's, passed over by its successor
    assert set(outputs.values()) == {1}  # every output exactly once
    state = load_state(kafka_bootstrap, names.topic)
    assert state.counts == {"processed": n - 10, "retried": 10, "moved": 10, "rejected": 0, "dropped": 0}
