"""A settle whose records the broker refuses: a poison or dead-letter topic deleted, denied to
this consumer, or its max.message.bytes lowered below a record after the start (what the
consumer read at its start, see outcomes.fitted, no longer holds).

Such a refusal aborts the whole transaction, so nothing of the batch is written; running the
batch's handlers again would only call them again and rewrite their sink outputs, and the
next settle would be refused the same way. So the same outcomes are committed again, never
recomputed: each refusal is a batch failure, counted in the ledger as a rollback is, backed
off as a rollback is, and after `queueDisable.consecutiveBatchFailures` of them the queue is
disabled (ConsecutiveBatchFailures) with the topic and the broker's words. Each message of the
batch keeps the handler calls it had: the `(immediate + 1) x (cycles + 1)` bound holds."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from antidote_api.conditions import DisableReason
from antidote_api.policy import QueueDisable
from antidote_consumer.kafka.transactions import RecordRefused

from .disabled import QueueDisabled

log = logging.getLogger("antidote.consumer")

MAX_BACKOFF_S = 30.0


def refused_backoff(failures: int, base: float) -> float:
    """Seconds before the `failures`-th refused settle is tried again (a rollback's)."""
    return min(base * 2 ** (failures - 1), MAX_BACKOFF_S)


def refused_disables(failures: int, enabled: bool, threshold: int) -> bool:
    """Whether `failures` refused settles in a row disable the queue."""
    return enabled and failures >= threshold


class RefusedCommit:
    """Commits a settle's state and records through the ledger, again while the broker refuses
    a record (see the module). `rollback` counts a refusal in the ledger as a rolled-back
    batch is counted (and returns the failures in a row); `stopping` ends the wait."""

    def __init__(self, ledger, queue_disable: QueueDisable, rollback: Callable[[Exception], int],
                 stopping: threading.Event, retry_sleep: float):
        self.ledger = ledger
        self.qd = queue_disable
        self.rollback = rollback
        self.stopping = stopping
        self.retry_sleep = retry_sleep

    def commit(self, state, records: list) -> None:
        """Raises QueueDisabled when the refusals disable the queue, and the refusal itself
        when a stop interrupts the wait (the batch runs again after it)."""
        while True:
            try:
                self.ledger.commit(state, records)
                return
            except RecordRefused as err:
                self.again(err, "the batch's outcomes could not be written {failures} times in a "
                           f"row, refused: {err}. Nothing of the batch was committed and its "
                           "handlers are not run again: it stays unconsumed. Make the topic "
                           "writable (it exists, this consumer may write it, its "
                           "max.message.bytes holds the record), then resume", "were refused")

    def again(self, err: Exception, disabled: str, what: str) -> None:
        """One more failed try at a batch's outcomes (refused by the broker, or not made: the
        registry that redaction needs was away): counted as a rollback, then the backoff before
        the next try; QueueDisabled(ConsecutiveBatchFailures, `disabled` with its `{failures}`
        filled in) at the threshold; `err` itself when a stop interrupts the wait."""
        qd = self.qd
        failures = self.rollback(err)  # counted in the ledger, like a rollback
        if refused_disables(failures, qd.enabled, qd.consecutive_batch_failures):
            raise QueueDisabled(DisableReason.CONSECUTIVE_BATCH_FAILURES,
                                disabled.replace("{failures}", str(failures))) from err
        delay = refused_backoff(failures, self.retry_sleep)
        log.warning("the batch's outcomes %s (%s): tried again in %.1fs, without running its "
                    "handlers again", what, err, delay)
        if self.stopping.wait(delay):
            raise err
