"""Waiting scrapes: one request held open per running consumer, which its driver answers
with its /metrics page as soon as it disables its queue (the contract is
`antidote_api.wire.DISABLE_WAIT_*`).

Why: the periodic scrape learns of a disabling at the consumer's next scrape, up to
`--scrape-interval` later (uniform 0-2 s at the default), and scraping everyone faster costs
CPU in proportion. A held request costs nothing while it waits and answers within
milliseconds, for every disable reason alike: SystemicFailure and Fault have no precursor
(no rising failure gauge) that a faster lane for consumers "at risk" could watch.

The page it answers with goes through the same path as a scrape's (`Watcher.consider`).
A consumer that does not know the parameter (an older image) answers its page at once
without the header: it is then only scraped, and asked again after UNSUPPORTED_RETRY.
Scrape mode only: with `--prometheus-url` the operator does not reach the consumers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import aiohttp

from antidote_api.wire import DISABLE_WAIT_HEADER, DISABLE_WAIT_PARAM

if TYPE_CHECKING:
    from .state import ConsumerState
    from .watcher import Watcher

log = logging.getLogger("antidote.operator.watcher")

# How long each request waits before the driver answers 204 and it is asked again: under the
# idle timeouts of common proxies and load balancers (60 s), and 40 requests/s for 1,000.
WAIT_SECONDS = 25.0
UNSUPPORTED_RETRY = 300.0  # an older consumer may have been replaced by then

Key = tuple[str, str]


class DisableWaits:
    def __init__(self, watcher: Watcher):
        self.watcher = watcher
        self.interval = watcher.opts.scrape_interval
        self.held: dict[Key, tuple[ConsumerState, asyncio.Task[None]]] = {}
        self.unsupported: dict[Key, float] = {}  # key -> monotonic time to ask again
        self.session: aiohttp.ClientSession | None = None

    def follow(self, targets: Iterable[ConsumerState]) -> None:
        """Hold a waiting scrape for each of `targets` (the consumers scraped this round) and
        none for the others (stopped, deleted, or another replica's)."""
        if self.session is None:
            # Every held request needs its own connection: no pool limit (the periodic
            # scrapes keep theirs), a short connect timeout, the wait plus a margin in all.
            self.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                timeout=aiohttp.ClientTimeout(total=WAIT_SECONDS + 10,
                                              sock_connect=max(1.0, min(10.0, self.interval * 2))))
        wanted = {(st.namespace, st.name): st for st in targets}
        for key, (st, task) in list(self.held.items()):
            if wanted.get(key) is not st:  # gone, or a new state for the same name
                task.cancel()
                del self.held[key]
        now = time.monotonic()
        for key, st in wanted.items():
            if key in self.held or self.unsupported.get(key, 0.0) > now:
                continue
            self.unsupported.pop(key, None)
            self.held[key] = (st, asyncio.create_task(self.hold(st), name=f"waiting scrape {key}"))

    async def hold(self, st: ConsumerState) -> None:
        key = (st.namespace, st.name)
        try:
            while True:
                if st.sample is not None and st.sample.disabled:
                    # Nothing more to learn from this driver: it stops. A plain scrape sees
                    # a restarted (resumed) one first and clears the flag.
                    await asyncio.sleep(self.interval)
                    continue
                asked = time.monotonic()
                answer = await self.ask(st)
                if answer is None:
                    # 204: waited, not disabled; ask again (at once, unless something on the
                    # way answered far sooner than asked: then no faster than the scrapes).
                    if time.monotonic() - asked < WAIT_SECONDS / 2:
                        await asyncio.sleep(self.interval)
                    continue
                if answer is False:
                    await asyncio.sleep(self.interval)  # not up yet, or gone
                    continue
                page, supported = answer
                self.watcher.ctx.metrics.scrapes.labels("waited" if supported else "ok").inc()
                self.watcher.consider(st, page)
                if not supported:
                    log.info("%s/%s does not answer waiting scrapes (an older consumer): "
                             "scraped every %gs only", *key, self.interval)
                    self.unsupported[key] = time.monotonic() + UNSUPPORTED_RETRY
                    return
                # Answered with a page: the disabling (or a restart into it). At most one
                # such answer per interval, whatever the driver does.
                await asyncio.sleep(self.interval)
        finally:
            held = self.held.get(key)
            if held is not None and held[1] is asyncio.current_task():
                del self.held[key]

    async def ask(self, st: ConsumerState) -> tuple[bytes, bool] | None | bool:
        """The page and whether the driver knew the parameter; None: it waited and its queue
        is not disabled (204); False: unreachable."""
        assert self.session is not None
        try:
            async with self.session.get(self.watcher.url(st),
                                        params={DISABLE_WAIT_PARAM: f"{WAIT_SECONDS:g}"}) as resp:
                if resp.status == 204:
                    return None
                supported = DISABLE_WAIT_HEADER in resp.headers
                resp.raise_for_status()
                return await resp.read(), supported
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False

    async def close(self) -> None:
        tasks = [task for _, task in self.held.values()]
        self.held.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.session is not None:
            await self.session.close()
