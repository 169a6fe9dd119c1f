"""One message's pass through the handler under the policy: pure, no Spark, no Kafka.

A pass is the first delivery or one retry cycle: validation first (no handler call when the
content is invalid), then up to `immediate + 1` attempts, and a verdict.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from antidote_api.wire import PoisonReason
from antidote_consumer.kafka.headers import MAX_STACK, truncate_stack

from .deadline import AttemptTimeout
from .handler import Handler, encode_output
from .message import Message


class Verdict(StrEnum):
    OK = "ok"            # the handler succeeded; `output` goes to the sink
    RETRY = "retry"      # park in the next retry topic
    FINAL = "final"      # no attempts left: the policy's disposition applies


Reason = PoisonReason  # the contract's one definition (antidote_api.wire)


@dataclass(frozen=True)
class Plan:
    immediate: int
    cycles: int
    non_retryable: frozenset[str] = frozenset()
    check: Callable[[bytes | None], str | None] | None = None


@dataclass(slots=True)
class Outcome:
    verdict: Verdict
    attempts: int  # handler calls in this pass
    output: bytes | None = None
    reason: Reason | None = None
    error_class: str | None = None
    error_message: str | None = None
    stack: str | None = None


def class_name(cls: type) -> str:
    """`ValueError` for builtins, `package.module.Name` otherwise."""
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def is_non_retryable(err: BaseException, names: frozenset[str]) -> bool:
    """True when the error's class or a base class is listed, by simple or qualified name."""
    if not names:
        return False
    return any(c.__qualname__ in names or class_name(c) in names for c in type(err).__mro__)


def run_pass(message: Message, handler: Handler, plan: Plan, cycle: int,
             failed: BaseException | None = None) -> Outcome:
    """Run one pass of `message` (in retry cycle `cycle`, 0 for the first delivery).

    `failed`: the error of a first attempt the caller already made (the worker's hot loop
    calls the handler itself and comes here only when that call fails)."""
    check = plan.check
    if check is not None and failed is None:
        problem = check(message.value)
        if problem is not None:
            return Outcome(Verdict.FINAL, 0, reason=Reason.VALIDATION,
                           error_class="antidote.ValidationError", error_message=problem)
    last: BaseException | None = failed
    calls = 0 if failed is None else 1
    if failed is not None and is_non_retryable(failed, plan.non_retryable):
        return _failed(Verdict.FINAL, calls, Reason.NON_RETRYABLE, failed)
    while calls < plan.immediate + 1:
        calls += 1
        try:
            return Outcome(Verdict.OK, calls, output=encode_output(handler(message)))
        except (Exception, AttemptTimeout) as err:  # noqa: BLE001 - any failure is the message's
            last = err
            if is_non_retryable(err, plan.non_retryable):
                return _failed(Verdict.FINAL, calls, Reason.NON_RETRYABLE, err)
    assert last is not None
    if cycle < plan.cycles:
        return _failed(Verdict.RETRY, calls, None, last)
    return _failed(Verdict.FINAL, calls, Reason.MAX_ATTEMPTS, last)


def _failed(verdict: Verdict, calls: int, reason: Reason | None, err: BaseException) -> Outcome:
    stack = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    return Outcome(verdict, calls, reason=reason, error_class=class_name(type(err)),
                   error_message=str(err), stack=truncate_stack(stack, MAX_STACK))
