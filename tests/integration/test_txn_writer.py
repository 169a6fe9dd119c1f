"""The executor's transactional writer (worker.txn_writer): one process keeps the exactly-once
sink's producers for all of an executor's Python workers, so a partition moving between them
costs no fencing at the broker, while two of its tasks still cannot both commit the same
offsets, and attempts elsewhere are still fenced by the broker. A real writer process and a
real broker; a `sleep` process stands in for the executor's Python daemon it watches."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Producer

from antidote_api.names import sink_transactional_id
from antidote_consumer.kafka.sink_entries import SinkEntry, entry_key, read_entry
from antidote_consumer.worker import sink_txn, txn_writer
from antidote_consumer.worker.sink_txn import ExactlyOnce, PartitionSink
from .test_sink_fenced_mid_chunk import committed

pytestmark = pytest.mark.integration


@pytest.fixture
def daemon():
    proc = subprocess.Popen(["sleep", "3600"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _partition(topic_factory, sink_config: dict | None = None) -> tuple[str, str, ExactlyOnce]:
    """A sink topic, a ledger and partition src/0's exactly-once settings (fresh: the driver's
    copy of its entry is current, as in a running consumer)."""
    sink = topic_factory("-out", config=sink_config)
    ledger = topic_factory(".ledger", config={"cleanup.policy": "compact"})
    return sink, ledger, ExactlyOnce(ledger, f"antidote/tests/writer-{uuid.uuid4().hex[:6]}",
                                     fresh=frozenset({"src:0"}))


def _task(eos: ExactlyOnce, bootstrap: str, sink: str, client: txn_writer.Client, position: int) -> PartitionSink:
    """A task of partition src/0 in one of the executor's Python workers."""
    part = PartitionSink.open(eos, {"topic": sink, "bootstrap.servers": bootstrap}, "src", 0, retried_task=False)
    part._shared = client  # as in a Spark task (sink_txn.in_spark_task)
    part.position = part.start = position
    return part


def _outputs(part: PartitionSink, first: int, last: int) -> None:
    for offset in range(first, last):
        part.add(offset, None, b"%d" % offset, None)


def _stats(client: txn_writer.Client) -> dict:
    return client.call("stats")[1]


def test_a_partition_moving_between_the_executors_workers_costs_no_fencing_and_each_output_is_written_once(
        kafka_bootstrap, topic_factory, daemon) -> None:
    sink, ledger, eos = _partition(topic_factory)
    name = txn_writer.writer_name(daemon.pid)
    one, two = txn_writer.Client(name, daemon.pid), txn_writer.Client(name, daemon.pid)  # two workers
    # Six batches, the partition's task alternating between the two workers.
    for batch in range(6):
        part = _task(eos, kafka_bootstrap, sink, (one, two)[batch % 2], batch * 100)
        _outputs(part, batch * 100, batch * 100 + 100)
        assert part.commit(batch * 100 + 100) == SinkEntry(batch * 100 + 100)
        part.done()  # the task's end: its chunks committed
    assert _stats(one) == {"inits": 1, "producers": 1}  # one producer, initialized once
    values = committed(kafka_bootstrap, sink)
    assert sorted(values) == sorted(b"%d" % o for o in range(600))
    assert read_entry({"bootstrap.servers": kafka_bootstrap}, ledger, entry_key("src", 0)) == SinkEntry(600)


