"""One process per executor that owns the exactly-once sink's transactional producers
(docs/consumer.md, "Exactly-once to a Kafka sink"; worker.sink_txn).

Why a process of its own: a partition's transactional id is what fences its older attempts,
so only one producer may hold it. When each Python worker kept its own producers, Spark gave
a partition's next task to whichever worker of the executor was free, and the worker that
got it back found its producer fenced by its sibling: a failed chunk, a new producer
(`init_transactions`, 60-140 ms), a read of the partition's entry, the chunk again (548
fencings in one benchmark run; docs/scaling.md). Here the executor's workers send their
chunks to one writer, which keeps one producer per partition for as long as the executor
lives: a partition moving between workers costs nothing.

What the broker's fencing did between sibling workers, the writer does itself: each task
takes a partition's id with a token of its own (`take`), and a commit whose token is no
longer the partition's owner's is refused as fenced, without a round trip. A task whose
partition was taken from it then takes it back and reads the entry, as after a broker
fence (sink_txn.PartitionSink._take_back). Attempts in other executors (or a dead driver's)
are still fenced by the broker: the writer's producer for the id is made again, fencing
them, when a commit says it was fenced, and whenever it is first made.

The writer listens on an abstract Unix socket named for the executor's Python daemon (the
workers' parent: its pid and start time), answers only its own user (SO_PEERCRED), and
exits once that daemon is gone. A task killed while the writer commits its chunk leaves the
chunk committed with its entry (the replay passes over it), as if it had died just after.

Run as `python -m antidote_consumer.worker.txn_writer <name> <daemon pid>`; started by the
first worker that needs it (`client()`)."""

from __future__ import annotations

import marshal
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from . import sink

# A chunk's transaction: writing it and committing, far above what a chunk takes (the
# broker's transaction.max.timeout.ms, 15 minutes by default, allows it). For the writer's
# producers and those a process keeps itself (sink_txn) alike.
TRANSACTION_TIMEOUT_MS = 60_000
COMMIT_TIMEOUT_S = 60.0
INIT_STEP_S = 0.05  # init_transactions is called again after this (see init_producer)
START_TIMEOUT_S = 30.0  # a new writer answers within this, or the task fails
WATCH_S = 1.0  # how often the writer checks that its executor's daemon still runs
_LEN = struct.Struct("!Q")


# Requests and replies are marshalled, not pickled: a chunk is lists of bytes (and headers'
# tuples of str and bytes), which marshal writes ~5x faster (0.07 against 0.40 us an output,
# measured); both ends run the same interpreter, and unlike pickle it runs no code when read.
def _send(conn: socket.socket, obj: Any) -> None:
    data = marshal.dumps(obj)
    conn.sendall(_LEN.pack(len(data)))  # apart: a chunk's megabytes are not copied to prefix it
    conn.sendall(data)


def _recv(conn: socket.socket) -> Any:
    head = _exact(conn, _LEN.size)
    return marshal.loads(_exact(conn, _LEN.unpack(head)[0]))


def _exact(conn: socket.socket, n: int) -> bytearray:
    """`n` bytes, read into one buffer (no copy per piece)."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = conn.recv_into(view[got:], n - got)
        if not k:
            raise ConnectionError("the transactional writer closed the connection")
        got += k
    return buf


def _start_time(pid: int) -> str:
    """A process's start time (clock ticks since boot): with its pid, a name no later process
    reuses."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[19].decode()


def writer_name(daemon: int) -> str:
    return f"antidote-txn-{os.getuid()}-{daemon}-{_start_time(daemon)}"


def _peer_uid(conn: socket.socket) -> int:
    return struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]


# -- the writer -------------------------------------------------------------------------

def _error(err) -> tuple:
    return (err.code(), err.str(), err.fatal(), err.retriable(), err.txn_requires_abort())


