"""Attempt outcomes told to the driver while a batch runs, for the systemic-failure breaker
judged live (driver/live_breaker.py; docs/consumer.md "When a whole batch fails").

Spark's accumulators reach the driver only when a task ends, and a task of hanging calls
ends minutes later; so each task (a Spark Python worker's, or the driver's local worker's)
posts its running figures to the driver's report endpoint: how many distinct messages it
judged, and how many of them failed (a message counts as failing as soon as an attempt of
it failed, and as a success again if a later attempt succeeds, as at the batch's end).
Figures are cumulative per task, so a lost or late report costs nothing but
time: the next one carries everything.

The hot loop never waits on the driver: it updates counters and, at a task's first failure
or once a second at the boundary of an input batch, wakes a sender thread, which posts
(timeout 1 s) at most every half second and gives up on a driver it cannot reach. A task
that sees no failure and ends within a second posts nothing but its final figures."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any

from .task_settle import NO, STOP, YES

# The Spark local property that names the run (a Spark job of the driver's) a task belongs to.
RUN_PROPERTY = "antidote.run"
PATH = "/attempts"
ASK_PATH = "/settle"  # a report that asks whether the task may settle its chunk's failures
PERIOD = 1.0  # a task's progress, at most this often (when nothing fails)
GAP = 0.5  # at most one post per task this often
TIMEOUT = 1.0  # a post's, at most
GIVE_UP = 3  # posts failed in a row before a task stops trying


def _nonretryable(err: BaseException) -> bool:
    from antidote import NonRetryable

    return issubclass(type(err), NonRetryable)


class Reporter:
    """A task's running figures and the thread that posts them. `target`: the driver's
    (url, secret, run), run empty when the task reads it from Spark (RUN_PROPERTY); None:
    no report (no endpoint, or a task outside any run)."""

    def __init__(self, target: tuple[str, str, str] | None, task: tuple[int, int] = (0, 0)):
        self.target = target
        self.task = task  # (Spark partition id, attempt number): a retried task replaces its earlier try
        # Messages whose attempt failed (and none succeeded since: the hot loop takes one off
        # when a later attempt succeeds), NonRetryable ones, and the task's successes.
        self.failing = self.other = self.n_ok = 0
        self.done = False
        self._next = time.monotonic() + PERIOD
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._seq = 0
        self._lock = threading.Lock()

    # --- the hot loop's side: counters and a wake-up, never I/O --------------------------
    def failed(self, err: BaseException, n_ok: int) -> None:
        """A message's first attempt failed: a failing message, unless the handler declared
        it NonRetryable (its own fault, not the downstream's; worker.chosen.systemic_signal)."""
        if _nonretryable(err):
            self.other += 1
        else:
            self.failing += 1
        self.n_ok = n_ok
        self._send()

    def progress(self, n_ok: int) -> None:
        """At an input batch's boundary: the successes so far, posted once a second."""
        if self.target is not None and time.monotonic() >= self._next:
            self.n_ok = n_ok
            self._send()

    def close(self, n_ok: int) -> None:
        """The task's final figures (posted only if it posted before, or failed)."""
        self.n_ok, self.done = n_ok, True
        if self._thread is not None:
            self._wake.set()

    def figures(self) -> tuple[int, int]:
        """(failed, judged) distinct messages."""
        return self.failing, self.n_ok + self.failing + self.other

    def ask(self, n_ok: int) -> str:
        """Whether the task may settle its chunk's failures itself (worker.task_settle): its
        figures so far posted to the driver's ask path, on the task's own thread, and the
        answer, yes, no or stop; no when there is no driver to ask or it does not answer in
        time (the failures then go back to the driver, as they always did)."""
        if self.target is None:
            return NO
        self.n_ok = n_ok
        url, secret, run = self.target
        with self._lock:  # one seq order for both threads' posts
            self._seq += 1
            failed, judged = self.figures()
            body = {"secret": secret, "run": run, "task": list(self.task), "seq": self._seq,
                    "failed": failed, "judged": judged, "done": False}
        try:
            answer = post(url.removesuffix(PATH) + ASK_PATH, body)
        except Exception:  # noqa: BLE001 - no answer is a no: the driver settles them
            return NO
        return answer if answer in (YES, NO, STOP) else NO

    def _send(self) -> None:
        if self.target is None:
            return
        self._next = time.monotonic() + PERIOD
        if self._thread is None:
            self._thread = threading.Thread(target=self._post_loop, name="antidote-attempt-reports",
                                            daemon=True)
            self._thread.start()
        self._wake.set()

    # --- the sender thread -----------------------------------------------------------------
    def _post_loop(self) -> None:
        assert self.target is not None
        url, secret, run = self.target
        failures = 0
        sent: tuple[int, int] | None = None
        while failures < GIVE_UP:
            self._wake.wait(PERIOD)
            self._wake.clear()
            done = self.done
            now = self.figures()
            if now != sent or done:
                with self._lock:
                    self._seq += 1
                    now = self.figures()
                    body = {"secret": secret, "run": run, "task": list(self.task), "seq": self._seq,
                            "failed": now[0], "judged": now[1], "done": done}
                try:
                    post(url, body)
                    sent, failures = now, 0
                except Exception:  # noqa: BLE001 - the driver is gone or busy: never the task's problem
                    failures += 1
            if done:
                return
            time.sleep(GAP)


def post(url: str, body: dict[str, Any], timeout: float = TIMEOUT) -> str:
    """Posts `body`; the answer's text (empty for a report)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - the driver's own http URL
        return resp.read().decode()


def reporter(target: tuple[str, str, str] | None) -> Reporter:
    """The current task's Reporter: in a Spark task, its run from the job's local property and
    its partition and try from TaskContext; in the local worker (no Spark), `target`'s run."""
    if target is None:
        return Reporter(None)
    url, secret, run = target
    if run:
        return Reporter(target)
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
    except ImportError:
        ctx = None
    task_run = ctx.getLocalProperty(RUN_PROPERTY) if ctx is not None else None
    if ctx is None or not task_run:
        return Reporter(None)
    return Reporter((url, secret, task_run), (ctx.partitionId(), ctx.attemptNumber()))
