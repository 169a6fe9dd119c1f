"""pandas within what the engine supports: pyspark 4.2.0 warns at every start ("PySpark does
not yet fully support pandas >= 3.0.0 ... use pandas < 3.0.0"), so pyproject.toml keeps
pandas below 3 and constraints.txt pins a 2.x (the images install from it too)."""

from __future__ import annotations

import importlib.metadata as md
import re
import tomllib
import warnings

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from ..api_cases import ROOT


def _pin(name: str) -> Version:
    text = (ROOT / "constraints.txt").read_text()
    return Version(re.search(rf"^{name}==(\S+)$", text, re.M).group(1))


def test_pandas_is_pinned_and_ranged_below_3() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pandas,) = [Requirement(r) for r in extras["consumer"] if Requirement(r).name == "pandas"]
    assert Version("3.0.0") not in pandas.specifier and Version("2.3.3") in pandas.specifier
    assert _pin("pandas") < Version("3")
    # The images install the consumer extra from the same constraints (docker/*.Dockerfile).
    assert "-c constraints.txt" in (ROOT / "docker" / "consumer.Dockerfile").read_text()


def test_the_engine_does_not_warn_about_the_installed_pandas() -> None:
    pytest.importorskip("pyspark")
    installed = Version(md.version("pandas"))
    if installed != _pin("pandas"):
        pytest.skip(f"pandas {installed} is installed, constraints.txt pins {_pin('pandas')}: "
                    "run `make install` to install the pinned versions")
    from pyspark.sql.pandas.utils import require_minimum_pandas_version

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        require_minimum_pandas_version()  # what every Spark start with Arrow runs
    assert not [w for w in seen if "pandas" in str(w.message)], [str(w.message) for w in seen]
