"""The systemic-failure rule (`queueDisable.failureRatio`), in one place: when most messages
of a sliding window failed, the fault is taken to be a downstream's, not the messages', and
the queue is disabled instead of quarantining them (Service Broker's lesson: a queue that
cannot be processed stops; it is not drained into the poison queue).

Pure: the window is the only state, and the clock is passed in. What counts as failed and
what counts at all (`worker.chosen.judged`: validation and NonRetryable failures are the
messages' own, held and overflowed rows were never attempted) is decided by the caller."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from antidote_api.conditions import DisableReason
from antidote_api.policy import QueueDisable

from .disabled import QueueDisabled


@dataclass
class SystemicRule:
    enabled: bool
    threshold: float
    window_s: float
    min_messages: int
    # (monotonic time, messages judged, of them failed), one entry per settled batch
    window: deque[tuple[float, int, int]] = field(default_factory=deque)

    @classmethod
    def of(cls, qd: QueueDisable) -> SystemicRule:
        fr = qd.failure_ratio
        return cls(enabled=qd.enabled, threshold=fr.threshold, window_s=fr.window.seconds,
                   min_messages=fr.min_messages)

    def tripped(self, failed: int, total: int, now: float) -> bool:
        """Adds a batch's figures to the window; whether the window now holds enough messages
        and a failed share at or above the threshold."""
        if not self.enabled:
            return False
        self.window.append((now, total, failed))
        horizon = now - self.window_s
        while self.window and self.window[0][0] < horizon:
            self.window.popleft()
        return self._over(0, 0, now)

    def live(self, failed: int, total: int, now: float) -> bool:
        """Whether the window with a running batch's figures so far (driver.live_breaker: its
        distinct messages judged, and of them failed, as its attempts ended) trips the rule.
        The window is read, not changed: the batch's figures join it when it is settled. Safe
        beside `tripped` on another thread (a copy is read, nothing removed)."""
        return self.enabled and self._over(failed, total, now)

    def settles(self, failed: int, total: int, now: float) -> bool:
        """Whether a task may settle failures itself (driver.live_breaker.ask): the window with
        the running batch's figures holds minMessages and does not trip the rule."""
        if not self.enabled:
            return True
        n, bad = self._figures(failed, total, now)
        return n >= self.min_messages and n > 0 and bad / n < self.threshold

    def _figures(self, failed: int, total: int, now: float) -> tuple[int, int]:
        horizon = now - self.window_s
        kept = [(t, f) for at, t, f in list(self.window) if at >= horizon]
        return total + sum(t for t, _ in kept), failed + sum(f for _, f in kept)

    def _over(self, failed: int, total: int, now: float) -> bool:
        n, bad = self._figures(failed, total, now)
        return n >= self.min_messages and n > 0 and bad / n >= self.threshold

    def disabled_live(self, failed: int, total: int, after: float) -> QueueDisabled:
        """The stop a rule tripped while the batch ran raises (driver.live_breaker)."""
        return QueueDisabled(DisableReason.SYSTEMIC_FAILURE,
                             f"{failed} of {total} messages judged so far failed, {after:.1f}s into the "
                             f"batch (threshold {self.threshold:g}, with the window's settled batches): "
                             "its running attempts were abandoned; nothing was quarantined and the "
                             "batch stays unconsumed")

    def disabled(self, failed: int, total: int) -> QueueDisabled:
        """The stop a tripped rule raises, with the batch's figures."""
        return QueueDisabled(DisableReason.SYSTEMIC_FAILURE,
                             f"{failed} of {total} messages failed in this batch (threshold "
                             f"{self.threshold:g}); nothing was quarantined and the batch stays "
                             "unconsumed")
