"""The CLI as the images carry it: without the dev tooling (dev/, in neither image) and, in
the consumer image, without the operator. It starts, and a command that needs what is left
out says so in one line (exit 1) instead of a traceback. The packages are hidden the way
an image lacks them: their import fails (None in sys.modules)."""

from __future__ import annotations

import subprocess
import sys

import pytest

DEV = ("antidote_devstack", "antidote_demo", "antidote_devrunner", "antidote_testkit")


def antidote(hidden: tuple[str, ...], *argv: str) -> subprocess.CompletedProcess[str]:
    code = ("import sys\n"
            f"for m in {hidden!r}: sys.modules[m] = None\n"
            "from antidote_cli.main import main\n"
            f"sys.exit(main({list(argv)!r}))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("hidden", [DEV, DEV + ("antidote_operator",)], ids=["operator-image", "consumer-image"])
def test_the_cli_starts_without_the_dev_tooling(hidden: tuple[str, ...]) -> None:
    out = antidote(hidden, "--help")
    assert out.returncode == 0 and "consumer" in out.stdout, out.stderr


@pytest.mark.parametrize("argv", [("dev", "status"), ("demo",)])
def test_a_dev_command_in_an_image_says_the_dev_tooling_is_left_out(argv: tuple[str, ...]) -> None:
    out = antidote(DEV, *argv)
    assert out.returncode == 1 and out.stdout == "", out
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"antidote {argv[0]}: needs the dev tooling (antidote_"), line


def test_the_operator_in_the_consumer_image_says_it_is_left_out() -> None:
    out = antidote(DEV + ("antidote_operator",), "operator", "--namespace", "x")
    assert out.returncode == 1, out
    assert out.stderr.strip() == ("antidote operator: needs the operator (antidote_operator), which the "
                                  "consumer image leaves out: run it from the operator image")
