"""`antidote demo`: the whole story on the embedded stack, with a report at the end."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "demo", help="run the whole story on the local stack: poison in, quarantine, pause, "
                     "resume, drain; exits 0 only if the ledger balances",
        description="Starts the local stack (unless $ANTIDOTE_STACK_DIR names a running one), "
                    "the operator, a PoisonPolicy and a QueueConsumer of expense reports, and "
                    "narrates what happens. Stops what it started. With --node (root) everything "
                    "runs as pods on the stack's node, installed with the Helm chart; without, the "
                    "operator's dev runner runs consumers as local processes.")
    p.add_argument("--node", action="store_true",
                   help="run on the stack's node: the chart's operator, the Spark driver, its "
                        "executors and the reader Job as pods (root; builds the images on first run)")
    p.add_argument("--keep", action="store_true",
                   help="leave the stack it started running (on a running stack: its namespace)")
    p.add_argument("--workdir", type=Path, help="where logs, checkpoint and archive go "
                                                "(default: a new temp dir)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from antidote_demo.story import run_demo

    return run_demo(keep=args.keep, workdir=args.workdir, node=args.node)
