"""`-o table|json|yaml`, the one output flag of every command that prints data (docs/cli.md).
JSON and YAML carry the same document; the table is for people. `text` (the reader's and
redrive's old spelling) is kept as an alias of `table`."""

from __future__ import annotations

import argparse
import json
from typing import Any

FORMATS = ("table", "json", "yaml")
ALIASES = {"text": "table"}


def _format(value: str) -> str:
    return ALIASES.get(value, value)


def add_output_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", type=_format, choices=FORMATS, default="table",
                   metavar="{table,json,yaml}",
                   help="a table for people (default; 'text' is an alias), or JSON or YAML for scripts")


def machine(args: argparse.Namespace) -> bool:
    """Whether the output is for a script (JSON or YAML): progress lines then stay off."""
    return getattr(args, "output", "table") != "table"


def render(doc: Any, fmt: str, *, indent: int | None = None) -> str:
    """`doc` (JSON types only) as JSON or YAML text, without a trailing newline."""
    if fmt == "yaml":
        import yaml

        # Through JSON first: the same document either way (integer keys become strings).
        return yaml.safe_dump(json.loads(json.dumps(doc)), sort_keys=False,
                              allow_unicode=True).rstrip("\n")
    return json.dumps(doc, indent=indent)


def emit(args: argparse.Namespace, doc: Any, *, indent: int | None = None) -> bool:
    """Print `doc` when -o json or yaml asked for it; False when the caller prints its table."""
    if not machine(args):
        return False
    print(render(doc, args.output, indent=indent))
    return True
