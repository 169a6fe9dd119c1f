"""The stack a benchmark runs on: the one named by $ANTIDOTE_STACK_DIR if it runs, else its
own in ~/.cache/antidote/bench-stack, started here and stopped by `down`."""

from __future__ import annotations

import os
from pathlib import Path

from antidote_devstack import stack as devstack
from antidote_devstack.paths import cache_dir


def up() -> tuple[devstack.Stack, Path | None]:
    """The running stack and the directory of the one started here (None: reused)."""
    reuse = os.environ.get("ANTIDOTE_STACK_DIR")
    running = devstack.running(Path(reuse)) if reuse else None
    if running is not None:
        return running, None
    own = cache_dir() / "bench-stack"
    return devstack.up(own), own


def down(own: Path | None) -> None:
    if own is not None:
        devstack.down(own)
