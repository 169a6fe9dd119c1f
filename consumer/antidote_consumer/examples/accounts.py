"""The demo's "accounts service": the downstream the expenses handler asks whether a cost
center exists. `antidote demo` runs it (a Deployment and Service `accounts` beside the
consumer on the node, a local process with the dev runner) and stages its outage through
`POST /admin/outage` (its database is down: every lookup answers 503 until `DELETE
/admin/outage`).

Why not stop it: a Service without endpoints is answered by kube-proxy's REJECT rule with
ICMP port-unreachable, which the kernel sends at most once a second per pod
(net.ipv4.icmp_ratelimit); a handler calling in a loop then waits for its connect timeout
on most calls, and each batch takes messages x attempts x timeout before the failure ratio
can judge it. A 503 fails each call at once.

    python -m antidote_consumer.examples.accounts [--port 8080]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Known cost centers; any other is answered 404 (the handler's LookupError).
COST_CENTERS = ("CC-1001", "CC-1002", "CC-2001", "CC-3005")
PORT = 8080
PREFIX = "/cost-centers/"
OUTAGE = "/admin/outage"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path in ("/healthz", "/"):
            return self._answer(200, {"ok": True, "outage": self.server.outage.is_set()})
        cc = self.path[len(PREFIX):] if self.path.startswith(PREFIX) else None
        if cc is not None and self.server.outage.is_set():
            return self._answer(503, {"error": "accounts database unavailable"})
        if cc in COST_CENTERS:
            return self._answer(200, {"costCenter": cc})
        self._answer(404, {"error": f"no cost center {cc!r}" if cc else f"no route {self.path}"})

    def do_POST(self) -> None:  # noqa: N802
        self._admin(True)

    def do_DELETE(self) -> None:  # noqa: N802
        self._admin(False)

    def _admin(self, outage: bool) -> None:
        if self.path != OUTAGE:
            return self._answer(404, {"error": f"no route {self.path}"})
        (self.server.outage.set if outage else self.server.outage.clear)()
        self._answer(200, {"outage": outage})

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:  # one line per request would drown the demo's log
        pass


class _Server(ThreadingHTTPServer):
    def __init__(self, address: tuple[str, int]):
        super().__init__(address, _Handler)
        self.outage = threading.Event()


def serve(host: str = "0.0.0.0", port: int = PORT) -> ThreadingHTTPServer:
    return _Server((host, port))


def set_outage(base_url: str, outage: bool) -> None:
    """What the demo does to stage the outage (and end it)."""
    import urllib.request

    req = urllib.request.Request(base_url + OUTAGE, method="POST" if outage else "DELETE")
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10) as r:
        r.read()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m antidote_consumer.examples.accounts")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=PORT)
    args = p.parse_args(argv)
    server = serve(args.host, args.port)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a pod's stop: exit at once, 0
    print(f"accounts service on {args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
