"""A loop's repeated failure logged without a traceback every round (the driver's retry pump
and topic-depth reader while the brokers are down)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger("antidote.consumer")


class OutageLog:
    """Logging a loop's repeated failure (the brokers are down, say) without a traceback every
    round: the first failure in one line, then a reminder at most every `every` seconds with
    how many rounds failed, and one line when it works again. The traceback is at DEBUG."""

    def __init__(self, what: str, every: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 logger: logging.Logger = log):
        self.what, self.every, self.clock, self.log = what, every, clock, logger
        self.since: float | None = None
        self.failures = 0
        self.logged_at = 0.0

    def failed(self, err: BaseException) -> None:
        now = self.clock()
        self.failures += 1
        self.log.debug("%s failed", self.what, exc_info=err)
        if self.since is None:
            self.since = self.logged_at = now
            self.log.error("%s failed (trying again every few seconds): %s", self.what, _one_line(err))
        elif now - self.logged_at >= self.every:
            self.logged_at = now
            self.log.error("%s still failing after %.0fs (%d rounds): %s", self.what, now - self.since,
                           self.failures, _one_line(err))

    def ok(self) -> None:
        if self.since is not None:
            self.log.warning("%s works again after %.0fs (%d failed rounds)", self.what,
                             self.clock() - self.since, self.failures)
            self.since, self.failures = None, 0


def _one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]
