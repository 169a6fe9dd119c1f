"""Outcomes the handler chooses by raising `antidote.Retry` or `antidote.NonRetryable`: the
texts they leave in the headers, the due time of a Retry, and what the systemic-failure
breaker counts. Pure; the pass (worker/attempts.py) and the driver (driver/batches.py)
call it: the `chosen` and `retry_after` columns of the executor's result rows carry the
choice from one to the other."""

from __future__ import annotations

from typing import Any

from antidote_api.wire import PoisonReason

from .describe import error_text, shown
from .verdict import Verdict

# The result row's `chosen` column: what the handler raised, when it decided the outcome.
CHOSE_RETRY = "retry"
CHOSE_NON_RETRYABLE = "non-retryable"


def bad_after(err: Any, message: Any) -> str:
    """The error message of an attempt whose Retry(after=...) is not a delay: it names the
    message and the value, and says the attempt counted as an ordinary failure."""
    return (f"Retry(after={shown(err.after)}) on {message.topic}/{message.partition}/{message.offset}: "
            f"{err.problem}; the attempt counts as an ordinary failure")


def no_cycle_left(err: Any, cycles: int) -> str:
    return f"{error_text(err)} (no retry cycle left: the policy has {cycles}, all used)"


def retry_delay_ms(asked_ms: int | None, policy_ms: int, bound_ms: int | None) -> int:
    """The wait before a retry cycle: the policy's delay, or what Retry(after=...) asked for,
    at most `bound_ms` (semantics.retry_after_bound)."""
    if asked_ms is None:
        return policy_ms
    return asked_ms if bound_ms is None else min(asked_ms, bound_ms)


# Result rows of messages the ordering rules (ordering Key) parked without a handler call:
# "held" behind their key's failed message, "overflow" past maxHeldPerKey.
NOT_ATTEMPTED = frozenset({Verdict.HELD.value, Verdict.OVERFLOW.value})


def judged(n_ok: int, failures: list) -> tuple[int, int]:
    """(failed, total) of a batch as queueDisable.failureRatio counts them: the messages a
    handler was called for, and those of them whose failure is a systemic signal. A message
    held behind its key's failure was never attempted: counted, one failing key holding a
    thousand messages would read as a batch failing as a whole, and pause every other key."""
    attempted = [r for r in failures if r.kind not in NOT_ATTEMPTED]
    return sum(1 for r in attempted if systemic_signal(r)), n_ok + len(attempted)


def systemic_signal(row: Any) -> bool:
    """Whether a failed message counts toward queueDisable.failureRatio. Content the policy's
    validation refused, and messages the handler declared NonRetryable, do not: both are a
    verdict on the message itself, and a burst of bad messages must be quarantined, not
    pause the queue. (A nonRetryable class listed in the policy still counts, as before; a
    handler-chosen Retry counts, like any failure: it says the downstream is not ready.)"""
    return signal_of(row.reason, getattr(row, "chosen", None))


def signal_of(reason: str | None, chosen: str | None) -> bool:
    """systemic_signal of a failure's reason and choice."""
    return reason != PoisonReason.VALIDATION.value and chosen != CHOSE_NON_RETRYABLE
