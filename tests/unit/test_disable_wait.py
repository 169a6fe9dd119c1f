"""Waiting scrapes (antidote_api.wire DISABLE_WAIT_*): the driver's metrics server answers
one as soon as its queue is disabled, and the operator's watcher learns the disabling from
it without a periodic scrape. Both sides run for real on loopback (the driver's own WSGI
server, the operator's aiohttp client); the operator's context is reduced to what the
watcher reads."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.request
from types import SimpleNamespace
from wsgiref.simple_server import make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from antidote_api.wire import DISABLE_WAIT_HEADER, DISABLE_WAIT_MAX, DISABLE_WAIT_PARAM
from antidote_consumer.driver.metrics import Metrics, wait_seconds
from antidote_operator.context import Options
from antidote_operator.disable_wait import parse_answer, request_for
from antidote_operator.metrics import OperatorMetrics
from antidote_operator.state import Registry
from antidote_operator.watcher import Watcher


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def driver(name: str = "orders") -> tuple[Metrics, str]:
    m = Metrics("shop", name)
    m.restore({"processed": 5}, attempts=5)
    port = free_port()
    m.start(port)
    return m, f"http://127.0.0.1:{port}/metrics"


def get(url: str) -> tuple[int, dict[str, str], bytes]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, dict(resp.headers), resp.read()


def test_wait_seconds_parsing() -> None:
    assert wait_seconds("") is None and wait_seconds("name[]=x") is None
    assert wait_seconds(f"{DISABLE_WAIT_PARAM}=2.5") == 2.5
    assert wait_seconds(f"{DISABLE_WAIT_PARAM}=9999") == DISABLE_WAIT_MAX
    assert wait_seconds(f"{DISABLE_WAIT_PARAM}=-1") == 0.0
    assert wait_seconds(f"{DISABLE_WAIT_PARAM}=soon") is None
    assert wait_seconds(f"{DISABLE_WAIT_PARAM}=nan") is None


def test_the_driver_answers_a_waiting_scrape_when_it_disables() -> None:
    m, url = driver()
    # Not disabled: 204 after the wait, with the header that says the driver knows it.
    status, headers, body = get(f"{url}?{DISABLE_WAIT_PARAM}=0.2")
    assert status == 204 and headers.get(DISABLE_WAIT_HEADER) == "1" and body == b""
    # Disabled while the request waits: the page, with the flag set, long before the wait.
    threading.Timer(0.3, m.set_disabled, args=("Fault",)).start()
    started = time.monotonic()
    status, headers, body = get(f"{url}?{DISABLE_WAIT_PARAM}=30")
    assert time.monotonic() - started < 20
    assert status == 200 and headers.get(DISABLE_WAIT_HEADER) == "1"
    assert b'antidote_queue_disabled{consumer="orders",namespace="shop",reason="Fault"} 1.0' in body
    # Already disabled: answered at once; a plain scrape is unchanged (no header).
    assert get(f"{url}?{DISABLE_WAIT_PARAM}=30")[0] == 200
    status, headers, _ = get(url)
    assert status == 200 and DISABLE_WAIT_HEADER not in headers
    # A restart that clears the flag makes it wait again.
    m.set_disabled(None)
    assert get(f"{url}?{DISABLE_WAIT_PARAM}=0.1")[0] == 204


def test_the_operators_request_and_its_reading_of_answers() -> None:
    host, port, tls, req = request_for("http://orders.shop.svc:9090/metrics")
    assert (host, port, tls) == ("orders.shop.svc", 9090, False)
    assert req == (f"GET /metrics?{DISABLE_WAIT_PARAM}=25 HTTP/1.0\r\nHost: orders.shop.svc:9090\r\n"
                   "Accept: text/plain\r\n\r\n").encode()
    host, port, tls, req = request_for("https://u:p@[::1]/a/metrics?x=1")
    assert (host, port, tls) == ("::1", 443, True)
    assert req.startswith(f"GET /a/metrics?x=1&{DISABLE_WAIT_PARAM}=25 HTTP/1.0\r\nHost: [::1]\r\n".encode())
    for bad in ("ftp://x/metrics", "/metrics"):
        try:
            request_for(bad)
        except ValueError as err:
            assert bad in str(err)
        else:
            raise AssertionError(bad)
    ok = parse_answer(b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\nX-Antidote-Wait-Disabled: 1\r\n\r\npageXX")
    assert ok == (200, {"content-length": "4", "x-antidote-wait-disabled": "1"}, b"page")
    assert parse_answer(b"HTTP/1.1 204 No Content\r\n\r\n") == (204, {}, b"")
    assert parse_answer(b"HTTP/1.0 200 OK\r\nContent-") is None  # cut off in its head
    assert parse_answer(b"SSH-2.0-OpenSSH\r\n\r\n") is None


def watcher(interval: float) -> tuple[Watcher, list[tuple[str, str]], Registry]:
    registry = Registry()
    kicks: list[tuple[str, str]] = []
    ctx = SimpleNamespace(options=Options(scrape_interval=interval), registry=registry,
                          metrics=OperatorMetrics(registry),
                          syncer=SimpleNamespace(kick=lambda ns, name, **_: kicks.append((ns, name))))
    return Watcher(ctx), kicks, registry  # type: ignore[arg-type]


async def until(what: str, check, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_the_operator_learns_a_disabling_from_its_waiting_scrape() -> None:
    m, url = driver()

    async def scenario() -> None:
        # An hour between scrapes: only the waiting scrape can bring the news.
        w, kicks, registry = watcher(3600)
        st = registry.get("shop", "orders")
        st.metrics_url, st.desired_replicas = url, 1
        w.waits.follow([st])
        await asyncio.sleep(0.3)
        assert st.sample is None and kicks == []  # held, not answered
        m.set_disabled("SystemicFailure")  # no precursor: straight to disabled
        await until("the disabled sample", lambda: st.sample is not None and st.sample.disabled)
        assert st.sample is not None and st.sample.disabled == "SystemicFailure"
        assert st.disabled_seen_at is not None and kicks == [("shop", "orders")]
        # Stopped (not a target any more): its waiting scrape is let go.
        w.waits.follow([])
        assert w.waits.held == {}
        await w.waits.close()

    asyncio.run(scenario())


def test_an_older_consumer_is_scraped_only() -> None:
    # A server that does not know the parameter answers its page at once, without the header.
    m = Metrics("shop", "old")
    m.set_disabled(None)
    port = free_port()
    httpd = make_server("127.0.0.1", port, make_wsgi_app(m.registry), ThreadingWSGIServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()

    async def scenario() -> None:
        w, _, registry = watcher(3600)
        st = registry.get("shop", "old")
        st.metrics_url, st.desired_replicas = f"http://127.0.0.1:{port}/metrics", 1
        w.waits.follow([st])
        await until("the task to end", lambda: not w.waits.held)
        assert ("shop", "old") in w.waits.unsupported and st.sample is not None  # its page was read
        w.waits.follow([st])  # and it is not asked again until UNSUPPORTED_RETRY
        assert not w.waits.held
        await w.waits.close()

    try:
        asyncio.run(scenario())
    finally:
        httpd.shutdown()


def test_an_unreachable_consumer_is_asked_again_at_the_scrape_interval() -> None:
    port = free_port()  # nothing listens yet

    async def scenario() -> None:
        w, _, registry = watcher(0.1)
        st = registry.get("shop", "late")
        st.metrics_url, st.desired_replicas = f"http://127.0.0.1:{port}/metrics", 1
        w.waits.follow([st])
        await asyncio.sleep(0.3)
        assert st.sample is None and ("shop", "late") in w.waits.held
        m = Metrics("shop", "late")
        m.start(port)  # the driver comes up, then disables its queue
        m.set_disabled("ConsecutiveBatchFailures")
        await until("the disabled sample", lambda: st.sample is not None and st.sample.disabled)
        await w.waits.close()

    asyncio.run(scenario())

