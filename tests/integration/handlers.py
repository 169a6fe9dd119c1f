"""Handlers used by the consumer tests (imported by Spark's Python workers by name).

Each call is recorded in $ANTIDOTE_TEST_CALLS_DIR/<original topic>.calls, one line per call
("topic/partition/offset"), so tests can count attempts exactly across worker processes and
restarts. (Set before Spark starts: workers see the environment of the JVM's start.)"""

from __future__ import annotations

import json
import os
import time


def _record(msg) -> None:
    folder = os.environ.get("ANTIDOTE_TEST_CALLS_DIR")
    if folder:
        with open(os.path.join(folder, f"{msg.topic}.calls"), "a") as f:
            f.write(f"{msg.topic}/{msg.partition}/{msg.offset} {time.time():.3f}\n")


def upper(msg):
    """Succeeds unless the value contains b"poison"."""
    _record(msg)
    if msg.value is not None and b"poison" in msg.value:
        raise ValueError(f"cannot process offset {msg.offset}")
    return (msg.value or b"").upper()


def strict_json(msg):
    """Parses JSON; a KeyError for a missing field is listed as non-retryable in tests."""
    _record(msg)
    doc = json.loads(msg.value)
    return {"id": doc["id"], "ok": True}


def crash_on_crash(msg):
    """Kills the Python worker on the value b"crash" (a native crash, not an exception)."""
    _record(msg)
    if msg.value == b"crash":
        os._exit(1)
    return msg.value


def downstream_down(msg):
    _record(msg)
    raise ConnectionError("downstream service unavailable")


def upper_unless_down(msg):
    """`upper`, but every call fails while the file $ANTIDOTE_TEST_DOWNSTREAM_DOWN exists (a
    downstream outage that a test starts and ends without restarting the consumer)."""
    flag = os.environ.get("ANTIDOTE_TEST_DOWNSTREAM_DOWN")
    if flag and os.path.exists(flag):
        _record(msg)
        raise ConnectionError("downstream service unavailable")
    return upper(msg)


def slow_upper(msg):
    time.sleep(float(os.environ.get("ANTIDOTE_TEST_DELAY", "0.01")))
    return upper(msg)


def flaky_upper(msg):
    """Like `upper` (b"poison" always fails), and a value with b"flaky-<n>" fails its first
    n deliveries (`attempt` counts across retry cycles), then succeeds."""
    _record(msg)
    value = msg.value or b""
    if b"poison" in value:
        raise ValueError(f"cannot process offset {msg.offset}")
    if b"flaky-" in value and msg.attempt <= int(value.split(b"flaky-")[1][:1]):
        raise ConnectionError(f"offset {msg.offset} failed on attempt {msg.attempt}")
    return value.upper()


def crash_on_redelivery(msg):
    """`flaky_upper`, except that b"crash" fails its first delivery with an exception and
    kills its Python process (a native crash) when re-delivered from a retry topic. Every
    call also appends "offset attempt pid ppid" to <topic>.procs: which process ran it."""
    folder = os.environ.get("ANTIDOTE_TEST_CALLS_DIR")
    if folder:
        with open(os.path.join(folder, f"{msg.topic}.procs"), "a") as f:
            f.write(f"{msg.offset} {msg.attempt} {os.getpid()} {os.getppid()}\n")
    if msg.value == b"crash":
        _record(msg)
        if msg.attempt == 1:
            raise ValueError(f"offset {msg.offset} failed on its first delivery")
        os._exit(1)
    return flaky_upper(msg)


def crash_or_linger(msg):
    """Kills its Python worker on b"crash"; takes ANTIDOTE_TEST_DELAY seconds (default 5)
    on b"linger", so another task of the same job is still running when the job fails."""
    _record(msg)
    if msg.value == b"crash":
        os._exit(1)
    if msg.value == b"linger":
        time.sleep(float(os.environ.get("ANTIDOTE_TEST_DELAY", "5")))
    return msg.value


def hang_on_hang(msg):
    """`upper`, except that the value b"hang" sleeps for an hour (a handler stuck on a call
    that never answers): only the attempt time limit ends it."""
    if msg.value == b"hang":
        _record(msg)
        time.sleep(3600)
    return upper(msg)


def slow_or_hang(msg):
    """`slow_upper` (ANTIDOTE_TEST_DELAY seconds a message, so a backlog takes a while),
    except that b"hang" hangs like `hang_on_hang` until the attempt time limit."""
    if msg.value == b"hang":
        _record(msg)
        time.sleep(3600)
    return slow_upper(msg)


def stubborn_on_hang(msg):
    """Like `hang_on_hang`, but swallows even the attempt timeout and sleeps on (as code in C
    that retries an interrupted call does): only ending its process stops it."""
    if msg.value == b"hang":
        _record(msg)
        while True:
            try:
                time.sleep(3600)
            except BaseException:  # noqa: BLE001 - that is the point
                pass
    return upper(msg)


def header_names(msg):
    """The names of the headers the handler is shown, as JSON."""
    _record(msg)
    return [k for k, _ in msg.headers]


def crash_during_outage(msg):
    """`crash_on_crash`, and every call kills its Python worker while the file
    $ANTIDOTE_TEST_CALLS_DIR/<topic>.outage exists: a sink outage, each run of a batch failing
    as a whole. The file holds how many calls the outage still lasts and the last of them
    removes it, so the outage ends at the run a test chose (one task at a time runs these)."""
    folder = os.environ.get("ANTIDOTE_TEST_CALLS_DIR")
    flag = os.path.join(folder, f"{msg.topic}.outage") if folder else None
    if flag and os.path.exists(flag):
        with open(flag) as f:
            left = int(f.read())
        if left <= 1:
            os.remove(flag)
        else:
            with open(flag, "w") as f:
                f.write(str(left - 1))
        _record(msg)
        os._exit(1)
    return crash_on_crash(msg)


