"""The metrics watcher: reads each consumer's quarantine metrics on an interval.

Two sources, one result (`Sample` per consumer):
- scrape mode (default): GET each running consumer's /metrics, at the headless Service's
  DNS name on a real cluster (`--metrics-url-template`), or the port the dev runner
  announced on the Deployment;
- Prometheus mode (`--prometheus-url`): one PromQL query for every consumer at once.

In scrape mode each running consumer also holds a waiting scrape (`disable_wait`), which its
driver answers the moment it disables its queue: the evidence that matters most does not
wait for the next round.

A consumer that stops (it does when it disables its queue) takes its /metrics with it, so
the last sample is kept, not cleared. Samples only reach status through `decide`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import re
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import aiohttp

from antidote_api.wire import DISABLE_REASONS, METRIC_PREFIX, Metric

from . import heap
from .disable_wait import DisableWaits
from .observations import LastPoisonSample, Sample

if TYPE_CHECKING:
    from .context import Context
    from .state import ConsumerState

log = logging.getLogger("antidote.operator.watcher")

METRIC_NAMES = tuple(m.value for m in Metric)
# How often the free heap is handed back to the kernel (heap.trim: a few ms per call).
TRIM_INTERVAL = 10.0


class SampleBuilder:
    """Folds metric samples (name, labels, value) of one consumer into a `Sample`."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.consecutive: int | None = None
        self.disabled: str | None = None
        self.last: tuple[float, Mapping[str, str]] | None = None
        self.last_at: dict[str, int] = {}  # "partition", "offset" of the last poison message
        self.dispositions: dict[str, str] = {}
        self.depths: dict[str, int] = {}
        self.disabled_at: datetime | None = None
        self.positions: dict[int, int] = {}  # source partition -> next offset (autoscaling)
        self.lags: dict[int, int] = {}

    def add(self, name: str, labels: Mapping[str, str], value: float) -> None:
        if name == Metric.MESSAGES and "outcome" in labels:
            self.counts[labels["outcome"]] = self.counts.get(labels["outcome"], 0) + int(value)
        elif name == Metric.CONSECUTIVE_BATCH_FAILURES:
            self.consecutive = int(value)
        elif name == Metric.QUEUE_DISABLED:
            if value >= 1 and labels.get("reason") in DISABLE_REASONS:
                self.disabled = labels["reason"]
        elif name == Metric.LAST_POISON_TIMESTAMP:
            if value > 0 and (self.last is None or value > self.last[0]):
                self.last = (value, labels)
        elif name in (Metric.LAST_POISON_PARTITION, Metric.LAST_POISON_OFFSET):
            self.last_at[name.rsplit("_", 1)[1]] = int(value)
        elif name == Metric.POISON_MESSAGES:
            if value > 0 and "reason" in labels and "disposition" in labels:
                self.dispositions[labels["reason"]] = labels["disposition"]
        elif name in (Metric.SOURCE_PARTITION_OFFSET, Metric.SOURCE_PARTITION_LAG):
            try:
                part = int(labels.get("partition", ""))
            except ValueError:
                return
            into = self.positions if name == Metric.SOURCE_PARTITION_OFFSET else self.lags
            into[part] = int(value)
        elif name == Metric.TOPIC_DEPTH and "kind" in labels:
            self.depths[labels["kind"]] = self.depths.get(labels["kind"], 0) + int(value)

    def build(self, at: datetime) -> Sample:
        last = None
        if self.last is not None:
            ts, lab = self.last
            try:
                last = LastPoisonSample(
                    time=datetime.fromtimestamp(ts, timezone.utc), reason=lab.get("reason", ""),
                    error_class=lab.get("error_class") or None, topic=lab.get("topic", ""),
                    # Values of their own gauges; labels on consumers older than those.
                    partition=self.last_at.get("partition", int(lab.get("partition", "0"))),
                    offset=self.last_at.get("offset", int(lab.get("offset", "0"))),
                    disposition=self.dispositions.get(lab.get("reason", "")))
            except ValueError:
                last = None
        return Sample(at=self.disabled_at or at, counts=dict(self.counts),
                      consecutive=self.consecutive, disabled=self.disabled, last_poison=last,
                      depths=dict(self.depths),
                      partitions=tuple((p, pos, self.lags.get(p, 0))
                                       for p, pos in sorted(self.positions.items())) or None)


