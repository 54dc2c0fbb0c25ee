"""Wikipedia as it is downloaded: a MediaWiki XML dump, or WikiExtractor's output.

* **MediaWiki XML dumps** (``enwiki-…-pages-articles*.xml.bz2``, the multistream ones too: their
  bz2 streams are one stream here): each ``<page>`` is one record. An article (namespace 0, not a
  redirect) becomes a Document of its prose (``pipelines.sources.wikitext.plain_text``: BERT's
  text passages, no lists, tables or headers) with its title, its URL (from the dump's
  ``<base>``) and its revision's timestamp; a redirect is ``filtered / wiki_redirect`` and a page
  of another namespace (talk, templates, categories, …) ``filtered / wiki_namespace``, so every
  page is counted. The XML is parsed by expat as it streams, one page in memory at a time, and
  a document type declaration (where entity expansion attacks live; dumps have none) ends the
  file as ``malformed_xml``, as broken XML does, after the pages read before it.
* **WikiExtractor output** (``text/AA/wiki_00``: ``<doc id=… url=… title=…>`` … ``</doc>``): each
  ``doc`` element is a Document with its URL and title; its first line, the title repeated, goes.
  Non-blank text outside a ``doc`` is one ``parse_error`` record.

Both are recognised by their first bytes (``format: auto``), whatever the file's name, or named
with ``format: wikipedia``.
"""

from __future__ import annotations

import html
import re
import xml.parsers.expat
from collections.abc import Iterator
from typing import BinaryIO
from urllib.parse import quote

from pipelines.records import Document, Reject, doc_id_at
from pipelines.sources.compression import CHUNK
from pipelines.sources.naming import file_key
from pipelines.sources.parsing import R_PARSE_ERROR, Frame, Record, Tally, too_large
from pipelines.sources.streams import CrLines, Prefixed, decode, iter_lines, read_head, safe_snippet
from pipelines.sources.wikitext import LINK_DROP_NAMESPACES, plain_text
from schemas.config import SourceConfig

R_WIKI_REDIRECT = "wiki_redirect"  # bucket "filtered"
R_WIKI_NAMESPACE = "wiki_namespace"  # bucket "filtered"
R_MALFORMED_XML = "malformed_xml"

_DOC_OPEN = re.compile(rb"^<doc(\s[^>]*)?>\s*$")
# The root element, after an XML declaration, comments and a document type declaration (refused later).
_MEDIAWIKI = re.compile(rb"(?:\s|<\?xml[^>]*\?>|<!--.*?-->|<!DOCTYPE[^\[>]*(?:\[.*?\]\s*)?>)*<mediawiki[\s>]", re.S)
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
_REDIRECT = re.compile(r"\s*#\s*redirect\b", re.I)


class MalformedXml(ValueError):
    """The XML of a dump broke (or declared a document type): the rest of the file is one reject."""


def is_wikipedia(head: bytes) -> bool:
    """True for the first bytes of a MediaWiki XML dump or of a WikiExtractor output file."""
    return _MEDIAWIKI.match(head) is not None or _DOC_OPEN.match(head.lstrip().split(b"\n", 1)[0]) is not None


# ------------------------------------------------------------------ MediaWiki XML

class _Pages:
    """expat handlers that collect each finished ``<page>`` (its fields, the text capped)."""

    def __init__(self, cap: int):
        self.cap = cap
        self.done: list[dict] = []
        self.base = ""
        self.drop = set(LINK_DROP_NAMESPACES)
        self._path: list[str] = []
        self._page: dict | None = None
        self._chars: list[str] = []
        self._size = 0
        self._ns_key: str | None = None

    def start(self, name: str, attrs: dict[str, str]) -> None:
        self._path.append(name)
        self._chars, self._size = [], 0
        if name == "page":
            self._page = {"title": "", "ns": "0", "redirect": False, "text": "", "timestamp": None, "over": False}
        elif name == "redirect" and self._page is not None:
            self._page["redirect"] = True
        elif name == "namespace":
            self._ns_key = attrs.get("key")

    def chars(self, data: str) -> None:
        if self._size <= self.cap:
            self._chars.append(data)
            self._size += len(data)

    def end(self, name: str) -> None:
        text = "".join(self._chars)
        parent = self._path[-2] if len(self._path) > 1 else ""
        self._path.pop()
        self._chars, self._size = [], 0
        page = self._page
        if name == "page" and page is not None:
            self.done.append(page)
            self._page = None
        elif page is None:
            if name == "base" and parent == "siteinfo":
                self.base = text.strip().rsplit("/", 1)[0] + "/" if "/" in text else ""
            elif name == "namespace" and self._ns_key in ("6", "-2", "14") and text.strip():
                self.drop.add(text.strip().lower())
        elif name in ("title", "ns") and parent == "page":
            page[name] = text.strip()
        elif name == "timestamp" and parent == "revision":
            page["timestamp"] = text.strip()
        elif name == "text" and parent == "revision":
            page["text"], page["over"] = text, len(text) > self.cap


def _forbid(*_args: object) -> None:
    raise MalformedXml("a document type declaration (entity definitions are not read)")


