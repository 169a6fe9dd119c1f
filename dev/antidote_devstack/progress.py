"""Progress for long steps: a line when a step starts, a heartbeat while it runs, its time."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator


def say(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def step(title: str, heartbeat: float = 30.0) -> Iterator[None]:
    """Announce `title`; while it runs, print the elapsed time every `heartbeat` seconds."""
    say(f"{title} ...")
    started = time.monotonic()
    done = threading.Event()

    def beat() -> None:
        while not done.wait(heartbeat):
            print(f"    ... {title}: {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)

    ticker = threading.Thread(target=beat, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
    print(f"    {title}: done in {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
