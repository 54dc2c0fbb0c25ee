"""The data job's layout (#16.8): drivers import the graph, never each other's internals; no import cycles.

Read statically from the source (every import, also those inside functions), so a lazy
import cannot hide a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = ROOT / "pipelines"
# The command-line drivers: nothing in pipelines/ may import them (they sit on top).
CLI_DRIVERS = {"pipelines.build", "pipelines.serve", "pipelines.repack"}
# The engines the drivers run: one batch as a corpus version, a chain of batches.
ENGINES = {"pipelines.ingest", "pipelines.batched"}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """The pipelines.* modules a file imports anywhere in it (``from pipelines import x`` counts x)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("pipelines")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "pipelines":
                found |= {f"pipelines.{a.name}" for a in node.names}
            elif node.module.startswith("pipelines."):
                found.add(node.module)
    return found


def graph() -> dict[str, set[str]]:
    files = sorted(PIPELINES.rglob("*.py"))
    names = {module_name(f) for f in files}

    def known(m: str) -> str | None:
        while m and m not in names:
            m = m.rpartition(".")[0]
        return m or None

    return {module_name(f): {k for m in imports_of(f) if (k := known(m)) and k != module_name(f)}
            for f in files}


def test_the_scan_sees_imports():
    g = graph()
    assert "pipelines.graph" in g["pipelines.ingest"]  # a lazy import inside a function
    assert "pipelines.graph" in g["pipelines.build"]


def test_no_import_cycles_in_pipelines():
    g = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(n):] + [n]))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)


def test_nothing_imports_a_cli_driver():
    g = graph()
    bad = {m: sorted(g[m] & CLI_DRIVERS) for m in g if g[m] & CLI_DRIVERS}
    assert not bad, bad


def test_graph_imports_no_driver_and_engines_only_downward():
    g = graph()
    assert not g["pipelines.graph"] & (CLI_DRIVERS | ENGINES)
    assert "pipelines.batched" not in g["pipelines.ingest"]  # batched runs ingest's batches, never back
    # The build graph is constructed in one place: the drivers that run it take it from there.
    builders = {m for m in g if "pipelines.graph" in g[m]}
    assert builders == {"pipelines.build", "pipelines.ingest"}, builders
