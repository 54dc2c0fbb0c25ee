"""Real English prose from installed packages, assembled into benchmark corpora of any size.

The paragraphs are real text that nobody on this project wrote:

- the Lee corpus (ABC news, 2001) that the ``gensim`` wheel ships (``tests/realtext.py``);
- the first ~200 articles of an English Wikipedia dump that ``gensim`` ships as test data
  (``enwiki-latest-pages-articles1.xml-…-shortened.bz2``), with the wiki markup stripped here
  (templates, references, tables, file links, headings and lists dropped; links become their text).

A corpus document is a handful of paragraphs drawn from that pool by a seeded RNG (no
paragraph twice in a document), so documents are distinct prose, not a template repeated:
the cleaning rules keep most of them (a paragraph is kept only with >= 20 words and an end
mark, so C4's line rules rarely bite), exact dedupe finds nothing, and near dedupe finds few
pairs. The same seed and size give the same bytes on every machine (nothing is downloaded;
gensim itself is never imported, its files are found through the distribution's metadata).

    from tests.prose import write_prose_corpus    # in scripts run from the repository root
    docs, nbytes = write_prose_corpus(Path("raw.jsonl"), megabytes=10)

On a machine without gensim (a GPU image, say), dump the pool where gensim is and point the
benchmarks at the dump; every corpus made from it has the same bytes:

    python benchmarks/prose.py --dump-pool pool.json          # where gensim is installed
    SHARDFORGE_PROSE_POOL=pool.json python benchmarks/bench_floor.py --mb 100

(``benchmarks/prose.py`` is this module's command line; ``python tests/prose.py`` is the same.)
"""

from __future__ import annotations

import bz2
import functools
import html
import importlib.metadata
import json
import os
import random
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from tests.realtext import news_documents  # noqa: E402

WIKI = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
MIN_PARAGRAPH_WORDS = 20
PARAGRAPHS_PER_DOC = (3, 9)

_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_TABLE = re.compile(r"\{\|.*?\|\}", re.S)
_REF = re.compile(r"<ref[^>/]*/>|<ref[^>]*>.*?</ref>", re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_TAG = re.compile(r"<[^<>]{0,200}>")
_LINK = re.compile(r"\[\[(?![Ff]ile:|[Ii]mage:|[Cc]ategory:)([^\[\]|]*\|)?([^\[\]|]*)\]\]")
_MEDIA = re.compile(r"\[\[(?:[Ff]ile|[Ii]mage|[Cc]ategory):[^\[\]]*\]\]")
_EXTERNAL = re.compile(r"\[https?://\S+ ?([^\]]*)\]")
_INTERWIKI = re.compile(r"\[\[[a-z\-]{2,12}:[^\]]*\]\]")


def _strip_wiki(text: str) -> list[str]:
    """Plain prose paragraphs of one article's wikitext."""
    text = _COMMENT.sub("", text)
    text = _REF.sub("", text)
    for _ in range(8):  # nested templates: innermost first
        text, n = _TEMPLATE.subn("", text)
        if not n:
            break
    text = _TABLE.sub("", text)
    for _ in range(4):  # links inside file captions: resolve the inner ones first
        text = _LINK.sub(r"\2", text)
    text = _MEDIA.sub("", _INTERWIKI.sub("", text))
    text = _EXTERNAL.sub(r"\1", text)
    text = _TAG.sub("", text).replace("'''", "").replace("''", "")
    out = []
    for line in text.split("\n"):
        line = " ".join(html.unescape(line).split())
        if not line or line[0] in "=*#:;|!{}[":
            continue
        if len(line.split()) >= MIN_PARAGRAPH_WORDS and line[-1] in ".?!\"" and "[[" not in line and "{{" not in line:
            out.append(line)
    return out


def _wiki_paragraphs() -> list[str]:
    path = str(importlib.metadata.distribution("gensim").locate_file(WIKI))
    out: list[str] = []
    with bz2.open(path, "rb") as f:
        for _, el in ET.iterparse(f):
            if el.tag.endswith("}text") and el.text:
                out += _strip_wiki(el.text)
            if el.tag.endswith("}page"):
                el.clear()
    return out


def _news_paragraphs() -> list[str]:
    """The Lee articles, cut into paragraphs of about three sentences (they are one line each)."""
    out = []
    for doc in news_documents():
        sents = re.split(r"(?<=[.!?])\s+(?=[A-Z\"])", doc)
        for i in range(0, len(sents), 3):
            para = " ".join(sents[i:i + 3])
            if len(para.split()) >= MIN_PARAGRAPH_WORDS and para[-1] in ".?!\"":
                out.append(para)
    return out


POOL_ENV = "SHARDFORGE_PROSE_POOL"  # a JSON list of paragraphs (``--dump-pool``) used instead of gensim's files


@functools.lru_cache(maxsize=1)
def paragraph_pool() -> tuple[str, ...]:
    """Every real paragraph available, in a fixed order (duplicates dropped); from the dump that
    ``$SHARDFORGE_PROSE_POOL`` names when it is set."""
    dump = os.environ.get(POOL_ENV)
    if dump:
        pool = json.loads(Path(dump).read_text(encoding="utf-8"))
        if not (isinstance(pool, list) and pool and all(isinstance(p, str) for p in pool)):
            raise SystemExit(f"{POOL_ENV}={dump}: not a paragraph pool (a JSON list of strings, from --dump-pool)")
        return tuple(pool)
    seen: set[str] = set()
    pool = []
    for p in _wiki_paragraphs() + _news_paragraphs():
        if p not in seen:
            seen.add(p)
            pool.append(p)
    return tuple(pool)


def prose_document(rng: random.Random) -> str:
    """One document: PARAGRAPHS_PER_DOC paragraphs of the pool drawn by ``rng``, none twice."""
    pool = paragraph_pool()
    k = rng.randint(*PARAGRAPHS_PER_DOC)
    return "\n".join(pool[i] for i in rng.sample(range(len(pool)), k))


def write_prose_corpus(path: Path, megabytes: float, seed: int = 7) -> tuple[int, int]:
    """JSONL documents of real paragraphs until ``megabytes`` of file; returns (documents, bytes)."""
    rng = random.Random(seed)
    target = int(megabytes * 1_000_000)
    docs = size = 0
    with open(path, "w", encoding="utf-8") as f:
        while size < target:
            text = prose_document(rng)
            line = json.dumps({"text": text, "url": f"https://example.org/prose/{docs}"}) + "\n"
            f.write(line)
            docs += 1
            size += len(line.encode("utf-8"))
    return docs, size


def main(argv: list[str] | None = None) -> int:
    import argparse
    import hashlib

    ap = argparse.ArgumentParser(description="The real-prose paragraph pool of the benchmarks' corpora.")
    ap.add_argument("--dump-pool", metavar="FILE", help=f"write the pool as JSON, for {POOL_ENV} on another machine")
    args = ap.parse_args(argv)
    pool = paragraph_pool()
    text = json.dumps(list(pool), ensure_ascii=False)
    print(f"{len(pool)} paragraphs, {sum(len(p) for p in pool) / 1e6:.2f} MB, "
          f"sha256 {hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]}")
    if args.dump_pool:
        Path(args.dump_pool).write_text(text, encoding="utf-8")
        print(f"wrote {args.dump_pool}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
