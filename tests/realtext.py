"""Real English prose that nobody on this project wrote, for tests and benchmarks.

The text is the Lee corpus of news articles (Australian Broadcasting
Corporation news, 2001) that the ``gensim`` wheel ships as test data:
``lee_background.cor`` (300 articles) and ``lee.cor`` (50 articles), one
article per line. ``gensim`` is in the ``dev`` extra, so ``scripts/setup.sh``
installs it; nothing is downloaded at run time and gensim itself is never
imported (its files are found through the installed distribution's metadata).

    from realtext import news_documents   # in tests (pytest puts tests/ on sys.path)
    # from tests.realtext import ...       # in scripts run from the repository root
    docs = news_documents()          # 343 distinct articles, ~1.1k characters (~190 words) each
    docs = news_documents(limit=40)  # the first 40
    windows(docs[0])                 # the first article's consecutive 20-word windows

The order is fixed (``lee_background.cor`` then ``lee.cor``, file order) and
exact repeats are dropped (``lee.cor`` holds a few), so every call returns the
same list. Raw text as shipped: ASCII news prose with digits, ``$ % & / < > ;``,
and ``£`` (``lee.cor`` is Latin-1).

More of it, further down: ``wiki_documents()`` (English Wikipedia articles, also from gensim's
test data) and ``aws_documents()`` (the AWS API reference prose that the ``botocore`` wheel
ships; botocore comes with s3fs). Together ~6 MB: the corpus of ``bench_cpu_recipe.py``.
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


WINDOW_WORDS = 20


def windows(text: str, n: int = WINDOW_WORDS, limit: int | None = None) -> list[str]:
    """Consecutive n-word windows of the text (the last partial one dropped): the unit the language
    identification checks score (tests/test_clean.py, benchmarks/bench_langid.py)."""
    w = text.split()
    out = [" ".join(w[i:i + n]) for i in range(0, len(w) - n + 1, n)]
    return out[:limit] if limit is not None else out


def after_second_sentence(article: str) -> int | None:
    """Where an article's second sentence ends (just past its second ". "; past the first if it has
    one only), or None for a text without any: where the planted-corpus builders cut an article."""
    cut = -1
    for _ in range(2):
        i = article.find(". ", cut + 1)
        if i == -1:
            break
        cut = i
    return cut + 2 if cut != -1 else None


def write_jsonl(path: str, docs: list[str]) -> str:
    """Write documents as a JSONL source file ({"text": ...} per line) for a build; returns the path."""
    with open(path, "w", encoding="utf-8") as f:
        for text in docs:
            f.write(json.dumps({"text": text}) + "\n")
    return path


# ------------------------------------------------------------------ Wikipedia articles (bigger)

WIKI_FILE = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def _strip_nested(text: str, open_: str, close: str) -> str:
    """Drop every (possibly nested) open_ ... close span, e.g. {{templates}} and {| tables |}."""
    import re

    out, depth, last = [], 0, 0
    for m in re.finditer(re.escape(open_) + "|" + re.escape(close), text):
        if m.group() == open_:
            if depth == 0:
                out.append(text[last:m.start()])
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:
                last = m.end()
    if depth == 0:
        out.append(text[last:])
    return "".join(out)


def wiki_to_text(wikitext: str) -> str:
    """Plain prose paragraphs from one article's wikitext (templates, tables, refs, files, lists dropped)."""
    import html
    import re

    t = html.unescape(wikitext)
    t = re.sub(r"<!--.*?-->", "", t, flags=re.S)
    t = re.sub(r"<ref[^>/]*/>", "", t)
    t = re.sub(r"<ref[^>]*>.*?</ref>", "", t, flags=re.S)
    t = re.sub(r"<(math|gallery|table|timeline|code|source|syntaxhighlight)[^>]*>.*?</\1>", "", t, flags=re.S)
    t = _strip_nested(_strip_nested(t, "{{", "}}"), "{|", "|}")
    t = re.sub(r"\[\[(?:File|Image|Category|[a-z\-]{2,12}):[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]", "", t)
    t = re.sub(r"\[\[(?:[^|\]]*\|)?([^\]]*)\]\]", r"\1", t)  # [[target|label]] -> label
    t = re.sub(r"\[https?://\S+ ([^\]]*)\]", r"\1", t)
    t = re.sub(r"\[https?://\S+\]", "", t)
    t = re.sub(r"<[^>]+>", "", t)
    t = re.sub(r"'{2,}", "", t)
    paragraphs = []
    for line in t.split("\n"):
        line = " ".join(line.split())
        # Prose lines only: headings, lists, indents and leftovers of markup are not sentences.
        if len(line) < 80 or line[0] in "=*#:;|!{}[" or line[-1] not in ".!?\"'":
            continue
        paragraphs.append(line)
    return "\n".join(paragraphs)


