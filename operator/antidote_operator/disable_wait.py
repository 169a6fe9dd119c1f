"""Waiting scrapes: one request held open per running consumer, which its driver answers
with its /metrics page as soon as it disables its queue (the contract is
`antidote_api.wire.DISABLE_WAIT_*`).

Why: the periodic scrape learns of a disabling at the consumer's next scrape, up to
`--scrape-interval` later (uniform 0-2 s at the default), and scraping everyone faster costs
CPU in proportion. A held request costs nothing while it waits and is answered within
milliseconds, for every disable reason alike: SystemicFailure and Fault have no precursor
(no rising failure gauge) that a faster lane for consumers "at risk" could watch.

The page it answers with goes through the same path as a scrape's (`Watcher.consider`).
A consumer that does not know the parameter (an older image) answers its page at once
without the header: it is then only scraped, and asked again after UNSUPPORTED_RETRY.
Scrape mode only: with `--prometheus-url` the operator does not reach the consumers.

Each request is a plain asyncio Protocol on its own connection, not an aiohttp request in a
task: 1,000 held aiohttp requests cost the operator 11 MB, these about 1 MB (measured). It
asks in HTTP/1.0, so the answer is never chunked and ends when the server closes.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from antidote_api.wire import DISABLE_WAIT_HEADER, DISABLE_WAIT_PARAM

if TYPE_CHECKING:
    from .state import ConsumerState

log = logging.getLogger("antidote.operator.watcher")

# How long each request waits before the driver answers 204 and it is asked again: under the
# idle timeouts of common proxies and load balancers (60 s), and 40 requests/s for 1,000.
WAIT_SECONDS = 25.0
ANSWER_MARGIN = 10.0  # beyond the wait, before a request without an answer is given up
UNSUPPORTED_RETRY = 300.0  # an older consumer may have been replaced by then
MAX_ANSWER = 32 * 1024 * 1024  # a page is 5-50 KB; more is not a metrics page

Key = tuple[str, str]


def request_for(url: str) -> tuple[str, int, bool, bytes]:
    """(host, port, TLS?, the HTTP/1.0 request) of a waiting scrape of `url`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    tls = parts.scheme == "https"
    query = f"{parts.query}&" if parts.query else ""
    target = f"{parts.path or '/'}?{query}{DISABLE_WAIT_PARAM}={WAIT_SECONDS:g}"
    host = parts.netloc.rsplit("@", 1)[-1]
    request = f"GET {target} HTTP/1.0\r\nHost: {host}\r\nAccept: text/plain\r\n\r\n".encode()
    return parts.hostname, parts.port or (443 if tls else 80), tls, request


