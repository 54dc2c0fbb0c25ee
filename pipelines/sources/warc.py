"""Common Crawl's WET files (``*.warc.wet.gz``): the crawl's extracted text, one record per page.

A WARC file is a run of records, each a ``WARC/1.0`` (or ``1.1``) line, header lines up to a blank
line, and ``Content-Length`` bytes of content. A WET file's ``conversion`` records hold a page's
text (what C4 was built from): each is a Document with its ``WARC-Target-URI`` and ``WARC-Date``.
Every other record is counted as ``filtered / warc_record_type``: the file's ``warcinfo``, and a
WARC file's requests, HTML responses and metadata (HTML is not read here: the crawl's WET files
hold its text, or extract it first: news-please for CC-News, trafilatura). Records are gzip
members of their own in Common Crawl's files: the decompressor reads them as one stream.

Bytes where a record should start that are not one end the file as ``malformed_warc`` (after the
records read); a record cut short (a file truncated) is one ``truncated`` record for the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

from pipelines.records import Document, Reject, doc_id_at
from pipelines.sources.compression import CHUNK
from pipelines.sources.naming import file_key
from pipelines.sources.parsing import R_BINARY, Frame, Record, Tally, too_large
from pipelines.sources.streams import decode, looks_binary, safe_snippet
from schemas.config import SourceConfig

R_WARC_RECORD_TYPE = "warc_record_type"  # bucket "filtered"
R_MALFORMED_WARC = "malformed_warc"
HEADER_LIMIT = 1 << 16  # bytes of one record's header block
TEXT_TYPES = ("conversion",)  # WET: the page's text
_HEADER_END = re.compile(rb"\r?\n\r?\n")
_START = re.compile(rb"WARC/1\.[01]\r?\n")
_BLANK = re.compile(rb"[\r\n]*")


class MalformedWarc(ValueError):
    """Bytes where a WARC record should start are none: the rest of the file is one reject."""


def is_warc(head: bytes) -> bool:
    return _START.match(head) is not None


class _Records:
    """A read(n) stream cut into (headers, content head, content length) records."""

    def __init__(self, stream: BinaryIO, cap: int):
        self.stream, self.cap = stream, cap
        self.buf = bytearray()
        self.eof = False

    def _fill(self) -> bool:
        data = self.stream.read(CHUNK)
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def _skip_blank(self) -> bool:
        """Drop the blank lines between records; False at the end of the stream."""
        while True:
            del self.buf[:_BLANK.match(self.buf).end()]  # type: ignore[union-attr]  # matches empty at worst
            if self.buf or not self._fill():
                return bool(self.buf)

    def __iter__(self) -> Iterator[tuple[dict[str, str], bytes, int]]:
        index = 0
        while self._skip_blank():
            while len(self.buf) < 16 and self._fill():
                pass
            if not _START.match(self.buf):
                raise MalformedWarc(f"no WARC record where record {index} should start: "
                                    f"{safe_snippet(bytes(self.buf[:80]))!r}")
            m = _HEADER_END.search(self.buf)
            while m is None and len(self.buf) <= HEADER_LIMIT and self._fill():
                m = _HEADER_END.search(self.buf)
            if m is None:
                if self.eof and len(self.buf) <= HEADER_LIMIT:
                    raise EOFError(f"WARC record {index} cut short in its header")
                raise MalformedWarc(f"WARC record {index}'s header is over {HEADER_LIMIT} bytes")
            headers = _parse_headers(bytes(self.buf[:m.start()]))
            del self.buf[:m.end()]
            try:
                length = int(headers.get("content-length", ""))
            except ValueError:
                raise MalformedWarc(f"WARC record {index} has no Content-Length") from None
            yield headers, self._content(length, index), length
            index += 1

    def _content(self, length: int, index: int) -> bytes:
        """The record's content (at most cap + 1 bytes kept, the rest read and dropped)."""
        keep = min(length, self.cap + 1)
        while len(self.buf) < keep and self._fill():
            pass
        head = bytes(self.buf[:keep])
        taken = min(len(self.buf), length)
        del self.buf[:taken]
        left = length - taken
        while left > 0:
            data = self.stream.read(min(CHUNK, left))
            if not data:
                break
            left -= len(data)
        if left > 0 or len(head) < keep:
            raise EOFError(f"WARC record {index} cut short in its content")
        return head


def _parse_headers(block: bytes) -> dict[str, str]:
    """Header names (lower case) -> values of one record's header block (its WARC/1.x line first)."""
    out: dict[str, str] = {}
    for line in decode(block).splitlines()[1:]:
        name, sep, value = line.partition(":")
        if sep:
            out.setdefault(name.strip().lower(), value.strip())
    return out


def frame_warc(stream: BinaryIO, path: str, source: SourceConfig, cap: int, tally: Tally) -> Iterator[Frame]:
    """One frame per WARC record."""
    tally.origins[path] = "record"
    key = file_key(source, path)
    for index, (headers, content, length) in enumerate(_Records(stream, cap)):
        doc_id = doc_id_at(key, index)
        yield Frame(doc_id, parse_warc_record, (headers, content, length, doc_id, source, cap))


def parse_warc_record(headers: dict[str, str], content: bytes, length: int, doc_id: str, source: SourceConfig,
                      cap: int) -> Record:
    """A WET conversion record -> its page's Document; any other record type is filtered."""
    kind = headers.get("warc-type", "").lower()
    if kind not in TEXT_TYPES:
        what = f"{kind or 'untyped'} record"
        if kind == "response":
            what += (f" ({headers.get('content-type', 'no content type')}): WARC's HTML is not read; the crawl's "
                     "WET files hold its text (or extract it first: news-please, trafilatura)")
        return Reject(doc_id, source.name, "filtered", R_WARC_RECORD_TYPE, safe_snippet(what))
    if length > cap:
        return too_large(doc_id, source, content)
    if looks_binary(content[:8192]):
        return Reject(doc_id, source.name, "rejected", R_BINARY, safe_snippet(content[:200]))
    return Document(doc_id, source.name, decode(content), url=headers.get("warc-target-uri") or None,
                    date=headers.get("warc-date") or None)
