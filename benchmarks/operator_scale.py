"""The operator at scale, on the real API server of the local stack:

    .venv/bin/python benchmarks/operator_scale.py [--consumers 1000] [--rss-consumers 1000]

(1) 1,000 QueueConsumers, each with its own /metrics; consumers cross their disable
    threshold (antidote_queue_disabled{reason="ConsecutiveBatchFailures"} goes to 1) and the
    time until their Deployment shows 0 replicas is measured from a watch:
    (a) staggered: crossings spread over 30 s, (b) burst: all at once (after a resume).
    Goal: p99 <= 2 s.
(2) 1,000 QueueConsumers: the operator's resident memory once they are all reconciled and
    scraped, and how long their first reconcile took. Goals: RSS <= 120 MB, first
    reconcile <= 20 s.
(3) The operator restarted over those consumers: how long until it has reconciled as many
    times as there are consumers and the API server sees no more requests (each consumer
    verifies its children), and the API requests.
(4) The API server's floor under (1b) and (2), measured in the same run (api_floor.py): the
    same requests from a bare client with no operator, and the operator against it.

The /metrics endpoints are served by this benchmark process (no consumer could run 1,000
Spark drivers here): a LOAD GENERATOR standing in for the consumers' metrics, rendered by
the consumer's own Metrics class, not a mock of the operator, which runs unmodified as
`antidote operator` in a subprocess. Uses the stack named by $ANTIDOTE_STACK_DIR if it
runs, else starts its own and stops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402
from kubernetes import client, config, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from antidote_api.types import GROUP, POISON_POLICIES, QUEUE_CONSUMERS, VERSION  # noqa: E402
from antidote_devstack.procs import terminate as stop  # noqa: E402
from antidote_operator import heap  # noqa: E402
from benchmarks import api_floor, bench_stack  # noqa: E402
from benchmarks.consumer_pages import FakeConsumers, free_port  # noqa: E402

ANTIDOTE = str(Path(sys.executable).with_name("antidote"))


def log(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


# --- the cluster ---------------------------------------------------------------------------

class Bench:
    def __init__(self, kubeconfig: str, workdir: Path, profile: Path | None = None,
                 scrape_interval: float = 2.0):
        self.kubeconfig = kubeconfig
        self.scrape_interval = scrape_interval
        self.profile = profile
        self.profilers: list[subprocess.Popen[bytes]] = []
        self.api = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.objs = client.CustomObjectsApi(self.api)
        self.ext = client.ApiextensionsV1Api(self.api)
        self.workdir = workdir
        self.pool = ThreadPoolExecutor(8)
        self.requests0: Counter[tuple[str, str, str]] = Counter()

    def install_crds(self) -> None:
        for path in sorted((REPO / "crds").glob("*.yaml")):
            try:
                self.ext.create_custom_resource_definition(yaml.safe_load(path.read_text()))
            except ApiException as err:
                if err.status != 409:
                    raise
        deadline = time.monotonic() + 60
        while True:
            try:
                self.objs.list_namespaced_custom_object(GROUP, VERSION, "default", QUEUE_CONSUMERS)
                return
            except ApiException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def namespace(self, prefix: str) -> str:
        ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        return ns

    def start(self, tag: str, n: int, fake: FakeConsumers) -> tuple[str, list[str], tuple[subprocess.Popen[bytes], int, Path]]:
        """A namespace of `n` QueueConsumers and an operator watching it."""
        ns = self.namespace(f"bench-{tag}")
        log(f"creating {n} QueueConsumers in {ns}")
        names = self.populate(ns, n, fake)
        self.requests0 = api_requests(self)
        return ns, names, self.operator(ns, fake, tag)

    def finish(self, ns: str, proc: subprocess.Popen[bytes], logfile: Path) -> None:
        stop(proc)
        log(f"operator log: {logfile}")
        self.cleanup(ns)

    def populate(self, ns: str, n: int, fake: FakeConsumers) -> list[str]:
        self.objs.create_namespaced_custom_object(GROUP, VERSION, ns, POISON_POLICIES, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "PoisonPolicy", "metadata": {"name": "default"},
            "spec": {}})
        names = [f"c{i:04d}" for i in range(n)]

        def create(name: str) -> None:
            fake.add(ns, name)
            self.objs.create_namespaced_custom_object(GROUP, VERSION, ns, QUEUE_CONSUMERS, {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "QueueConsumer", "metadata": {"name": name},
                "spec": {"policyRef": {"name": "default"},
                         "source": {"kafka": {"bootstrapServers": "kafka:9092", "topic": f"topic-{name}"}},
                         "handler": "shop.handlers:charge", "checkpoint": {"location": f"/ckpt/{name}"}}})

        list(self.pool.map(create, names))
        return names

    def operator(self, ns: str, fake: FakeConsumers, tag: str) -> tuple[subprocess.Popen[bytes], int, Path]:
        port = free_port()
        logfile = self.workdir / f"operator-{tag}.log"
        env = {**os.environ, "KUBECONFIG": self.kubeconfig}
        proc = subprocess.Popen(
            [ANTIDOTE, "operator", "--namespace", ns, "--metrics-port", str(port),
             "--metrics-url-template", fake.url_template(), "--scrape-interval", f"{self.scrape_interval:g}"],
            env=env, stdout=logfile.open("wb"), stderr=subprocess.STDOUT)
        if self.profile is not None:
            # Sampled from outside (py-spy), so the operator runs unmodified; one collapsed-stack
            # file per phase, from its start until it stops.
            out = self.profile / f"operator-{tag}.txt"
            self.profilers.append(subprocess.Popen(
                [py_spy(), "record", "--pid", str(proc.pid), "--rate", "50", "--format", "raw",
                 "--threads", "--nonblocking", "--output", str(out)],
                stdout=subprocess.DEVNULL, stderr=(self.profile / f"py-spy-{tag}.log").open("wb")))
            log(f"profiling the operator into {out}")
        return proc, port, logfile

    def window(self, proc: subprocess.Popen[bytes], tag: str) -> subprocess.Popen[bytes] | None:
        """With --profile, a second sampler over one phase only (SIGINT ends it: `end_window`)."""
        if self.profile is None:
            return None
        out = self.profile / f"operator-{tag}.txt"
        return subprocess.Popen(
            [py_spy(), "record", "--pid", str(proc.pid), "--rate", "100", "--format", "raw",
             "--threads", "--nonblocking", "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=(self.profile / f"py-spy-{tag}.log").open("wb"))

    @staticmethod
    def end_window(sampler: subprocess.Popen[bytes] | None) -> None:
        if sampler is not None:
            sampler.send_signal(signal.SIGINT)  # py-spy writes its file and exits
            sampler.wait(60)

    def wait(self, what: str, fn, timeout: float = 600, interval: float = 1.0):
        deadline = time.monotonic() + timeout
        while True:
            out = fn()
            if out:
                return out
            if time.monotonic() > deadline:
                raise SystemExit(f"benchmark: timed out waiting for {what}")
            time.sleep(interval)

    def replicas(self, ns: str) -> dict[str, int]:
        return {d.metadata.name: d.spec.replicas for d in self.apps.list_namespaced_deployment(ns).items}

    def reconciled(self, ns: str) -> int:
        items = self.objs.list_namespaced_custom_object(GROUP, VERSION, ns, QUEUE_CONSUMERS)["items"]
        return sum(1 for i in items if (i.get("status") or {}).get("conditions"))

    def cleanup(self, ns: str) -> None:
        """Without a controller-manager nothing is collected: delete what was made."""
        items = self.objs.list_namespaced_custom_object(GROUP, VERSION, ns, QUEUE_CONSUMERS)["items"]

        def drop(name: str) -> None:
            try:
                self.objs.patch_namespaced_custom_object(GROUP, VERSION, ns, QUEUE_CONSUMERS, name,
                                                         {"metadata": {"finalizers": None}})
            except ApiException:
                pass

        list(self.pool.map(drop, [i["metadata"]["name"] for i in items]))
        self.objs.delete_collection_namespaced_custom_object(GROUP, VERSION, ns, QUEUE_CONSUMERS)
        self.objs.delete_collection_namespaced_custom_object(GROUP, VERSION, ns, POISON_POLICIES)
        self.apps.delete_collection_namespaced_deployment(ns)
        self.core.delete_collection_namespaced_config_map(ns)
        self.core.delete_collection_namespaced_service_account(ns)
        rbac = client.RbacAuthorizationV1Api(self.api)
        rbac.delete_collection_namespaced_role(ns)
        rbac.delete_collection_namespaced_role_binding(ns)
        for svc in self.core.list_namespaced_service(ns).items:
            self.core.delete_namespaced_service(svc.metadata.name, ns)
        self.core.delete_collection_namespaced_event(ns)
        self.core.delete_namespace(ns)


def py_spy() -> str:
    """py-spy (a sampling profiler from PyPI; not a dependency of the project)."""
    import shutil

    found = shutil.which("py-spy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        raise SystemExit("benchmark: --profile needs py-spy: .venv/bin/pip install py-spy")
    return found




def rss_mb(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def cpu_seconds(pid: int) -> float:
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def judged(measure: str, result: str, goal: str, met: bool) -> tuple[str, str, str, str]:
    """A row of the report with its goal and whether this run met it."""
    return measure, result, goal, "ok" if met else "MISSED"


def operator_histogram(port: int, name: str) -> tuple[float, float]:
    """(sum, count) of one of the operator's own histograms."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = dict(line.rsplit(" ", 1) for line in text.splitlines()
                  if line.startswith((f"{name}_sum", f"{name}_count")))
    return float(values.get(f"{name}_sum", 0)), float(values.get(f"{name}_count", 0))


