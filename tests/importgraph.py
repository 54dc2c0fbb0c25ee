"""A static map of every import in shardforge's source, for tests/test_boundaries.py.

Reads each ``.py`` file of our packages with `ast` (nothing is imported), and
records every import it can see: ``import a.b``, ``from a import b``, relative
imports, imports inside functions and methods, under ``if TYPE_CHECKING:``, and
``importlib.import_module("a.b")`` / ``__import__("a.b")`` with a literal name.
A dynamic import whose name is not a literal is recorded too (``target=None``),
so a check can refuse what it cannot see.

Each import says whether it runs when its module is imported (``at_import``:
module level or a class body, not inside a function, not under
``TYPE_CHECKING``); the import-cycle check uses only those.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipelines", "trainer", "schemas", "shardforge", "deploy")
_DYNAMIC_CALLS = {"import_module", "__import__"}


@dataclass(frozen=True)
class Import:
    """One import statement (or dynamic import call) of one of our modules."""

    module: str  # the importing module, dotted
    file: str  # its file, relative to the repository root
    target: str | None  # the imported module, dotted and absolute; None: a dynamic import of a non-literal name
    line: int
    at_import: bool  # runs when `module` is imported (not in a function, not under TYPE_CHECKING)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def module_name(path: Path, root: Path = ROOT) -> str:
    """``pipelines/sources/__init__.py`` -> ``pipelines.sources``; ``schemas/errors.py`` -> ``schemas.errors``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Every module of our packages: dotted name -> file."""
    out: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            out[module_name(path, root)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, file: str, is_package: bool, known: Mapping[str, Path]):
        self.module, self.file, self.known, self.found = module, file, known, []
        # The package a relative import starts from: the module itself for an __init__.
        self.package = module if is_package else module.rpartition(".")[0]
        self.in_function = 0
        self.type_checking = 0

    def _add(self, target: str | None, node: ast.AST) -> None:
        at_import = not self.in_function and not self.type_checking
        self.found.append(Import(self.module, self.file, target, node.lineno, at_import))

    def _function(self, node: ast.AST) -> None:
        # Decorators and default values run at import time; the body does not.
        for d in getattr(node, "decorator_list", []):
            self.visit(d)
        self.in_function += 1
        for child in node.body:
            self.visit(child)
        self.in_function -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.in_function += 1
        self.visit(node.body)
        self.in_function -= 1

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self.type_checking += 1
            for child in node.body:
                self.visit(child)
            self.type_checking -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".") if self.package else []
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            stem = ".".join([*base, node.module] if node.module else base)
        else:
            stem = node.module or ""
        for alias in node.names:
            sub = f"{stem}.{alias.name}"
            # `from pkg import sub` imports the submodule when there is one, else a name of pkg.
            self._add(sub if sub in self.known else stem, node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in _DYNAMIC_CALLS:
            arg = node.args[0] if node.args else None
            literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str) and not arg.value.startswith(".")
            self._add(arg.value if literal else None, node)  # type: ignore[union-attr]
        self.generic_visit(node)


def imports_of(module: str, path: Path, known: Mapping[str, Path], root: Path = ROOT) -> list[Import]:
    """Every import in one file, in source order."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    collector = _Collector(module, path.relative_to(root).as_posix(), path.name == "__init__.py", known)
    collector.visit(tree)
    return collector.found


def all_imports(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> list[Import]:
    """Every import of every module of our packages."""
    known = source_modules(root, packages)
    return [imp for name, path in known.items() for imp in imports_of(name, path, known, root)]


def owner(target: str, known: Mapping[str, Path]) -> str:
    """The node a target stands for: our module (its longest known prefix), else the top-level distribution name."""
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        if name in known:
            return name
    return parts[0]


def graph(imports: Iterable[Import], known: Mapping[str, Path], at_import_only: bool) -> dict[str, dict[str, Import]]:
    """module -> {imported node -> the first import making that edge}; nodes outside `known` are leaves."""
    out: dict[str, dict[str, Import]] = {m: {} for m in known}
    for imp in imports:
        if imp.target is None or (at_import_only and not imp.at_import):
            continue
        node = owner(imp.target, known)
        if node != imp.module:
            out[imp.module].setdefault(node, imp)
    return out


# One step of an import chain: the imported node and the import that reaches it.
Step = tuple[str, Import]


def path_to(edges: Mapping[str, Mapping[str, Import]], start: str, goal: set[str]) -> list[Step] | None:
    """The shortest chain of imports from `start` to any node in `goal` (breadth first), or None."""
    seen = {start}
    queue: deque[tuple[str, list[Step]]] = deque([(start, [])])
    while queue:
        node, chain = queue.popleft()
        for nxt, imp in sorted(edges.get(node, {}).items()):
            if nxt in goal:
                return [*chain, (nxt, imp)]
            if nxt in seen:
                continue
            seen.add(nxt)
            queue.append((nxt, [*chain, (nxt, imp)]))
    return None


def cycles(edges: Mapping[str, Mapping[str, Import]]) -> list[list[Step]]:
    """One shortest cycle per strongly connected component that has one (Tarjan), as its chain of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def strongconnect(v: str) -> None:
        # Iterative Tarjan: recursion would hit Python's limit on a long import chain.
        work = [(v, iter(sorted(edges.get(v, {}))))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    components.append(comp)
            elif child not in edges:
                continue  # a leaf (a third-party or standard-library module)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, {})))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])

    for v in sorted(edges):
        if v not in index:
            strongconnect(v)
    out = []
    for comp in components:
        if len(comp) > 1:
            members = set(comp)
            inside = {m: {n: i for n, i in edges[m].items() if n in members} for m in comp}
            start = min(comp)
            chain = path_to(inside, start, {start})
            assert chain is not None  # a strongly connected component of 2+ nodes has a cycle through each
            out.append(chain)
    return out


def describe(chain: list[Step]) -> str:
    """``a -> b -> c`` followed by where each import is."""
    names = [chain[0][1].module, *(node for node, _ in chain)]
    return " -> ".join(names) + "  (" + ", ".join(imp.where for _, imp in chain) + ")"
