"""`antidote dev up|down|env|status|build`: the embedded local stack."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from antidote_devstack import build, stack
from antidote_devstack.errors import StackError


def register(commands: argparse._SubParsersAction) -> None:
    dev = commands.add_parser("dev", help="the local stack: real kube-apiserver, etcd, Kafka")
    dev.add_argument("--dir", type=Path, default=None,
                     help="stack state directory (default $ANTIDOTE_STACK_DIR or ~/.cache/antidote/stack)")
    sub = dev.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = sub.add_parser("up", help="build what is missing, then start the stack")
    up.add_argument("--with", dest="extra", action="append", default=[],
                    choices=["kube-controller-manager", "kube-scheduler"],
                    help="also build this optional component")
    up.set_defaults(run=_up)
    sub.add_parser("down", help="stop everything the stack started").set_defaults(run=_down)
    sub.add_parser("env", help="print shell exports for the running stack").set_defaults(run=_env)
    sub.add_parser("status", help="is the stack running?").set_defaults(run=_status)
    b = sub.add_parser("build", help="build and cache binaries and jars, start nothing")
    b.add_argument("--with", dest="extra", action="append", default=[],
                   choices=["kube-controller-manager", "kube-scheduler"])
    b.set_defaults(run=_build)


def _fail(err: StackError) -> int:
    print(f"antidote dev: {err}", file=sys.stderr)
    return 1


def _up(args: argparse.Namespace) -> int:
    try:
        s = stack.up(args.dir, build.DEFAULT_BINARIES + tuple(args.extra))
    except StackError as err:
        return _fail(err)
    print(f"# stack running in {s.dir}; load it with: eval \"$(antidote dev env)\"")
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = stack.down(args.dir)
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def _env(args: argparse.Namespace) -> int:
    s = stack.running(args.dir)
    if s is None:
        print("antidote dev env: no running stack; start it with `antidote dev up`", file=sys.stderr)
        return 1
    sys.stdout.write(stack.env_script(s))
    return 0


def _status(args: argparse.Namespace) -> int:
    s = stack.running(args.dir)
    if s is None:
        print("not running")
        return 1
    print(f"running: API server {s.server} ({s.kube_version}), Kafka {s.kafka_bootstrap}, dir {s.dir}")
    return 0


def _build(args: argparse.Namespace) -> int:
    try:
        build.build_all(build.DEFAULT_BINARIES + tuple(args.extra))
    except StackError as err:
        return _fail(err)
    return 0
