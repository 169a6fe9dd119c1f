"""The systemic-failure breaker judged while a batch runs (docs/consumer.md "When a whole
batch fails"): the tasks of a run (a Spark job, or a batch in the local worker) post their
running figures here (worker/attempt_reports.py), and the rule (driver.systemic) is judged
on the window plus the run's figures at every report. When it trips, the run is cancelled
(its Spark job, by tag; the local worker, killed): its attempts are abandoned without
outcomes, and the batch's thread raises the QueueDisabled, which stops the consumer as
today's end-of-batch trip does (nothing quarantined, the batch unconsumed).

The channel is a small HTTP endpoint on the driver (its own port, `--reports-port`; the
executors reach the driver at spark.driver.host, its pod's headless Service). A report must
carry this process's secret and the current run's id: anything else is dropped, so neither a
stray client nor a late report of a finished run can trip the breaker."""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from antidote_consumer.worker.attempt_reports import ASK_PATH, PATH, RUN_PROPERTY
from antidote_consumer.worker.task_settle import NO, STOP, YES

from .disabled import QueueDisabled
from .systemic import SystemicRule

log = logging.getLogger("antidote.consumer")

MAX_BODY = 4096  # a report is ~150 bytes


@dataclass
class RunTally:
    """A run's figures: the latest report of each task (a Spark partition; its later try
    replaces an earlier one, whose messages are the same), summed. Pure."""

    latest: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)  # part -> (try, seq, failed, judged)

    def add(self, part: int, attempt: int, seq: int, failed: int, judged: int) -> bool:
        """Takes a report; False when an earlier try's or an older one (kept out)."""
        held = self.latest.get(part)
        if held is not None and (attempt, seq) <= held[:2]:
            return False
        self.latest[part] = (attempt, seq, failed, judged)
        return True

    def figures(self) -> tuple[int, int]:
        """(failed, judged) distinct messages of the run so far."""
        return (sum(f for _, _, f, _ in self.latest.values()),
                sum(j for _, _, _, j in self.latest.values()))