@functools.lru_cache(maxsize=1)
def _wiki_articles() -> tuple[str, ...]:
    import bz2
    import re

    with bz2.open(_path(WIKI_FILE), "rt", encoding="utf-8") as f:
        xml = f.read()
    out = []
    for m in re.finditer(r"<text[^>]*>(.*?)</text>", xml, flags=re.S):
        body = m.group(1)
        if body.lstrip().upper().startswith("#REDIRECT"):
            continue
        text = wiki_to_text(body)
        if len(text) >= 500:
            out.append(text)
    return tuple(out)


def wiki_dump() -> str:
    """The path of the English Wikipedia dump gensim ships (``WIKI_FILE``: 206 pages, April 2016)."""
    return _path(WIKI_FILE)


def wiki_documents(limit: int | None = None) -> list[str]:
    """Prose of the English Wikipedia articles gensim ships as test data (~4.3 MB), in file order.

    The dump (``enwiki-...-shortened.bz2``, 6 MB of wikitext, April 2016) is stripped of
    templates, tables, references, files and lists; paragraphs are kept with newlines between them.
    """
    docs = _wiki_articles()
    return list(docs if limit is None else docs[:limit])


# ------------------------------------------------------------------ AWS API reference prose (more)

AWS_PACKAGE = "botocore"
AWS_DOC_CHARS = 2000


def aws_paragraphs(html_doc: str) -> list[str]:
    """Prose paragraphs of one botocore ``documentation`` string (HTML): code, notes' markup, links dropped."""
    import html
    import re

    out = []
    for block in re.split(r"</p>|<p>|</li>|<li>|<br\s*/?>", html_doc):
        text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", block)).split())
        text = re.sub(r"\s+([.,;:)])", r"\1", text)  # "<code>x</code> ." left a space before the mark
        # Whole sentences of some length only: one-line field captions are not prose.
        if len(text.split()) >= 20 and text[-1] in ".!?":
            out.append(text)
    return out


@functools.lru_cache(maxsize=4)
def _aws_documents(per_service_chars: int) -> tuple[str, ...]:
    import glob
    import gzip

    try:
        dist = importlib.metadata.distribution(AWS_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise RealTextMissing(f"the AWS prose needs the '{AWS_PACKAGE}' package (s3fs brings it)") from None
    root = str(dist.locate_file("botocore/data"))
    services = sorted({os.path.dirname(os.path.dirname(p))
                       for p in glob.glob(os.path.join(root, "*", "*", "service-2.json.gz"))})
    seen: set[str] = set()
    out: list[str] = []
    for service in services:
        # The newest API version of each service (its folder names are dates, so they sort).
        path = sorted(glob.glob(os.path.join(service, "*", "service-2.json.gz")))[-1]
        with gzip.open(path, "rt", encoding="utf-8") as f:
            spec = json.load(f)
        docs = [spec.get("documentation", "")] + [op.get("documentation", "") for _, op in
                                                  sorted(spec.get("operations", {}).items())]
        budget, chunk = per_service_chars, []
        for doc in docs:
            paragraphs = [p for p in aws_paragraphs(doc) if p not in seen]
            if not paragraphs or budget <= 0:
                continue
            seen.update(paragraphs)
            chunk += paragraphs
            budget -= sum(len(p) for p in paragraphs)
            # Operations' texts are short (most under the 50 words a clean page needs): a document
            # is a run of consecutive operations of one service, like a page of its reference.
            if sum(len(p) for p in chunk) >= AWS_DOC_CHARS:
                out.append("\n".join(chunk))
                chunk = []
        if chunk:
            out.append("\n".join(chunk))
    return tuple(out)


def aws_documents(per_service_chars: int = 24000) -> list[str]:
    """Prose of the AWS API reference that the ``botocore`` wheel ships (its ``service-2.json.gz`` files).

    A document is the reference text of consecutive operations of one service (the overview first),
    at least ``AWS_DOC_CHARS`` characters where the service has them: each ``documentation`` HTML cut into
    paragraphs, markup dropped, paragraphs of >= 20 words ending in a sentence mark kept, a
    paragraph that an earlier operation or service already had dropped (boilerplate shared across
    services; repeats inside one operation's text stay, as written). Services in name order, the
    newest API version of each, about ``per_service_chars`` characters per service so that every
    service contributes (the default gives ~3.0 MB from botocore 1.43's 400+ services). Written by Amazon's technical writers:
    real English prose of another register than the Wikipedia and news text above.
    """
    return list(_aws_documents(per_service_chars))
