"""`antidote dev up|down|env|status|build|images|load-images`: the embedded local stack and
the project's images."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from .errors import fail

# The stack's modules (and `cryptography`, for its PKI) are imported inside the commands that
# use them, not when the CLI starts: every `antidote` process imports this module, the
# operator's too, where they were ~9 MB of resident memory it never used; and the images
# carry the CLI without the dev tooling (dev/), so `antidote dev` there says it is missing.


# `--with schema-registry` runs a service rather than building a binary: the one `--with` value
# that is not a Go binary (antidote_devstack.schema_registry.NAME, spelled here so that the
# parser needs no dev tooling).
SCHEMA_REGISTRY = "schema-registry"


def _binaries(extra: list[str]) -> tuple[str, ...]:
    return tuple(x for x in extra if x != SCHEMA_REGISTRY)


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
                    choices=["kube-controller-manager", "kube-scheduler", SCHEMA_REGISTRY],
                    help="also build this optional component; schema-registry: also run a Schema "
                         "Registry (Apicurio, built by Maven, Confluent-compatible API) that `dev "
                         "env` names as SCHEMA_REGISTRY_URL; added to a running stack without a "
                         "restart (docs/consumer.md)")
    up.add_argument("--node", action="store_true",
                    help="also run a one-node cluster (containerd, kubelet, kube-proxy, CoreDNS) "
                         "that runs pods; needs root (docs/node.md)")
    up.add_argument("--prometheus", action="store_true",
                    help="also run a Prometheus (Debian's `prometheus`) on loopback that scrapes the "
                         "operator and its dev-runner consumers and evaluates the chart's alert "
                         "rules; added to a running stack without a restart")
    up.add_argument("--s3", action="store_true",
                    help="also run an S3-compatible server (SeaweedFS, built from its Go module) "
                         "with a bucket, for s3a:// checkpoints, sinks and archives; `dev env` "
                         "names it; added to a running stack without a restart (docs/storage.md)")
    up.set_defaults(run=_guarded(_up))
    add("down", "stop everything the stack started").set_defaults(run=_guarded(_down))
    add("env", "print shell exports for the running stack").set_defaults(run=_guarded(_env))
    add("status", "is the stack running?").set_defaults(run=_guarded(_status))
    b = add("build", "build and cache binaries and jars, start nothing")
    b.add_argument("--with", dest="extra", action="append", default=[],
                   choices=["kube-controller-manager", "kube-scheduler", SCHEMA_REGISTRY])
    b.add_argument("--node", action="store_true",
                   help="also build the node's binaries and images (and install its Debian packages)")
    b.add_argument("--images", action="store_true",
                   help="also build the project's images (docker/*.Dockerfile) with buildah on "
                        "local bases; needs root and --node (docs/images.md)")
    b.add_argument("--s3", action="store_true",
                   help="also build the S3 server and fetch the S3A jars (what `dev up --s3` needs)")
    b.add_argument("--kind", action="store_true",
                   help="also build kind, its node image (into podman's storage) and the "
                        "project's image archives, and write the environment hack/kind-up.sh "
                        "needs to ~/.cache/antidote/kind/env.sh; implies --node --images; needs "
                        "root (docs/kind.md)")
    b.set_defaults(run=_guarded(_build))
    im = add("images", "build the operator and consumer images (docker/*.Dockerfile) with docker, "
             "podman or buildah and push them to REGISTRY as antidote-operator:TAG and "
             "antidote-consumer:TAG (`make images`, docs/images.md)")
    im.add_argument("--registry", required=True, help="host[:port][/path] to push to, e.g. ghcr.io/you")
    im.add_argument("--tag", default=None, help="image tag (default: pyproject.toml's version)")
    im.add_argument("--tool", choices=["docker", "podman", "buildah"], default=None,
                    help="the builder (default: docker if its daemon answers, else podman, else buildah)")
    im.add_argument("--local-bases", action="store_true",
                    help="buildah on the node builder's local stand-ins for the Docker Hub bases "
                         "(for machines without Docker Hub; needs root)")
    im.add_argument("--tls-verify", choices=["true", "false"], default="true",
                    help="false: push to a plain-HTTP registry (podman, buildah)")
    im.add_argument("--no-push", dest="push", action="store_false", help="build only")
    im.set_defaults(run=_guarded(_images))
    add("load-images", "build (or find cached) the operator and consumer images and load them into "
        "the running node, under the names hack/local-images.values.yaml gives the chart; needs "
        "root and `dev up --node` (docs/node.md)").set_defaults(run=_guarded(_load_images))


def _dir(args: argparse.Namespace) -> Path | None:
    return getattr(args, "dir", None)


def _guarded(action: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`action` with the stack's refusals (StackError) as one line and exit 1, with the
    prefix of the action (`antidote dev up: `), as its usage errors have."""
    def run(args: argparse.Namespace) -> int:
        from antidote_devstack.errors import StackError  # absent in the images: main says so

        try:
            return action(args)
        except StackError as err:
            return fail(f"dev {args.action}", str(err))
    return run