class Writer:
    def __init__(self) -> None:
        self.producers: dict[str, Any] = {}
        self.owners: dict[str, str] = {}
        self.locks: dict[str, threading.Lock] = {}
        self.guard = threading.Lock()
        self.inits = 0  # producers made (each fences its id's holders elsewhere): "stats"
        # Tokens one of whose chunks was not committed: their later chunks (already sent, the
        # task not waiting) are refused too, so no entry passes over the missing one's offsets.
        self.broken: set[str] = set()

    def lock(self, tid: str) -> threading.Lock:
        with self.guard:
            return self.locks.setdefault(tid, threading.Lock())

    def take(self, tid: str, conf: dict, token: str) -> tuple:
        with self.lock(tid):
            if tid not in self.producers:
                self.producers[tid] = init_producer(conf, tid)  # fences the id's holders elsewhere
                self.inits += 1
            self.owners[tid] = token
        return ("ok",)

    def commit(self, tid: str, token: str, sink_topic: str, records: tuple, ledger_topic: str,
               key: bytes, entry: bytes, extra: list | tuple = ()) -> tuple:
        from confluent_kafka import KafkaError, KafkaException

        with self.lock(tid):
            p = self.producers.get(tid)
            if token in self.broken:
                return ("err", (KafkaError._FENCED, "an earlier chunk of this task was not committed",
                                False, False, False))
            if p is None or self.owners.get(tid) != token:
                self.broken.add(token)
                return ("err", (KafkaError._FENCED, "another task of this executor took the partition",
                                False, False, False))
            try:
                p.begin_transaction()
                sink.produce_all(p, sink_topic, records)
                sink.produce_records(p, extra)  # the task's failure records (task_settle)
                p.produce(ledger_topic, entry, key)
                p.commit_transaction(COMMIT_TIMEOUT_S)
            except KafkaException as err:
                self.broken.add(token)
                self._refused(tid, err.args[0])
                return ("err", _error(err.args[0]))
        return ("ok",)

    def _refused(self, tid: str, err) -> None:
        """The chunk is not committed: its transaction is aborted, and its producer is made
        again by the next `take` (after an abort for a refused record, librdkafka's next
        commit fails with OUT_OF_ORDER_SEQUENCE_NUMBER; one fenced is of no use either)."""
        p = self.producers.pop(tid)
        try:
            if err.txn_requires_abort():
                p.abort_transaction(COMMIT_TIMEOUT_S)  # ended now, not at its timeout
        except Exception:  # noqa: BLE001, S110 - the next producer's init fences it anyway
            pass

    def serve(self, conn: socket.socket) -> None:
        with conn:
            if _peer_uid(conn) != os.getuid():
                return  # another user's process on this network namespace
            while True:
                try:
                    op, *args = _recv(conn)
                except (ConnectionError, OSError):
                    return
                reply: tuple
                try:
                    if op == "stats":
                        reply = ("ok", {"inits": self.inits, "producers": len(self.producers)})
                    else:
                        reply = self.take(*args) if op == "take" else self.commit(*args)
                except Exception as err:  # noqa: BLE001 - the task fails with it, the writer lives
                    reply = ("fail", f"{type(err).__name__}: {err}")
                try:
                    _send(conn, reply)
                except OSError:
                    return  # the task is gone (killed while its chunk was committed)


