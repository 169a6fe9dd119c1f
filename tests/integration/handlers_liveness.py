"""Handlers of the liveness tests (imported by Spark's Python workers and the local worker by
name): a message that freezes its process, so that nothing in it runs again, neither the
attempt time limit's signal handler nor its watchdog thread (as C code holding the GIL, or a
process the kernel no longer schedules)."""

from __future__ import annotations

import ctypes
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


def gil_on_gil(msg):
    """`upper`, except that b"gil" sleeps an hour in C code that holds the GIL (libc's sleep
    through ctypes.PyDLL, with the time limit's SIGUSR1 blocked so the sleep is not cut):
    neither the attempt's signal handler nor its watchdog thread can run in the process."""
    if msg.value == b"gil":
        _record(msg)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        ctypes.PyDLL(None).sleep(3600)
    return upper(msg)