def _up(args: argparse.Namespace) -> int:
    from antidote_devstack import build, stack

    s = stack.up(_dir(args), build.DEFAULT_BINARIES + _binaries(args.extra), node=args.node,
                 prometheus=args.prometheus, s3=args.s3,
                 schema_registry=SCHEMA_REGISTRY in args.extra)
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
    s3 = f", S3 {s.s3_endpoint} (bucket {s.s3.bucket})" if s.s3 else ""
    sr = f", Schema Registry {s.schema_registry_url}" if s.schema_registry_url else ""
    print(f"running: API server {s.server} ({s.kube_version}), Kafka {s.kafka_bootstrap}{node}"
          f"{prom}{s3}{sr}, dir {s.dir}")
    return 0


def _build(args: argparse.Namespace) -> int:
    from antidote_devstack import build
    from antidote_devstack.errors import StackError

    if args.images and not (args.node or args.kind):
        raise StackError("build images", "--images needs --node (its Debian packages and base image)")
    build.build_all(build.DEFAULT_BINARIES + _binaries(args.extra), node=args.node or args.kind,
                    project=args.images or args.kind, s3=args.s3)
    if SCHEMA_REGISTRY in args.extra:
        from antidote_devstack import schema_registry

        schema_registry.build()
    if args.kind:
        from antidote_devstack import kind_env

        kind_env.build()
        print(f"# kind: load its environment with: . {kind_env.kind_dir() / 'env.sh'}; "
              "then hack/kind-up.sh (docs/kind.md)")
    return 0


def _load_images(args: argparse.Namespace) -> int:
    from antidote_devstack import project_images, stack

    s = stack.running(_dir(args))
    if s is None or not s.node:
        print("antidote dev load-images: no running stack with a node; start one with "
              "`antidote dev up --node` (as root)", file=sys.stderr)
        return 1
    loaded = project_images.load_into_node(Path(s.dir))
    for name in loaded.values():
        print(f"loaded {name}")
    print("# install the chart with them: helm install antidote charts/antidote "
          "-n antidote-system --create-namespace -f hack/local-images.values.yaml")
    return 0


def _images(args: argparse.Namespace) -> int:
    from antidote_devstack import project_images, publish

    refs = publish.build_and_push(args.registry, args.tag or project_images._version(),
                                  tool=args.tool, local_bases=args.local_bases,
                                  tls_verify=args.tls_verify == "true", push=args.push)
    for ref in refs.values():
        print(("pushed " if args.push else "built ") + ref)
    # The chart's image.registry defaults to the project's: emptied, the repositories are
    # the whole names pushed here.
    print(f"# point the chart at them: --set image.registry= "
          f"--set image.repository={refs['operator'].rsplit(':', 1)[0]} "
          f"--set image.tag={refs['operator'].rsplit(':', 1)[1]} "
          f"--set consumer.image.repository={refs['consumer'].rsplit(':', 1)[0]} "
          f"--set consumer.image.tag={refs['consumer'].rsplit(':', 1)[1]}")
    return 0
