"""The type checker over what pyproject.toml's [tool.mypy] names: the contracts
(antidote_api, strict), and under mypy's default rules the data plane and handler API
(antidote_consumer, antidote), the operator, the CLI and the dev tools (the dev stack, the
demo, the dev runner). A change that breaks a typed contract (a Literal, an enum, a field's
type) fails here, in `make test`, before any integration test runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Outside the clone, like the project's other caches (a warm run takes seconds).
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "antidote" / "mypy"


def test_the_type_checker_passes() -> None:
    if shutil.which("mypy", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("mypy is not installed: it is a dev dependency (make install)")
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(CACHE), "--no-error-summary"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode == 0 and not errors, "\n".join(errors or [done.stdout, done.stderr])
