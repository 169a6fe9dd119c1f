"""Per-attempt time limits (`spec.retries.attemptTimeout`) in the process that runs the
handler: a Spark Python worker, or the driver's local worker.

Two steps, both driven by one watchdog thread per process:
- at the limit, SIGUSR1 (SIGALRM is left to user code and test timeouts) is sent to the
  main thread, whose signal handler raises `AttemptTimeout` inside the handler call: that
  ends Python code and any wait the kernel interrupts (sleep, socket reads, locks). The
  attempt fails like any other and the policy decides what follows.
- if the attempt is still running `grace` later (a handler stuck in C code that retries on
  EINTR, or one that swallowed the error), the process ends itself (`os._exit`). Spark starts
  a new Python worker and the batch fails as a whole (rollbacks, then bisection isolates the
  message); a dead local worker sends its batch to a Spark job, where the same happens.
- C code that holds the GIL lets neither step run (both need the interpreter). For that the
  watchdog keeps faulthandler's timer armed (a C thread that needs no GIL): every round it
  pushes the timer `hard_deadline` (limit + grace + 5 s) into the future. A watchdog that
  cannot run cannot push it, so an attempt holding the GIL ends its process at most that
  long after it started: faulthandler writes every thread's stack to stderr and exits 1,
  the same dead worker as above.

The hot loop pays two attribute stores and one clock read per attempt (written inline
there, as `timed` does for the later attempts); the watchdog wakes every limit/10 (between
50 ms and 1 s) and reads them.
"""

from __future__ import annotations

import faulthandler
import os
from typing import Any
import signal
import threading
import time

KILL_GRACE_MAX_S = 10.0  # the hard kill comes min(limit, this) after the timeout was raised
SIGNAL = signal.SIGUSR1
KILLED_EXIT = 124  # a worker that ended itself over a stuck attempt (coreutils timeout's code)
# After the watchdog's own kill (and a round or two of it): faulthandler's timer is the
# fallback for a watchdog that cannot run, never a race with one that can.
HARD_MARGIN_S = 5.0
STDERR_FD = 2  # where the last resort's stacks and its reason are written


class AttemptTimeout(BaseException):
    """An attempt ran past spec.retries.attemptTimeout.

    A BaseException, as KeyboardInterrupt is: a handler's `except Exception` (a retry loop of
    its own) must not swallow it and run on past the limit."""


# So its error class, in the headers and for nonRetryable, is `antidote.AttemptTimeout`.
AttemptTimeout.__module__ = "antidote"


def kill_grace(limit_s: float) -> float:
    return min(limit_s, KILL_GRACE_MAX_S)


def hard_deadline(limit_s: float) -> float:
    """Seconds after an attempt's start by which its process has ended if the attempt has
    not: the limit, the grace to unwind, and the margin of faulthandler's timer."""
    return limit_s + kill_grace(limit_s) + HARD_MARGIN_S


class Watchdog:
    """One per process. `started` is the current attempt's start (time.monotonic()), 0.0
    between attempts; `msg` is its message (named when the process ends itself)."""

    def __init__(self, limit_s: float) -> None:
        self.limit = limit_s
        self.started = 0.0
        self.msg: Any = None  # the Message of the attempt under way
        self.fired = 0.0  # `started` of the attempt the timeout was raised in
        self.pid = os.getpid()
        self.main: int = threading.main_thread().ident or 0  # set once the interpreter runs
        self.soft = False
        self._complained = False
        self.install()
        self.thread = threading.Thread(target=self._watch, name="antidote-attempt-watchdog", daemon=True)
        self.thread.start()

    def install(self) -> None:
        """(Re)installs the signal handler: only the main thread may, and Python code there
        may have replaced it since the last batch."""
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(SIGNAL) != self._on_alarm:
                signal.signal(SIGNAL, self._on_alarm)
            self.soft = True

    @property
    def poll(self) -> float:
        return max(0.05, min(1.0, self.limit / 10))

    def timed(self, handler):
        """`handler` under the limit (the hot loop inlines the same for its first attempt)."""
        def call(msg):
            self.msg = msg
            self.started = time.monotonic()
            try:
                return handler(msg)
            finally:
                self.started = 0.0
        return call

    def _on_alarm(self, _signum, _frame) -> None:
        started = self.started
        # Only inside the attempt the watchdog fired for: a late signal must not hit the loop.
        if started and started == self.fired:
            raise AttemptTimeout(f"the attempt ran longer than {self.limit:g}s (spec.retries.attemptTimeout)")

    def _watch(self) -> None:
        fired_at = 0.0
        while True:
            # Pushed back every round: it fires only after a whole hard_deadline in which
            # this thread could not run, which no attempt within its limit causes. To file
            # descriptor 2, not sys.stderr: a handler that replaces sys.stderr with an object
            # without a descriptor (contextlib.redirect_stderr, a logging library, pytest's
            # capsys) made this call raise, and the thread died with every limit it enforces.
            try:
                faulthandler.dump_traceback_later(hard_deadline(self.limit), exit=True, file=STDERR_FD)
            except (OSError, ValueError) as err:  # fd 2 closed by the handler: still watch
                self._complain(f"faulthandler's timer could not be armed ({err})")
            time.sleep(self.poll)
            started = self.started
            if not started:
                continue
            now = time.monotonic()
            if self.fired != started:
                if now - started >= self.limit:
                    self.fired, fired_at = started, now
                    if self.soft:
                        signal.pthread_kill(self.main, SIGNAL)
            elif now - fired_at >= kill_grace(self.limit):
                self._kill(now - started)

    def _complain(self, what: str) -> None:
        if not self._complained:
            self._complained = True
            try:
                os.write(STDERR_FD, f"antidote: {what}; the limit and the watchdog's own kill still apply\n".encode())
            except OSError:
                pass

    def _kill(self, late: float) -> None:
        msg = self.msg
        where = f"{msg.topic}/{msg.partition}/{msg.offset}" if msg is not None else "a message"
        try:
            os.write(STDERR_FD, (f"antidote: the attempt on {where} is still running {late:.1f}s after it "
                                 f"started (spec.retries.attemptTimeout {self.limit:g}s, plus "
                                 f"{kill_grace(self.limit):g}s to unwind): ending this Python worker\n").encode())
        finally:  # fd 2 closed by the handler: ending the process matters more than saying why
            os._exit(KILLED_EXIT)


_watchdog: Watchdog | None = None


def watchdog(limit_s: float) -> Watchdog:
    """This process's watchdog, set to `limit_s` (a forked process gets its own)."""
    global _watchdog
    wd = _watchdog
    if wd is None or wd.pid != os.getpid():
        wd = _watchdog = Watchdog(limit_s)
    else:
        wd.install()
    wd.limit = limit_s
    return wd