def test_two_tasks_of_one_partition_on_one_executor_cannot_both_commit_its_offsets(
        kafka_bootstrap, topic_factory, daemon) -> None:
    sink, ledger, eos = _partition(topic_factory)
    name = txn_writer.writer_name(daemon.pid)
    one, two = txn_writer.Client(name, daemon.pid), txn_writer.Client(name, daemon.pid)
    # A task that Spark gave up on, still running in one worker; its retry in the other.
    old = _task(eos, kafka_bootstrap, sink, one, 0)
    _outputs(old, 0, 50)
    assert old.commit(50) == SinkEntry(50)  # its first chunk, before the retry started
    old.done()
    _outputs(old, 50, 100)
    new = _task(eos, kafka_bootstrap, sink, two, 0)
    new.carried = SinkEntry(50)  # read from the ledger by the retry (retried_task)
    _outputs(new, 50, 100)
    assert new.commit(100) == SinkEntry(100)
    new.done()
    # The old task's next chunk is refused by the writer (the retry took the partition), and
    # the entry it reads then says another attempt committed its offsets: it stops.
    with pytest.raises(RuntimeError, match="another attempt committed offsets from 50 on"):
        old.commit(100)
        old.done()
    assert _stats(one)["inits"] == 1  # fenced without the broker
    values = committed(kafka_bootstrap, sink)
    assert sorted(values) == sorted(b"%d" % o for o in range(100))  # each once


def test_an_attempt_in_another_executor_fences_the_writer_through_the_broker(
        kafka_bootstrap, topic_factory, daemon) -> None:
    sink, ledger, eos = _partition(topic_factory)
    client = txn_writer.Client(txn_writer.writer_name(daemon.pid), daemon.pid)
    part = _task(eos, kafka_bootstrap, sink, client, 0)
    _outputs(part, 0, 100)
    assert part.commit(100) == SinkEntry(100)
    part.done()
    # Another executor's task of the partition (the next batch, there) commits 100-199.
    other = Producer({"bootstrap.servers": kafka_bootstrap,
                      "transactional.id": sink_transactional_id(eos.ledger_writer, "src", 0)})
    other.init_transactions(30)
    other.begin_transaction()
    for o in range(100, 200):
        other.produce(sink, b"%d" % o)
    other.produce(ledger, json.dumps(SinkEntry(200).to_json()).encode(), entry_key("src", 0).encode())
    other.commit_transaction(30)
    # The partition comes back to this executor: its writer's producer was fenced; the chunk
    # is written by a new one (which fences the other executor's) after the entry is read.
    part = _task(eos, kafka_bootstrap, sink, client, 200)
    _outputs(part, 200, 300)
    assert part.commit(300) == SinkEntry(300)
    part.done()
    assert _stats(client)["inits"] == 2
    assert sorted(committed(kafka_bootstrap, sink)) == sorted(b"%d" % o for o in range(300))


def test_a_chunk_sent_after_one_the_broker_refused_is_not_committed_either(
        kafka_bootstrap, topic_factory, daemon) -> None:
    """The task does not wait for a chunk's commit before it goes on and sends the next: if
    the first is refused, the second (whose entry passes over the first's offsets) must not be
    committed, or the first's outputs would be lost."""
    sink, ledger, eos = _partition(topic_factory, {"max.message.bytes": "2000"})
    client = txn_writer.Client(txn_writer.writer_name(daemon.pid), daemon.pid)
    part = _task(eos, kafka_bootstrap, sink, client, 0)
    _outputs(part, 0, 10)
    part.add(10, None, os.urandom(50_000), None)  # larger than the topic takes, compressed: refused
    with pytest.raises(RuntimeError, match="outputs not committed"):
        part.commit(11)
        _outputs(part, 11, 20)
        part.commit(20)  # sent before the first's refusal is read (it needs the broker)
        part.done()
    assert part.inflight and part.inflight[-1].entry == SinkEntry(20)  # it was sent, and not committed
    assert committed(kafka_bootstrap, sink) == []
    assert read_entry({"bootstrap.servers": kafka_bootstrap}, ledger, entry_key("src", 0)) is None


