"""Running the operator: Kopf with Antidote's handlers and watcher, and a ChildRunner where no
kubelet runs (child_runner.py; the caller passes its factory)."""

from __future__ import annotations

import asyncio
import logging
import sys

import kopf

from antidote_api.wire import cli_prefix

from . import heap, kube
from .child_runner import ChildRunnerRefused, RunnerFactory
from .context import Context, Options
from .reconcile import sync_consumer

log = logging.getLogger("antidote.operator")


def _logging(verbose: bool) -> None:
    kopf.configure(verbose=verbose, log_format=kopf.LogFormat.FULL)
    for noisy in ("aiohttp.access",):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not verbose:
        # Kopf logs every handled watch event ("Handler ... succeeded"): one line per
        # Deployment or Pod change. Keep its warnings; the operator logs what it does.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)


async def operate(options: Options, *, runner: RunnerFactory | None = None,
                  stop_flag: asyncio.Event | None = None, ready_flag: asyncio.Event | None = None) -> None:
    from . import handlers  # noqa: F401 - registers the Kopf handlers

    k = kube.Kube.from_environment()
    try:
        ctx = Context(options, k, sync_consumer)
        if runner is not None:
            ctx.runner = await runner(k, options)
        await kopf.operator(
            clusterwide=not options.namespaces, namespaces=options.namespaces,
            # Without --peering the operator runs alone; with it, replicas elect one active
            # instance through Kopf's (Cluster)KopfPeering objects.
            standalone=options.peering is None, peering_name=options.peering,
            # identity: Kopf types it as its peering Identity, a NewType of str it does not export.
            priority=options.priority, liveness_endpoint=options.liveness, identity=ctx.identity,  # type: ignore[arg-type]
            memo=kopf.Memo(ctx=ctx), stop_flag=stop_flag, ready_flag=ready_flag)
    finally:
        await k.close()  # also on a refusal before Kopf starts


def run(options: Options, verbose: bool = False, runner: RunnerFactory | None = None) -> int:
    _logging(verbose)
    heap.limit_arenas()  # before any thread exists (DNS lookups, the metrics server)
    heap.small_tls_buffers()  # before the first connection
    from . import handlers  # noqa: F401 - what `operate` runs, imported before the freeze

    heap.fewer_collections()  # the process's own; not in `operate`, which tests run in theirs
    where = ", ".join(options.namespaces) if options.namespaces else "all namespaces"
    log.info("antidote operator: watching %s; metrics %s; %s", where,
             f"on :{options.metrics_port}" if options.metrics_port else "off",
             f"Prometheus at {options.prometheus_url}" if options.prometheus_url
             else f"scraping consumers every {options.scrape_interval:g}s")
    try:
        asyncio.run(operate(options, runner=runner))
    except KeyboardInterrupt:
        return 0
    except Exception as err:
        from .kube_login import LoginRefused

        if isinstance(err, ChildRunnerRefused):
            print(f"{cli_prefix('operator')}{err}", file=sys.stderr)
            return 2
        if isinstance(err, LoginRefused):
            print(f"{cli_prefix('operator')}cannot log in to the API server: {err}", file=sys.stderr)
            return 2
        raise
    return 0
