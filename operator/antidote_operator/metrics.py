"""The operator's own Prometheus metrics (prefix `antidote_operator_`)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from antidote_api.conditions import CONSUMER_READY_REASONS
from antidote_api.wire import OperatorMetric

from .state import Registry


class _Consumers(Collector):
    """antidote_operator_consumers{condition,status}: computed at scrape time from the
    conditions the operator last wrote, so it never drifts from what it wrote."""

    def __init__(self, consumers: Registry):
        self.consumers = consumers

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily("antidote_operator_consumers",
                              "QueueConsumers by condition and status, as last written.",
                              labels=["condition", "status"])
        tally: Tally[tuple[str, str]] = Tally()
        for st in self.consumers:
            for type_, status in st.conditions.items():
                tally[(type_, status)] += 1
        for (type_, status), n in sorted(tally.items()):
            g.add_metric([type_, status], n)
        yield g
        # Per consumer, because the consumer's own antidote_queue_disabled goes away with its
        # process: this one stays 1 for as long as the queue is disabled (the alert reads it).
        d = GaugeMetricFamily(OperatorMetric.QUEUE_DISABLED.value,
                              "1 while a QueueConsumer's queue is disabled, by reason.",
                              labels=["namespace", "consumer", "reason"])
        for st in self.consumers:
            if st.disabled_reason:
                d.add_metric([st.namespace, st.name, st.disabled_reason], 1)
        yield d
        # Per consumer, because a consumer that never started never exported a series of its
        # own (AntidoteConsumerNotRunning reads this one). Its reason is from a closed set.
        r = GaugeMetricFamily(OperatorMetric.CONSUMER_READY.value,
                              "1 while a QueueConsumer is Ready, else 0; reason: Ready's reason.",
                              labels=["namespace", "consumer", "reason"])
        for st in self.consumers:
            if st.ready is not None:
                status, reason = st.ready
                r.add_metric([st.namespace, st.name,
                              reason if reason in CONSUMER_READY_REASONS else "Unknown"],
                             1 if status == "True" else 0)
        yield r
        # The executor count is in the driver's Spark configuration, not a metric of Spark's:
        # the operator says what it set (current) and what the lag asked for (desired).
        x = GaugeMetricFamily("antidote_operator_executors",
                              "Executors of a QueueConsumer with spec.spark.autoscale, as last "
                              "written: current (in the driver's configuration) and desired.",
                              labels=["namespace", "consumer", "kind"])
        for st in self.consumers:
            if st.executors is not None:
                x.add_metric([st.namespace, st.name, "current"], st.executors[0])
                x.add_metric([st.namespace, st.name, "desired"], st.executors[1])
        yield x
        yield GaugeMetricFamily("antidote_operator_watched_consumers",
                                "QueueConsumers the operator knows.", value=len(self.consumers))


class OperatorMetrics:
    def __init__(self, consumers: Registry):
        self.registry = r = CollectorRegistry()
        self.reconciles = Counter("antidote_operator_reconciles", "Reconciliations, by kind and result.",
                                  ["kind", "result"], registry=r)
        self.errors = Counter("antidote_operator_errors", "Errors, by operation.", ["operation"], registry=r)
        self.pauses = Counter("antidote_operator_pauses", "Consumers scaled to 0, by reason (UserRequested "
                              "or the QueueDisabled reason).", ["reason"], registry=r)
        self.resumes = Counter("antidote_operator_resumes", "Disabled queues re-enabled, by how "
                               "(Resumed: the annotation; Probing: autoResume).", ["how"], registry=r)
        self.child_writes = Counter("antidote_operator_child_writes", "Child objects written, by kind and "
                                    "action (created, updated).", ["kind", "action"], registry=r)
        self.events = Counter("antidote_operator_events", "Kubernetes Events posted, by reason.",
                              ["reason"], registry=r)
        self.scrapes = Counter("antidote_operator_scrapes", "Consumer metrics scrapes, by result.",
                               ["result"], registry=r)
        self.reader_started = Counter("antidote_operator_reader_jobs_started", "Poison-reader Jobs started, "
                                      "by consumer and trigger (Manual, Schedule, PoisonDepth).",
                                      ["namespace", "consumer", "trigger"], registry=r)
        self.reader_failed = Counter("antidote_operator_reader_jobs_failed", "Poison-reader Jobs that failed, "
                                     "by consumer and trigger.", ["namespace", "consumer", "trigger"],
                                     registry=r)
        self.disable_seconds = Histogram(
            "antidote_operator_disable_seconds",
            "From disable evidence (metrics or exit code) reaching the operator to the Deployment "
            "scaled to 0.", registry=r, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30))
        self.scrape_seconds = Histogram("antidote_operator_scrape_round_seconds",
                                        "Duration of one round of scrapes over all consumers.",
                                        registry=r, buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10))
        r.register(_Consumers(consumers))

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)

    def names(self) -> Iterable[str]:
        return [m.name for m in self.registry.collect()]