def series_identity(labels: Mapping[str, str]) -> tuple[str, str] | None:
    """Whose a series from Prometheus is: (namespace, consumer) of the *target* it was scraped
    from, never what the page said of itself; None when the two disagree or it has none.

    The chart's PodMonitor (honorLabels false) labels each target from its pod's Kubernetes
    metadata: `namespace` from the pod's namespace, `consumer` from its `antidote.dev/consumer`
    label, which the operator sets on the driver pods. The labels the page wrote itself then
    arrive renamed `exported_namespace`/`exported_consumer`; any pod may write any, so a page
    that names another consumer than its target speaks for no one (a pod in namespace A must
    not disable B's consumer)."""
    ns, name = labels.get("namespace"), labels.get("consumer")
    if not ns or not name:
        return None
    if labels.get("exported_namespace", ns) != ns or labels.get("exported_consumer", name) != name:
        return None
    return ns, name


_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _unescape(value: str) -> str:
    return re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], value) if "\\" in value else value


def parse_metrics(text: str, namespace: str, name: str, at: datetime) -> Sample:
    """A consumer's /metrics page (Prometheus text format) as a Sample of `namespace/name`.

    Reads only the few series the operator needs, line by line: with hundreds of consumers
    scraped every few seconds, a general exposition parser costs the operator most of a core.
    """
    b = SampleBuilder()
    for line in text.splitlines():
        if not line.startswith(METRIC_NAMES):
            continue
        brace = line.find("{")
        if brace < 0:
            continue
        metric = line[:brace]
        if metric not in METRIC_NAMES:
            continue
        close = line.rfind("}")
        rest = line[close + 1:].split()
        if close < brace or not rest:
            raise ValueError(f"malformed sample line: {line[:80]}")
        labels = {k: _unescape(v) for k, v in _LABEL.findall(line, brace + 1, close)}
        # The page at the consumer's own address: its labels only pick its series out.
        if (labels.get("namespace"), labels.get("consumer")) == (namespace, name):
            b.add(metric, labels, float(rest[0]))
    return b.build(at)


def promql_selector(namespaces: Iterable[str] = ()) -> str:
    names = "|".join(n.removeprefix(METRIC_PREFIX) for n in METRIC_NAMES)
    sel = f'__name__=~"{METRIC_PREFIX}({names})"'
    ns = sorted(namespaces)
    if ns:
        sel += f',namespace=~"{"|".join(ns)}"'
    return "{" + sel + "}"


def promql_disabled(namespaces: Iterable[str] = ()) -> str:
    """When each consumer's disabling was scraped (Prometheus answers instant queries with
    the evaluation time; `timestamp()` gives the sample's own)."""
    ns = sorted(namespaces)
    sel = f'{{namespace=~"{"|".join(ns)}"}}' if ns else ""
    return f"timestamp({Metric.QUEUE_DISABLED.value}{sel} == 1)"


