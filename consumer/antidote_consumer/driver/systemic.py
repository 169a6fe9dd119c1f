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
        n = sum(t for _, t, _ in self.window)
        bad = sum(f for _, _, f in self.window)
        return n >= self.min_messages and bad / n >= self.threshold

    def disabled(self, failed: int, total: int) -> QueueDisabled:
        """The stop a tripped rule raises, with the batch's figures."""
        return QueueDisabled(DisableReason.SYSTEMIC_FAILURE,
                             f"{failed} of {total} messages failed in this batch (threshold "
                             f"{self.threshold:g}); nothing was quarantined and the batch stays "
                             "unconsumed")
