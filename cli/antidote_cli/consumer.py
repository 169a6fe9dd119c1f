"""`antidote consumer`: run one QueueConsumer's Spark driver (what the Deployment runs)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from antidote_api.wire import CONSUMER_PREFIX


# After disabling its queue the driver keeps its /metrics up this long (ended early by SIGTERM,
# which the operator sends once it has scaled the Deployment to 0): exiting at once took the
# antidote_queue_disabled series away before a Prometheus scrape could see it.
METRICS_LINGER_S = 30.0


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("consumer", help="run a consumer (the Spark driver)")
    from .reader import add_settings_args

    add_settings_args(p)  # --settings FILE | -f MANIFEST [--policy FILE], as the reader's
    p.add_argument("--until-idle", action="store_true",
                   help="exit 0 once the source and retry topics are drained and no retry is pending")
    p.add_argument("--metrics-port", type=int, default=None, help="serve /metrics on this port")
    p.add_argument("--reports-port", type=int, default=0,
                   help="port of the endpoint executors report attempt outcomes to, for the "
                        "systemic-failure breaker judged while a batch runs (default 0: any free port)")
    p.add_argument("--master", default=None, help="Spark master (default local[2], or the settings')")
    p.add_argument("--metrics-linger", type=float, default=METRICS_LINGER_S,
                   help="after disabling its queue, keep serving /metrics this many seconds (or "
                        "until SIGTERM) so a scrape sees antidote_queue_disabled (default "
                        f"{METRICS_LINGER_S:g}: the Prometheus Operator's default interval)")
    p.add_argument("--trigger-interval", type=float, default=1.0, help="seconds between batches")
    p.add_argument("--resume", action="store_true",
                   help="re-enable a queue this consumer disabled in an earlier run (a restart "
                        "alone keeps it disabled; the operator resumes through the settings)")
    p.set_defaults(run=run)


def _settings(args: argparse.Namespace):
    """The consumer's settings, or the exit code when it must not start (bad settings, a
    handler that cannot be imported, a paused consumer)."""
    from antidote_consumer.settings import SettingsError, from_manifests, load_settings

    try:
        if args.settings:
            settings = load_settings(args.settings)
        else:
            settings = from_manifests(args.consumer, args.policy)
    except SettingsError as err:
        print(f"{CONSUMER_PREFIX}{err}", file=sys.stderr)
        return 2
    if args.resume:
        import time

        settings = settings.model_copy(update={"resume_token": f"cli-{time.time_ns()}"})
    if settings.paused:
        print(f"{CONSUMER_PREFIX}{settings.consumer} is paused (spec.paused); nothing to do",
              file=sys.stderr)
        return 0

    from antidote_consumer.worker.handler import check_handler

    # Before any Spark work: a handler that cannot be imported would fail every batch (five
    # rollbacks, then a disabled queue) instead of saying so once.
    problem = check_handler(settings.handler)
    if problem is not None:
        print(f"{CONSUMER_PREFIX}spec.{problem}", file=sys.stderr)
        return 2
    return settings


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # In its pod the driver is PID 1 (the container's command is `antidote`), and the kernel
    # drops a signal that PID 1 has no handler for: a SIGTERM while Spark started was lost and
    # the pod ran on until the grace period's SIGKILL (150 s). Noted from the first moment,
    # and the driver exits as soon as Spark is up, before reading anything.
    stop_early = threading.Event()

    def early_stop(*_args) -> None:
        stop_early.set()

    signal.signal(signal.SIGTERM, early_stop)
    signal.signal(signal.SIGINT, early_stop)
    settings = _settings(args)
    if isinstance(settings, int):
        return settings
    from antidote_consumer.kafka.auth import KafkaAuthError, verified_source_config
    from antidote_consumer.driver.metrics import Metrics
    from antidote_consumer.driver.consumer import Consumer, install_signal_handlers
    from antidote_consumer.spark import spark_session
    from antidote_api.wire import DISABLE_EXIT
    from antidote_consumer.kafka.topics import KafkaUnreachable, TopicMisfit, reachable
    from antidote_consumer.worker.redact import RedactionKeyError

    try:  # before Spark starts: an unreachable broker is one line, not Spark's start-up and a trace
        # Credentials first (a secretRef: one connection), so refused ones are named as such;
        # checked once, here: the Consumer takes the result instead of connecting again.
        conf = verified_source_config(settings)
        reachable(conf, settings.source.bootstrap_servers)
    except KafkaAuthError as err:
        print(f"{CONSUMER_PREFIX}{err}", file=sys.stderr)
        return 2
    except KafkaUnreachable as err:  # exit 1: restarted with back-off until the brokers answer
        print(f"{CONSUMER_PREFIX}{err}", file=sys.stderr)
        return 1
    metrics = Metrics(settings.namespace, settings.consumer)
    spark = spark_session(settings, args.master)
    spark.sparkContext.setLogLevel("WARN")
    try:
        if stop_early.is_set():
            logging.getLogger("antidote.consumer").info("stopped while starting: exit 0 (OK)")
            return 0
        try:
            consumer = Consumer(settings, spark, metrics, trigger_interval=args.trigger_interval,
                                client_conf=conf, reports_port=args.reports_port)
        except (KafkaAuthError, RedactionKeyError) as err:  # exit 2: restarted with back-off, a fixed Secret is read
            print(f"{CONSUMER_PREFIX}{err}", file=sys.stderr)
            return 2
        except TopicMisfit as err:  # a derived topic that cannot hold the policy: like bad settings
            print(f"{CONSUMER_PREFIX}{err}", file=sys.stderr)
            return 2
        except KafkaUnreachable as err:  # exit 1: restarted with back-off until the brokers answer
            print(f"{CONSUMER_PREFIX}{err}", file=sys.stderr)
            return 1
        install_signal_handlers(consumer)
        if stop_early.is_set():
            consumer.request_stop()  # run() then returns before starting the query
        serve = None if args.metrics_port is None else (lambda: metrics.start(args.metrics_port))
        try:
            code = consumer.run(until_idle=args.until_idle, recovered=serve)
        except TopicMisfit as err:  # a topic recreated under the ledger: like bad settings
            print(f"{CONSUMER_PREFIX}{err}", file=sys.stderr)
            return 2
    finally:
        spark.stop()
    if serve is not None and code in DISABLE_EXIT.values() and args.metrics_linger > 0:
        logging.getLogger("antidote.consumer").info(
            "queue disabled: serving /metrics for %gs more (or until SIGTERM) before exiting %d",
            args.metrics_linger, int(code))
        consumer.runtime.stopping.wait(args.metrics_linger)
    logging.getLogger("antidote.consumer").info("exit %d (%s)", int(code), code.name)
    return int(code)