def gated_slow_upper(msg):
    """`slow_upper`, except that a value holding b"gate" waits (its call recorded first) while
    the file $ANTIDOTE_TEST_CALLS_DIR/<topic>.gate exists: its batch is held open mid-way, with
    the outputs before it written, for a test to kill or fence its consumer there."""
    if msg.value is not None and b"gate" in msg.value:
        _record(msg)
        folder = os.environ.get("ANTIDOTE_TEST_CALLS_DIR")
        gate = os.path.join(folder, f"{msg.topic}.gate") if folder else None
        while gate and os.path.exists(gate):
            time.sleep(0.01)
        return msg.value.upper()
    return slow_upper(msg)


def with_env(msg):
    """The value, then the handler's environment (spec.env, spec.envFrom): `APP_SECRET` (from
    a Secret) and `CFG_region` (a ConfigMap's key with prefix CFG_), then the host it ran on (a
    pod's name), `|`-separated: a test sees in the sink record what reached the process that
    ran the handler, and where that process was."""
    import socket

    _record(msg)
    got = [os.environ.get(name, "<unset>") for name in ("APP_SECRET", "CFG_region")]
    return b"|".join([msg.value or b"", *(g.encode() for g in got), socket.gethostname().encode()])


def gated_flaky_upper(msg):
    """`flaky_upper` at `slow_upper`'s pace, and held by a gate like `gated_slow_upper`: for a
    kill while poison and flaky messages are in their retry cycles and a batch is held."""
    if msg.value is not None and b"gate" in msg.value:
        return gated_slow_upper(msg)
    time.sleep(float(os.environ.get("ANTIDOTE_TEST_DELAY", "0.01")))
    return flaky_upper(msg)


_BEGUN: dict[int, list[int]] = {}  # Spark task (attempt id) -> partitions it began, from the gate's offset


def task_gated_flaky_upper(msg):
    """`flaky_upper` at `slow_upper`'s pace, recording which Spark task ran each message (a
    line "<partition> <offset> <task attempt id>" in $ANTIDOTE_TEST_CALLS_DIR/<topic>.tasks).
    From offset $ANTIDOTE_TEST_GATE_FROM on, a task's first message of the second partition
    it reads waits while the file <topic>.gate exists (a line in <topic>.gated says so): each
    task of a coalesced batch held right after it moved on from one partition."""
    from pyspark import TaskContext

    folder, ctx = os.environ.get("ANTIDOTE_TEST_CALLS_DIR"), TaskContext.get()
    if folder and ctx is not None:
        task = ctx.taskAttemptId()
        with open(os.path.join(folder, f"{msg.topic}.tasks"), "a") as f:
            f.write(f"{msg.partition} {msg.offset} {task}\n")
        begun = _BEGUN.setdefault(task, [])
        if msg.offset >= int(os.environ.get("ANTIDOTE_TEST_GATE_FROM", "-1")) >= 0 and msg.partition not in begun:
            begun.append(msg.partition)
            if len(begun) == 2:  # it moved on from its first partition
                with open(os.path.join(folder, f"{msg.topic}.gated"), "a") as f:
                    f.write(f"{msg.partition} {msg.offset} {task}\n")
                while os.path.exists(os.path.join(folder, f"{msg.topic}.gate")):
                    time.sleep(0.01)
    time.sleep(float(os.environ.get("ANTIDOTE_TEST_DELAY", "0.01")))
    return flaky_upper(msg)


def hang_then_fail(msg):
    """A downstream that lets calls time out: every call waits 4 s and then fails with
    TimeoutError, until the file $ANTIDOTE_TEST_CALLS_DIR/<topic>.fixed exists (the cause
    fixed); then `upper`. A value starting with b"ok" needs no downstream: `upper` at once;
    one starting with b"retry" fails at once on its first delivery (a fault of its own), then
    is `upper`. Each call is recorded as it starts (its time is the first call's)."""
    _record(msg)
    folder = os.environ.get("ANTIDOTE_TEST_CALLS_DIR")
    fixed = folder and os.path.exists(os.path.join(folder, f"{msg.topic}.fixed"))
    value = msg.value or b""
    if value.startswith(b"retry") and msg.attempt == 1:
        raise ConnectionError(f"offset {msg.offset} failed on its first delivery")
    if fixed or value.startswith((b"ok", b"retry")):
        return value.upper()
    time.sleep(4)
    raise TimeoutError("downstream call timed out after 4s")


def bad_then_hang(msg):
    """For a retry batch in the local worker: a value holding b"bad" fails at once on its first
    delivery, and every later delivery waits 4 s and then fails (the downstream it retries
    on hangs), until $ANTIDOTE_TEST_CALLS_DIR/<topic>.fixed exists; other values are `upper`."""
    _record(msg)
    folder = os.environ.get("ANTIDOTE_TEST_CALLS_DIR")
    value = msg.value or b""
    if b"bad" not in value or (folder and os.path.exists(os.path.join(folder, f"{msg.topic}.fixed"))):
        return value.upper()
    if msg.attempt == 1:
        raise ValueError(f"offset {msg.offset} refused")
    time.sleep(4)
    raise TimeoutError("downstream call timed out after 4s")
