"""The floor plan holds: rooms by what they are, arrows only downward, no cycles, files of one purpose.

A *room* is a module or a package, seen from the package that holds it: inside ``pipelines`` the rooms
are ``graph.py``, ``options.py``, … and the folders ``sources/``, ``dedupe/``, …, each folder one room
whatever its modules import among themselves. Every import counts, also those inside functions
(``tests/importgraph.py`` reads them statically), so a lazy import cannot hide an arrow. The checks:

- no import cycle among the rooms of any package, at any depth;
- every arrow runs down the declared floors (``FLOORS``; ``PIPELINES_FLOORS`` inside the data job);
- at most 12 modules directly in ``pipelines/``; no product file over 600 lines, no function over 80;
- no ``_private`` name imported from another file; no issue number in a comment or docstring;
- the distribution installs four top-level names only, and every package says what its room is for.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable
from pathlib import Path

import pytest
from importgraph import ROOT, all_imports, cycles, describe, graph, source_modules

PRODUCT = ("pipelines", "trainer", "schemas", "shardforge", "deploy")
TOP_LEVEL_NAMES = {"pipelines", "trainer", "schemas", "shardforge"}

# The house from the ground up: a room may import rooms of its own floor or below, never above.
# pipelines and trainer share a floor and never import each other (tests/test_boundaries.py).
FLOORS: list[tuple[str, ...]] = [
    ("schemas",),
    ("shardforge.storage",),
    ("shardforge.console",),
    ("pipelines", "trainer"),
    ("deploy",),
    ("shardforge", "shardforge.cli", "shardforge.commands"),
]
# Inside the data job: records at the bottom, the stages' rooms, the graph, the jobs, the commands.
PIPELINES_FLOORS: list[tuple[str, ...]] = [
    ("pipelines", "pipelines.records"),
    ("pipelines.coders", "pipelines.metrics", "pipelines.flags", "pipelines.localrunner", "pipelines.intermediates"),
    ("pipelines.sources", "pipelines.clean", "pipelines.dedupe", "pipelines.tokenizer", "pipelines.pack",
     "pipelines.corpus", "pipelines.report"),
    ("pipelines.options", "pipelines.stages"),
    ("pipelines.graph",),
    ("pipelines.jobs",),
    ("pipelines.build", "pipelines.repack", "pipelines.serve"),
]
# The commands users run as `python -m pipelines.X`: thin entry points over pipelines.jobs.
ENTRY_POINTS = {"pipelines.build", "pipelines.repack", "pipelines.serve"}
MAX_PIPELINES_MODULES = 12
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80


@pytest.fixture(scope="module")
def known() -> dict[str, Path]:
    return source_modules()


@pytest.fixture(scope="module")
def edges(known) -> dict[str, set[str]]:
    """Our module -> our modules it imports, anywhere in it (function level included)."""
    g = graph(all_imports(), known, at_import_only=False)
    return {m: {t for t in out if t in known} for m, out in g.items()}


def is_package(module: str, known: dict[str, Path]) -> bool:
    return known[module].name == "__init__.py"


def room_of(module: str, package: str) -> str | None:
    """The room of ``package`` that holds ``module`` (``pipelines.dedupe.near`` in ``pipelines`` is
    ``pipelines.dedupe``), the package itself for its ``__init__``, None outside it."""
    if module == package:
        return package
    if not module.startswith(package + "."):
        return None
    return package + "." + module[len(package) + 1:].split(".")[0]


def room_edges(package: str, edges: dict[str, set[str]]) -> dict[str, dict[str, str]]:
    """Arrows between the rooms of ``package``: room -> {room it imports: "importer -> imported"}."""
    out: dict[str, dict[str, str]] = {}
    for m, targets in edges.items():
        a = room_of(m, package)
        if a is None or a == package:  # the package's face is not one of its rooms
            continue
        for t in targets:
            b = room_of(t, package)
            if b is not None and b not in (a, package):
                out.setdefault(a, {}).setdefault(b, f"{m} -> {t}")
    return out


def floor_of(module: str, floors: list[tuple[str, ...]]) -> int | None:
    """The floor of the longest declared name that holds ``module``."""
    best, found = -1, None
    for i, names in enumerate(floors):
        for n in names:
            if (module == n or module.startswith(n + ".")) and len(n) > best:
                best, found = len(n), i
    return found


def product_files() -> Iterable[Path]:
    for pkg in PRODUCT:
        yield from sorted((ROOT / pkg).rglob("*.py"))


# ------------------------------------------------------------------ arrows


def test_no_cycle_among_the_rooms_of_any_package(known, edges) -> None:
    from importgraph import Import

    packages = sorted(m for m in known if is_package(m, known))
    assert {"pipelines", "pipelines.dedupe", "shardforge", "trainer.loader"} <= set(packages)
    found = []
    for pkg in packages:
        arrows = room_edges(pkg, edges)
        # cycles() wants Import records per arrow; the note says which modules make the arrow
        as_imports = {a: {b: Import(a, note, b, 0, True) for b, note in out.items()} for a, out in arrows.items()}
        for nodes in arrows.values():
            for b in nodes:
                as_imports.setdefault(b, {})
        found += [f"in {pkg}: " + describe(c) for c in cycles(as_imports)]
    assert not found, "rooms that import each other:\n  " + "\n  ".join(found)


@pytest.mark.parametrize("floors, what", [(FLOORS, "the house"), (PIPELINES_FLOORS, "pipelines")],
                         ids=["house", "pipelines"])
def test_every_arrow_runs_down_the_floors(known, edges, floors, what) -> None:
    scope = {n for names in floors for n in names}
    covered = [m for m in known if floor_of(m, floors) is not None]
    assert covered, what
    # Every module of the scope is on a floor: a new room must be placed (and so thought about).
    top = {n.split(".")[0] for n in scope}
    unplaced = [m for m in known if m.split(".")[0] in top and floor_of(m, floors) is None]
    assert not unplaced, f"modules on no floor of {what}: {unplaced}"
    up = []
    for m in sorted(covered):
        fm = floor_of(m, floors)
        for t in sorted(edges[m]):
            ft = floor_of(t, floors)
            if ft is not None and ft > fm:  # type: ignore[operator]
                up.append(f"{m} (floor {fm}) imports {t} (floor {ft})")
    assert not up, f"arrows that run up in {what}:\n  " + "\n  ".join(up)


def test_the_halves_never_import_each_other(edges) -> None:
    bad = [f"{m} -> {t}" for m, ts in edges.items() for t in ts
           if {m.split(".")[0], t.split(".")[0]} == {"pipelines", "trainer"}]
    assert not bad, bad


def test_entry_points_are_thin_and_nothing_imports_them(edges) -> None:
    importers = {m: sorted(ts & ENTRY_POINTS) for m, ts in edges.items() if ts & ENTRY_POINTS}
    assert not importers, importers
    for ep in ENTRY_POINTS:
        assert edges[ep] <= {"pipelines.flags", "pipelines.localrunner.preflight", f"pipelines.jobs.{ep.split('.')[1]}"}


def test_the_graph_is_built_in_one_place_and_imports_no_job(edges) -> None:
    assert not any(t.startswith("pipelines.jobs") for t in edges["pipelines.graph"])
    assert "pipelines.jobs.batched" not in edges["pipelines.jobs.ingest"]  # batched runs ingest's batches
    builders = {m for m, ts in edges.items() if "pipelines.graph" in ts}
    assert builders == {"pipelines.jobs.build", "pipelines.jobs.ingest", "deploy.dataflow.main"}, builders


def test_no_stage_room_consults_the_options(edges) -> None:
    """The runner's choices are made in pipelines.options (RunnerPlan) and handed down: no stage asks."""
    stages = PIPELINES_FLOORS[2]
    bad = [f"{m} -> {t}" for m, ts in edges.items() for t in ts
           if floor_of(m, PIPELINES_FLOORS) == 2 and t == "pipelines.options"]
    assert stages and not bad, bad


