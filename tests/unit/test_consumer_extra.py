"""The `consumer` extra (pyproject.toml): the operator, its API models and the on-call CLI
import without Spark and Arrow (the operator image leaves them out), and a command that needs
them says which extra to install instead of a traceback. Each case runs in a fresh Python
whose imports of those packages fail, as they do where they are not installed."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from packaging.requirements import Requirement

from antidote_cli.main import CONSUMER_EXTRA

from ..api_cases import ROOT

BLOCK = f"import sys\nfor m in {sorted(CONSUMER_EXTRA)!r}:\n    sys.modules[m] = None\n"


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK + code, *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_the_extra_names_what_pyproject_puts_in_it() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["consumer"]
    names = {Requirement(r).name for r in extra}
    assert names <= CONSUMER_EXTRA, names - CONSUMER_EXTRA


def test_every_module_of_the_operator_and_the_cli_imports_without_the_extra() -> None:
    out = _python(
        "import importlib, pkgutil\n"
        "for top in ('antidote_api', 'antidote_operator', 'antidote_cli'):\n"
        "    pkg = importlib.import_module(top)\n"
        "    for info in pkgutil.walk_packages(pkg.__path__, top + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "        print(info.name)\n")
    assert out.returncode == 0, out.stderr
    imported = out.stdout.split()
    assert {"antidote_operator.main", "antidote_operator.handlers", "antidote_cli.oncall.commands"} <= set(imported)


def test_the_consumer_without_the_extra_names_it_in_one_line(tmp_path) -> None:
    qc = (ROOT / "examples/queueconsumer-minimal.yaml").read_text().replace(
        "audit.handlers:record", "antidote_consumer.examples.expenses:approve")
    (tmp_path / "qc.yaml").write_text(qc)
    out = _python("from antidote_cli.main import main\nsys.exit(main(sys.argv[1:]))",
                  "consumer", "--consumer", str(tmp_path / "qc.yaml"),
                  "--policy", str(ROOT / "examples/poisonpolicy-minimal.yaml"))
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip().splitlines() == [
        "antidote consumer: needs pyspark, from the 'consumer' extra: pip install "
        "'antidote[consumer]' (the consumer image has it)"]
