"""`antidote consumer`: the Structured Streaming query over the source topic, the retry
pump over the retry topics, metrics, and a clean stop."""

from __future__ import annotations

import copy
import logging
import signal
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from antidote_api.names import ledger_names
from antidote_api.semantics import EffectiveSettings, longest_retry_delay, route_topics
from antidote_api.wire import ExitCode
from antidote_consumer.kafka import auth as kafka_auth
from antidote_consumer.kafka.topics import (depth, end_offsets, ensure_topics, max_message_bytes,
                                            partition_lags, reachable)
from antidote_consumer.spark import ARROW_ROWS_CONF, KAFKA_READ_OPTIONS, ArrowRows, arrow_batching, checkpoint_files
from antidote_consumer.worker import collector

from .batches import Runtime
from .checkpoint import clear_torn_first_write, remove_checkpoint
from .disabled import QueueDisabled
from .ledger import LedgerFenced
from .liveness import stall_after
from .metrics import Metrics
from .offsets import committed_offsets, starting_offsets
from .outage_log import OutageLog
from .poison_age import PoisonAge
from .recreated import RetryTopicGone, TopicRecreated, check as check_topics, refusal, watch
from .retry_pump import RetryPump, RetryReader

log = logging.getLogger("antidote.consumer")


# The source batch's columns as the executors read them (worker.executor.INPUT_COLUMNS).
SOURCE_COLUMNS = ("key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts", "headers")


class BatchCutShort(Exception):
    """A source batch interrupted by a stop (not committed; it runs again)."""


# Depth and lag take ~10 offset requests: often enough for a scrape, not every pump round.
DEPTHS_EVERY_S = 2.0