# ------------------------------------------------------------------ sizes and names


def test_pipelines_keeps_few_modules_at_its_top() -> None:
    top = sorted(p.name for p in (ROOT / "pipelines").glob("*.py"))
    assert len(top) <= MAX_PIPELINES_MODULES, top


def test_no_file_over_600_lines_and_no_function_over_80() -> None:
    long_files, long_functions = [], []
    for path in product_files():
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT)
        if text.count("\n") > MAX_FILE_LINES:
            long_files.append(f"{rel}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > MAX_FUNCTION_LINES:
                    long_functions.append(f"{rel}:{node.lineno} {node.name}: {n} lines")
    assert not long_files and not long_functions, long_files + long_functions


def test_no_private_name_is_imported_from_another_file() -> None:
    ours = {*PRODUCT, "tests", "benchmarks"}
    found = []
    for path in [*product_files(), *sorted((ROOT / "tests").glob("*.py")), *sorted((ROOT / "benchmarks").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ours:
                found += [f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, found


ISSUE_TAG = re.compile(r"(?<![\w/])#\d+(?:\.\d+)?\b|\bissues?\s+#?\d+", re.IGNORECASE)


def comments_and_docstrings(text: str) -> Iterable[tuple[int, str]]:
    """(line, text) of every comment and every docstring of a Python source."""
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc


def test_comments_say_what_the_code_does_not_which_issue_asked() -> None:
    found = []
    for path in [*product_files(), *sorted((ROOT / "tests").glob("*.py")), *sorted((ROOT / "benchmarks").glob("*.py"))]:
        for line, text in comments_and_docstrings(path.read_text(encoding="utf-8")):
            found += [f"{path.relative_to(ROOT)}:{line}: {m.group(0)}" for m in ISSUE_TAG.finditer(text)]
    assert not found, "issue references in comments or docstrings (history belongs in git):\n  " + "\n  ".join(found)


def test_the_scan_for_issue_tags_sees_them() -> None:
    text = '"""Checks (issue #16, item 2)."""\n# hfinit (#20.2): x\nX = "#444"  # a color\n'
    assert [m.group(0) for _, t in comments_and_docstrings(text) for m in ISSUE_TAG.finditer(t)] == ["#20.2", "issue #16"]


def test_four_top_level_import_names() -> None:
    """The distribution installs pipelines, trainer, schemas and shardforge, and nothing else."""
    import tomllib

    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = spec["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {p.rstrip("*") for p in include} == TOP_LEVEL_NAMES
    # nothing else at the top of the checkout would be found as one of those patterns
    tops = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert TOP_LEVEL_NAMES <= tops and not {t for t in tops - TOP_LEVEL_NAMES
                                            if any(re.fullmatch(i.replace("*", ".*"), t) for i in include)}


def test_every_package_says_what_its_room_is_for(known) -> None:
    missing = [m for m, path in known.items() if path.name == "__init__.py" and m.split(".")[0] in PRODUCT
               and not ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))]
    assert not missing, f"packages without a docstring: {missing}"
