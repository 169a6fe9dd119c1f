"""An exactly-once Kafka sink under the worst kill (docs/consumer.md, "Exactly-once to a Kafka
sink"): `antidote consumer` as a process, SIGKILLed while one partition's task of a batch has
committed its outputs and the other's is held mid-way, with poison and flaky messages in
their retry cycles; then its checkpoint is lost, and a new run finishes. A read_committed
reader of the sink sees every processed message's output exactly once, the poison ones are
quarantined once, and the ledger's counts are exact."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest

from antidote_api.names import ledger_topic
from antidote_consumer.driver.ledger import load_state
from antidote_consumer.kafka import headers as h

from antidote_testkit import consumers as cu
from antidote_testkit.consumers import start
from antidote_testkit.kafka_io import produce, read_all
from .cut_short import abort_open_transaction
from .test_consumer_process import exited, kill9, wait_until

POLICY = {"retries": {"immediate": 0, "cycles": 2, "cycleDelay": "2s"}}
# No retry cycle: a poison message's record is its disposition's, written by the task that
# failed it (worker.task_settle); a flaky one succeeds at its immediate retry.
FINALS = {"retries": {"immediate": 1, "cycles": 0}}


def value(i: int, gate: int, poison_every: int = 40) -> bytes:
    if i % poison_every == 7:
        return b"poison %d" % i
    if i % 25 == 3:
        return b"m%d flaky-1" % i  # fails its first delivery, succeeds in retry cycle 1
    return b"m%d gate" % i if i == gate else b"m%d" % i


@pytest.mark.parametrize("settled", ["retried", "final"])
def test_sigkill_between_the_tasks_commits_and_the_drivers_then_a_lost_checkpoint_writes_each_output_once(
        stack, kafka_bootstrap, topic_factory, tmp_path, calls_dir, settled) -> None:
    source, sink = topic_factory(partitions=2), topic_factory("-out")
    n, gate = 240, 150
    # Final failures: poison in every partition's share of a batch of 40, so the task not
    # held commits some with its chunk while the other is held.
    every = 40 if settled == "retried" else 8
    produce(kafka_bootstrap, source, [(b"k%d" % i, value(i, gate, every), None) for i in range(n)])
    policy = POLICY if settled == "retried" else FINALS
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=policy, name="eos")
    args = cu.write_manifests(tmp_path, name="eos", namespace="tests", bootstrap=kafka_bootstrap, source=source,
                              handler="tests.integration.handlers:gated_flaky_upper", policy=policy,
                              sink=sink, max_batch=40)
    log = tmp_path / "consumer.log"
    src = {(r.partition, r.offset): r for r in read_all(kafka_bootstrap, source)}
    (at,) = [where for where, r in src.items() if b"gate" in r.value]
    held = calls_dir / f"{source}.gate"
    held.touch()
    ledger = ledger_topic(source, s.namespace, s.consumer)

    proc = start(stack, calls_dir, log, args, ANTIDOTE_TEST_DELAY="0.01")

    def between_commits() -> bool:
        # The held batch has begun, earlier failures wait in retry-1 (or poison), and an
        # executor has committed outputs and failures' records it settled itself (its ledger
        # entry ahead of the position, with settled offsets past it) that the driver has not.
        if not cu.calls(calls_dir, source)[f"{source}/{at[0]}/{at[1]}"]:
            return False
        first = s.topics.retry[0] if settled == "retried" else s.topics.poison
        if not read_all(kafka_bootstrap, first, missing_ok=True):
            return False
        state = load_state(kafka_bootstrap, ledger)
        return any(e.next > state.positions.get(k, 0) and max(
            e.retried if settled == "retried" else [o for _, offsets in e.final for o in offsets],
            default=-1) >= state.positions.get(k, 0) for k, e in state.sink.items() if k.startswith(f"{source}:"))
    wait_until(between_commits, 180, proc, log, f"a task's commit with its {settled} ahead of the driver's")
    kill9(proc)
    held.unlink()
    lost_checkpoint_then_each_output_once(stack, kafka_bootstrap, tmp_path, calls_dir, log, args, s, sink, src,
                                          settled)



def test_a_task_of_several_partitions_commits_each_as_it_moves_on_and_a_sigkill_then_a_lost_checkpoint_writes_each_output_once(
        stack, kafka_bootstrap, topic_factory, tmp_path, calls_dir) -> None:
    """spark.antidote.tasksPerCore 1 on local[2]: 6 source partitions, read by 2 tasks of 3 a
    batch. A task commits each partition it moves on from before it ends: both tasks are
    held at their second partition of the third batch, and the first one's outputs are
    committed (its entry ahead of the driver's position) while the other partitions' are not.
    Killed there, with poison and flaky messages in retry cycles, and the checkpoint lost: a
    new run writes every output once."""
    parts, per, batch = 6, 30, 10  # batches of 10 messages a partition
    source, sink = topic_factory(partitions=parts), topic_factory("-out")
    for p in range(parts):
        produce(kafka_bootstrap, source, [(b"k%d" % i, value(i, -1), None)
                                          for i in range(p * per, (p + 1) * per)], partition=p)
    s = cu.settings(kafka_bootstrap, source, tmp_path, policy=POLICY, name="eos-tasks")
    args = cu.write_manifests(tmp_path, name="eos-tasks", namespace="tests", bootstrap=kafka_bootstrap,
                              source=source, handler="tests.integration.handlers:task_gated_flaky_upper",
                              policy=POLICY, sink=sink, max_batch=parts * batch,
                              extra={"spark": {"conf": {"spark.antidote.tasksPerCore": "1"}}})
    log = tmp_path / "consumer.log"
    src = {(r.partition, r.offset): r for r in read_all(kafka_bootstrap, source)}
    held = calls_dir / f"{source}.gate"
    held.touch()
    ledger = ledger_topic(source, s.namespace, s.consumer)

    def lines(suffix: str) -> list[tuple[int, int, str]]:
        path = calls_dir / f"{source}{suffix}"
        return [(int(p), int(o), t) for p, o, t in (x.split() for x in path.read_text().splitlines())] \
            if path.exists() else []

    proc = start(stack, calls_dir, log, args, ANTIDOTE_TEST_DELAY="0.01", ANTIDOTE_TEST_GATE_FROM=str(2 * batch))
    first: dict[str, set[int]] = {}  # gated task -> the partitions it read before (one)

    def both_held_after_one_partition() -> bool:
        gated = lines(".gated")
        if len(gated) < 2 or not read_all(kafka_bootstrap, s.topics.retry[0], missing_ok=True):
            return False
        for p, _, task in gated:
            first[task] = {q for q, o, t in lines(".tasks") if t == task and o >= 2 * batch and q != p}
        state = load_state(kafka_bootstrap, ledger)
        ahead = {int(k.rsplit(":", 1)[1]) for k, e in state.sink.items()
                 if k.startswith(f"{source}:") and e.next > state.positions.get(k, 0)}
        return ahead == set().union(*first.values())
    wait_until(both_held_after_one_partition, 180, proc, log, "both tasks held, their first partitions committed")
    kill9(proc)
    held.unlink()
    assert sorted(map(len, first.values())) == [1, 1] and len(set().union(*first.values())) == 2, first
    lost_checkpoint_then_each_output_once(stack, kafka_bootstrap, tmp_path, calls_dir, log, args, s, sink, src)


def lost_checkpoint_then_each_output_once(stack, kafka_bootstrap, tmp_path, calls_dir, log, args, s, sink,
                                          src: dict, settled: str = "retried") -> None:
    """After the kill: what the killed run committed is there once; its checkpoint is lost and
    a new run finishes. A read_committed reader of the sink sees every processed message's
    output once, each poison message is quarantined once, and the ledger's counts are exact."""
    abort_open_transaction(kafka_bootstrap, s)
    committed_before = Counter(r.value for r in read_all(kafka_bootstrap, sink))
    assert committed_before and max(committed_before.values()) == 1
    shutil.rmtree(tmp_path / "ckpt")  # the checkpoint is lost: the ledger alone says where to start

    proc = start(stack, calls_dir, log, [*args, "--until-idle"])
    assert exited(proc, 300) == 0, log.read_text()[-3000:]

    poison = {w for w, r in src.items() if r.value.startswith(b"poison")}
    assert set(cu.quarantined(kafka_bootstrap, s.topics.poison)) == poison  # fails on a duplicate
    outputs = Counter(r.value for r in read_all(kafka_bootstrap, sink))
    expected = Counter(r.value.upper() for w, r in src.items() if w not in poison)
    assert outputs == expected, {v: c for v, c in outputs.items() if c != 1}
    state = load_state(kafka_bootstrap, ledger_topic(s.source.topic, s.namespace, s.consumer))
    flaky = sum(1 for r in src.values() if b"flaky-1" in r.value)
    retried = flaky + 2 * len(poison) if settled == "retried" else 0
    assert state.counts == {"processed": len(src) - len(poison), "retried": retried,
                            "moved": len(poison), "rejected": 0, "dropped": 0}
    # Each retry record once, whoever wrote it: the tasks, with their chunks, the retries the
    # breaker said yes to (worker.task_settle; their entries say so), the driver the others.
    retries = Counter()
    for topic in s.topics.retry:
        for r in read_all(kafka_bootstrap, topic, missing_ok=True):
            st = h.retry_state(r.headers)
            retries[(st.origin.partition, st.origin.offset, st.cycle)] += 1
    assert max(retries.values(), default=1) == 1 and sum(retries.values()) == retried
    assert any(task_settled(r, settled) for r in read_all(kafka_bootstrap, ledger_topic(
        s.source.topic, s.namespace, s.consumer)))


def task_settled(r, settled: str) -> bool:
    """A ledger record that is a task's entry with failures it settled itself (`settled`:
    "retried" or "final")."""
    return bool(r.key and r.key.startswith(b"sink:") and r.value and json.loads(r.value).get(settled))