def operator_counter(port: int, name: str, labels: str) -> float:
    """One series of one of the operator's own counters (0 until it exists)."""
    import urllib.request

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    except OSError:
        return 0.0  # not serving yet
    prefix = f"{name}{{{labels}}} "
    return sum(float(line[len(prefix):]) for line in text.splitlines() if line.startswith(prefix))


def api_requests(bench: Bench) -> Counter[tuple[str, str, str]]:
    """The API server's own request counter (apiserver_request_total), summed by verb,
    resource[/subresource] and HTTP code: every client's requests, the operator's and Kopf's
    included, as the server counted them."""
    method, url, headers, _, _ = bench.api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    text = bench.api.call_api(method, url, header_params=headers, _request_timeout=30).read().decode()
    out: Counter[tuple[str, str, str]] = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[:line.rfind("}")]))
        what = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        out[(labels.get("verb", ""), what, labels.get("code", ""))] += int(float(line.rsplit(" ", 1)[1]))
    return out


def requests_line(before: Counter[tuple[str, str, str]], after: Counter[tuple[str, str, str]]) -> str:
    """What changed between two readings of api_requests, largest first (the benchmark's own
    polling, LIST and WATCH, included)."""
    delta = after - before
    parts = [f"{verb} {what} {code}: {n}" for (verb, what, code), n in delta.most_common() if n]
    return f"{sum(delta.values())} ({', '.join(parts)})"


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