def frame_mediawiki(stream: BinaryIO, path: str, source: SourceConfig, cap: int, tally: Tally) -> Iterator[Frame]:
    """One frame per ``<page>`` of a MediaWiki XML dump, as the parser finishes it."""
    tally.origins[path] = "page"
    key = file_key(source, path)
    pages = _Pages(cap)
    parser = xml.parsers.expat.ParserCreate()
    parser.buffer_text = True
    parser.StartElementHandler = pages.start
    parser.EndElementHandler = pages.end
    parser.CharacterDataHandler = pages.chars
    parser.StartDoctypeDeclHandler = _forbid
    parser.EntityDeclHandler = _forbid
    index = 0
    while True:
        chunk = stream.read(CHUNK)
        broken: MalformedXml | None = None
        try:
            parser.Parse(chunk, not chunk)
        except xml.parsers.expat.ExpatError as e:
            broken = MalformedXml(str(e))
        for page in pages.done:  # the pages finished before a fault are records all the same
            doc_id = doc_id_at(key, index)
            index += 1
            yield Frame(doc_id, parse_page, (page, doc_id, source, pages.base, frozenset(pages.drop)))
        pages.done.clear()
        if broken is not None:
            raise broken
        if not chunk:
            return


def parse_page(page: dict, doc_id: str, source: SourceConfig, base: str, drop: frozenset[str]) -> Record:
    """One page -> its article's Document, or the filtered reason it is none."""
    title = page["title"]
    if page["ns"] != "0":
        return Reject(doc_id, source.name, "filtered", R_WIKI_NAMESPACE, safe_snippet(f"ns {page['ns']}: {title}"))
    if page["redirect"] or _REDIRECT.match(page["text"]):
        return Reject(doc_id, source.name, "filtered", R_WIKI_REDIRECT, safe_snippet(title))
    if page["over"]:
        return too_large(doc_id, source, page["text"][:4096].encode("utf-8", "surrogatepass"))
    url = base + quote(title.replace(" ", "_"), safe="/:()',!*;@$&+=~-._") if base and title else None
    return Document(doc_id, source.name, plain_text(page["text"], drop), url=url, title=title or None,
                    date=page["timestamp"])


# ------------------------------------------------------------------ WikiExtractor

def frame_wikiextractor(stream: BinaryIO, path: str, source: SourceConfig, cap: int, tally: Tally) -> Iterator[Frame]:
    """One frame per ``<doc …>`` … ``</doc>`` of a WikiExtractor file (and one for stray text)."""
    tally.origins[path] = "document"
    key = file_key(source, path)
    index = 0
    attrs: dict[str, str] | None = None
    parts: list[bytes] = []
    size = 0

    def frame(parse: object, *args: object) -> Frame:
        nonlocal index
        doc_id = doc_id_at(key, index)
        index += 1
        return Frame(doc_id, parse, (doc_id, *args))  # type: ignore[arg-type]

    for raw, length, _ in iter_lines(CrLines(stream), cap):  # type: ignore[arg-type]
        line = raw.strip()
        opening = _DOC_OPEN.match(line) if length <= cap else None
        if opening is not None or line == b"</doc>":
            if parts and (attrs is not None or any(p.strip() for p in parts)):
                yield frame(parse_extracted, attrs, b"\n".join(parts), size, source, cap)
            elif attrs is not None:  # an empty doc element is a record too
                yield frame(parse_extracted, attrs, b"", 0, source, cap)
            parts, size = [], 0
            attrs = (dict(_ATTRIBUTE.findall(decode(opening.group(1) or b"")))
                     if opening is not None else None)
            continue
        if size + length + 1 <= cap:
            parts.append(raw)
        size += length + 1
    if attrs is not None or any(p.strip() for p in parts):  # a doc never closed (a cut file) is kept
        yield frame(parse_extracted, attrs, b"\n".join(parts), size, source, cap)


def parse_extracted(doc_id: str, attrs: dict[str, str] | None, data: bytes, size: int, source: SourceConfig,
                    cap: int) -> Record:
    """One WikiExtractor document (its title line dropped), or ``parse_error`` for text outside one."""
    if attrs is None:
        return Reject(doc_id, source.name, "rejected", R_PARSE_ERROR,
                      safe_snippet("text outside <doc>…</doc>: " + decode(data[:200])))
    if size > cap:
        return too_large(doc_id, source, data)
    title = html.unescape(attrs.get("title", "")) or None
    text = decode(data).lstrip("\n")
    first, _, rest = text.partition("\n")
    if title is not None and first.strip() == title:
        text = rest
    url = html.unescape(attrs["url"]) if attrs.get("url") else None
    return Document(doc_id, source.name, text.strip("\n"), url=url, title=title)


def frame_wikipedia(stream: BinaryIO, path: str, source: SourceConfig, cap: int, tally: Tally) -> Iterator[Frame]:
    """A MediaWiki dump or a WikiExtractor file, told apart by the first bytes (a head already read)."""
    head = read_head(stream, 4096)
    whole = Prefixed(head, stream)
    if _MEDIAWIKI.match(head) is not None:
        yield from frame_mediawiki(whole, path, source, cap, tally)  # type: ignore[arg-type]
    elif is_wikipedia(head):
        yield from frame_wikiextractor(whole, path, source, cap, tally)  # type: ignore[arg-type]
    else:
        raise MalformedXml("not a Wikipedia dump: no <mediawiki> or WikiExtractor <doc> at its start")
