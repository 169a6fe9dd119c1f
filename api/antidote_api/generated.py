"""Every file generated from the models (`antidote crds --write`; a unit test fails on drift):
the CRDs, the chart's copy of them, and docs/api.md.

The chart's copy is under files/crds/, not Helm's crds/ folder: templates/crds/ renders it
when `crds.install` is on, so `helm upgrade` updates the CRDs (Helm never touches crds/
after the first install)."""

from __future__ import annotations

from .crdgen import KINDS, render
from .docs import render_docs


def files() -> dict[str, str]:
    """Every generated file by path relative to the repository root."""
    out: dict[str, str] = {}
    for kind in KINDS:
        text = render(kind)
        out[f"crds/{kind.filename}"] = text
        out[f"charts/antidote/files/crds/{kind.filename}"] = text
    out["docs/api.md"] = render_docs()
    return out
