"""One message's pass through the handler under the policy: pure, no Spark, no Kafka.

A pass is the first delivery or one retry cycle: validation first (no handler call when the
content is invalid), then up to `immediate + 1` attempts, and a verdict.
"""

from __future__ import annotations

import linecache
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from antidote import NonRetryable, Retry
from antidote_api.wire import PoisonReason
from antidote_consumer.kafka.headers import MAX_STACK, truncate_stack

from .decode import DeserializationError
from .encode import SerializationError
from .chosen import CHOSE_NON_RETRYABLE, CHOSE_RETRY, bad_after, no_cycle_left, retry_delay_ms
from .deadline import AttemptTimeout
from .describe import class_name, error_text, valid_text
from .governance import Governance, expired, expired_text, route_of, stale
from .handler import Handler, encode_output
from .message import Message
from .verdict import Verdict


Reason = PoisonReason  # the contract's one definition (antidote_api.wire)


@dataclass(frozen=True)
class Plan:
    immediate: int
    cycles: int
    non_retryable: frozenset[str] = frozenset()
    check: Callable[[bytes | None], str | None] | None = None
    gov: Governance | None = None  # the policy's routes and age limits (governance.py)


@dataclass(slots=True)
class Outcome:
    verdict: Verdict
    attempts: int  # handler calls in this pass
    output: bytes | None = None
    reason: Reason | None = None
    error_class: str | None = None
    error_message: str | None = None
    stack: str | None = None
    # What the handler chose by raising antidote.Retry / antidote.NonRetryable (chosen.py).
    chosen: str | None = None
    retry_after: int | None = None  # Retry(after=...) in ms, bounded later by the driver
    route: int | None = None  # the policy's route (spec.routes index) a final failure takes
    error_type: type | None = None  # the failure's class, for the routes' class hierarchy


def plan_of(cfg) -> Plan:
    """The Plan of a WorkerConfig (its retries and the policy's validation, wire form): what
    every worker runs a pass under, and `antidote.testing` too."""
    check = None
    v = cfg.validation or {}
    # Content checks only: an age alone (maxAge, governance.py) adds no check to the hot loop.
    if v.get("maxBytes") is not None or v.get("format", "bytes") != "bytes" or v.get("jsonSchema") is not None:
        from antidote_api.policy import Validation
        from antidote_api.semantics import message_checker

        check = message_checker(Validation.model_validate(cfg.validation))
    return Plan(cfg.immediate, cfg.cycles, cfg.non_retryable, check, cfg.governance)


def is_non_retryable(err: BaseException, names: frozenset[str]) -> bool:
    """True when the error's class or a base class is listed, by simple or qualified name."""
    if not names:
        return False
    return any(c.__qualname__ in names or class_name(c) in names for c in type(err).__mro__)


def run_pass(message: Message, handler: Handler, plan: Plan, cycle: int,
             failed: BaseException | None = None) -> Outcome:
    """Run one pass of `message` (in retry cycle `cycle`, 0 for the first delivery).

    `failed`: the error of a first attempt the caller already made (the worker's hot loop
    calls the handler itself and comes here only when that call fails). With the policy's
    routes or age limits (governance.py): a record too old at first sight is refused without
    a call; a retry that would start too late is the disposition, reason `expired`; a final
    failure takes its route."""
    g = plan.gov
    if g is None:
        return _pass(message, handler, plan, cycle, failed)
    now = int(time.time() * 1000)
    problem = stale(message.timestamp, now, g.stale_ms) if failed is None and cycle == 0 else None
    if problem is not None:
        out = Outcome(Verdict.FINAL, 0, reason=Reason.VALIDATION,
                      error_class="antidote.ValidationError", error_message=problem)
    else:
        out = _pass(message, handler, plan, cycle, failed)
    if out.verdict is Verdict.RETRY and g.max_age_ms is not None and cycle < len(g.delays):
        due = now + retry_delay_ms(out.retry_after, g.delays[cycle], g.retry_bound_ms)
        if expired(message.timestamp, due, g.max_age_ms):
            out.verdict, out.reason = Verdict.FINAL, Reason.EXPIRED
            out.error_message = expired_text(out.error_message, message.timestamp, due, cycle + 1,
                                             g.max_age_ms)
    if out.verdict is Verdict.FINAL:
        out.route = route_of(g.routes, out.reason.value if out.reason else None, out.error_class,
                             out.error_type)
    return out


