"""Models -> docs/api.md: every field with its type, default, meaning and seed analogue,
plus the cross-field rules and printer columns, all read from the same schema as the CRDs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .crdgen import KINDS, Kind, json_schema
from .spark_conf import OWNED, TUNABLE_MAX, TUNABLES
from .types import API_VERSION

INTRO = f"""\
# Antidote API reference (`{API_VERSION}`)

<!-- Generated from api/antidote_api by `antidote crds --write`; do not edit. -->

Two namespaced kinds in the `antidote` category (`kubectl get antidote`). Field names are
camelCase; unknown fields are rejected (`kubectl apply --validate=strict`, the default of
recent kubectl). Defaults live in the CRD schema, so `kubectl get ppol NAME -o yaml` shows
the effective policy. Durations are whole numbers with units `h`, `m`, `s`, `ms` in that
order: `30s`, `10m`, `1h30m`, `250ms`.

Semantics:
- A message that always fails is attempted exactly `(retries.immediate + 1) x (retries.cycles + 1)`
  times, then gets its `disposition` (or, with `routes`, the first matching route's).
  Cycle k (1-based) waits `cycleDelay x backoff^(k-1)`, at most `maxCycleDelay`; with
  `retries.maxAge`, one that would start too late is not started (reason `expired`).
- Derived topics of a source topic `T`: `T.retry-1` ... `T.retry-<cycles>`, `T.poison`
  (for `Move`), `T.dlq` (for `Reject`); `spec.topics` overrides them.
- `validation` failures and `nonRetryable` exceptions skip all retries.
"""


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(value: Any) -> str:
    text = value if isinstance(value, str) and value else json.dumps(value)
    return f"`{text}`"


def _type(node: dict[str, Any]) -> str:
    kind = node.get("type", "object")
    if "x-antidote-type" in node:
        return str(node["x-antidote-type"])
    if "enum" in node:
        return "enum: " + ", ".join(_code(v) for v in node["enum"])
    if kind == "array":
        inner = _type(node["items"])
        suffix = {"set": " (set)", "map": " (map by " + ", ".join(node.get("x-kubernetes-list-map-keys", [])) + ")"}
        return f"[]{inner}" + suffix.get(node.get("x-kubernetes-list-type", ""), "")
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map[string]{_type(node['additionalProperties'])}"
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return "object (free-form)"
    parts = [kind + (f" ({node['format']})" if "format" in node else "")]
    lo, hi = node.get("minimum"), node.get("maximum")
    if lo is not None and hi is not None:
        parts.append(f"{'(' if node.get('exclusiveMinimum') else '['}{lo}, {hi}]")
    elif lo is not None:
        parts.append(f"{'>' if node.get('exclusiveMinimum') else '>='} {lo}")
    if "pattern" in node:
        parts.append(f"pattern {_code(node['pattern'])}")
    return " ".join(parts)


def _formats(node: Any, found: dict[str, str]) -> dict[str, str]:
    if isinstance(node, dict):
        if "x-antidote-type" in node and "pattern" in node:
            found.setdefault(node["x-antidote-type"], node["pattern"])
        for value in node.values():
            _formats(value, found)
    elif isinstance(node, list):
        for value in node:
            _formats(value, found)
    return found


def _rows(node: dict[str, Any], path: str, required: bool) -> Iterator[list[str]]:
    if path:
        default = _code(node["default"]) if "default" in node else ("required" if required else "")
        yield [f"`{path}`", _type(node), default, node.get("description", ""), node.get("x-antidote-seed", "")]
    target = node["items"] if node.get("type") == "array" else node
    prefix = f"{path}[]." if node.get("type") == "array" else (f"{path}." if path else "")
    needed = set(target.get("required", []))
    for name, sub in target.get("properties", {}).items():
        yield from _rows(sub, f"{prefix}{name}", name in needed)


def _rules(node: dict[str, Any], path: str) -> Iterator[list[str]]:
    for rule in node.get("x-kubernetes-validations", []):
        where = path + rule.get("fieldPath", "")
        yield [f"`{where or '(object)'}`", _code(rule["rule"]), rule["message"]]
    target = node["items"] if node.get("type") == "array" else node
    if target is not node:  # rules of a list's items (a PoisonPolicy route's)
        for rule in target.get("x-kubernetes-validations", []):
            yield [f"`{path}[]{rule.get('fieldPath', '')}`", _code(rule["rule"]), rule["message"]]
    for name, sub in target.get("properties", {}).items():
        yield from _rules(sub, f"{path}{'[]' if target is not node else ''}.{name}")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _kind_section(kind: Kind) -> str:
    schema = json_schema(kind.model)
    props = schema["properties"]
    names = ", ".join(f"`{n}`" for n in kind.short_names)
    out = [f"## {kind.kind}\n",
           f"{kind.description}\n",
           f"`kubectl get {kind.plural}` (short name {names}); status is written through the "
           "`status` subresource only.\n"]
    header = ["field", "type", "default", "meaning", "seed analogue"]
    for part in ("spec", "status"):
        out.append(f"### {kind.kind}.{part}\n")
        out.append(_table(header, list(_rows(props[part], "", False))))
    rules = list(_rules(schema, ""))
    if rules:
        out.append(f"### {kind.kind} rules\n")
        out.append("Cross-field rules, enforced by the API server (CEL) and by the models alike.\n")
        out.append(_table(["where", "rule (CEL)", "message"], rules))
    out.append(f"### {kind.kind} columns\n")
    out.append(_table(["column", "JSONPath", "shown"], [
        [c["name"], _code(c["jsonPath"]), "wide" if c.get("priority") else "always"]
        for c in kind.printer_columns]))
    return "\n".join(out)


def _formats_section() -> str:
    found: dict[str, str] = {}
    for kind in KINDS:
        _formats(json_schema(kind.model), found)
    rows = [[name, _code(pattern)] for name, pattern in sorted(found.items(), key=lambda i: i[0].lower())]
    return "## Formats\n\nNamed string formats used in the tables below, as the API server checks them.\n\n" \
        + _table(["format", "pattern"], rows)


def _owned_section() -> str:
    rows = [[", ".join(_code(k) for k in group.keys), group.why] for group in OWNED]
    return ("## Spark configuration the operator owns\n\n"
            "`spec.spark.conf` may not set these keys (a key ending in `*` stands for every key "
            "with that prefix): the API server refuses the QueueConsumer with a message naming "
            "them, and `antidote consumer` refuses such settings with exit code 2. They would "
            "override the consumer's least-privilege set-up (docs/operator.md, \"Security\").\n\n"
            + _table(["keys", "owned because"], rows))


def _tunables_section() -> str:
    rows = [[_code(t.key), f"{t.default:,}", t.meaning] for t in TUNABLES]
    return ("## Antidote's settings in spark.conf\n\n"
            "Tuning of the consumer itself, set in `spec.spark.conf` like any Spark setting. "
            f"Values are whole numbers from 0 to {TUNABLE_MAX:,}; a `spark.antidote.*` key not "
            "listed here, or a value that is not such a number, is refused by the API server and "
            "by `antidote consumer` (exit code 2, naming the key).\n\n"
            + _table(["key", "default", "meaning"], rows))


def render_docs() -> str:
    return "\n".join([INTRO, _formats_section(), *(_kind_section(k) for k in KINDS), _owned_section(),
                      _tunables_section()])
