"""Prometheus metrics of one consumer (prefix `antidote_`, labels namespace and consumer).

The operator scrapes these to write QueueConsumer status and to disable queues; the alert
rules use them too. Counters start from the ledger's totals, so a restart does not reset
what `kubectl get qc` shows."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

LABELS = ("namespace", "consumer")


class Metrics:
    def __init__(self, namespace: str, consumer: str, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r, ids = self.registry, {"namespace": namespace, "consumer": consumer}
        self.messages = Counter("antidote_messages", "Messages by final outcome of a pass: "
                                "processed, retried (parked in a retry topic), moved, rejected, dropped.",
                                LABELS + ("outcome",), registry=r)
        self.attempts = Counter("antidote_attempts", "Handler calls.", LABELS, registry=r)
        self.retries_scheduled = Counter("antidote_retry_scheduled", "Messages parked for retry cycle N.",
                                         LABELS + ("cycle",), registry=r)
        self.poison = Counter("antidote_poison_messages", "Messages that got a disposition, by reason.",
                              LABELS + ("reason", "disposition"), registry=r)
        self.batch_failures = Counter("antidote_batch_failures", "Whole-batch failures (rollbacks).",
                                      LABELS, registry=r)
        self.consecutive = Gauge("antidote_consecutive_batch_failures",
                                 "Whole-batch failures in a row.", LABELS, registry=r)
        self.disabled = Gauge("antidote_queue_disabled",
                              "1 when the consumer disabled its queue, with the reason.",
                              LABELS + ("reason",), registry=r)
        self.batch_seconds = Histogram("antidote_batch_duration_seconds", "Batch processing time.",
                                       LABELS, registry=r,
                                       buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))
        self.lag = Gauge("antidote_source_lag_records",
                         "Records in the source topic after the last committed batch (end offsets "
                         "minus the query's committed offsets).", LABELS + ("topic",), registry=r)
        self.depth = Gauge("antidote_topic_depth", "Records in Antidote's topics (end - start offset).",
                           LABELS + ("topic", "kind"), registry=r)
        self.last_poison = Gauge("antidote_last_poison_timestamp_seconds",
                                 "When the last message got its disposition; labels say which and why "
                                 "(never the payload).",
                                 LABELS + ("reason", "error_class", "topic", "partition", "offset"),
                                 registry=r)
        self.retry_next_due = Gauge("antidote_retry_next_due_timestamp_seconds",
                                    "When the earliest message waiting in a retry topic falls due, "
                                    "as the retry pump last read them; 0 when none waits.",
                                    LABELS, registry=r)
        self.isolation_runs = Counter("antidote_isolation_executions",
                                      "Batch re-executions spent isolating crashing messages.",
                                      LABELS, registry=r)
        self.ids = ids

    def start(self, port: int) -> None:
        start_http_server(port, addr="0.0.0.0", registry=self.registry)

    def restore(self, counts: dict[str, int], attempts: int) -> None:
        for outcome, n in counts.items():
            self.messages.labels(**self.ids, outcome=outcome).inc(n)
        self.attempts.labels(**self.ids).inc(attempts)
        self.set_disabled(None)

    def count(self, outcome: str, n: int = 1) -> None:
        if n:
            self.messages.labels(**self.ids, outcome=outcome).inc(n)

    def set_disabled(self, reason: str | None) -> None:
        for r in ("ConsecutiveBatchFailures", "SystemicFailure", "Fault"):
            self.disabled.labels(**self.ids, reason=r).set(1 if r == reason else 0)
