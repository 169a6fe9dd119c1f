"""What a failed attempt's error says in the headers (its class, its text), whatever the
handler raised. Pure.

Every exception a handler raises is an ordinary failure of its message, so describing it
must never raise: an error whose `str()` or `repr()` raises or returns no text, a class whose
`__module__` is not text, a text with lone surrogates (which Arrow and Kafka's headers
cannot carry as UTF-8) would otherwise fail the whole batch, and batch isolation would
quarantine the message as `batch-isolation` after its attempts were spent.
"""

from __future__ import annotations

from typing import Any

UNKNOWN = "<unknown>"  # as Python's traceback writes a module that is not text


def valid_text(text: str) -> str:
    """`text` as an exact str that encodes to UTF-8: a lone surrogate is written as its
    escape (`\\udc80`), the rest unchanged."""
    text = str.__str__(text)  # a str subclass's methods are the handler's code
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _own(cls: type, name: str, default: Any) -> Any:
    """The class's own `__qualname__`/`__module__`, read past a metaclass that overrides
    them; `default` when it has none."""
    try:
        return type.__dict__[name].__get__(cls)
    except Exception:  # noqa: BLE001 - e.g. no __module__ in the class's dict
        return default


def class_name(cls: type) -> str:
    """`ValueError` for builtins, `package.module.Name` otherwise (`<unknown>.Name` when the
    module is not text, as Python's traceback writes it)."""
    try:
        name, module = cls.__qualname__, cls.__module__
        if type(name) is not str or (module is not None and type(module) is not str):
            raise TypeError("not text")
    except Exception:  # noqa: BLE001 - a metaclass of the handler's: the class's own names
        name, module = _own(cls, "__qualname__", UNKNOWN), _own(cls, "__module__", UNKNOWN)
        if type(module) is not str:
            module = UNKNOWN
    if module == "builtins":
        return valid_text(name)
    return valid_text(f"{module if module is not None else UNKNOWN}.{name}")


def failed_call(what: str, obj: Any, err: BaseException) -> str:
    """The text standing in for `what` of `obj` (`str()`, `repr()`) when that raised `err`."""
    return f"<{what} of {class_name(type(obj))} failed: {class_name(type(err))}>"


def error_text(err: BaseException) -> str:
    """`str(err)`, or, when that raises (or returns no str), a text saying so with the class
    names: `<str() of shop.Error failed: RuntimeError>`."""
    try:
        return valid_text(str(err))
    except Exception as failed:  # noqa: BLE001 - the handler's code: any failure is the message's
        return failed_call("str()", err, failed)


def shown(value: Any) -> str:
    """`repr(value)`, or a text saying it failed (a value the handler passed, as Retry's after)."""
    try:
        return valid_text(repr(value))
    except Exception as failed:  # noqa: BLE001
        return failed_call("repr()", value, failed)
