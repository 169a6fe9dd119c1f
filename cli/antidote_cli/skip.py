"""`antidote skip <consumer>`: move the message a Fault consumer stopped at to the poison
topic, so that `antidote resume` goes on past it."""

from __future__ import annotations

import argparse
from pathlib import Path

from .oncall.cluster import CliError, Cluster, local_settings
from .oncall.commands import _common
from .output import emit


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "skip", help="move the poison message a Fault consumer stopped at to its poison topic",
        description="For a consumer stopped by disposition Fault (QueueDisabled, reason Fault): "
                    "moves that one message to the poison topic (key and value unchanged, the "
                    "failure in antidote.* headers) and records it in the consumer's ledger, so "
                    "`antidote resume` continues after it. Nothing else is touched.")
    _common(p)
    p.add_argument("--settings", type=Path, help="a local consumer's effective settings file, "
                                                  "instead of the cluster's ConfigMap")
    p.add_argument("--dry-run", action="store_true", help="say what would be moved; change nothing")
    p.set_defaults(run=cmd_skip)


def cmd_skip(args: argparse.Namespace) -> int:
    from antidote_consumer.reader.skip import SkipError, skip_fault

    if args.settings is not None:
        settings = local_settings(args, args.consumer)
    else:
        k = Cluster(args)
        qc = k.consumer(args.consumer)
        cond = next((c for c in (qc.get("status") or {}).get("conditions") or []
                     if c["type"] == "QueueDisabled"), None)
        if cond is None or cond.get("status") != "True" or cond.get("reason") != "Fault":
            raise CliError(f'queueconsumer "{args.consumer}" is not stopped by a Fault '
                           f"(QueueDisabled: {cond.get('status') + ' ' + cond.get('reason', '') if cond else 'not set'})")
        settings = k.settings(args.consumer)
    try:
        done = skip_fault(settings, dry_run=args.dry_run)
    except SkipError as err:
        raise CliError(str(err)) from None
    if emit(args, dict(done.__dict__)):
        return 0
    verb = "would move" if done.dry_run else "moved"
    print(f"{verb} {done.topic}/{done.partition}/{done.offset} (original {done.origin}; "
          f"{done.reason}, {done.error_class}) to {done.poison_topic}")
    if not done.dry_run:
        print(f"next: antidote resume {args.consumer}" + (f" -n {args.namespace}" if args.namespace else ""))
    return 0
