"""Loading the user's handler from `package.module:function`."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from typing import Any

Handler = Callable[..., Any]


class HandlerLoadError(ValueError):
    pass


def load_handler(ref: str) -> Handler:
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise HandlerLoadError(f"handler {ref!r}: expected 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise HandlerLoadError(f"handler {ref!r}: cannot import {module_name}: {err}") from err
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise HandlerLoadError(f"handler {ref!r}: {module_name} has no callable {attr!r}")
    return fn


def encode_output(out: Any) -> bytes | None:
    """A handler returns bytes, str, a JSON-able dict/list, or None (nothing to write)."""
    if out is None or isinstance(out, bytes):
        return out
    if isinstance(out, (bytearray, memoryview)):
        return bytes(out)
    if isinstance(out, str):
        return out.encode("utf-8")
    if isinstance(out, (dict, list)):
        return json.dumps(out, separators=(",", ":")).encode("utf-8")
    raise TypeError(f"handler returned {type(out).__name__}; expected bytes, str, dict, list or None")
