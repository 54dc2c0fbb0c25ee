"""The package boundaries hold, checked twice: statically over every import in the source, and at runtime.

- pipelines/ (and the Dataflow image's deploy/dataflow/) never imports torch (nor matplotlib);
  trainer/ never imports apache_beam;
- schemas/ (the contract) and storage/ import neither, nor anything of
  pipelines/, trainer/ or shardforge/ (storage may use the contract's errors);
- the CLI layer the halves share (shardforge.console.run, .cliargs, .redact) loads
  neither half;
- no import cycles among our modules.

The static check (tests/importgraph.py) reads every ``.py`` file with `ast`, so
it sees what a runtime check cannot: imports inside functions (which run only
on some paths), under ``TYPE_CHECKING``, and ``importlib.import_module("…")``.
It follows our own modules transitively: a trainer function that imports a
pipelines module which imports Beam is caught, with the chain in the message.
The runtime check sees what the static one cannot: what third-party packages
import in turn.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from importgraph import ROOT, Import, Step, all_imports, cycles, describe, graph, path_to, source_modules

import pipelines
import trainer

# The console layer every __main__ uses (run_cli, the strict parser, redaction): both halves import it.
CLI_LAYER = ("shardforge", "shardforge.console", "shardforge.console.run", "shardforge.console.args",
             "shardforge.console.redact")
# What of shardforge sits above both halves: the `shardforge` command and its subcommands.
COMMANDS = frozenset({"shardforge.cli", "shardforge.commands"})



@dataclass(frozen=True)
class Rule:
    """The modules of `packages` (with their submodules; only those modules when exact) never reach `forbidden`."""

    what: str
    packages: tuple[str, ...]
    forbidden: frozenset[str]  # a third-party distribution, or one of our packages or modules (with what is under it)
    exact: bool = False

    def covers(self, module: str) -> bool:
        return module in self.packages if self.exact else any(
            module == p or module.startswith(p + ".") for p in self.packages)

    def forbids(self, node: str) -> bool:
        return any(node == f or node.startswith(f + ".") for f in self.forbidden)


_NEITHER_HALF = frozenset({"torch", "apache_beam", "pipelines", "trainer"})
RULES = [
    Rule("pipelines never imports torch", ("pipelines",), frozenset({"torch"})),
    # The report's charts are SVG text (pipelines.report.charts): the data job needs no plotting library.
    Rule("pipelines never imports matplotlib", ("pipelines",), frozenset({"matplotlib"})),
    Rule("the Dataflow job (deploy/dataflow) never imports torch or the trainer", ("deploy.dataflow",),
         frozenset({"torch", "trainer"})),
    Rule("trainer never imports apache_beam", ("trainer",), frozenset({"apache_beam"})),
    Rule("schemas (the contract) imports neither torch nor Beam nor any layer above it", ("schemas",),
         _NEITHER_HALF | {"shardforge"}),
    Rule("storage imports neither torch nor Beam nor any layer above it", ("shardforge.storage",),
         _NEITHER_HALF | COMMANDS | {"shardforge.console"}),
    Rule("the shared console layer loads neither half nor the commands", CLI_LAYER, _NEITHER_HALF | COMMANDS, exact=True),
]

# Known import cycles through function-level imports, each allowed by ONE edge, until the work
# that removes it lands. Remove an entry when its cycle is gone (the test says when).
KNOWN_CYCLE_EDGES: dict[tuple[str, str], str] = {
    # (module, imported module): "why it is allowed for now" -- empty: there is no cycle left.
}


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return all_imports()


@pytest.fixture(scope="module")
def known() -> dict[str, Path]:
    return source_modules()


# ------------------------------------------------------------------ the static check


def test_the_static_scan_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The scanner on a small package: function-level, class-body, relative, TYPE_CHECKING and importlib imports."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(textwrap.dedent("""\
        import importlib
        import os.path
        from typing import TYPE_CHECKING

        from . import b

        if TYPE_CHECKING:
            import apache_beam

        class C:
            from .b import helper

        def f(name):
            import torch.nn
            importlib.import_module("numpy.linalg")
            return __import__(name)

        g = lambda: importlib.import_module("pkg.sub")
        """))
    (pkg / "b.py").write_text("from pkg.a import C\n\ndef helper():\n    from .sub import thing\n")
    (pkg / "sub" / "__init__.py").write_text("from .. import a\nfrom ..b import helper\n")
    mods = source_modules(tmp_path, ["pkg"])
    assert sorted(mods) == ["pkg", "pkg.a", "pkg.b", "pkg.sub"]
    found = all_imports(tmp_path, ["pkg"])
    got = {(i.module, i.target, i.at_import) for i in found}
    assert {("pkg.a", "importlib", True), ("pkg.a", "os.path", True), ("pkg.a", "pkg.b", True),
            ("pkg.a", "apache_beam", False),  # TYPE_CHECKING: seen, but not run at import time
            ("pkg.a", "torch.nn", False), ("pkg.a", "numpy.linalg", False), ("pkg.a", "pkg.sub", False),
            ("pkg.a", None, False),  # __import__(name): a dynamic import the check cannot follow
            ("pkg.b", "pkg.a", True), ("pkg.b", "pkg.sub", False),
            ("pkg.sub", "pkg.a", True), ("pkg.sub", "pkg.b", True)} <= got
    assert ("pkg.a", "pkg.b", True) in got  # the class body's `from .b import helper` runs at import time
    assert [i.line for i in found if i.target == "torch.nn"] == [14]
    at_import = graph(found, mods, at_import_only=True)
    assert [describe(c).split("  (")[0] for c in cycles(at_import)] == ["pkg.a -> pkg.b -> pkg.a"]
    every = graph(found, mods, at_import_only=False)
    chain = path_to(every, "pkg.b", {"torch"})
    assert chain is not None and describe(chain).startswith("pkg.b -> pkg.a -> torch  (pkg/b.py:1, pkg/a.py:14)")


def test_the_static_scan_reads_our_source(imports: list[Import], known: dict[str, Path]) -> None:
    """The check itself works on the real tree: it sees Beam in pipelines, torch in the trainer, lazy imports."""
    assert {"pipelines.jobs.build", "trainer.train", "schemas.manifest", "shardforge.storage.urls", "shardforge.console.run"} <= set(known)
    tops = {(i.module.split(".")[0], (i.target or "").split(".")[0]) for i in imports}
    assert ("pipelines", "apache_beam") in tops and ("trainer", "torch") in tops
    assert any(not i.at_import and i.module.startswith("pipelines.") for i in imports)  # function-level seen


@pytest.mark.parametrize("rule", RULES, ids=[r.what for r in RULES])
def test_no_forbidden_import_anywhere_in_the_source(rule: Rule, imports: list[Import], known: dict[str, Path]) -> None:
    """Every module of a package, through every import (module or function level) of ours, never reaches what it must not."""
    edges = graph(imports, known, at_import_only=False)
    nodes = set(edges) | {n for out in edges.values() for n in out}
    goal = {n for n in nodes if rule.forbids(n)}
    starts = [m for m in sorted(known) if rule.covers(m)]
    assert len(starts) >= len(rule.packages), f"a module of {rule.packages} is missing"
    # One line per offending import (the last step of a chain), with the shortest chain that reaches it.
    offending: dict[tuple[str, int], list[Step]] = {}
    for m in starts:
        chain = path_to(edges, m, goal)
        if chain is not None:
            last = chain[-1][1]
            if (last.file, last.line) not in offending or len(chain) < len(offending[(last.file, last.line)]):
                offending[(last.file, last.line)] = chain
    bad = [describe(chain) for _, chain in sorted(offending.items())]
    assert not bad, f"{rule.what}, but:\n  " + "\n  ".join(bad)


def test_no_dynamic_import_the_check_cannot_follow(imports: list[Import]) -> None:
    """importlib.import_module / __import__ of a computed name hides an import from the checks above."""
    hidden = [i.where for i in imports if i.target is None and any(r.covers(i.module) for r in RULES)]
    assert not hidden, f"dynamic imports of a non-literal name: {hidden}"


def test_no_import_cycles_at_import_time(imports: list[Import], known: dict[str, Path]) -> None:
    """No cycle among the imports that run when a module is imported (module level, class bodies)."""
    found = [describe(c) for c in cycles(graph(imports, known, at_import_only=True))]
    assert not found, "import cycles:\n  " + "\n  ".join(found)


def test_no_import_cycles_even_through_imports_inside_functions(imports: list[Import], known: dict[str, Path]) -> None:
    """No cycle even through function-level imports (a lazy import hides a cycle, it does not remove it).

    KNOWN_CYCLE_EDGES lists the cycles still being removed, each by one edge; an
    entry whose cycle is gone fails here, so that it is removed too.
    """
    edges = graph(imports, known, at_import_only=False)
    stale = [f"{a} -> {b} ({why})" for (a, b), why in KNOWN_CYCLE_EDGES.items()
             if b not in edges.get(a, {}) or path_to(edges, b, {a}) is None]
    assert not stale, f"these allowed cycle edges no longer close a cycle: remove them from KNOWN_CYCLE_EDGES: {stale}"
    allowed = {a: {b: i for b, i in out.items() if (a, b) not in KNOWN_CYCLE_EDGES} for a, out in edges.items()}
    found = [describe(c) for c in cycles(allowed)]
    assert not found, "import cycles (through function-level imports):\n  " + "\n  ".join(found)


# ------------------------------------------------------------------ the runtime check


def modules_of(pkg) -> list[str]:
    """Every module of a package, its subpackages' included."""
    return sorted(m.name for m in pkgutil.walk_packages(pkg.__path__, prefix=f"{pkg.__name__}."))


