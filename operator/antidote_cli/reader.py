"""`antidote reader` and `antidote redrive`: run the poison-queue reader once."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from antidote_api.wire import ExitCode

EXIT_OK, EXIT_BAD_SETTINGS, EXIT_FAULT = ExitCode.OK, ExitCode.BAD_SETTINGS, ExitCode.FAULT
REPORT_LIMIT = 4096  # /dev/termination-log keeps 4 KiB


def add_settings_args(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--settings", type=Path, help="effective settings (the operator's ConfigMap)")
    src.add_argument("--consumer", type=Path, help="a QueueConsumer manifest (with --policy)")
    p.add_argument("--policy", type=Path, help="the PoisonPolicy manifest it refers to")


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--report-file", type=Path, default=None,
                   help="also write the JSON report here (a Job passes /dev/termination-log)")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text")


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
    from antidote_consumer.settings import SettingsError, from_manifests, load_settings

    if args.settings:
        return load_settings(args.settings)
    if not args.policy:
        raise SettingsError("--consumer needs --policy")
    return from_manifests(args.consumer, args.policy)


def options(args: argparse.Namespace):
    from antidote_consumer.reader.options import options_from

    return options_from(args, action=args.fixed_action)


def finish(report, args: argparse.Namespace) -> int:
    """Write and print the report; the exit code it stands for."""
    text = report.dumps()
    if args.report_file is not None:
        try:
            args.report_file.write_text(text[:REPORT_LIMIT])
        except OSError as err:
            print(f"antidote {args.prog_name}: cannot write the report to {args.report_file}: "
                  f"{err.strerror}", file=sys.stderr)
    print(text if args.output == "json" else report.summary())
    return EXIT_FAULT if report.faultAt else EXIT_OK


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from antidote_consumer.reader.run import run_reader
    from antidote_consumer.reader.rules import ReaderError
    from antidote_consumer.settings import SettingsError

    name = args.prog_name
    try:
        settings = load(args)
    except SettingsError as err:
        print(f"antidote {name}: {err}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    stop = threading.Event()

    def on_signal(*_):  # finish the current chunk, commit it, and stop
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    from antidote_consumer.kafka.auth import KafkaAuthError

    try:
        report = run_reader(settings, options(args), stop=stop)
    except (ReaderError, KafkaAuthError) as err:
        print(f"antidote {name}: {err}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    except TimeoutError as err:  # a broker that stopped answering (reader.run READ_WAIT)
        print(f"antidote {name}: {err}", file=sys.stderr)
        return 1
    return finish(report, args)
