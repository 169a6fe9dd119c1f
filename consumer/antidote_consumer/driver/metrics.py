"""Prometheus metrics of one consumer (prefix `antidote_`, labels namespace and consumer).

The operator scrapes these to write QueueConsumer status and to disable queues; the alert
rules use them too. Counters start from the ledger's totals, so a restart does not reset
what `kubectl get qc` shows."""

from __future__ import annotations

import threading
import time
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from antidote_api.conditions import DisableReason
from antidote_api.wire import (DISABLE_WAIT_HEADER, DISABLE_WAIT_MAX, DISABLE_WAIT_PARAM, HEALTH_PATH,
                               Metric)

from .liveness import Liveness

LABELS = ("namespace", "consumer")
# A connection that sends no request (or no more of one) for this long is closed: each holds
# a server thread, and the kubelet's probes and the operator's scrapes send theirs at once.
IDLE_TIMEOUT_S = 10.0


class _Quiet(WSGIRequestHandler):
    timeout = IDLE_TIMEOUT_S  # socketserver sets it on the connection

    def log_message(self, *_args) -> None:  # a probe every few seconds is not news
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except TimeoutError:  # idle past `timeout`: closed, without a traceback on stderr
            self.close_connection = True


class Metrics:
    def __init__(self, namespace: str, consumer: str, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r, ids = self.registry, {"namespace": namespace, "consumer": consumer}
        self.messages = Counter(Metric.MESSAGES.registered, "Messages by final outcome of a pass: "
                                "processed, retried (parked in a retry topic), moved, rejected, dropped.",
                                LABELS + ("outcome",), registry=r)
        self.attempts = Counter("antidote_attempts", "Handler calls.", LABELS, registry=r)
        self.retries_scheduled = Counter("antidote_retry_scheduled", "Messages parked for retry cycle N.",
                                         LABELS + ("cycle",), registry=r)
        self.poison = Counter(Metric.POISON_MESSAGES.registered, "Messages that got a disposition, by reason.",
                              LABELS + ("reason", "disposition"), registry=r)
        self.batch_failures = Counter("antidote_batch_failures", "Whole-batch failures (rollbacks).",
                                      LABELS, registry=r)
        self.consecutive = Gauge(Metric.CONSECUTIVE_BATCH_FAILURES,
                                 "Whole-batch failures in a row.", LABELS, registry=r)
        self.disabled = Gauge(Metric.QUEUE_DISABLED,
                              "1 when the consumer disabled its queue, with the reason.",
                              LABELS + ("reason",), registry=r)
        self.batch_seconds = Histogram("antidote_batch_duration_seconds", "Batch processing time.",
                                       LABELS, registry=r,
                                       buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))
        self.lag = Gauge("antidote_source_lag_records",
                         "Records in the source topic after the last committed batch (end offsets "
                         "minus the query's committed offsets).", LABELS + ("topic",), registry=r)
        # Per source partition, for the operator's executor autoscaling: where the query stands
        # (the next offset it reads) and the records after that. Partitions are few and fixed
        # by the topic, so these labels stay bounded.
        self.partition_lag = Gauge(Metric.SOURCE_PARTITION_LAG,
                                   "Records in a source partition after the last committed batch.",
                                   LABELS + ("topic", "partition"), registry=r)
        self.partition_offset = Gauge(Metric.SOURCE_PARTITION_OFFSET,
                                      "The next offset the query reads in a source partition (the "
                                      "last committed batch's end).", LABELS + ("topic", "partition"),
                                      registry=r)
        self.depth = Gauge(Metric.TOPIC_DEPTH, "Records in Antidote's topics (end - start offset).",
                           LABELS + ("topic", "kind"), registry=r)
        # Per poison and dead-letter topic (driver.poison_age): what no reader has resolved yet.
        self.poison_waiting = Gauge(Metric.POISON_WAITING,
                                    "Records of a poison or dead-letter topic after its reader's "
                                    "position (offsets: an upper bound; 0 when none waits).",
                                    LABELS + ("topic", "kind"), registry=r)
        self.poison_oldest_age = Gauge(Metric.POISON_OLDEST_AGE,
                                       "Seconds since the first waiting record of a poison or "
                                       "dead-letter topic was quarantined; 0 when none waits.",
                                       LABELS + ("topic", "kind"), registry=r)
        # Where the last poison message came from is in two gauges' values, not in labels: an
        # offset label would make a new time series per poison message. The labels left are
        # bounded by the code (reasons, exception classes) and the settings (the topic).
        self.last_poison = Gauge(Metric.LAST_POISON_TIMESTAMP,
                                 "When the last message got its disposition, and why (never the payload).",
                                 LABELS + ("reason", "error_class", "topic"), registry=r)
        self.last_poison_partition = Gauge(Metric.LAST_POISON_PARTITION,
                                           "Original partition of the last poison message.", LABELS,
                                           registry=r)
        self.last_poison_offset = Gauge(Metric.LAST_POISON_OFFSET,
                                        "Original offset of the last poison message.", LABELS, registry=r)
        self.retry_expired = Counter("antidote_retry_expired_offsets",
                                     "Offsets of retry topics that expired (retention) before this "
                                     "consumer read them: retry records lost.",
                                     LABELS + ("topic",), registry=r)
        self.retry_next_due = Gauge("antidote_retry_next_due_timestamp_seconds",
                                    "When the earliest message waiting in a retry topic falls due, "
                                    "as the retry pump last read them; 0 when none waits.",
                                    LABELS, registry=r)
        # How retry cycles ran: read and run beside the driver ("local"), or read and run by
        # the executors from a plan of offsets ("executors"; spark.antidote.retry.localMaxRecords).
        self.retry_batches = Counter("antidote_retry_batches", "Retry batches run, by where they "
                                     "were read and run: local or executors.",
                                     LABELS + ("path",), registry=r)
        self.retry_records = Counter("antidote_retry_records", "Retry records run (attempted or "
                                     "held), by the path of their batch: local or executors.",
                                     LABELS + ("path",), registry=r)
        self.isolation_runs = Counter("antidote_isolation_executions",
                                      "Batch re-executions spent isolating crashing messages.",
                                      LABELS, registry=r)
        self.heartbeat = Gauge("antidote_heartbeat_timestamp_seconds",
                               "When the runtime last showed progress (a retry-pump round, a batch's "
                               "Spark job or local run starting or ending); stops while a run is "
                               "past its bound, and /healthz fails then.",
                               LABELS, registry=r)
        self.held = Gauge("antidote_held_messages",
                          "Messages held behind an earlier message of their key in a retry cycle "
                          "(QueueConsumer spec.ordering Key), as the ledger last committed them.",
                          LABELS, registry=r)
        # How source batches travel to the Python workers (spark.ArrowRows): the rows per Arrow
        # batch their last Spark job ran with, and the largest record seen, which sets them.
        self.arrow_rows = Gauge("antidote_arrow_batch_rows",
                                "Rows per Arrow batch of the last source batch's Spark job.",
                                LABELS, registry=r)
        self.largest_record = Gauge("antidote_largest_record_bytes",
                                    "Bytes of the largest source record this run has read (key, "
                                    "value and headers); sets antidote_arrow_batch_rows.",
                                    LABELS, registry=r)
        self.liveness = Liveness()
        self.ids = ids
        # Set while the queue is disabled: releases the operator's waiting scrape at once.
        self.disabled_now = threading.Event()

    @property
    def liveness(self) -> Liveness:
        return self._liveness

    @liveness.setter
    def liveness(self, live: Liveness) -> None:
        live.on_beat = self._beaten  # its beats (a run's start and end too) set the gauge
        self._liveness = live

    def beat(self) -> None:
        self.liveness.beat()

    def _beaten(self) -> None:
        self.heartbeat.labels(**self.ids).set(time.time())

    def running(self, what: str, bound: float):
        """A run in flight (see liveness.Liveness.running)."""
        return self.liveness.running(what, bound)

    def app(self):
        """/metrics (any path, as prometheus_client serves it), /healthz, and the operator's
        waiting scrape (`?antidote_wait_disabled=<s>`, antidote_api.wire)."""
        metrics = make_wsgi_app(self.registry)

        def app(environ, start_response):
            if environ.get("PATH_INFO") == HEALTH_PATH:
                ok, text = self.liveness.check()
                start_response("200 OK" if ok else "503 Service Unavailable",
                               [("Content-Type", "text/plain; charset=utf-8")])
                return [text.encode() + b"\n"]
            wait = wait_seconds(environ.get("QUERY_STRING", ""))
            if wait is None:
                return metrics(environ, start_response)
            # One server thread waits (ThreadingWSGIServer: one per request); the operator
            # holds at most one such request per consumer.
            if not self.disabled_now.wait(wait):
                start_response("204 No Content", [(DISABLE_WAIT_HEADER, "1")])
                return [b""]
            return metrics(environ, lambda status, headers, *exc: start_response(
                status, [*headers, (DISABLE_WAIT_HEADER, "1")], *exc))
        return app

    def start(self, port: int, idle_timeout: float = IDLE_TIMEOUT_S):
        handler = type("Handler", (_Quiet,), {"timeout": idle_timeout})
        httpd = make_server("0.0.0.0", port, self.app(), ThreadingWSGIServer, handler_class=handler)
        threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
        return httpd

    def restore(self, counts: dict[str, int], attempts: int) -> None:
        for outcome, n in counts.items():
            self.messages.labels(**self.ids, outcome=outcome).inc(n)
        self.attempts.labels(**self.ids).inc(attempts)
        self.set_disabled(None)

    def set_last_poison(self, reason: str, error_class: str | None, topic: str, partition: int,
                        offset: int, at: float) -> None:
        self.last_poison.clear()  # one series: the last one
        self.last_poison.labels(**self.ids, reason=reason, error_class=error_class or "",
                                topic=topic).set(at)
        self.last_poison_partition.labels(**self.ids).set(partition)
        self.last_poison_offset.labels(**self.ids).set(offset)

    def set_held(self, n: int) -> None:
        self.held.labels(**self.ids).set(n)

    def count(self, outcome: str, n: int = 1) -> None:
        if n:
            self.messages.labels(**self.ids, outcome=outcome).inc(n)

    def set_disabled(self, reason: str | None) -> None:
        for r in DisableReason:
            self.disabled.labels(**self.ids, reason=r).set(1 if r == reason else 0)
        # After the gauge: a released waiting scrape must read the page with it set.
        if reason:
            self.disabled_now.set()
        else:
            self.disabled_now.clear()


def wait_seconds(query: str) -> float | None:
    """How long a waiting scrape may wait (capped at DISABLE_WAIT_MAX), or None: a plain one
    (no parameter, or one that is not a number)."""
    values = parse_qs(query).get(DISABLE_WAIT_PARAM)
    if not values:
        return None
    try:
        wait = float(values[0])
    except ValueError:
        return None
    return min(max(wait, 0.0), DISABLE_WAIT_MAX) if wait == wait else None  # NaN: plain