def _pass(message: Message, handler: Handler, plan: Plan, cycle: int,
          failed: BaseException | None) -> Outcome:
    """run_pass without the policy's routes and age limits."""
    check = plan.check
    if check is not None and failed is None:
        problem = check(message.value)
        if problem is not None:
            return Outcome(Verdict.FINAL, 0, reason=Reason.VALIDATION,
                           error_class="antidote.ValidationError", error_message=problem)
    last: BaseException | None = failed
    calls = 0 if failed is None else 1
    if failed is not None:
        decided = _decided(message, plan, cycle, calls, failed)
        if decided is not None:
            return decided
    first = message.attempt  # the pass's first call; each immediate retry is the next one
    while calls < plan.immediate + 1:
        calls += 1
        # `message.attempt` counts handler calls across cycles (docs/consumer.md): a handler
        # that succeeds on its nth call sees n, immediate retries included.
        message.attempt = first + calls - 1
        try:
            return Outcome(Verdict.OK, calls, output=encode_output(handler(message)))
        except (Exception, AttemptTimeout) as err:  # noqa: BLE001 - any failure is the message's
            last = err
        # Outside the except block: a later attempt's error must not chain to this one.
        decided = _decided(message, plan, cycle, calls, last)
        if decided is not None:
            return decided
    assert last is not None
    if cycle < plan.cycles:
        return _failed(Verdict.RETRY, calls, None, last, message)
    return _failed(Verdict.FINAL, calls, Reason.MAX_ATTEMPTS, last, message)


def _decided(message: Message, plan: Plan, cycle: int, calls: int,
             err: BaseException) -> Outcome | None:
    """`_decides`, and None (an ordinary failure) when the error cannot even be looked at: a
    class of the handler's whose attributes raise must not fail the batch."""
    try:
        return _decides(message, plan, cycle, calls, err)
    except Exception:  # noqa: BLE001 - the handler's code: any failure is the message's
        return None


def _decides(message: Message, plan: Plan, cycle: int, calls: int,
             err: BaseException) -> Outcome | None:
    """The outcome an error decides by itself, or None when the pass goes on (attempts left).

    Listed in nonRetryable, or raised as NonRetryable: the disposition now. Retry: the next
    cycle now, skipping this cycle's attempts left (the disposition when no cycle is left). A
    Retry whose `after` is not a delay decides nothing: it is an ordinary failure (see
    _failed, whose message then names the message and the value), so nothing is lost."""
    if type(err) is DeserializationError:  # the key or value does not decode: invalid, no call made
        return Outcome(Verdict.FINAL, calls - 1, reason=Reason.VALIDATION,
                       error_class=DeserializationError.error_class, error_message=str(err))
    if type(err) is SerializationError:  # the sink's schema refuses the return value: again would too
        out = _failed(Verdict.FINAL, calls, Reason.NON_RETRYABLE, err)
        out.error_class = SerializationError.error_class
        return out
    if issubclass(type(err), NonRetryable):  # not isinstance: that asks err.__class__
        out = _failed(Verdict.FINAL, calls, Reason.NON_RETRYABLE, err)
        out.chosen = CHOSE_NON_RETRYABLE
        return out
    if is_non_retryable(err, plan.non_retryable):
        return _failed(Verdict.FINAL, calls, Reason.NON_RETRYABLE, err)
    retry = cast(Retry, err) if issubclass(type(err), Retry) else None
    if retry is not None and retry.problem is None:
        if cycle < plan.cycles:
            out = _failed(Verdict.RETRY, calls, None, err)
            out.chosen, out.retry_after = CHOSE_RETRY, retry.after_ms
            return out
        out = _failed(Verdict.FINAL, calls, Reason.MAX_ATTEMPTS, err)
        out.error_message = no_cycle_left(err, plan.cycles)
        out.chosen = CHOSE_RETRY
        return out
    return None