def parse_answer(raw: bytes) -> tuple[int, dict[str, str], bytes] | None:
    """(status, headers with lower-case names, body) of an HTTP answer read to its end;
    None if it is not one."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0].split(" ", 2)
    if len(first) < 2 or not first[0].startswith("HTTP/") or not first[1].isdigit():
        return None
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length", "")
    if length.isdigit():
        body = body[:int(length)]
    return int(first[1]), headers, body


class _Ask(asyncio.Protocol):
    """One waiting scrape: writes the request, reads the answer until the server closes,
    then hands it to `done` (None: no complete answer)."""

    def __init__(self, request: bytes, done: Callable[[bytes | None], None], timeout: float):
        self.request, self.done, self.timeout = request, done, timeout
        self.buf = bytearray()
        self.eof = False
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.timer = asyncio.get_running_loop().call_later(self.timeout, transport.abort)
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > MAX_ANSWER and self.transport is not None:
            self.transport.abort()

    def eof_received(self) -> None:
        self.eof = True  # returning None closes the transport: the answer is complete

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        complete = exc is None and self.eof and len(self.buf) <= MAX_ANSWER
        self.done(bytes(self.buf) if complete else None)

    def abort(self) -> None:
        self.done = lambda _: None
        if self.transport is not None:
            self.transport.abort()


class Held:
    """The waiting scrape of one consumer, asked again and again while it runs."""

    def __init__(self, waits: DisableWaits, st: ConsumerState):
        self.waits, self.st = waits, st
        self.closed = False
        self.timer: asyncio.TimerHandle | None = None
        self.connecting: asyncio.Task[None] | None = None
        self.ask: _Ask | None = None
        self.asked = 0.0

    def start(self) -> None:
        self.timer = None
        if self.closed:
            return
        st, interval = self.st, self.waits.interval
        if st.sample is not None and st.sample.disabled:
            # Nothing more to learn from this driver: it stops. A plain scrape sees a
            # restarted (resumed) one first and clears the flag.
            self.later(interval)
            return
        try:
            host, port, tls, request = request_for(self.waits.watcher.url(st))
        except ValueError as err:
            log.warning("%s/%s: no waiting scrape: %s", st.namespace, st.name, err)
            self.waits.give_up(self, UNSUPPORTED_RETRY)
            return
        self.asked = time.monotonic()
        self.ask = _Ask(request, self.answered, WAIT_SECONDS + ANSWER_MARGIN)
        self.connecting = asyncio.create_task(self.connect(host, port, tls, self.ask),
                                              name=f"waiting scrape {st.namespace}/{st.name}")

    async def connect(self, host: str, port: int, tls: bool, ask: _Ask) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: ask, host, port, ssl=self.waits.tls() if tls else None),
                timeout=max(1.0, min(10.0, self.waits.interval * 2)))
        except (OSError, asyncio.TimeoutError, ssl.SSLError):
            self.ask = None
            if not self.closed:
                self.later(self.waits.interval)  # not up yet, or gone
        finally:
            self.connecting = None

    def answered(self, raw: bytes | None) -> None:
        self.ask = None
        if self.closed:
            return
        st, interval = self.st, self.waits.interval
        answer = parse_answer(raw) if raw is not None else None
        if answer is None or answer[0] not in (200, 204):
            self.later(interval)  # cut off, or an error page: as if unreachable
            return
        status, headers, body = answer
        if status == 204:
            # Waited, not disabled: ask again at once, unless something on the way answered
            # far sooner than asked (then no more often than the periodic scrapes).
            self.later(interval if time.monotonic() - self.asked < WAIT_SECONDS / 2 else 0.0)
            return
        supported = DISABLE_WAIT_HEADER.lower() in headers
        metrics = self.waits.watcher.ctx.metrics
        metrics.scrapes.labels("waited" if supported else "ok").inc()
        self.waits.watcher.consider(st, body)
        if not supported:
            self.waits.give_up(self, UNSUPPORTED_RETRY)
            return
        # Answered with a page: the disabling (or a restart into it). At most one such
        # answer per interval, whatever the driver does.
        self.later(interval)

    def later(self, delay: float) -> None:
        if not self.closed:
            self.timer = asyncio.get_running_loop().call_later(delay, self.start)

    def close(self) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
        if self.connecting is not None:
            self.connecting.cancel()
        if self.ask is not None:
            self.ask.abort()


class Scraper(Protocol):
    """What a waiting scrape needs of the watcher that holds it (watcher.Watcher): where a
    consumer's page is, the one path every page goes through, and the operator's options
    and metrics. Declared here so this module does not import the watcher, which imports it."""

    ctx: Any
    opts: Any

    def url(self, st: ConsumerState) -> str: ...

    def consider(self, st: ConsumerState, page: bytes) -> None: ...


class DisableWaits:
    def __init__(self, watcher: Scraper):
        self.watcher = watcher
        self.interval = watcher.opts.scrape_interval
        self.held: dict[Key, Held] = {}
        self.unsupported: dict[Key, float] = {}  # key -> monotonic time to ask again
        self._tls: ssl.SSLContext | None = None
        self.told: set[Key] = set()  # consumers whose giving up was logged

    def tls(self) -> ssl.SSLContext:
        """One context for every https consumer (building one reads the CA bundle)."""
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def follow(self, targets: Iterable[ConsumerState]) -> None:
        """Hold a waiting scrape for each of `targets` (the consumers scraped this round) and
        none for the others (stopped, deleted, or another replica's)."""
        wanted = {(st.namespace, st.name): st for st in targets}
        for key, held in list(self.held.items()):
            if wanted.get(key) is not held.st:  # gone, or a new state for the same name
                held.close()
                del self.held[key]
        now = time.monotonic()
        for key, st in wanted.items():
            if key in self.held or self.unsupported.get(key, 0.0) > now:
                continue
            self.unsupported.pop(key, None)
            held = self.held[key] = Held(self, st)
            held.start()

    def give_up(self, held: Held, retry_after: float) -> None:
        key = (held.st.namespace, held.st.name)
        if key not in self.told:  # once per consumer, not at every retry
            self.told.add(key)
            log.info("%s/%s does not answer waiting scrapes (an older consumer?): scraped every "
                     "%gs only, asked again every %gs", *key, self.interval, retry_after)
        held.close()
        if self.held.get(key) is held:
            del self.held[key]
        self.unsupported[key] = time.monotonic() + retry_after

    async def close(self) -> None:
        tasks = [h.connecting for h in self.held.values() if h.connecting is not None]
        for held in self.held.values():
            held.close()
        self.held.clear()
        await asyncio.gather(*tasks, return_exceptions=True)
