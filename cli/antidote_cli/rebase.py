"""`antidote rebase <consumer> --topic T`: after a source or retry topic was deleted and
recreated, read the new topic from its beginning (the consumer refuses to start until then)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .oncall.cluster import CliError, Cluster, local_settings
from .oncall.commands import _common
from .output import emit


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "rebase", help="read a recreated source or retry topic from its beginning",
        description="For a consumer that refuses to start because its source or a retry topic was "
                    "deleted and recreated (exit 2, Ready=False SettingsRejected): records the new "
                    "topic in the consumer's ledger, its positions at the new topic's first offsets, "
                    "so the next start reads all of it. The old topic's records were deleted with "
                    "it. Refuses a topic that was not recreated.")
    _common(p)
    p.add_argument("--topic", action="append", required=True, metavar="TOPIC",
                   help="the recreated topic, as the consumer's refusal names it (repeatable)")
    p.add_argument("--settings", type=Path, help="a local consumer's effective settings file, "
                                                  "instead of the cluster's ConfigMap")
    p.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")
    p.set_defaults(run=cmd_rebase)


def cmd_rebase(args: argparse.Namespace) -> int:
    from antidote_consumer.driver.rebase import RebaseError, rebase

    if args.settings is not None:
        settings = local_settings(args, args.consumer)
    else:
        settings = Cluster(args).settings(args.consumer)
    done = []
    for topic in args.topic:
        try:
            done.append(rebase(settings, topic, dry_run=args.dry_run))
        except RebaseError as err:
            raise CliError(str(err)) from None
    if emit(args, [{"topic": d.topic, "starts": d.starts, "source": d.source,
                    "dryRun": d.dry_run} for d in done]):
        return 0
    verb = "would read" if args.dry_run else "reads"
    for d in done:
        starts = ", ".join(f"partition {p} from {o}" for p, o in sorted(d.starts.items()))
        print(f"{d.found.describe()}; consumer {args.consumer} {verb} it from its beginning: {starts}"
              + ("; its checkpoint is removed at the next start" if d.source else ""))
    return 0
