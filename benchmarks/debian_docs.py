"""Real English documentation prose from Debian's documentation packages, for benchmarks that
need more unique text than the prose pool (``tests/prose.py``, ~4 MB unique) holds.

    python benchmarks/debian_docs.py --debs DIR --out docs.txt

``DIR`` holds the ``.deb`` files, fetched once with (network needed; nothing here downloads)::

    apt-get download linux-doc-6.1 python3.11-doc perl-doc postgresql-doc-15 git-doc \\
        debian-reference-en rust-doc python-django-doc libreoffice-help-en-us openjdk-17-doc

Each package is unpacked with ``dpkg-deb -x`` into a scratch folder; its prose paragraphs are
kept (reStructuredText / POD / AsciiDoc sources: blank-line paragraphs that do not start as
markup, code or a table; HTML: ``<p>`` elements with their tags dropped), a paragraph of at
least 12 words and 70 % letters, each distinct paragraph once. The output has one paragraph per
line and a blank line after each source file: a file is a document. Debian bookworm's packages
gave 15,491 documents and 76.1 MB of paragraphs (2026-11-27; 45 MB of it the OpenJDK API).
"""

from __future__ import annotations

import argparse
import hashlib
import html
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

MIN_WORDS = 12
MIN_LETTERS = 0.7
_MARKUP_START = (" ", "\t", "..", "=", "-", "*", "|", "+", ":", "#")
_TAG = re.compile(r"<[^<>]*>")
_CODE = re.compile(r"(?s)<(script|style|pre)[^>]*>.*?</\1>")
_PARA = re.compile(r"(?s)<p[^>]*>(.*?)</p>")
_BLOCK = re.compile(r'(?s)<div class="block">(.*?)</div>')
_INLINE = re.compile(r"``?|\*\*|:\w+:")
# package -> (file name suffix, paragraph reader)
_SOURCES: dict[str, tuple[str, str]] = {
    "linux-doc-6.1": (".rst.txt", "text"),
    "python3.11-doc": (".rst.txt", "text"),
    "perl-doc": (".pod", "text"),
    "git-doc": (".txt", "text"),
    "postgresql-doc-15": (".html", "html"),
    "debian-reference-en": (".html", "html"),
    "rust-doc": (".html", "html"),
    "python-django-doc": (".html", "html"),
    "libreoffice-help-en-us": (".html", "html"),
    "openjdk-17-doc": (".html", "javadoc"),
}


def text_paragraphs(text: str) -> Iterator[str]:
    """Blank-line paragraphs of a plain-text markup source whose first line is not markup."""
    for p in re.split(r"\n\s*\n", text):
        if not p.startswith(_MARKUP_START):
            yield p


def html_paragraphs(text: str) -> Iterator[str]:
    """The text of an HTML page's <p> elements (code, scripts and styles dropped)."""
    for p in _PARA.findall(_CODE.sub("", text)):
        yield html.unescape(_TAG.sub("", p))


def javadoc_paragraphs(text: str) -> Iterator[str]:
    """The text of a Javadoc page's description blocks (``<div class="block">``) and <p> elements."""
    text = _CODE.sub("", text)
    for p in _BLOCK.findall(text) + _PARA.findall(text):
        yield html.unescape(_TAG.sub("", p))


READERS: dict[str, Callable[[str], Iterator[str]]] = {
    "text": text_paragraphs, "html": html_paragraphs, "javadoc": javadoc_paragraphs}


def prose(paragraph: str) -> str | None:
    """The paragraph on one line, or None when it is too short or not mostly letters."""
    p = _INLINE.sub("", re.sub(r"\s+", " ", paragraph)).strip()
    if len(p.split()) < MIN_WORDS or sum(c.isalpha() for c in p) < MIN_LETTERS * len(p):
        return None
    return p


def documents(debs: Path) -> Iterator[list[str]]:
    """One list of distinct prose paragraphs per source file, packages in a fixed order."""
    seen: set[bytes] = set()
    with tempfile.TemporaryDirectory(prefix="debian-docs-") as tmp:
        for package, (suffix, kind) in _SOURCES.items():
            debs_of = sorted(debs.glob(f"{package}_*.deb"))
            if not debs_of:
                raise SystemExit(f"debian_docs: no {package}_*.deb in {debs} (see --help)")
            root = Path(tmp) / package
            subprocess.run(["dpkg-deb", "-x", str(debs_of[-1]), str(root)], check=True)
            for f in sorted(root.rglob(f"*{suffix}")):
                kept = []
                for raw in READERS[kind](f.read_text("utf-8", "replace")):
                    p = prose(raw)
                    digest = None if p is None else hashlib.sha256(p.encode()).digest()
                    if digest is not None and digest not in seen:
                        seen.add(digest)
                        kept.append(p)
                if kept:
                    yield kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--debs", type=Path, required=True, help="folder with the .deb files")
    ap.add_argument("--out", type=Path, required=True, help="text file to write")
    args = ap.parse_args()
    n = size = 0
    with open(args.out, "w", encoding="utf-8") as out:
        for doc in documents(args.debs):
            out.write("\n".join(doc) + "\n\n")
            n += 1
            size += sum(len(p.encode()) for p in doc)
    print(f"{n:,} documents, {size / 1e6:.1f} MB of paragraphs -> {args.out}")


if __name__ == "__main__":
    main()
