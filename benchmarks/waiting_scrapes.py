"""What the operator's waiting scrapes cost, apart from the API server and Kopf:

    .venv/bin/python benchmarks/waiting_scrapes.py [--consumers 1000] [--seconds 60]

The operator's metrics watcher (its own `Watcher`, with the context reduced to what the
watcher reads) against the operator benchmark's load generator (`consumer_pages`, in a
child process), in three modes, each in a fresh process: the periodic scrapes only (every
2 s), the waiting scrapes only, and both. Prints this process's CPU over the window and its
RSS before and after (free heap handed back first, as the operator does every 10 s).
No cluster needed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def rss_mb() -> float:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmRSS"))
    return int(line.split()[1]) / 1024


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


async def measure(template: str, n: int, seconds: float, mode: str) -> str:
    import aiohttp

    from antidote_operator import heap
    from antidote_operator.context import Options
    from antidote_operator.metrics import OperatorMetrics
    from antidote_operator.state import Registry
    from antidote_operator.watcher import Watcher

    async def refresh() -> None:
        return None

    registry = Registry()
    ctx = SimpleNamespace(options=Options(scrape_interval=2, metrics_url_template=template),
                          registry=registry, metrics=OperatorMetrics(registry),
                          syncer=SimpleNamespace(kick=lambda *a, **k: None),
                          peering=SimpleNamespace(refresh=refresh, allows=lambda ns: True))
    w = Watcher(ctx)  # type: ignore[arg-type]
    targets = []
    for i in range(n):
        st = registry.get("bench", f"c{i:04d}")
        st.desired_replicas = 1
        targets.append(st)
    w.session = aiohttp.ClientSession()
    if mode == "scrapes":
        w.waits.follow = lambda _targets: None  # type: ignore[method-assign]
    heap.trim()
    rss0, cpu0, t0 = rss_mb(), cpu_s(), time.monotonic()
    if mode == "waits":
        w.waits.follow(targets)
    while time.monotonic() - t0 < seconds:
        if mode != "waits":
            await w.round()
        await asyncio.sleep(2)
    cpu = cpu_s() - cpu0
    heap.trim()
    out = (f"{mode:8s} {n} consumers: CPU {cpu:.2f}s in {seconds:g}s ({cpu / seconds * 100:.1f}% of a core), "
           f"RSS {rss0:.0f} -> {rss_mb():.0f} MB")
    await w.waits.close()
    await w.session.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--consumers", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--mode", choices=("scrapes", "waits", "both"), help=argparse.SUPPRESS)
    ap.add_argument("--template", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mode:  # one mode, in this fresh process
        from antidote_operator import heap

        heap.limit_arenas()  # as the operator does before its thread pools start
        print(asyncio.run(measure(args.template, args.consumers, args.seconds, args.mode)), flush=True)
        return 0
    pages = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, %r)\n"
        "from benchmarks.consumer_pages import FakeConsumers\n"
        "f = FakeConsumers()\n"
        "[f.add('bench', f'c{i:04d}') for i in range(%d)]\n"
        "print(f.url_template(), flush=True)\n"
        "time.sleep(86400)\n") % (str(REPO), args.consumers)], stdout=subprocess.PIPE, text=True)
    try:
        template = pages.stdout.readline().strip()  # type: ignore[union-attr]
        print(f"load average at the start: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
        for mode in ("scrapes", "waits", "both"):
            subprocess.run([sys.executable, __file__, "--mode", mode, "--template", template,
                            "--consumers", str(args.consumers), "--seconds", str(args.seconds)], check=True)
    finally:
        pages.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
