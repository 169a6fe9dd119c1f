"""Running the operator: Kopf with Antidote's handlers, watcher and (optionally) dev runner."""

from __future__ import annotations

import asyncio
import logging
import sys

import kopf

from antidote_api.wire import cli_prefix

from . import heap, kube
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


async def operate(options: Options, *, stop_flag: asyncio.Event | None = None,
                  ready_flag: asyncio.Event | None = None) -> None:
    from . import handlers  # noqa: F401 - registers the Kopf handlers

    k = kube.Kube.from_environment()
    try:
        ctx = Context(options, k, sync_consumer)
        if options.dev_runner:
            from .devrunner.local import DevRunnerRefused, check_allowed
            from .devrunner.runner import DevRunner

            if options.peering:
                raise DevRunnerRefused("it runs consumers inside this process, so it cannot hand "
                                       "them over to another replica: drop --peering")
            await check_allowed(k)
            targets = None
            if options.dev_runner_targets:
                from .devrunner.targets import TargetFiles

                targets = TargetFiles(options.dev_runner_targets)
                targets.prune()
            ctx.devrunner = DevRunner(k, base=options.dev_runner_dir, master=options.dev_runner_master,
                                      targets=targets)
        await kopf.operator(
            clusterwide=not options.namespaces, namespaces=options.namespaces,
            # Without --peering the operator runs alone; with it, replicas elect one active
            # instance through Kopf's (Cluster)KopfPeering objects.
            standalone=options.peering is None, peering_name=options.peering,
            priority=options.priority, liveness_endpoint=options.liveness, identity=ctx.identity,  # type: ignore[arg-type]
            memo=kopf.Memo(ctx=ctx), stop_flag=stop_flag, ready_flag=ready_flag)
    finally:
        await k.close()  # also on a refusal before Kopf starts


def run(options: Options, verbose: bool = False) -> int:
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
        asyncio.run(operate(options))
    except KeyboardInterrupt:
        return 0
    except Exception as err:
        from .devrunner.local import DevRunnerRefused
        from .kube_login import LoginRefused

        if isinstance(err, DevRunnerRefused):
            print(f"{cli_prefix('operator')}--dev-runner refused: {err}", file=sys.stderr)
            return 2
        if isinstance(err, LoginRefused):
            print(f"{cli_prefix('operator')}cannot log in to the API server: {err}", file=sys.stderr)
            return 2
        raise
    return 0