class ZeroWatcher:
    """Records when each Deployment is first seen with 0 replicas (a watch, not polling)."""

    def __init__(self, bench: Bench, ns: str):
        self.bench, self.ns = bench, ns
        self.zero_at: dict[str, float] = {}
        self.stop = False
        rv = bench.apps.list_namespaced_deployment(ns).metadata.resource_version
        self.thread = threading.Thread(target=self._run, args=(rv,), daemon=True)
        self.thread.start()

    def _run(self, rv: str) -> None:
        w = watch.Watch()
        while not self.stop:
            for ev in w.stream(self.bench.apps.list_namespaced_deployment, self.ns, resource_version=rv,
                               timeout_seconds=30):
                d = ev["object"]
                rv = d.metadata.resource_version
                if d.spec.replicas == 0 and d.metadata.name not in self.zero_at:
                    self.zero_at[d.metadata.name] = time.monotonic()
                if self.stop:
                    break

    def reset(self) -> None:
        self.zero_at.clear()


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """Python's cyclic collector off in this process while a window is timed, as `timeit`
    does: a full collection here (up to 0.7 s with 1,000 consumers' pages and watch events
    in memory) delays the page a consumer answers, or when a Deployment's 0 is seen, and
    would be counted as the operator's latency or the floor's."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@collector_off()
def crossing(bench: Bench, fake: FakeConsumers, ns: str, names: list[str], spread: float,
             zeros: ZeroWatcher) -> list[float]:
    zeros.reset()
    crossed: dict[str, float] = {}
    if spread:
        schedule = sorted((random.uniform(0, spread), n) for n in names)
        start = time.monotonic()
        for at, name in schedule:
            time.sleep(max(0.0, start + at - time.monotonic()))
            crossed[name] = fake.cross(ns, name)
    else:
        for name in names:
            crossed[name] = fake.cross(ns, name)
    bench.wait("every Deployment at 0 replicas", lambda: len(zeros.zero_at) >= len(names), timeout=300,
               interval=0.2)
    return [zeros.zero_at[n] - crossed[n] for n in names]


def resume_all(bench: Bench, fake: FakeConsumers, ns: str, names: list[str]) -> None:
    for n in names:
        fake.heal(ns, n)

    def resume(name: str) -> None:
        bench.objs.patch_namespaced_custom_object(GROUP, VERSION, ns, QUEUE_CONSUMERS, name, {
            "metadata": {"annotations": {"antidote.dev/resume": "bench"}}})

    time.sleep(3)  # let the healed pages be scraped
    list(bench.pool.map(resume, names))
    bench.wait("every Deployment back at 1 replica",
               lambda: sum(1 for r in bench.replicas(ns).values() if r == 1) == len(names), interval=0.5)


def floor(bench: Bench, fake: FakeConsumers, n: int, template: dict) -> tuple[float, list[float]]:
    """api_floor's two figures on a namespace of `n` fresh QueueConsumers: seconds for their
    first-reconcile requests, then each Deployment's seconds to 0 replicas in a burst.
    `template`: a consumer the operator reconciled (its status and Kopf's annotations)."""
    os.environ["KUBECONFIG"] = bench.kubeconfig  # api_floor logs in as the operator does
    ns = bench.namespace("bench-floor")
    log(f"floor: {n} QueueConsumers in {ns}, their requests made by a bare client")
    try:
        bench.populate(ns, n, fake)
        consumers = bench.objs.list_namespaced_custom_object(GROUP, VERSION, ns, QUEUE_CONSUMERS)["items"]
        record = {k: v for k, v in template["metadata"].get("annotations", {}).items()
                  if k.startswith("kopf.antidote.dev/")}
        before = api_requests(bench)
        with collector_off():  # its pauses would lower the bar the operator is read against
            took = asyncio.run(api_floor.first_reconcile(consumers, record, template["status"]))
        log(f"floor: first-reconcile requests took {took:.1f}s; API requests meanwhile: "
            f"{requests_line(before, api_requests(bench))}")
        deployments = [d.metadata.name for d in bench.apps.list_namespaced_deployment(ns).items]
        with collector_off():
            burst = asyncio.run(api_floor.scale_to_zero(ns, deployments))
        log(f"floor: {len(burst)} Deployments to 0 replicas, the last after {max(burst):.2f}s")
        return took, burst
    finally:
        bench.cleanup(ns)


def main() -> int:
    # Long on purpose: a benchmark script's flags and its measured steps in the order they run.
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--consumers", type=int, default=1000, help="consumers in the latency test")
    ap.add_argument("--rss-consumers", type=int, default=1000, help="consumers in the memory test")
    ap.add_argument("--spread", type=float, default=30.0, help="seconds the staggered crossings span")
    ap.add_argument("--scrape-interval", type=float, default=2.0,
                    help="the operator's --scrape-interval (default 2, the operator's default)")
    ap.add_argument("--consumers-without-wait", action="store_true",
                    help="the load generator ignores waiting scrapes, as consumers older than "
                         "them do: the operator learns of each crossing from its periodic scrape")
    ap.add_argument("--no-restart", action="store_true",
                    help="skip the last phase: an operator restart over the memory test's consumers")
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="sample the operator with py-spy into DIR (collapsed stacks per phase)")
    args = ap.parse_args()
    if args.profile is not None:
        py_spy()
        args.profile.mkdir(parents=True, exist_ok=True)
    random.seed(7)
    # This process is the load generator (the consumers' pages, served from a thread) and the
    # clock (the watch that times each Deployment's 0, the floor's client). With Python's
    # default collector thresholds it paused for up to 0.7 s at a time (80 full collections
    # in a run, 28 s of its CPU). The operator's own tuning here; off while timing (below).
    heap.fewer_collections()

    stack, own = bench_stack.up()
    workdir = Path(tempfile.mkdtemp(prefix="antidote-operator-bench-"))
    bench = Bench(stack.kubeconfig, workdir, args.profile, args.scrape_interval)
    fake = FakeConsumers(waiting=not args.consumers_without_wait)
    rows: list[tuple[str, str, str, str]] = []
    loads = [load()]
    try:
        bench.install_crds()

        # (1) threshold crossing -> 0 replicas
        ns, names, (proc, _port, logfile) = bench.start("latency", args.consumers, fake)
        try:
            t0 = time.monotonic()
            bench.wait("every Deployment", lambda: sum(1 for r in bench.replicas(ns).values() if r == 1)
                       == len(names))
            bench.wait("every consumer scraped", lambda: all(fake.hits.get((ns, n), 0) >= 2 for n in names))
            log(f"{len(names)} consumers reconciled and scraped in {time.monotonic() - t0:.1f}s; "
                f"API requests meanwhile: {requests_line(bench.requests0, api_requests(bench))}")
            loads.append(load())
            zeros = ZeroWatcher(bench, ns)
            cpu0 = cpu_seconds(proc.pid)
            log(f"staggered: {len(names)} crossings over {args.spread:g}s")
            stag = crossing(bench, fake, ns, names, args.spread, zeros)
            log("resuming all")
            resume_all(bench, fake, ns, names)
            time.sleep(3)
            log(f"burst: {len(names)} crossings at once")
            h0 = operator_histogram(_port, "antidote_operator_disable_seconds")
            sampler = bench.window(proc, "burst")
            try:
                burst = crossing(bench, fake, ns, names, 0.0, zeros)
            finally:
                bench.end_window(sampler)
            h1 = operator_histogram(_port, "antidote_operator_disable_seconds")
            acting = (h1[0] - h0[0]) / max(1.0, h1[1] - h0[1])
            cpu = cpu_seconds(proc.pid) - cpu0
            zeros.stop = True
            rss, _ = rss_mb(proc.pid)
            for label, lat in ((f"staggered over {args.spread:g}s", stag), ("burst, all at once", burst)):
                rows.append(judged(f"crossing -> 0 replicas, {len(names)} consumers, {label}",
                                   f"p50 {statistics.median(lat):.2f}s  p90 {percentile(lat, 90):.2f}s  "
                                   f"p99 {percentile(lat, 99):.2f}s  max {max(lat):.2f}s",
                                   "p99 <= 2 s", percentile(lat, 99) <= 2))
            rows.append(("  of which: operator, evidence read -> scaled to 0 (burst, mean)",
                         f"{acting:.2f}s", "-", "-"))
            rows.append((f"operator CPU during the latency test ({len(names)} consumers)",
                         f"{cpu:.1f}s CPU, RSS {rss:.0f} MB", "-", "-"))
        finally:
            bench.finish(ns, proc, logfile)

        # (2) memory with many consumers
        ns, names, (proc, _port, logfile) = bench.start("rss", args.rss_consumers, fake)
        try:
            t0 = time.monotonic()
            bench.wait("every consumer reconciled", lambda: bench.reconciled(ns) == len(names), interval=2)
            bench.wait("every Deployment", lambda: len(bench.replicas(ns)) == len(names), interval=2)
            took = took_first = time.monotonic() - t0
            took_cpu = cpu_seconds(proc.pid)  # from its start: imports and log-in included
            requests = requests_line(bench.requests0, api_requests(bench))
            log(f"first reconcile took {took:.1f}s; API requests meanwhile: {requests}")
            loads.append(load())
            bench.wait("every consumer scraped", lambda: all(fake.hits.get((ns, n), 0) >= 2 for n in names))
            template = bench.objs.get_namespaced_custom_object(GROUP, VERSION, ns, QUEUE_CONSUMERS, names[0])
            cpu0, w0 = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(20)  # steady state: scraping every consumer every --scrape-interval
            cpu_share = (cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - w0)
            rss, peak = rss_mb(proc.pid)
            rows.append(judged(f"operator RSS, {len(names)} consumers reconciled and scraped",
                               f"{rss:.0f} MB (peak {peak:.0f} MB)", "<= 120 MB", rss <= 120))
            rows.append(judged(f"first reconcile of {len(names)} consumers (6 children each)",
                               f"{took:.0f}s", "<= 20 s", took <= 20))
            rows.append((f"steady-state CPU, scraping {len(names)} consumers every "
                         f"{args.scrape_interval:g} s{'' if fake.waiting else ' (no waiting scrapes)'}",
                         f"{cpu_share * 100:.0f}% of one core", "-", "-"))
            rows.append(("  API requests during the first reconcile; operator CPU until then",
                         f"{requests.split(' (')[0]}; {took_cpu:.1f}s CPU", "-", "-"))
            if not args.no_restart:
                # (3) an operator restart: the same consumers, reconciled before, verified anew.
                stop(proc)
                before = api_requests(bench)
                proc, port, logfile = bench.operator(ns, fake, "restart")
                t0 = time.monotonic()
                bench.wait(f"{len(names)} reconciles after a restart",
                           lambda: operator_counter(port, "antidote_operator_reconciles_total",
                                                    'kind="QueueConsumer",result="ok"') >= len(names))
                # Done when the API server has seen no new request for 3 s (reconciles that
                # verified a consumer and those a metrics sample kicked count alike above).
                took, seen, quiet = time.monotonic() - t0, -1, 0
                while quiet < 3:
                    now = sum(n for (_v, what, _c), n in api_requests(bench).items() if what)
                    quiet, seen = (quiet + 1, seen) if now == seen else (0, now)
                    if not quiet:
                        took = time.monotonic() - t0
                    time.sleep(1)
                requests = requests_line(before, api_requests(bench))
                log(f"after a restart, {len(names)} reconciles took {took:.1f}s; API requests meanwhile: {requests}")
                loads.append(load())
                rows.append((f"operator restart: {len(names)} consumers verified (until requests stop)",
                             f"{took:.0f}s; {requests.split(' (')[0]} API requests; {cpu_seconds(proc.pid):.1f}s CPU",
                             "-", "-"))
        finally:
            bench.finish(ns, proc, logfile)

        # (4) the API server's floor: the same requests from a bare client, no operator.
        floor_took, floor_burst = floor(bench, fake, args.rss_consumers, template)
        rows.append((f"  floor: the same requests by a bare client, no operator ({args.rss_consumers} consumers)",
                     f"{floor_took:.0f}s; operator/floor {took_first / floor_took:.2f}", "-", "-"))
        rows.append((f"  floor: {len(floor_burst)} Deployments scaled to 0 at once by a bare client",
                     f"p99 {percentile(floor_burst, 99):.2f}s; operator/floor "
                     f"{percentile(burst, 99) / percentile(floor_burst, 99):.2f}", "-", "-"))
    finally:
        for p in bench.profilers:
            p.wait(60)  # py-spy ends with the process it samples and writes its file
        bench_stack.down(own)

    print()
    loads.append(load())
    print(f"antidote operator at scale (kube-apiserver {stack.kube_version}, {os.cpu_count()} CPUs; "
          "consumer /metrics served by this benchmark as a load generator; operator "
          f"--scrape-interval {args.scrape_interval:g}, consumers "
          f"{'answer' if fake.waiting else 'ignore'} waiting scrapes)")
    print(f"load average (1/5/15 min) at the start, after each first reconcile and at the end: "
          f"{', '.join(loads)}")
    widths = [max(len(r[i]) for r in rows + [("measure", "result", "goal", "")]) for i in range(4)]
    for r in [("measure", "result", "goal", "")] + rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0 if all(r[3] != "MISSED" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
