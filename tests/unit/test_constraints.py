"""constraints.txt (hack/lock.py) against pyproject.toml: every dependency Antidote names is
pinned, at a version its range allows, so `make install` and the images cannot drift from
the ranges, nor fetch an unpinned package."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.version import Version

from ..api_cases import ROOT


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_every_dependency_and_the_build_backend_is_pinned_within_its_range() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    wanted = [*project["project"]["dependencies"], *[r for group in extras.values() for r in group],
              *project["build-system"]["requires"]]
    pins = _pins()
    for text in wanted:
        req = Requirement(text)
        if req.name == project["project"]["name"]:  # dev = antidote[consumer] + the tools
            assert req.extras <= extras.keys(), f"{text}: no such extra in pyproject.toml"
            continue
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pins, f"{req.name} (pyproject.toml) is not in constraints.txt: run hack/lock.py"
        assert Version(pins[name]) in req.specifier, f"constraints.txt pins {name}=={pins[name]}, outside {text}"
