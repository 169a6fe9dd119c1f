"""Loading the user's handler from `package.module:function`."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from .describe import error_text  # a module's import error may not even print

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
        raise HandlerLoadError(f"handler {ref!r}: cannot import {module_name}: {error_text(err)}") from err
    except Exception as err:  # noqa: BLE001 - the module's own code failed as it was imported
        first = (error_text(err).strip().splitlines() or [""])[0]
        raise HandlerLoadError(f"handler {ref!r}: importing {module_name} failed: "
                               f"{type(err).__name__}: {first}") from err
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise HandlerLoadError(f"handler {ref!r}: {module_name} has no callable {attr!r}")
    return fn


CHECK_TIMEOUT_S = 120.0


def check_handler(ref: str, timeout: float = CHECK_TIMEOUT_S) -> str | None:
    """Why `ref` cannot be loaded, in one line, or None. Run in a child process, as the
    handler always is: its module's code stays out of the driver, and an import that hangs
    or kills its process is reported too."""
    try:
        proc = subprocess.run([sys.executable, "-m", __name__, ref], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"handler {ref!r}: importing it did not finish in {timeout:g}s"
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode == 1 and lines:
        return lines[-1]
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return f"handler {ref!r}: the process importing it died with code {proc.returncode}: {tail}"


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


if __name__ == "__main__":  # check_handler's child: exit 0, or print why and exit 1
    try:
        load_handler(sys.argv[1])
    except HandlerLoadError as err:
        print(err)
        sys.exit(1)
