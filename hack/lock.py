"""Write constraints.txt: the exact version of every package `antidote[dev]` pulls in, read
from an environment where it is installed (the .venv of `make install`).

    .venv/bin/python hack/lock.py            # after changing a dependency in pyproject.toml

pyproject.toml keeps ranges (what Antidote works with); constraints.txt pins what this
repository installs and tests (hack/install.sh) and what its images ship
(docker/*.Dockerfile), so a fresh machine builds the same thing. Only the dependency closure
of antidote[dev] is written: tools installed beside it (a profiler) stay out.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
# The installer and the build backend ([build-system] requires): not in the closure above,
# so pinned here by hand; installed first, then Antidote is built without an isolated
# environment (which would fetch the newest setuptools).
BUILD = {"pip": "26.3", "setuptools": "84.2.1", "wheel": "0.48.0"}
HEADER = """\
# Exact versions of everything antidote[dev] installs, written by hack/lock.py from a
# working .venv (do not edit by hand). Used as pip constraints by hack/install.sh and by
# docker/*.Dockerfile, so that every machine and image gets the versions that were tested.
"""


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(name: str, extras: tuple[str, ...]) -> dict[str, str]:
    """{distribution: version} of `name[extras]` and everything it requires, transitively."""
    found: dict[str, str] = {}
    # A distribution is visited once per set of extras: antidote[dev] requires
    # antidote[consumer], whose requirements the first visit did not take.
    seen: set[tuple[str, tuple[str, ...]]] = set()
    todo = [(name, extras)]
    while todo:
        dist_name, wanted = todo.pop()
        visit = (_key(dist_name), tuple(sorted(wanted)))
        if visit in seen:
            continue
        seen.add(visit)
        dist = md.distribution(dist_name)
        found[_key(dist_name)] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (*wanted, "")):
                todo.append((req.name, tuple(req.extras)))
    return found


def main() -> int:
    pins = closure("antidote", ("dev",))
    pins.pop("antidote")
    pins.update(BUILD)
    text = HEADER + "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))
    (ROOT / "constraints.txt").write_text(text)
    print(f"constraints.txt: {len(pins)} packages", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