class LiveBreaker:
    """The endpoint and the current run. One run at a time (the batches are serialized, and
    a local run ahead of the lock has its own id: a report names its run)."""

    def __init__(self, rule: SystemicRule, clock: Callable[[], float] = time.monotonic):
        self.rule = rule
        self.clock = clock
        self.secret = secrets.token_hex(16)
        self.url: str | None = None
        self._lock = threading.Lock()
        self._runs: dict[str, tuple[RunTally, float, Callable[[], None]]] = {}
        self.tripped: QueueDisabled | None = None
        # What the judge saw (the log at DEBUG, tests): reports of running runs, and the
        # run figures with the most failed messages.
        self.judged_reports = 0
        self.most_failed: tuple[int, int] = (0, 0)
        self._server: ThreadingHTTPServer | None = None

    # --- the endpoint ----------------------------------------------------------------------
    def start(self, host: str, port: int = 0, bind: str = "0.0.0.0") -> str:
        """Serves the reports on `bind`:`port` (0: any free port); executors post to `host`
        (the driver's address as they see it). The URL tasks are given."""
        breaker = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 5  # a client that says nothing does not hold a thread

            def do_POST(self):  # noqa: N802 - http.server's name
                size = int(self.headers.get("Content-Length") or 0)
                answer: str | None = None
                if self.path in (PATH, ASK_PATH) and 0 < size <= MAX_BODY:
                    try:
                        body = json.loads(self.rfile.read(size))
                        answer = (breaker.ask(body) if self.path == ASK_PATH
                                  else "" if breaker.report(body) else None)
                    except (ValueError, TypeError, KeyError):
                        answer = None
                data = (answer or "").encode()
                self.send_response(400 if answer is None else 200 if data else 204)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if data:
                    self.wfile.write(data)

            def log_message(self, *args):  # quiet: one line a report would flood the log
                pass

        self._server = ThreadingHTTPServer((bind, port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="attempt-reports", daemon=True).start()
        self.url = f"http://{host}:{self._server.server_address[1]}{PATH}"
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # --- runs ------------------------------------------------------------------------------
    def begin(self, cancel: Callable[[], None]) -> str | None:
        """A run starts: its id, for its tasks (None: no endpoint, nothing judged live).
        `cancel` abandons the run when the rule trips."""
        if self.url is None or not self.rule.enabled:
            return None
        run = secrets.token_hex(8)
        with self._lock:
            self._runs[run] = (RunTally(), self.clock(), cancel)
        return run

    def end(self, run: str | None) -> QueueDisabled | None:
        """The run ended (or failed): the stop it tripped, if it did."""
        if run is None:
            return None
        with self._lock:
            self._runs.pop(run, None)
            return self.tripped

    def target(self, run: str = "") -> tuple[str, str, str] | None:
        """What a WorkerConfig carries (worker/attempt_reports.py): `run` empty for Spark
        tasks, which read it from the job's local property (RUN_PROPERTY)."""
        return None if self.url is None else (self.url, self.secret, run)

    def report(self, body: dict) -> bool:
        """One task's report; trips the rule (and cancels the run) when the window and the
        run's figures say so. False: not ours, or not a current run's."""
        if not secrets.compare_digest(str(body.get("secret", "")), self.secret):
            return False
        part, attempt = (int(x) for x in body["task"])
        with self._lock:
            held = self._runs.get(str(body.get("run")))
            if held is None:
                return True  # a run that ended: too late to matter
            tally, began, _cancel = held
            tally.add(part, attempt, int(body["seq"]), int(body["failed"]), int(body["judged"]))
            if self.tripped is not None:
                return True
            failed, judged = tally.figures()
            self.judged_reports += 1
            self.most_failed = max(self.most_failed, (failed, judged))
            now = self.clock()
            if not self.rule.live(failed, judged, now):
                return True
            self.tripped = self.rule.disabled_live(failed, judged, now - began)
            # Every run in flight: a retry batch in the local worker and a source batch's job
            # meet the same downstream.
            cancels = [c for _, _, c in self._runs.values()]
        log.error("systemic failure while the batch runs: %d of %d messages judged failed; "
                  "abandoning the running attempts", failed, judged)
        for cancel in cancels:
            try:
                cancel()
            except Exception:  # noqa: BLE001 - the batch's thread still sees `tripped` when its run ends
                log.exception("could not cancel a running batch")
        return True

    def ask(self, body: dict) -> str | None:
        """A task's report that asks whether it may settle its chunk's failures itself
        (worker.task_settle): yes when the rule, over the window and the run's figures with
        this report, does not trip and has minMessages behind it; stop once it tripped (this
        report may trip it); no otherwise, and for a run that ended. None: not ours."""
        if not self.report(body):
            return None
        with self._lock:
            if self.tripped is not None:
                return STOP
            held = self._runs.get(str(body.get("run")))
            if held is None:
                return NO
            failed, judged = held[0].figures()
            return YES if self.rule.settles(failed, judged, self.clock()) else NO

    def check(self, cause: BaseException | None = None) -> None:
        """Raises the stop, once the rule tripped (the batch's thread, after its run)."""
        if self.tripped is not None:
            raise self.tripped from cause


def started(spark, rule: SystemicRule, port: int | None) -> LiveBreaker:
    """The breaker, its endpoint started unless `port` is None: executors of a local master
    are processes of this machine; on Kubernetes they reach spark.driver.host."""
    breaker = LiveBreaker(rule)
    if port is not None and spark is not None and rule.enabled:
        sc = spark.sparkContext
        local = sc.master.startswith("local")
        host = "127.0.0.1" if local else sc.getConf().get("spark.driver.host", "127.0.0.1")
        try:
            breaker.start(host, port, bind="127.0.0.1" if local else "0.0.0.0")
        except OSError as err:  # the port taken: judged at each batch's end, as before
            log.warning("attempt reports endpoint not started on port %d (%s): the failure ratio is "
                        "judged when each batch ends", port, err)
    return breaker


def spark_run(spark, breaker: LiveBreaker):
    """A context for one Spark job of the driver's: its tasks see the run's id (a local
    property), and a trip cancels the job by its tag. Yields the run id (None: not judged
    live)."""
    import contextlib

    @contextlib.contextmanager
    def scope():
        tag = f"antidote-run-{secrets.token_hex(6)}"
        run = breaker.begin(lambda: spark.sparkContext.cancelJobsWithTag(tag))
        if run is None:
            yield None
            return
        sc = spark.sparkContext
        sc.setLocalProperty(RUN_PROPERTY, run)
        sc.addJobTag(tag)
        try:
            yield run
        finally:
            sc.removeJobTag(tag)
            sc.setLocalProperty(RUN_PROPERTY, None)
            breaker.end(run)
    return scope()
