"""Rules of the code's structure that anyone can check with the project's own tools: each
layer imports only the layers below it (docs/architecture.md), no module imports itself back
through others (no import cycle, tests and benchmarks included), and no module of the
packages grows past 450 lines (a module that does one thing reads in one sitting; new logic
goes into a new module named for it)."""

from __future__ import annotations

import ast
from pathlib import Path

from antidote_devstack.paths import source_roots

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = source_roots()  # api/, operator/, consumer/, cli/, dev/
ALSO = [ROOT / "tests", ROOT / "benchmarks", ROOT / "hack", ROOT / "examples"]
MAX_LINES = 450


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every Python file of the repository (the packages under the
    layers' folders by their import names, the rest from the repository's root)."""
    out: dict[str, Path] = {}
    for base in SHIPPED:
        for f in base.rglob("*.py"):
            parts = f.relative_to(base).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    for base in ALSO:
        for f in base.rglob("*.py"):
            if ".venv" in f.parts:
                continue
            parts = f.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports, at any depth of its code (a function-level import
    is an import too), TYPE_CHECKING blocks left out (they are not run)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for child in node.body for n in ast.walk(child)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_back_through_others() -> None:
    known = _modules()
    # A package's __init__ importing its own modules is how a package hands names on; the
    # cycle rule is about modules, so packages' faces are left out of the graph.
    graph = {name: {t for t in _imports(name, path, known) if known[t].name != "__init__.py"}
             for name, path in known.items() if path.name != "__init__.py"}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_shipped_module_is_longer_than_the_rule() -> None:
    long = {str(f.relative_to(ROOT)): n for base in SHIPPED for f in base.rglob("*.py")
            if (n := len(f.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"over {MAX_LINES} lines: {long}"


# Who may import whom, by top-level package (docs/architecture.md draws it). The contracts
# import nothing of ours; the operator and the data plane only the contracts (and the data
# plane the handlers' API it serves); the CLI sits on both; the dev tooling on what it runs.
DEV = {"antidote_devstack", "antidote_demo", "antidote_devrunner", "antidote_testkit"}
MAY_IMPORT = {
    "antidote_api": set(),
    "antidote": {"antidote_api", "antidote_consumer"},
    "antidote_consumer": {"antidote_api", "antidote"},
    "antidote_operator": {"antidote_api"},
    "antidote_cli": {"antidote_api", "antidote", "antidote_consumer", "antidote_operator"},
    "antidote_devstack": {"antidote_api"},
    "antidote_devrunner": {"antidote_api", "antidote_operator", "antidote_devstack"},
    "antidote_demo": {"antidote_api", "antidote", "antidote_consumer", "antidote_devstack"},
    # What tests and benchmarks both drive the components with (neither imports the other's).
    "antidote_testkit": {"antidote_api", "antidote_consumer", "antidote_devstack"},
}
# The images carry the CLI but not the dev tooling: the CLI reaches it only from inside the
# functions of its dev commands (`antidote dev`, `demo`, `operator --dev-runner`), which a
# checkout or `pip install antidote[dev]` brings.
LAZY = {"antidote_cli": DEV}


def _layer_breaches() -> list[str]:
    known = _modules()
    out = []
    for name, path in sorted(known.items()):
        top = name.split(".")[0]
        if top not in MAY_IMPORT:
            continue  # tests, benchmarks, hack, examples
        module_level = {t for node in ast.parse(path.read_text()).body
                        for t in _top_imports(node)}
        for t in sorted(_imports(name, path, known)):
            other = t.split(".")[0]
            if other == top or other not in MAY_IMPORT:
                continue
            lazy_ok = other in LAZY.get(top, set()) and other not in module_level
            if other not in MAY_IMPORT[top] and not lazy_ok:
                out.append(f"{name} imports {t}")
    return out


def _top_imports(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name.split(".")[0] for a in node.names}
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        return {node.module.split(".")[0]}
    return set()


def test_each_layer_imports_only_the_layers_below_it() -> None:
    assert set(MAY_IMPORT) == {d.name for base in SHIPPED for d in base.iterdir()
                               if (d / "__init__.py").exists()}, "a package without a layer rule"
    assert _layer_breaches() == []


def test_tests_and_benchmarks_do_not_import_each_other_both_ways() -> None:
    """What both need lives in a library (antidote_testkit), as kopf.testing does for Kopf's
    users: the chaos tests run the benchmarks' chaos (one implementation), and no benchmark
    imports a test module."""
    known = _modules()
    from_benchmarks = {t for name, path in known.items() if name.startswith("benchmarks.")
                       for t in _imports(name, path, known) if t.startswith("tests.")}
    assert from_benchmarks == set()
