"""Where the local stack keeps things: caches outside the clone, state per stack."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HACK = REPO / "hack"


def source_roots() -> list[Path]:
    """The checkout's package folders, one per layer (pyproject.toml's packages.find, the
    one list of them): what a process started from the checkout needs on its PYTHONPATH."""
    import tomllib

    with open(REPO / "pyproject.toml", "rb") as f:
        where = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]["where"]
    return [REPO / w for w in where]


def code_path(*first: str | Path) -> str:
    """A PYTHONPATH for a process that runs this checkout's code: `first`, the checkout
    (its tests' helper modules) and its package folders."""
    return os.pathsep.join(str(p) for p in (*first, REPO, *source_roots()))


def cache_dir() -> Path:
    """Built binaries and jars, shared by every clone on the machine."""
    root = os.environ.get("ANTIDOTE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "antidote"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_stack_dir() -> Path:
    """State of the stack started by `antidote dev up` (certs, data, logs, pid files)."""
    return Path(os.environ.get("ANTIDOTE_STACK_DIR") or cache_dir() / "stack")


def venv_bin() -> Path:
    """The bin/ of the running interpreter's environment (kubectl, antidote live there)."""
    return Path(sys.executable).parent
