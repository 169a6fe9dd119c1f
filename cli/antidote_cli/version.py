"""The installed distribution's version (pyproject.toml's, the one source of it): what
`antidote --version` prints and what the on-call commands name when they meet settings of
another version."""

from __future__ import annotations


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version as dist_version

    try:
        return dist_version("antidote")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"
