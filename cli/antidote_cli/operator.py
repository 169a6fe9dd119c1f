"""`antidote operator`: run the Kopf operator (QueueConsumers -> Spark consumers)."""

from __future__ import annotations

import argparse
import os
import sys

from antidote_api.wire import cli_prefix


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("operator", help="run the operator (reconciles QueueConsumers)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--namespace", "-n", dest="namespaces", action="append", default=[],
                       metavar="NS", help="watch this namespace (repeatable; glob patterns work)")
    where.add_argument("--all-namespaces", "-A", action="store_true",
                       help="watch every namespace (the default)")
    p.add_argument("--dev-runner", action="store_true",
                   help="LOCAL STACK ONLY: run consumer Deployments as local processes "
                        "(refused in a pod, off loopback, or when the cluster has Nodes)")
    p.add_argument("--dev-runner-dir", default=None,
                   help="where the dev runner keeps settings copies and consumer logs (default: a temp dir)")
    p.add_argument("--dev-runner-master", default="local[2]", help="Spark master of dev-runner consumers")
    p.add_argument("--dev-runner-targets", metavar="DIR",
                   default=os.environ.get("ANTIDOTE_PROMETHEUS_TARGETS") or None,
                   help="with --dev-runner: write Prometheus file_sd target files for this operator's "
                        "/metrics and each consumer's into DIR (default $ANTIDOTE_PROMETHEUS_TARGETS, "
                        "which `antidote dev env` exports with `dev up --prometheus`)")
    p.add_argument("--finalizer", action="store_true",
                   help="hold antidote.dev/finalizer on each QueueConsumer and delete its children "
                        "when it is deleted, for an API server without a garbage collector (the "
                        "local stack; implied by --dev-runner). Without it a cluster's garbage "
                        "collector deletes them through their owner references")
    p.add_argument("--metrics-port", type=int, default=8080,
                   help="serve the operator's own /metrics on this port (0: off; default 8080)")
    p.add_argument("--peering", metavar="NAME", default=None,
                   help="run as one of several replicas coordinated by Kopf peering NAME "
                        "(needs Kopf's peering CRDs); default: standalone")
    p.add_argument("--priority", type=int, default=0, help="peering priority of this replica")
    p.add_argument("--print-peering-crds", action="store_true",
                   help="print Kopf's peering CRDs (needed once for --peering) and exit")
    p.add_argument("--scrape-interval", type=float, default=2.0,
                   help="seconds between reads of the consumers' metrics (default 2)")
    p.add_argument("--metrics-url-template", default="http://{name}.{namespace}.svc:{port}/metrics",
                   help="where a consumer's /metrics is; {name} {namespace} {port} are filled in "
                        "(default: the headless Service's DNS name)")
    p.add_argument("--prometheus-url", default=None,
                   help="read consumer metrics from this Prometheus (PromQL) instead of scraping")
    p.add_argument("--consumer-image", default=None,
                   help="driver and executor image when spec.spark.image is not set")
    p.add_argument("--driver-cluster-role", default=None,
                   help="the ClusterRole bound to each consumer's driver in its namespace "
                        "(the chart passes its <release>-antidote-spark-driver; default antidote-spark-driver)")
    p.add_argument("--resync-interval", type=float, default=300.0,
                   help="seconds between full reconciles of each consumer (0: only on events)")
    p.add_argument("--poison-event-interval", type=float, default=60.0,
                   help="at most one PoisonDetected Event per consumer per this many seconds")
    p.add_argument("--liveness", default=None, metavar="URL",
                   help="Kopf liveness endpoint, e.g. http://0.0.0.0:8081/healthz")
    p.add_argument("--verbose", "-v", action="store_true", help="log more")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.print_peering_crds:
        from antidote_operator.peering import PEERING_CRDS

        print(PEERING_CRDS, end="")
        return 0
    from antidote_operator import no_kubernetes

    no_kubernetes.keep_out()  # before Kopf is imported: see the module
    from antidote_operator.object_watch import namespace_patterns

    patterns = namespace_patterns(args.namespaces)
    if args.peering and patterns and not args.all_namespaces:
        # Kopf then keeps a KopfPeering in each namespace the patterns match, while the
        # operator's own loops (the metrics watcher, the drivers' watches) read the peering
        # by the names given: they would never act. Refused rather than silently idle.
        print(f"{cli_prefix('operator')}--peering with --namespace patterns ({', '.join(patterns)}) is not "
              "supported: name the namespaces (--namespace NS, repeated), or use --all-namespaces "
              "with a ClusterKopfPeering", file=sys.stderr)
        return 2
    from antidote_operator.builders.common import RenderOptions
    from antidote_operator.main import run as run_operator
    from antidote_operator.context import Options

    given = {"image": args.consumer_image, "driver_cluster_role": args.driver_cluster_role}
    render = RenderOptions(**{k: v for k, v in given.items() if v})
    options = Options(
        namespaces=[] if args.all_namespaces else list(args.namespaces),
        finalizer=args.finalizer or args.dev_runner,
        metrics_port=args.metrics_port or None, peering=args.peering, priority=args.priority,
        scrape_interval=args.scrape_interval, metrics_url_template=args.metrics_url_template,
        prometheus_url=args.prometheus_url, resync_interval=args.resync_interval,
        poison_event_interval=args.poison_event_interval, liveness=args.liveness, render=render)
    runner = None
    if args.dev_runner:  # the local stack's kubelet stand-in, plugged in from outside
        from antidote_devrunner.runner import DevRunnerOptions, factory

        runner = factory(DevRunnerOptions(base=args.dev_runner_dir, master=args.dev_runner_master,
                                          targets=args.dev_runner_targets))
    return run_operator(options, verbose=args.verbose, runner=runner)