def imported_after(modules: list[str]) -> set[str]:
    code = ("import sys, importlib\n"
            f"for m in {modules!r}:\n"
            "    importlib.import_module(m)\n"
            "print('\\n'.join(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return set(out.split())


def test_pipelines_never_import_torch():
    mods = imported_after(modules_of(pipelines))
    assert "apache_beam" in mods  # the check itself works
    assert not any(m == "torch" or m.startswith("torch.") for m in mods)


def test_trainer_never_imports_beam():
    mods = imported_after(modules_of(trainer))
    assert "torch" in mods
    assert not any(m == "apache_beam" or m.startswith("apache_beam.") for m in mods)


def test_schemas_import_neither():
    import schemas

    mods = imported_after(modules_of(schemas))
    assert "pydantic" in mods  # the check itself works
    assert not any(m.split(".")[0] in ("torch", "apache_beam", "pipelines", "trainer", "shardforge") for m in mods)


def test_storage_imports_neither():
    from shardforge import storage

    mods = imported_after(modules_of(storage))
    assert "fsspec" in mods and "shardforge.storage.contract" in mods  # the check itself works
    assert not any(m.split(".")[0] in ("torch", "apache_beam", "pipelines", "trainer") for m in mods)
    assert {m for m in mods if m.split(".")[0] == "shardforge"} <= {"shardforge", *modules_of(storage), "shardforge.storage"}


def test_the_cli_layer_costs_the_halves_nothing():
    """pipelines and trainer import run_cli and the parser from shardforge: that loads neither half."""
    mods = imported_after(list(CLI_LAYER))
    assert "shardforge.console.run" in mods  # the check itself works
    assert not any(m.split(".")[0] in ("torch", "apache_beam", "pipelines", "trainer") for m in mods)
    assert not any(m in COMMANDS or m.startswith("shardforge.commands.") for m in mods)