def stack_text(err: BaseException) -> str:
    """`err`'s traceback as `traceback.format_exception` writes it, without the `^^^` lines
    under each frame: Python 3.11 finds where to put them by parsing every frame's source line
    (ast), and its TracebackException records every frame's positions; together they were most
    of what a failure cost in the workers (profiled at 1% poison). Chained errors ("direct
    cause", "during handling") are written as Python writes them; an ExceptionGroup goes to
    Python's own formatter."""
    if isinstance(err, BaseExceptionGroup):
        te = traceback.TracebackException(type(err), err, err.__traceback__, compact=True)
        _no_carets(te, set())
        return "".join(te.format())
    parts: list[str] = []
    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        parts.append(_one_error(e))
        if e.__cause__ is not None:
            e, link = e.__cause__, _CAUSE
        elif e.__context__ is not None and not e.__suppress_context__:
            e, link = e.__context__, _CONTEXT
        else:
            break
        parts.append(link)
    return "".join(reversed(parts))


_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def _one_error(e: BaseException) -> str:
    out = []
    tb = e.__traceback__
    if tb is not None:
        out.append("Traceback (most recent call last):\n")
        while tb is not None:
            code, line = tb.tb_frame.f_code, tb.tb_lineno
            out.append(f'  File "{code.co_filename}", line {line}, in {code.co_name}\n')
            source = linecache.getline(code.co_filename, line).strip()
            if source:
                out.append(f"    {source}\n")
            tb = tb.tb_next
    out.append(_exception_line(e))
    return "".join(out)


def _exception_line(e: BaseException) -> str:
    """`traceback.format_exception_only(e)` joined. Python builds a TracebackException for it,
    which walks the error's chain and frames again: ~60% of a failure's stack text (profiled,
    a failed pass). Written here for a plain error; a SyntaxError (its caret lines) and an
    error with notes go to Python's own."""
    cls = type(e)
    if issubclass(cls, SyntaxError) or getattr(e, "__notes__", None) is not None:
        return "".join(traceback.format_exception_only(cls, e))
    name, module = cls.__qualname__, cls.__module__
    if module not in ("__main__", "builtins"):
        name = f"{module if isinstance(module, str) else '<unknown>'}.{name}"
    try:
        text = str(e)
    except Exception:  # noqa: BLE001 - as Python's traceback writes an error whose str() fails
        text = "<exception str() failed>"
    return f"{name}: {text}\n" if text else f"{name}\n"


def _no_carets(te: traceback.TracebackException, seen: set[int]) -> None:
    if id(te) in seen:
        return
    seen.add(id(te))
    for frame in te.stack:
        frame.colno = None  # no column: nothing to underline (traceback.StackSummary.format)
    for nested in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if nested is not None:
            _no_carets(nested, seen)


def _failed(verdict: Verdict, calls: int, reason: Reason | None, err: BaseException,
            message: Message | None = None) -> Outcome:
    """The outcome of a failed pass, `err` described in texts that never raise (describe.py)."""
    error_class = class_name(type(err))
    text = error_text(err)
    if message is not None and issubclass(type(err), Retry):
        try:
            if cast(Retry, err).problem is not None:
                text = bad_after(err, message)
        except Exception:  # noqa: BLE001 - a Retry subclass of the handler's
            pass
    try:
        stack = valid_text(stack_text(err))
    except Exception as failed:  # noqa: BLE001 - e.g. a __cause__ that raises: the error alone
        stack = f"{error_class}: {text}\n(its traceback could not be written: {class_name(type(failed))})\n"
    return Outcome(verdict, calls, reason=reason, error_class=error_class,
                   error_message=text, stack=truncate_stack(stack, MAX_STACK), error_type=type(err))
