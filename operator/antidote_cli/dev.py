"""`antidote dev up|down|env|status|build`: the embedded local stack."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from antidote_devstack.errors import StackError

# The stack's modules (and `cryptography`, for its PKI) are imported inside the commands that
# use them, not when the CLI starts: every `antidote` process imports this module, the
# operator's too, where they were ~9 MB of resident memory it never used.


def register(commands: argparse._SubParsersAction) -> None:
    # --dir is accepted before or after the action (`dev --dir X up` and `dev up --dir X`).
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--dir", type=Path, default=argparse.SUPPRESS,
                       help="stack state directory (default $ANTIDOTE_STACK_DIR or ~/.cache/antidote/stack)")
    dev = commands.add_parser("dev", help="the local stack: real kube-apiserver, etcd, Kafka",
                              parents=[where])
    sub = dev.add_subparsers(dest="action", required=True, metavar="ACTION")

    def add(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, parents=[where])

    up = add("up", "build what is missing, then start the stack")
    up.add_argument("--with", dest="extra", action="append", default=[],
                    choices=["kube-controller-manager", "kube-scheduler"],
                    help="also build this optional component")
    up.add_argument("--node", action="store_true",
                    help="also run a one-node cluster (containerd, kubelet, kube-proxy, CoreDNS) "
                         "that runs pods; needs root (docs/node.md)")
    up.add_argument("--prometheus", action="store_true",
                    help="also run a Prometheus (Debian's `prometheus`) on loopback that scrapes the "
                         "operator and its dev-runner consumers and evaluates the chart's alert "
                         "rules; added to a running stack without a restart")
    up.set_defaults(run=_up)
    add("down", "stop everything the stack started").set_defaults(run=_down)
    add("env", "print shell exports for the running stack").set_defaults(run=_env)
    add("status", "is the stack running?").set_defaults(run=_status)
    b = add("build", "build and cache binaries and jars, start nothing")
    b.add_argument("--with", dest="extra", action="append", default=[],
                   choices=["kube-controller-manager", "kube-scheduler"])
    b.add_argument("--node", action="store_true",
                   help="also build the node's binaries and images (and install its Debian packages)")
    b.add_argument("--images", action="store_true",
                   help="also build the project's images (docker/*.Dockerfile) with buildah on "
                        "local bases; needs root and --node (docs/images.md)")
    b.add_argument("--kind", action="store_true",
                   help="also build kind, its node image (into podman's storage) and the "
                        "project's image archives, and write the environment hack/kind-up.sh "
                        "needs to ~/.cache/antidote/kind/env.sh; implies --node --images; needs "
                        "root (docs/kind.md)")
    b.set_defaults(run=_build)


def _dir(args: argparse.Namespace) -> Path | None:
    return getattr(args, "dir", None)


def _fail(err: StackError) -> int:
    print(f"antidote dev: {err}", file=sys.stderr)
    return 1


def _up(args: argparse.Namespace) -> int:
    from antidote_devstack import build, stack

    try:
        s = stack.up(_dir(args), build.DEFAULT_BINARIES + tuple(args.extra), node=args.node,
                     prometheus=args.prometheus)
    except StackError as err:
        return _fail(err)
    print(f"# stack running in {s.dir}; load it with: eval \"$(antidote dev env)\"")
    return 0


def _down(args: argparse.Namespace) -> int:
    from antidote_devstack import stack

    stopped = stack.down(_dir(args))
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def _env(args: argparse.Namespace) -> int:
    from antidote_devstack import stack

    s = stack.running(_dir(args))
    if s is None:
        print("antidote dev env: no running stack; start it with `antidote dev up`", file=sys.stderr)
        return 1
    sys.stdout.write(stack.env_script(s))
    return 0


def _status(args: argparse.Namespace) -> int:
    from antidote_devstack.certs import ensure_pki
    from antidote_devstack import stack
    from antidote_devstack.node import node_ready

    s = stack.running(_dir(args))
    if s is None:
        print("not running")
        return 1
    node = ""
    if s.node:
        pki = ensure_pki(Path(s.dir) / "pki")
        ready = node_ready(s.host, s.apiserver_port, pki)
        node = f", node {s.node} {'Ready' if ready else 'NotReady'}"
    prom = f", Prometheus {s.prometheus_url}" if s.prometheus_url else ""
    print(f"running: API server {s.server} ({s.kube_version}), Kafka {s.kafka_bootstrap}{node}"
          f"{prom}, dir {s.dir}")
    return 0


def _build(args: argparse.Namespace) -> int:
    from antidote_devstack import build

    try:
        if args.images and not (args.node or args.kind):
            raise StackError("build images", "--images needs --node (its Debian packages and base image)")
        build.build_all(build.DEFAULT_BINARIES + tuple(args.extra), node=args.node or args.kind,
                        project=args.images or args.kind)
        if args.kind:
            from antidote_devstack import kind_env

            kind_env.build()
            print(f"# kind: load its environment with: . {kind_env.kind_dir() / 'env.sh'}; "
                  "then hack/kind-up.sh (docs/kind.md)")
    except StackError as err:
        return _fail(err)
    return 0
