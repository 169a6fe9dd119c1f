"""The operator benchmark's load generator: one /metrics page per QueueConsumer, rendered by
the consumer's own Metrics class and served by one aiohttp server, standing in for 1,000
Spark drivers no machine of this size could run (the operator under test is unmodified).

Waiting scrapes (`?antidote_wait_disabled=<s>`, antidote_api.wire) are answered as the
driver's metrics server answers them (`antidote_consumer.driver.metrics`): the page as soon
as the consumer disables its queue, 204 after the wait otherwise, both with the header.
`waiting=False` serves consumers that do not know the parameter (older images): the page at
once, without the header, so the operator falls back to its periodic scrapes."""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time

from aiohttp import web
from prometheus_client import generate_latest

from antidote_api.wire import DISABLE_WAIT_HEADER
from antidote_consumer.driver.metrics import Metrics, wait_seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FakeConsumers:
    """Serves /<namespace>/<name>/metrics for many consumers from one aiohttp server."""

    def __init__(self, waiting: bool = True) -> None:
        self.waiting = waiting
        self.metrics: dict[tuple[str, str], Metrics] = {}
        self.disabled: dict[tuple[str, str], asyncio.Event] = {}  # set while disabled
        self.pages: dict[tuple[str, str], bytes] = {}
        self.hits: dict[tuple[str, str], int] = {}
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_get("/{ns}/{name}/metrics", self._page)
        runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(runner.setup())
        self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self.loop.run_forever()

    async def _page(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        page = self.pages.get(key)
        if page is None:
            raise web.HTTPNotFound()
        wait = wait_seconds(request.query_string) if self.waiting else None
        if wait is not None:
            try:
                await asyncio.wait_for(self.disabled[key].wait(), wait)
            except asyncio.TimeoutError:
                return web.Response(status=204, headers={DISABLE_WAIT_HEADER: "1"})
            return web.Response(body=self.pages[key], content_type="text/plain",
                                headers={DISABLE_WAIT_HEADER: "1"})
        self.hits[key] = self.hits.get(key, 0) + 1  # periodic scrapes only
        return web.Response(body=page, content_type="text/plain")

    def add(self, ns: str, name: str) -> None:
        m = Metrics(ns, name)
        m.restore({"processed": random.randint(1000, 100000), "moved": 3, "rejected": 0, "dropped": 0,
                   "retried": 10}, attempts=100000)
        m.consecutive.labels(**m.ids).set(0)
        self.metrics[(ns, name)] = m
        self.disabled[(ns, name)] = asyncio.Event()
        self._render(ns, name)

    def _render(self, ns: str, name: str) -> None:
        self.pages[(ns, name)] = generate_latest(self.metrics[(ns, name)].registry)

    def cross(self, ns: str, name: str) -> float:
        """The consumer reaches its threshold and disables its queue; returns when."""
        m = self.metrics[(ns, name)]
        m.consecutive.labels(**m.ids).set(5)
        m.set_disabled("ConsecutiveBatchFailures")
        self._render(ns, name)
        at = time.monotonic()
        self.loop.call_soon_threadsafe(self.disabled[(ns, name)].set)  # after the page, as the driver
        return at

    def heal(self, ns: str, name: str) -> None:
        m = self.metrics[(ns, name)]
        m.consecutive.labels(**m.ids).set(0)
        m.set_disabled(None)
        self._render(ns, name)
        self.loop.call_soon_threadsafe(self.disabled[(ns, name)].clear)

    def url_template(self) -> str:
        return f"http://127.0.0.1:{self.port}/{{namespace}}/{{name}}/metrics"