def init_producer(conf: dict, tid: str):
    """A producer of `tid`, initialized (which fences its earlier holders). The broker answers
    CONCURRENT_TRANSACTIONS while it still ends a fenced producer's transaction: retried."""
    from confluent_kafka import KafkaError, KafkaException, Producer

    # No delivery report for a record delivered: nothing reads them (a record that fails
    # fails its transaction's commit), so none is queued and served per output.
    p = Producer({**conf, **sink.PRODUCER_CONF, "transactional.id": tid,
                  "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, "delivery.report.only.error": True})
    deadline = time.monotonic() + COMMIT_TIMEOUT_S
    while True:
        try:
            # In short steps: librdkafka asks the coordinator for the producer id once its
            # connection is up, and when it is not up yet, asks again only half a second later;
            # a new call (init_transactions is resumable) asks at once. Measured in a new
            # driver's first batch (partition_scale.py, 64 partitions): 71 of 128 inits took
            # 0.50 s in one call; in steps, none of 64 above 0.18 s, median 0.063 s.
            p.init_transactions(INIT_STEP_S)
            return p
        except KafkaException as err:
            if err.args[0].code() == KafkaError._TIMED_OUT and time.monotonic() < deadline:
                continue
            # A transaction of a fenced or failed producer the coordinator still ends.
            busy = err.args[0].retriable() or err.args[0].code() == KafkaError.CONCURRENT_TRANSACTIONS
            if not busy or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main(name: str, daemon: int) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind("\0" + name)
    except OSError:
        return  # another worker started it first
    server.listen(64)
    writer = Writer()

    def watch() -> None:
        while True:
            time.sleep(WATCH_S)
            try:
                os.kill(daemon, 0)
            except ProcessLookupError:
                os._exit(0)  # the executor is gone: its producers' open transactions time out

    threading.Thread(target=watch, daemon=True).start()
    while True:
        conn, _ = server.accept()
        threading.Thread(target=writer.serve, args=(conn,), daemon=True).start()


# -- a worker's side ----------------------------------------------------------------------

def error_of(reply: tuple) -> Exception | None:
    """The exception a writer's reply stands for (None: done)."""
    if reply[0] == "err":
        from confluent_kafka import KafkaError, KafkaException

        code, reason, fatal, retriable, abort = reply[1]
        return KafkaException(KafkaError(code, reason, fatal=fatal, retriable=retriable,
                                         txn_requires_abort=abort))
    if reply[0] == "fail":
        return RuntimeError(f"the executor's transactional writer: {reply[1]}")
    return None


class Client:
    """A Python worker's connection to its executor's writer (one, kept across tasks).
    Requests are answered in the order they were sent: `call` waits for its answer, `send`
    does not (its answer goes to `on_reply` when `poll` or `wait_one` reads it)."""

    def __init__(self, name: str, daemon: int) -> None:
        self.name, self.daemon = name, daemon
        self.conn: socket.socket | None = None
        self.pending: deque[Callable[[tuple], None]] = deque()

    def _connect(self) -> socket.socket:
        deadline, started = time.monotonic() + START_TIMEOUT_S, False
        while True:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect("\0" + self.name)
            except (ConnectionRefusedError, FileNotFoundError):
                conn.close()
            else:
                if _peer_uid(conn) == os.getuid():
                    return conn
                conn.close()  # an abstract name has no owner: another user's process took it
                raise PermissionError(f"the executor's transactional writer's socket ({self.name}) "
                                      "is held by another user's process")
            if not started:
                # Its own session: a task killed (or a worker stopped) does not take it along.
                subprocess.Popen([sys.executable, "-m", __name__, self.name, str(self.daemon)],
                                 start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
                started = True
            if time.monotonic() > deadline:
                raise TimeoutError(f"the executor's transactional writer ({self.name}) did not start "
                                   f"within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.05)

    def _io(self, fn: Callable[[socket.socket], Any]) -> Any:
        if self.conn is None:
            self.conn = self._connect()
        try:
            return fn(self.conn)
        except (ConnectionError, OSError):
            self.conn.close()
            self.conn = None  # the writer died: the task fails; the next starts a new one
            self.pending.clear()
            raise

    def send(self, request: tuple, on_reply: Callable[[tuple], None]) -> None:
        self._io(lambda conn: _send(conn, request))
        self.pending.append(on_reply)

    def wait_one(self) -> None:
        """Reads the oldest unanswered `send`'s reply and hands it over."""
        reply = self._io(_recv)
        self.pending.popleft()(reply)

    def poll(self) -> None:
        """Hands over the replies that have arrived, without waiting for more."""
        while self.pending and self.conn is not None and select.select([self.conn], [], [], 0)[0]:
            self.wait_one()

    def call(self, *request) -> tuple:
        while self.pending:
            self.wait_one()
        self._io(lambda conn: _send(conn, request))
        reply = self._io(_recv)
        err = error_of(reply)
        if err is not None:
            raise err
        return reply


_client: Client | None = None


def client() -> Client:
    """This worker's client of its executor's writer (the daemon is the worker's parent)."""
    global _client
    if _client is None:
        daemon = os.getppid()
        _client = Client(writer_name(daemon), daemon)
    return _client


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