def parse_promql(result: Iterable[Mapping[str, Any]], disabled_times: Iterable[Mapping[str, Any]],
                 at: datetime, foreign: set[tuple[str, str, str, str]] | None = None
                 ) -> dict[tuple[str, str], Sample]:
    """Samples per (namespace, consumer) from instant-vector results of the Prometheus API:
    `result` for the metrics, `disabled_times` for `timestamp(antidote_queue_disabled == 1)`
    (when the disabling was scraped, which decides whether it predates a resume). Series
    whose page named another consumer than its target (`series_identity`) are left out, and
    added to `foreign` as (target namespace, target consumer, claimed namespace, claimed
    consumer)."""
    builders: dict[tuple[str, str], SampleBuilder] = {}
    for series in result:
        metric = series.get("metric", {})
        key = series_identity(metric)
        if key is None:
            if foreign is not None and metric.get("namespace"):
                foreign.add((metric.get("namespace", ""), metric.get("consumer", ""),
                             metric.get("exported_namespace", ""), metric.get("exported_consumer", "")))
            continue
        b = builders.setdefault(key, SampleBuilder())
        b.add(metric.get("__name__", ""), metric, float(series["value"][1]))
    for series in disabled_times:
        key = series_identity(series.get("metric", {}))
        if key is not None and key in builders:
            ts = float(series["value"][1])
            builders[key].disabled_at = datetime.fromtimestamp(ts, timezone.utc)
    return {key: b.build(at) for key, b in builders.items()}


# --- the loop ------------------------------------------------------------------------------

