"""`antidote crds [--write]`: the CRDs (and docs/api.md) generated from antidote_api."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from antidote_api import crdgen, generated

from .errors import fail


def _repo_root() -> Path:
    # cli/antidote_cli/crds.py -> the checkout, when run from a source install.
    return Path(__file__).resolve().parents[2]


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("crds", help="print the CustomResourceDefinitions (YAML)")
    p.add_argument("--write", action="store_true",
                   help="write crds/, charts/antidote/files/crds/ and docs/api.md instead of printing")
    p.add_argument("--root", type=Path, default=None,
                   help="repository root to write into (default: this checkout)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not args.write:
        sys.stdout.write(crdgen.render_all())
        return 0
    root = args.root or _repo_root()
    if not (root / "pyproject.toml").is_file():
        return fail("crds", f"{root} is not an antidote checkout; pass --root")
    for rel, text in generated.files().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        old = path.read_text() if path.exists() else None
        if old != text:
            path.write_text(text)
        print(f"{'unchanged' if old == text else 'wrote':9} {rel}")
    return 0