@pytest.mark.parametrize("shared", [False, True], ids=["process", "writer"])
def test_after_a_refused_chunk_the_partitions_next_task_commits(
        kafka_bootstrap, topic_factory, daemon, shared: bool) -> None:
    """A producer whose transaction was aborted for a refused record fails its next commit
    (OUT_OF_ORDER_SEQUENCE_NUMBER): it is made again, or every later task of the partition on
    that worker (or executor) would fail too."""
    sink, ledger, eos = _partition(topic_factory, {"max.message.bytes": "2000"})
    client = txn_writer.Client(txn_writer.writer_name(daemon.pid), daemon.pid)
    tid = sink_transactional_id(eos.ledger_writer, "src", 0)
    try:
        part = _task(eos, kafka_bootstrap, sink, client, 0)
        part._shared = client if shared else False
        part.add(0, None, os.urandom(50_000), None)
        with pytest.raises(RuntimeError, match="outputs not committed"):
            part.commit(1)
            part.done()
        part = _task(eos, kafka_bootstrap, sink, client, 0)  # Spark's retry, without the record
        part._shared = client if shared else False
        _outputs(part, 1, 11)
        part.pend(0)
        assert part.commit(11) == SinkEntry(11, frozenset({0}))
        part.done()
        assert sorted(committed(kafka_bootstrap, sink)) == sorted(b"%d" % o for o in range(1, 11))
    finally:
        sink_txn.forget(tid)


def _answers(name: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect("\0" + name)
        return True
    except ConnectionRefusedError:
        return False
    finally:
        s.close()


def test_the_writer_exits_with_its_executor(kafka_bootstrap, daemon) -> None:
    name = txn_writer.writer_name(daemon.pid)
    client = txn_writer.Client(name, daemon.pid)
    assert _stats(client) == {"inits": 0, "producers": 0}  # started by the first call
    daemon.kill()
    daemon.wait()
    deadline = time.monotonic() + 30
    while _answers(name):
        assert time.monotonic() < deadline, "the writer outlived its executor's daemon by 30 s"
        time.sleep(0.1)


PLAIN_PYTHON = "/usr/bin/python3"  # the stdlib is all the probe needs; /root's venv is root's
another_user = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(PLAIN_PYTHON),
                                  reason="another user's process needs root to make, and a python it may run")


@another_user
def test_another_users_process_is_not_answered(daemon) -> None:
    name = txn_writer.writer_name(daemon.pid)
    assert _stats(txn_writer.Client(name, daemon.pid))["inits"] == 0
    probe = (f"import socket, struct, marshal\ns = socket.socket(socket.AF_UNIX)\ns.connect('\\0{name}')\n"
             "d = marshal.dumps(('stats',))\n"
             # the writer may close before the probe has sent (a broken pipe) or read (a reset):
             # either way it was not answered
             "try:\n    s.sendall(struct.pack('!Q', len(d)) + d)\n    print(repr(s.recv(100)))\n"
             "except (BrokenPipeError, ConnectionResetError):\n    print(repr(b''))\n")
    out = subprocess.run([PLAIN_PYTHON, "-c", probe], capture_output=True, text=True, timeout=60,
                         user=65534, group=65534)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "b''"  # closed (or reset) without an answer


@another_user
def test_a_writer_name_held_by_another_users_process_is_refused_not_used(daemon) -> None:
    """An abstract socket name has no owner: another user's process on the executor's network
    namespace could take the writer's name first. A worker sends it nothing (its outputs) and
    reads nothing from it; the task fails naming the socket."""
    name = txn_writer.writer_name(daemon.pid)
    squatter = subprocess.Popen(
        [PLAIN_PYTHON, "-c", f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind('\\0{name}')\n"
                             "s.listen(8)\nprint('bound', flush=True)\nc, _ = s.accept()\n"
                             "print(repr(c.recv(100)), flush=True)\n"],
        stdout=subprocess.PIPE, text=True, user=65534, group=65534)
    try:
        assert squatter.stdout.readline().strip() == "bound"
        with pytest.raises(PermissionError, match="held by another user's process"):
            txn_writer.Client(name, daemon.pid).call("stats")
        assert squatter.stdout.readline().strip() == "b''"  # connected, then closed: nothing sent
    finally:
        squatter.kill()
        squatter.wait()
