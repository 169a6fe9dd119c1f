"""The demo's voice: numbered steps, results, and one live status line on a terminal."""

from __future__ import annotations

import time
from typing import TextIO


class Narrator:
    def __init__(self, out: TextIO):
        self.out = out
        self.tty = out.isatty()
        self.t0 = time.monotonic()
        self.n = 0
        self._live = ""
        self._last_plain = 0.0

    def _stamp(self) -> str:
        return f"[{time.monotonic() - self.t0:6.1f}s]"

    def _print(self, text: str) -> None:
        self.clear()
        print(text, file=self.out, flush=True)

    def step(self, text: str) -> None:
        self.n += 1
        self._print(f"{self._stamp()} {self.n}. {text}")

    def ok(self, text: str) -> None:
        self._print(f"{' ' * 9}   ✔ {text}")

    def fail(self, text: str) -> None:
        self._print(f"{' ' * 9}   ✘ {text}")

    def hint(self, text: str) -> None:
        self._print(f"{' ' * 9}     {text}")

    def live(self, text: str) -> None:
        """A status line: redrawn in place on a terminal, printed every 5s otherwise."""
        if self.tty:
            self.out.write(f"\r{' ' * 9}   … {text}\x1b[K")
            self.out.flush()
            self._live = text
        elif text != self._live and time.monotonic() - self._last_plain >= 5:
            print(f"{self._stamp()}    … {text}", file=self.out, flush=True)
            self._live, self._last_plain = text, time.monotonic()

    def clear(self) -> None:
        if self.tty and self._live:
            self.out.write("\r\x1b[K")
            self.out.flush()
        if self.tty:
            self._live = ""

    def report(self, title: str, lines: list[str]) -> None:
        self._print(f"\n{'=' * 20} {title} {'=' * 20}")
        for line in lines:
            print(line, file=self.out, flush=True)
