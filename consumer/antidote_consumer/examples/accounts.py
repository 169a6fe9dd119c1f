"""The demo's "accounts service": the downstream the expenses handler asks whether a cost
center exists. `antidote demo` runs it (a Deployment and Service `accounts` beside the
consumer on the node, a local process with the dev runner) and stops it to stage an outage:
a real connection refused, not a flag.

    python -m antidote_consumer.examples.accounts [--port 8080]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Known cost centers; any other is answered 404 (the handler's LookupError).
COST_CENTERS = ("CC-1001", "CC-1002", "CC-2001", "CC-3005")
PORT = 8080
PREFIX = "/cost-centers/"


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path in ("/healthz", "/"):
            return self._answer(200, {"ok": True})
        cc = self.path[len(PREFIX):] if self.path.startswith(PREFIX) else None
        if cc in COST_CENTERS:
            return self._answer(200, {"costCenter": cc})
        self._answer(404, {"error": f"no cost center {cc!r}" if cc else f"no route {self.path}"})

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:  # one line per request would drown the demo's log
        pass


def serve(host: str = "0.0.0.0", port: int = PORT) -> ThreadingHTTPServer:
    return ThreadingHTTPServer((host, port), _Handler)


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
