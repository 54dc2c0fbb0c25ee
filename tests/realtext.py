"""Real English prose that nobody on this project wrote, for tests and benchmarks.

The text is the Lee corpus of news articles (Australian Broadcasting
Corporation news, 2001) that the ``gensim`` wheel ships as test data:
``lee_background.cor`` (300 articles) and ``lee.cor`` (50 articles), one
article per line. ``gensim`` is in the ``dev`` extra, so ``scripts/setup.sh``
installs it; nothing is downloaded at run time and gensim itself is never
imported (its files are found through the installed distribution's metadata).

    from realtext import news_documents   # in tests (pytest puts tests/ on sys.path)
    # from tests.realtext import ...       # in benchmarks, run from the repository root
    docs = news_documents()          # 343 distinct articles, ~1.1k characters (~190 words) each
    docs = news_documents(limit=40)  # the first 40

The order is fixed (``lee_background.cor`` then ``lee.cor``, file order) and
exact repeats are dropped (``lee.cor`` holds a few), so every call returns the
same list. Raw text as shipped: ASCII news prose with digits, ``$ % & / < > ;``,
and ``£`` (``lee.cor`` is Latin-1).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os

PACKAGE = "gensim"
FILES = (("gensim/test/test_data/lee_background.cor", "utf-8"), ("gensim/test/test_data/lee.cor", "latin-1"))


class RealTextMissing(RuntimeError):
    """The package that ships the real text is not installed."""


def _path(rel: str) -> str:
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise RealTextMissing(f"real-text tests need the '{PACKAGE}' package (it ships the Lee news corpus): "
                              f"pip install -e '.[dev]'") from None
    path = str(dist.locate_file(rel))
    if not os.path.isfile(path):
        raise RealTextMissing(f"{PACKAGE} {dist.version} does not ship {rel}; install gensim 4.x "
                              "(pip install -e '.[dev]')")
    return path


@functools.lru_cache(maxsize=1)
def _all_documents() -> tuple[str, ...]:
    seen: set[str] = set()
    out: list[str] = []
    for rel, encoding in FILES:
        with open(_path(rel), encoding=encoding) as f:
            for line in f:
                text = " ".join(line.split())
                if text and text not in seen:
                    seen.add(text)
                    out.append(text)
    return tuple(out)


def news_documents(limit: int | None = None) -> list[str]:
    """The real news articles, in a fixed order (all 343, or the first `limit`)."""
    docs = _all_documents()
    return list(docs if limit is None else docs[:limit])


def write_jsonl(path: str, docs: list[str]) -> str:
    """Write documents as a JSONL source file ({"text": ...} per line) for a build; returns the path."""
    with open(path, "w", encoding="utf-8") as f:
        for text in docs:
            f.write(json.dumps({"text": text}) + "\n")
    return path
