"""`antidote reader` and `antidote redrive`: run the poison-queue reader once."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from antidote_api.wire import CliExit, ExitCode

from .errors import CliError, say_error
from .kafka_flags import add_verbose_arg, log_conf
from .output import add_output_arg, render

EXIT_OK, EXIT_BAD_SETTINGS, EXIT_FAULT = ExitCode.OK, ExitCode.BAD_SETTINGS, ExitCode.FAULT
REPORT_LIMIT = 4096  # /dev/termination-log keeps 4 KiB


def add_settings_args(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--settings", type=Path, metavar="FILE",
                     help="effective settings (the operator's ConfigMap)")
    # `-f` as kubectl's: a manifest file. `--consumer` is the old spelling (an alias).
    src.add_argument("-f", "--consumer-file", "--consumer", dest="consumer", type=Path, metavar="FILE",
                     help="a QueueConsumer manifest; its PoisonPolicy in the same file (a second "
                          "YAML document) or with --policy")
    p.add_argument("--policy", type=Path, metavar="FILE", help="the PoisonPolicy manifest it refers to")


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--report-file", type=Path, default=None,
                   help="also write the JSON report here (a Job passes /dev/termination-log)")
    add_output_arg(p)
    add_verbose_arg(p)  # librdkafka's own log lines (kafka_flags)


def register(commands: argparse._SubParsersAction) -> None:
    from antidote_consumer.reader.options import add_option_args

    r = commands.add_parser("reader", help="run the poison-queue reader once (a finite job)")
    add_settings_args(r)
    add_option_args(r)
    add_output_args(r)
    r.set_defaults(run=run, fixed_action=None, prog_name="reader")
    d = commands.add_parser("redrive", help="send poison messages back to the source topic "
                                            "(the reader with action Redrive)")
    add_settings_args(d)
    add_option_args(d, action=False)
    add_output_args(d)
    d.set_defaults(run=run, fixed_action="Redrive", prog_name="redrive")


def load(args: argparse.Namespace):
    """The effective settings named on the command line; SettingsError when they are bad."""
    from antidote_consumer.settings import from_manifests, load_settings

    if args.settings:
        return load_settings(args.settings)
    return from_manifests(args.consumer, args.policy)


def options(args: argparse.Namespace):
    from antidote_consumer.reader.options import options_from

    return options_from(args, action=args.fixed_action)


def finish(report, args: argparse.Namespace) -> int:
    """Write and print the report; the exit code it stands for."""
    import json

    text = report.dumps()
    if args.report_file is not None:
        try:
            args.report_file.write_text(text[:REPORT_LIMIT])
        except OSError as err:
            say_error(args.prog_name, f"cannot write the report to {args.report_file}: {err.strerror}")
    if args.output == "table":
        print(report.summary())
    else:
        print(text if args.output == "json" else render(json.loads(text), args.output))
    return EXIT_FAULT if report.faultAt else EXIT_OK


def run(args: argparse.Namespace) -> int:
    from antidote_consumer.settings import SettingsError

    try:
        settings = load(args)
    except SettingsError as err:
        raise CliError(str(err), EXIT_BAD_SETTINGS) from None
    return run_with(args, settings)


def run_with(args: argparse.Namespace, settings, client_conf: dict[str, str] | None = None) -> int:
    """The reader over `settings`, here; `client_conf`: librdkafka properties given on the
    command line. Every failure a user can cause is one line (CliError), never a traceback."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from confluent_kafka import KafkaError, KafkaException

    from antidote_consumer.kafka import auth as kafka_auth
    from antidote_consumer.kafka.topics import KafkaUnreachable, reachable
    from antidote_consumer.reader.rules import ReaderError
    from antidote_consumer.reader.run import run_reader

    conf = {**log_conf(args), **(client_conf or {})}
    bootstrap = settings.source.bootstrap_servers
    try:
        opts = options(args)  # a bad flag before any broker is asked
        # One connection first: a broker that does not answer is one line naming it, not the
        # client's retries and a traceback from the first metadata request.
        reachable({**kafka_auth.source_config(settings, verify=True), **conf}, bootstrap, timeout=15)
    except (ReaderError, kafka_auth.KafkaAuthError) as err:
        raise CliError(str(err), EXIT_BAD_SETTINGS) from None
    except KafkaUnreachable as err:
        raise CliError(f"{err}; nothing was changed") from None
    stop = threading.Event()

    def on_signal(*_):  # finish the current chunk, commit it, and stop
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        report = run_reader(settings, opts, stop=stop, client_conf=conf)
    except (ReaderError, kafka_auth.KafkaAuthError) as err:
        raise CliError(str(err), EXIT_BAD_SETTINGS) from None
    except KafkaException as err:  # the broker went away mid-run: committed chunks stay done
        kerr = err.args[0] if err.args else None
        raise CliError(f"Kafka at {bootstrap}: {kerr.str() if isinstance(kerr, KafkaError) else err}; what "
                       "was committed before stays done, the rest is read again next time") from None
    except TimeoutError as err:  # a broker that stopped answering (reader.run READ_WAIT)
        raise CliError(str(err), CliExit.ERROR) from None
    return finish(report, args)
