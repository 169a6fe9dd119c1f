"""The small steps every build of the stack shares (binaries, jars, images): a tool that must
be on PATH, a content digest for cache keys, Go's environment, a logged command."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from .errors import StackError


def _require(tool: str, step_name: str, hint: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise StackError(step_name, f"`{tool}` not found on PATH ({hint})")
    return path


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()[:16]


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(CGO_ENABLED="0", GOTOOLCHAIN="local", GOFLAGS="-mod=readonly")
    return env


def _run_logged(cmd: list[str], cwd: Path, env: dict[str, str], log: Path, step_name: str) -> None:
    with open(log, "wb") as out:
        rc = subprocess.call(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
    if rc != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        hint = ""
        text = "\n".join(tail)
        if "proxy.golang.org" in text or "dial tcp" in text or "Could not transfer" in text:
            hint = " (is the package registry reachable?)"
        raise StackError(step_name, f"exit {rc}{hint}; last lines of {log}:\n" + text)
