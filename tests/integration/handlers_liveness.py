"""Handlers of the liveness tests (imported by Spark's Python workers and the local worker by
name): a message that freezes its process, so that nothing in it runs again, neither the
attempt time limit's signal handler nor its watchdog thread (as C code holding the GIL, or a
process the kernel no longer schedules)."""

from __future__ import annotations

import os
import signal

from .handlers import _record, upper


def freeze_on_freeze(msg):
    """`upper`, except that b"freeze" writes its process id to
    $ANTIDOTE_TEST_CALLS_DIR/frozen.pid and stops its own process (SIGSTOP): the batch makes
    no progress until the test kills it."""
    if msg.value == b"freeze":
        _record(msg)
        folder = os.environ.get("ANTIDOTE_TEST_CALLS_DIR", ".")
        with open(os.path.join(folder, "frozen.pid"), "a") as f:
            f.write(f"{os.getpid()}\n")
        os.kill(os.getpid(), signal.SIGSTOP)
    return upper(msg)