class Consumer:
    def __init__(self, settings: EffectiveSettings, spark: SparkSession, metrics: Metrics,
                 *, trigger_interval: float = 1.0, client_conf: dict[str, str] | None = None,
                 reports_port: int | None = 0):
        """`client_conf`: the source's librdkafka settings, already checked against a broker
        that answered (`antidote consumer` does so before Spark starts); else checked here."""
        self.s = settings
        self.spark = spark
        self.metrics = metrics
        self.interval = trigger_interval
        conf = client_conf
        if conf is None:
            conf = kafka_auth.verified_source_config(settings)  # the secretRef's, for librdkafka
            reachable(conf, settings.source.bootstrap_servers)  # one line if not, not a traceback
        self.client_conf = conf
        self.admin = admin = AdminClient({**conf, "bootstrap.servers": settings.source.bootstrap_servers})
        t = settings.topics
        derived = list(t.retry) + [t.poison, t.dlq] + route_topics(settings)  # created and checked alike
        self.partitions = ensure_topics(
            admin, t.source, derived, ledger_names(settings).topic,
            retry=list(t.retry), longest_delay_ms=longest_retry_delay(settings.retries).ms)
        source_max = max_message_bytes(admin, t.source)
        for key, value in {**arrow_batching(source_max, settings.spark.conf),
                           **checkpoint_files(settings.checkpoint.location, settings.spark.conf)}.items():
            spark.conf.set(key, value)
        self.runtime = Runtime(settings, spark, metrics, partitions=self.partitions, client_conf=conf,
                               max_bytes={topic: max_message_bytes(admin, topic) for topic in derived},
                               reports_port=reports_port)  # live breaker's endpoint (live_breaker)
        self.runtime.arrow = ArrowRows(source_max, settings.spark.conf)
        # After a commit with an unknown result the ledger is read again (Ledger.reload): what
        # that commit counted, if it landed, is counted in the metrics too.
        self.runtime.ledger.on_reload = self.runtime.settler.reloaded
        rows = spark.conf.get(ARROW_ROWS_CONF, None)
        if rows is not None and rows.strip().lstrip("-").isdigit():
            metrics.arrow_rows.labels(**metrics.ids).set(int(rows))
        delays = {topic: d.ms for topic, d in zip(t.retry, settings.retries.cycle_delays)}
        self.retry = RetryReader(settings.source.bootstrap_servers, delays, conf,
                                 owner=ledger_names(settings).consumer_id,
                                 on_expired=self._retry_expired) if t.retry else None
        self.pump = RetryPump(settings, spark, self.runtime, metrics, self.retry) if self.retry else None
        # Topic depths (poison, dlq, retry) are exported with or without retry cycles: the
        # operator's poisonDepth trigger reads them. Read uncommitted, so they count up to the
        # high watermark: a read_committed end offset is the last stable offset, which lags a
        # committed transaction until the broker has written its markers.
        self.offsets = self.retry.uncommitted if self.retry else KafkaConsumer({
            **conf, "bootstrap.servers": settings.source.bootstrap_servers, "group.id": "antidote-depths",
            "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
        self.poison_age = PoisonAge(settings, conf, metrics)  # its own thread, from run()
        metrics.liveness.stall_after = stall_after(settings.retries.attempt_timeout.seconds)
        # A SIGTERM waits this long for the current batch (then cuts it short; it runs again
        # after the restart): never longer than one attempt's limit, so a hung handler (whose
        # batch would go on for its immediate retries) cannot hold a stop up.
        self.stop_wait = min(120.0, settings.retries.attempt_timeout.seconds)
        self.stop_deadline: float | None = None
        self.query = None
        self.pump_stop = threading.Event()  # ends the background pump (not the consumer)
        self.wake = threading.Event()  # the pump's sleep ends early: new retries, or a stop
        self.runtime.on_scheduled = self.wake.set
        self.depths_at = float("-inf")
        self.pump_errors = OutageLog("retry pump")
        self.refused: TopicRecreated | None = None  # a topic recreated while running (pump thread)

    def _retry_expired(self, topic: str, partition: int, start: int, low: int) -> None:
        self.metrics.retry_expired.labels(**self.metrics.ids, topic=topic).inc(low - start)

    # --- the source query ---------------------------------------------------------------
    def _source_batch(self, df, batch_id: int) -> None:
        if self.runtime.stopping.is_set():
            # A stop waits for the batch it found running, not for the ones after it: under a
            # backlog the next trigger fires as soon as a batch ends, and waiting for a pause
            # between batches held a SIGTERM up for tens of seconds (the whole stop limit when
            # the backlog outlasted it). This batch does nothing and fails, which ends the
            # query; Spark runs it again after the restart.
            self._quiet_stop_failure()
            log.info("batch %d not started: stopping", batch_id)
            raise BatchCutShort(f"batch {batch_id} not started: stopping")
        try:
            self.runtime.handle(df, batch_id=batch_id)
        except Exception:
            if not self.runtime.stopping.is_set():
                raise
            # Cut short by a stop. The batch must still fail (returning would let Spark's
            # checkpoint pass it), but with a short error: the interrupted job's Java stack
            # in it sent Spark's error parsing into a StackOverflowError on stderr.
            self._quiet_stop_failure()
            log.info("batch %d cut short by the stop: it runs again after the restart", batch_id)
            raise BatchCutShort(f"batch {batch_id} cut short by a stop") from None

    def _quiet_stop_failure(self) -> None:
        """The batch failed on purpose by a stop is not an error: py4j and Spark's query would
        log it as one, with a Python traceback inside a Java one."""
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
        try:
            jvm = self.spark.sparkContext._jvm
            assert jvm is not None  # a running session's gateway
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
                "org.apache.spark.sql.execution.streaming", jvm.org.apache.logging.log4j.Level.OFF)
        except Exception as err:  # noqa: BLE001 - only the log's noise is at stake
            log.info("could not quiet Spark's query log: %s", str(err).strip().splitlines()[0][:200])

    def _start_query(self, until_idle: bool):
        src = self.s.source
        # A first offsets write cut short (a kill) would keep Spark from ever starting it.
        clear_torn_first_write(self.spark, self.s.checkpoint.location)
        reader = (self.spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", src.bootstrap_servers)
                  .options(**KAFKA_READ_OPTIONS)
                  .options(**kafka_auth.source_spark_options(self.s))
                  .option("subscribe", src.topic)
                  # Committed records only: those of an aborted transaction (a producer's, or a
                  # Redrive chunk the reader aborted and sent again) must get no outcome.
                  .option("kafka.isolation.level", "read_committed")
                  .option("startingOffsets", self._starting_offsets())
                  .option("maxOffsetsPerTrigger", str(src.max_messages_per_batch))
                  .option("includeHeaders", "true"))
        # The batch's columns are part of the query, so Spark plans them with the batch:
        # projected in foreachBatch, each batch's new Dataset cost ~5 ms of the driver's time
        # (analysed at once, over py4j) while the executors waited.
        self.runtime.query_read = {}  # a new query may start below the ledger's positions
        writer = (reader.load().selectExpr(*SOURCE_COLUMNS).writeStream.foreachBatch(self._source_batch)
                  .option("checkpointLocation", self.s.checkpoint.location)
                  .queryName(f"antidote-{self.s.consumer or 'consumer'}"))
        writer = writer.trigger(availableNow=True) if until_idle else writer.trigger(
            processingTime=f"{self.interval} seconds")
        return writer.start()

    def _starting_offsets(self) -> str:
        floor = self.runtime.source_floor()
        state = self.runtime.ledger.state
        if self.s.source.starting_offsets == "latest" and not floor and not state.source_start:
            # Where "latest" is now, kept: should the checkpoint be lost before a partition
            # delivers a record, that partition starts here again, not at a later "latest".
            self.runtime.record_source_start(self._stable_ends())
        start = {int(p): o for p, o in self.runtime.ledger.state.source_start.items()}
        return starting_offsets(self.s.source.topic, self.s.source.starting_offsets,
                                self.partitions, floor, start)

    def _stable_ends(self) -> dict[int, int]:
        """Each source partition's last stable offset: "latest" as a read_committed reader
        sees it. (The high watermark lies past the records of a transaction still open, which
        would be skipped once it commits.)"""
        client = KafkaConsumer({**self.client_conf, "bootstrap.servers": self.s.source.bootstrap_servers,
                                "group.id": "antidote-depths", "enable.auto.commit": False,
                                "isolation.level": "read_committed"})
        try:
            return end_offsets(client, self.s.source.topic, self.partitions)
        finally:
            client.close()

    # --- the retry pump -----------------------------------------------------------------
    def pump_once(self) -> tuple[int, int | None]:
        """Process the retry records due now; returns (records processed, next due ms).
        Nothing processed and no next due time means no retry is pending."""
        try:
            return self.pump.once() if self.pump is not None else (0, None)
        except RetryTopicGone as err:
            raise TopicRecreated(refusal(err.found, self.s.consumer, self.s.namespace)) from None

    def _pump_loop(self) -> None:
        while not (self.runtime.stopping.is_set() or self.pump_stop.is_set()):
            self.metrics.beat()  # the liveness: a round that never ends stops these
            self.wake.clear()  # before reading: a wake-up from now on is not lost
            try:
                n, next_due = self.pump_once()
                if time.monotonic() - self.depths_at >= DEPTHS_EVERY_S:
                    self.update_depths()
                    self._watch_topics()
            except (QueueDisabled, LedgerFenced):
                self._stop_query()
                return
            except TopicRecreated as err:  # the consumer stops; run() raises it (exit 2)
                log.error("%s", err)
                self.refused = err
                self._stop_query()
                return
            except Exception as err:  # noqa: BLE001 - keep pumping; the source query decides health
                self.pump_errors.failed(err)
                n, next_due = 0, None
            else:
                self.pump_errors.ok()
            if not n:
                self.wake.wait(self._pump_wait(next_due))

    def _pump_wait(self, next_due: int | None) -> float:
        """Until the earliest known due time: of what the retry topics hold, or of what this
        process scheduled since (it wakes the pump). Bounded so depths stay fresh."""
        now = int(time.time() * 1000)
        scheduled = self.runtime.scheduled_due
        if scheduled is not None and scheduled <= now:
            self.runtime.scheduled_due = scheduled = None  # read by now, or being read
        known = [d for d in (next_due, scheduled) if d is not None]
        if not known:
            return DEPTHS_EVERY_S
        return max(0.05, min(DEPTHS_EVERY_S, (min(known) - now) / 1000))

    def update_depths(self) -> None:
        self.depths_at = time.monotonic()
        t = self.s.topics
        kinds = [(t.poison, "poison"), (t.dlq, "dlq")] + [
            (name, f"retry-{i}") for i, name in enumerate(t.retry, start=1)]
        consumer = self.offsets
        for topic, kind in kinds:
            self.metrics.depth.labels(**self.metrics.ids, topic=topic, kind=kind).set(
                depth(consumer, topic))
        q = self.query
        committed = committed_offsets(q.lastProgress if q is not None else None, t.source)
        if committed is not None:
            # Measured against the end offsets now: a batch that hangs leaves the committed
            # offsets behind while the topic grows, and the "consumer stuck" alert sees it.
            lags = partition_lags(consumer, t.source, committed)
            self.metrics.lag.labels(**self.metrics.ids, topic=t.source).set(sum(lags.values()))
            for p, lag in lags.items():
                self.metrics.partition_lag.labels(**self.metrics.ids, topic=t.source,
                                                  partition=str(p)).set(lag)
                self.metrics.partition_offset.labels(**self.metrics.ids, topic=t.source,
                                                     partition=str(p)).set(committed[p])

    # --- running and stopping -----------------------------------------------------------
    def _stop_query(self) -> None:
        q = self.query
        if q is not None and q.isActive:
            q.stop()

    def _end_pump(self) -> None:
        self.pump_stop.set()
        self.wake.set()

    def request_stop(self, *_args) -> None:
        """SIGTERM: finish the current batch within `stop_wait`, then stop (a batch cut short
        is replayed)."""
        if self.runtime.stopping.is_set():
            return
        log.info("stop requested: finishing the current batch (at most %gs)", self.stop_wait)
        self.stop_deadline = deadline = time.monotonic() + self.stop_wait
        self.runtime.stopping.set()
        self.wake.set()

        def stop_after_batch() -> None:
            while (self.query is not None and self.query.isActive
                   and self.query.status.get("isTriggerActive") and time.monotonic() < deadline):
                time.sleep(0.1)
            self._quiet_stop_failure()  # the batch cut short fails on purpose
            try:
                self._stop_query()
            except Exception as err:  # noqa: BLE001 - the main thread may be stopping Spark already
                log.info("stopping the source query: %s", str(err).strip().splitlines()[0][:200])

        threading.Thread(target=stop_after_batch, daemon=True).start()

    def run(self, until_idle: bool = False, recovered: Callable[[], None] | None = None) -> ExitCode:
        """Consume until idle (`until_idle`), SIGTERM or a disabled queue. `recovered` runs once
        the ledger is loaded: serving /metrics before that would show counts of zero, which
        the operator would read as a reset."""
        self.runtime.recover()
        if recovered is not None:
            recovered()
        if self.runtime.disabled:
            self._close_clients()
            return self.runtime.disabled.exit_code
        if self.runtime.stopping.is_set():  # a SIGTERM while Spark started: nothing to finish
            log.info("stopped while starting: the source not read")
            self._close_clients()
            return ExitCode.OK
        try:
            self._check_topics()  # may write the ledger first: a newer instance fences it here
        except TopicRecreated:
            self._close_clients()
            raise
        except LedgerFenced:
            self._close_clients()
            log.error("%s", self.runtime.ledger.fenced)
            return ExitCode.FENCED
        self.update_depths()
        self.poison_age.start()
        # What the driver holds once it is up (Spark's and py4j's Python side, pydantic, the
        # modules) is long-lived. At 1% poison each settle keeps ~1,000 failed rows and their
        # records alive across younger collections, and a full collection walking all of it
        # followed every second batch or so, 0.06-0.2 s with the GIL held (none at 0%;
        # docs/performance.md). Frozen once here, those collections walk only what came after.
        collector.freeze_long_lived()
        # Retries fall due while the source is still being read: the pump runs beside the
        # source query in both modes.
        pump = threading.Thread(target=self._pump_loop, name="retry-pump", daemon=True)
        try:
            self.query = query = self._start_query(until_idle)
            pump.start()
            # availableNow ends by itself once the source is drained; a continuous query
            # runs until SIGTERM or until a batch disables the queue.
            while query.isActive and not self.runtime.disabled:
                query.awaitTermination(1)
            self._end_pump()
            pump.join(timeout=self._pump_wait_left())
            self._stop_query()
            if self.refused is not None:
                raise self.refused
            self._raise_disabled()
            if until_idle:
                self._drain_retries()
        except QueueDisabled as err:
            return err.exit_code
        except TopicRecreated:
            raise  # exit 2, its line says what to do (antidote_cli.consumer)
        except Exception:
            if self.runtime.ledger.fenced is not None:
                pass  # reported below, once the clients are closed
            elif self.runtime.disabled:
                return self.runtime.disabled.exit_code
            elif self.runtime.stopping.is_set():
                return ExitCode.OK
            else:
                raise
        finally:
            self.poison_age.stop()
            self._end_pump()
            if pump.is_alive():
                pump.join(timeout=self._pump_wait_left())
            self._stop_query()
            if pump.is_alive() and self.runtime.local is not None:
                self.runtime.local.close()  # a retry batch still running there: cut short
                pump.join(timeout=5)
            self._close_clients()
        if self.runtime.ledger.fenced is not None:
            log.error("%s", self.runtime.ledger.fenced)
            return ExitCode.FENCED
        return self.runtime.disabled.exit_code if self.runtime.disabled else ExitCode.OK

    def _check_topics(self) -> None:
        """Refuse a source or retry topic deleted and recreated under the ledger's positions
        (TopicRecreated, see driver.recreated); record the topics' ids; after a rebased source
        topic, remove the checkpoint that holds the old topic's offsets."""
        ledger = self.runtime.ledger
        topics = [self.s.topics.source, *self.s.topics.retry]
        ids, found = check_topics(self.admin, self.offsets, topics, ledger.state.topic_ids,
                                  ledger.state.positions)
        if found:
            raise TopicRecreated(refusal(found, self.s.consumer, self.s.namespace))
        if ledger.state.stale_checkpoint or any(ledger.state.topic_ids.get(t) != i for t, i in ids.items()):
            if ledger.state.stale_checkpoint:
                remove_checkpoint(self.spark, self.s.checkpoint.location)
            new = copy.deepcopy(ledger.state)
            new.topic_ids.update(ids)
            new.stale_checkpoint = False
            ledger.commit(new, keys=("topics",))

    def _watch_topics(self) -> None:
        """While running, as at start: a topic recreated under the ledger's positions stops
        the consumer (TopicRecreated) before its new records are read from them."""
        state = self.runtime.ledger.state
        found = watch(self.admin, self.offsets, [self.s.topics.source, *self.s.topics.retry],
                      state.topic_ids, state.positions)
        if found:
            raise TopicRecreated(refusal(found, self.s.consumer, self.s.namespace))

    def _pump_wait_left(self) -> float:
        """How long to wait for the pump's round: its batch may finish (120 s), unless a stop
        was requested, whose deadline holds for the pump too."""
        if self.stop_deadline is None:
            return 120.0
        return max(0.0, self.stop_deadline - time.monotonic())

    def _close_clients(self) -> None:
        self.runtime.live.stop()
        if self.runtime.local is not None:
            self.runtime.local.close()
        if self.retry:
            self.retry.close()
        else:
            self.offsets.close()
        self.runtime.ledger.close()
        self.runtime.sink.close()

    def _drain_retries(self) -> None:
        """Until no retry record is left, waiting for each one's due time."""
        while not self.runtime.stopping.is_set():
            n, next_due = self.pump_once()
            if n == 0 and next_due is None:
                break
            if n == 0 and next_due is not None:  # until the next due time, or a SIGTERM
                self.runtime.stopping.wait(max(0.05, next_due / 1000 - time.time()))
        self.update_depths()

    def _raise_disabled(self) -> None:
        if self.runtime.disabled:
            raise self.runtime.disabled
        if self.query is not None and self.query.exception() is not None and not self.runtime.stopping.is_set():
            raise RuntimeError(f"the source query failed: {self.query.exception()}")


def install_signal_handlers(consumer: Consumer) -> None:
    signal.signal(signal.SIGTERM, consumer.request_stop)
    signal.signal(signal.SIGINT, consumer.request_stop)
