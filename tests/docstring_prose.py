"""Real English prose from the docstrings of installed scientific Python libraries.

Another register than the news, Wikipedia and AWS text of ``tests/realtext.py``: the explanatory
paragraphs that the authors of networkx, scipy, sympy, matplotlib and pandas wrote in their
docstrings (what an algorithm does, when to use a function, what a result means): ~168,000 words.
All five wheels come with the project's environment (networkx and sympy with torch, scipy with
gensim, pandas with datasets, matplotlib with the trainer); nothing is downloaded and no library is
imported: the ``.py`` files are found through the distributions' metadata and read with ``ast``.

    from tests.docstring_prose import docstring_documents   # scripts run from the repository root
    docs = docstring_documents()   # one document per docstring holding prose, paragraphs "\\n\\n"-joined

A paragraph is a blank-line-separated block of a docstring, its lines joined, kept when it reads
as prose: at least 15 words, at least 85 % letters and spaces, ending in a full stop, and free of
markup (reST roles and literals, doctest prompts, section rules, list bullets, ``name : type``
parameter lines, URLs, formulas). The order is fixed (packages, then files by path, then
docstrings by line) and a paragraph seen before is dropped, so every call gives the same list.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re

PACKAGES = ("networkx", "scipy", "sympy", "matplotlib", "pandas")
MIN_WORDS = 15
_MARKUP_LINE = re.compile(r"^(-{3,}|={3,}|~{3,}|>>>|\.\.\.? |\.\. |[-*+] |\d+\. |:|\[\d+\]|\w+ : )")
_MARKUP = re.compile(r"``|`|::|\$|\\|https?:|www\.|[{}=_<>|#@^~]")


class DocstringProseMissing(RuntimeError):
    """A library the prose comes from is not installed."""


def prose_paragraphs(doc: str) -> list[str]:
    """The prose paragraphs of one docstring (see the module's docstring for the rule)."""
    out = []
    for block in re.split(r"\n\s*\n", doc):
        lines = [line.strip() for line in block.strip().split("\n")]
        if not lines[0] or any(_MARKUP_LINE.match(line) for line in lines):
            continue
        text = " ".join(" ".join(lines).split())
        if len(text.split()) < MIN_WORDS or _MARKUP.search(text) or not text.endswith("."):
            continue
        if sum(c.isalpha() or c == " " for c in text) < 0.85 * len(text):
            continue
        out.append(text)
    return out


def _docstrings(source: str) -> list[str]:
    """The module's, classes' and functions' docstrings of one file, in line order."""
    tree = ast.parse(source)
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    out = [ast.get_docstring(tree)]
    out += [ast.get_docstring(n) for n in sorted(nodes, key=lambda n: (n.lineno, n.col_offset))]
    return [d for d in out if d]


@functools.lru_cache(maxsize=2)
def _documents(packages: tuple[str, ...]) -> tuple[str, ...]:
    seen: set[str] = set()
    out: list[str] = []
    for package in packages:
        try:
            dist = importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            raise DocstringProseMissing(f"the docstring prose needs the '{package}' package installed") from None
        files = sorted(str(f) for f in dist.files or () if str(f).endswith(".py") and "/tests/" not in str(f))
        for rel in files:
            try:
                source = dist.locate_file(rel).read_text(encoding="utf-8")
                docs = _docstrings(source)
            except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for doc in docs:
                paragraphs = [p for p in prose_paragraphs(doc) if p not in seen]
                seen.update(paragraphs)
                if paragraphs:
                    out.append("\n\n".join(paragraphs))
    return tuple(out)


def docstring_documents(packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """One document per docstring that holds prose (its prose paragraphs joined by blank lines)."""
    return list(_documents(tuple(packages)))