class Watcher:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.opts = ctx.options
        self.session: aiohttp.ClientSession | None = None
        self.limit = asyncio.Semaphore(64)
        self.trimmed = 0.0  # monotonic time free heap memory was last handed back
        # A digest of the last page per consumer, not the page: with 1,000 consumers the
        # pages themselves (5-50 KB each) were megabytes kept only to compare against.
        self.pages: dict[tuple[str, str], bytes] = {}
        # A held request per running consumer, answered when it disables its queue.
        self.waits = DisableWaits(self)
        # Series seen naming another consumer than their target (warned about once each).
        self.foreign_seen: set[tuple[str, str, str, str]] = set()

    def url(self, st: ConsumerState) -> str:
        if st.metrics_url:
            return st.metrics_url
        return self.opts.metrics_url_template.format(
            name=st.name, namespace=st.namespace, port=self.opts.render.metrics_port)

    @staticmethod
    def running(st: ConsumerState) -> bool:
        # Scrape only consumers meant to run; a stopped one keeps its last sample.
        wanted = st.desired_replicas if st.desired_replicas is not None else (
            st.deployment.replicas if st.deployment else 0)
        return wanted >= 1 or (st.deployment is not None and st.deployment.replicas >= 1)

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=max(1.0, min(10.0, self.opts.scrape_interval * 2)))
        self.session = aiohttp.ClientSession(timeout=timeout)
        try:
            while True:
                started = time.monotonic()
                try:
                    await self.round()
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - one bad round must not stop watching
                    log.exception("metrics round failed")
                    self.ctx.metrics.errors.labels("watch").inc()
                elapsed = time.monotonic() - started
                self.ctx.metrics.scrape_seconds.observe(elapsed)
                self.housekeeping()
                if started >= self.trimmed + TRIM_INTERVAL:
                    self.trimmed = started
                    heap.trim()
                await asyncio.sleep(max(0.05, self.opts.scrape_interval - elapsed))
        finally:
            await self.waits.close()
            await self.session.close()

    async def round(self) -> None:
        await self.ctx.peering.refresh()
        if self.opts.prometheus_url:
            await self.query_prometheus(self.opts.prometheus_url)
            return
        allows = self.ctx.peering.allows
        targets = [st for st in self.ctx.registry if self.running(st) and allows(st.namespace)]
        self.waits.follow(targets)
        await asyncio.gather(*(self.scrape(st) for st in targets))

    async def scrape(self, st: ConsumerState) -> None:
        assert self.session is not None
        url = self.url(st)
        async with self.limit:
            try:
                async with self.session.get(url) as resp:
                    resp.raise_for_status()
                    page = await resp.read()
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                # Not up yet, or gone after disabling its queue: keep the last sample.
                self.ctx.metrics.scrapes.labels("unreachable").inc()
                return
        self.ctx.metrics.scrapes.labels("ok").inc()
        self.consider(st, page)

    def consider(self, st: ConsumerState, page: bytes) -> None:
        """A consumer's /metrics page, from a scrape or a waiting scrape (disable_wait)."""
        digest = hashlib.blake2b(page, digest_size=16).digest()
        if digest == self.pages.get((st.namespace, st.name)):
            return  # an idle consumer's page does not change: nothing new to decide
        self.pages[(st.namespace, st.name)] = digest
        try:
            # The exposition format is UTF-8 (Prometheus' text format 0.0.4).
            sample = parse_metrics(page.decode("utf-8"), st.namespace, st.name, datetime.now(timezone.utc))
        except ValueError:  # UnicodeDecodeError too
            self.ctx.metrics.scrapes.labels("unparsable").inc()
            log.warning("metrics of %s/%s at %s are not in the Prometheus text format",
                        st.namespace, st.name, self.url(st))
            return
        self.offer(st, sample)

    def offer(self, st: ConsumerState, sample: Sample) -> None:
        """Keep `sample`; decide again only when something in it changed."""
        if sample.same_values(st.sample):
            return
        if sample.disabled and not (st.sample and st.sample.disabled):
            st.disabled_seen_at = time.monotonic()
        st.sample = sample
        self.ctx.syncer.kick(st.namespace, st.name)

    async def query_prometheus(self, url: str) -> None:
        assert self.session is not None
        base = url.rstrip("/")
        sel = promql_selector(self.opts.namespaces)
        disabled_q = promql_disabled(self.opts.namespaces)

        async def query(q: str) -> list[dict[str, Any]]:
            assert self.session is not None
            async with self.session.get(f"{base}/api/v1/query", params={"query": q}) as resp:
                resp.raise_for_status()
                body = await resp.json()
            if body.get("status") != "success":
                raise RuntimeError(f"Prometheus query failed: {body.get('error')}")
            return list(body["data"]["result"])

        try:
            result, disabled = await asyncio.gather(query(sel), query(disabled_q))
        except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError) as err:
            self.ctx.metrics.scrapes.labels("unreachable").inc()
            log.warning("Prometheus at %s: %s", base, err)
            return
        self.ctx.metrics.scrapes.labels("ok").inc()
        foreign: set[tuple[str, str, str, str]] = set()
        samples = parse_promql(result, disabled, datetime.now(timezone.utc), foreign)
        for seen in foreign - self.foreign_seen:
            log.warning("Prometheus: a target in namespace %r (consumer label %r) publishes series of "
                        "%r/%r: ignored (a pod speaks only for itself; is the scrape honoring the "
                        "pods' labels?)", *seen)
        if len(self.foreign_seen) < 1000:  # bounded: any pod can make up new names
            self.foreign_seen |= foreign
        for st in self.ctx.registry:
            sample = samples.get((st.namespace, st.name))
            if sample is not None and self.ctx.peering.allows(st.namespace):
                self.offer(st, sample)

    def housekeeping(self) -> None:
        """Level-based work that no event triggers: time-based decisions (auto-resume,
        a rate-limited Event that is due) and a periodic full reconcile of every consumer."""
        now = datetime.now(timezone.utc)
        mono = time.monotonic()
        if len(self.pages) > len(self.ctx.registry):
            known = {(st.namespace, st.name) for st in self.ctx.registry}
            self.pages = {k: v for k, v in self.pages.items() if k in known}
        for st in self.ctx.registry:
            if not self.ctx.peering.allows(st.namespace):
                continue  # another replica acts; Kopf has paused this one's handlers too
            if st.recheck_at is not None and now >= st.recheck_at:
                st.recheck_at = None
                self.ctx.syncer.kick(st.namespace, st.name)
            if self.opts.resync_interval > 0:
                if st.next_resync == 0.0:
                    st.next_resync = mono + random.uniform(0.5, 1.0) * self.opts.resync_interval
                elif mono >= st.next_resync:
                    st.next_resync = mono + self.opts.resync_interval
                    self.ctx.syncer.kick(st.namespace, st.name, verify=True)
