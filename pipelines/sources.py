"""Source readers: raw files (any fsspec URL / glob) -> Documents, or Rejects.

One reader per layout the real corpora ship in:

* JSONL (one object per line; CC-News news-please dumps, OpenWebText/Stories exports),
* JSON (news-please: one object per file, or a JSON array of objects),
* Parquet (``text``, ``title``, ``url``, ``domain``, ``date`` columns), read in record batches,
* tar archives of ``.txt`` members, nested too (OpenWebText: ``urlsf_subset*.xz`` are xz-compressed
  tars of documents, and the outer ``openwebtext.tar.xz`` holds those),
* plain text, one document per file or several separated by a delimiter line (Stories).

Compression follows the extension (.gz, .xz, .zst, .bz2). Everything streams: lines, array items
and archive members are read with a byte cap (``SourceConfig.max_record_bytes``), so a 200 MB
"document" costs a bounded buffer and ends as ``filtered/max_doc_bytes``.

Accounting contract: every input record gives exactly one Document or one Reject, and a file that
cannot be read (truncated or corrupt compression, truncated archive, binary junk, empty) still gives
one Reject for the part that could not be read, so nothing is lost silently and nothing raises.
Reading is parallel across files (one element per file, reshuffled over workers).

Invalid UTF-8 is decoded with ``surrogateescape`` here and judged by the cleaning stage, which owns
the ``invalid_utf8: reject | repair`` policy.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import posixpath
import re
import tarfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from pipelines import progress
from pipelines.records import Document, Reject, make_doc_id, snippet
from schemas.config import SourceConfig
from schemas.errors import UserError
from schemas.storage import expand_glob, is_transient, open_read

REJECTS = "rejects"
CHUNK = 1 << 20  # streaming read size
SNIFF = 8192  # bytes looked at to recognise binary files and tar archives
COMPRESSIONS = {".gz": "gzip", ".gzip": "gzip", ".xz": "xz", ".lzma": "xz", ".zst": "zstd", ".zstd": "zstd",
                ".bz2": "bz2"}
TAR_SUFFIXES = (".tar", ".tgz", ".tbz2", ".txz")
MAX_ARCHIVE_DEPTH = 3  # openwebtext.tar.xz > urlsf_subset*.xz > *.txt needs 2

# Reasons a reader gives (bucket "rejected" unless noted).
R_MALFORMED_JSON = "malformed_json"
R_MISSING_TEXT = "missing_text_field"
R_TOO_LARGE = "max_doc_bytes"  # bucket "filtered": same reason the cleaning rule uses
R_LANGUAGE_FIELD = "language_field"  # bucket "filtered": news-please `language` not in SourceConfig.languages
R_BINARY = "binary"
R_EMPTY_FILE = "empty_file"
R_TRUNCATED = "truncated"  # a compressed stream that ends early
R_TRUNCATED_ARCHIVE = "truncated_archive"
R_CORRUPT_COMPRESSED = "corrupt_compressed"
R_CORRUPT_ARCHIVE = "corrupt_archive"
R_CORRUPT_PARQUET = "corrupt_parquet"
R_UNREADABLE = "unreadable"

# Field names by layout: the first present one wins (news-please writes `maintext`).
TEXT_FIELDS = ("maintext", "text")
URL_FIELDS = ("url",)
TITLE_FIELDS = ("title",)
DATE_FIELDS = ("date_publish", "date", "date_modify", "date_download")

Record = Document | Reject
Reader = Callable[[BinaryIO, str, SourceConfig, int], Iterator[Record]]


# ------------------------------------------------------------------ formats and streams

def split_compression(name: str) -> tuple[str, str | None]:
    """('x.jsonl.gz') -> ('x.jsonl', 'gzip'); no known compression -> (name, None)."""
    lower = name.lower()
    for ext, comp in COMPRESSIONS.items():
        if lower.endswith(ext):
            return name[: -len(ext)], comp
    return name, None


def format_by_name(name: str) -> str | None:
    """The record layout an (uncompressed) file name announces, or None when it does not say."""
    lower = name.lower()
    if lower.endswith((".jsonl", ".ndjson", ".jsonlines")):
        return "jsonl"
    if lower.endswith(".json"):
        return "json"
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    if lower.endswith(TAR_SUFFIXES):
        return "tar"
    if lower.endswith((".txt", ".text", ".md")):
        return "text"
    return None


def detect_format(url: str, source: SourceConfig) -> str | None:
    """jsonl | json | parquet | tar | text from the config or the extension; None: sniff the content.

    ``ccnews`` and ``openwebtext`` formats pick by extension like ``auto`` (their field names are
    handled by every reader), so a source may mix JSON, JSONL, Parquet and archives.
    """
    if source.format in ("jsonl", "json", "parquet", "text"):
        return source.format
    base, _ = split_compression(posixpath.basename(url))
    if base.lower().endswith(".tar"):  # .tar.gz, .tar.xz, ...
        return "tar"
    return format_by_name(base)


class CorruptData(Exception):
    """Compressed data that does not decode."""


class ZstdReader:
    """A read(n) stream over zstd data that raises EOFError on a truncated frame.

    zstandard's stream_reader returns short data silently when the input ends mid-frame; this
    reader feeds small input chunks to a decompressobj (bounding memory on highly compressible
    input) and checks the frame end itself. Multi-frame files are read across frames.
    """

    IN_CHUNK = 2048

    def __init__(self, raw: BinaryIO):
        import zstandard

        self._zstd = zstandard
        self._raw = raw
        self._dobj = zstandard.ZstdDecompressor().decompressobj()
        self._buf = bytearray()
        self._done = False
        self._mid_frame = False

    def _fill(self) -> None:
        data = self._raw.read(self.IN_CHUNK)
        if not data:
            if self._mid_frame and not self._dobj.eof:
                raise EOFError("zstd stream ended before the end of its frame")
            self._done = True
            return
        while data:
            try:
                self._buf += self._dobj.decompress(data)
            except self._zstd.ZstdError as e:
                raise CorruptData(f"corrupt zstd data: {e}") from e
            self._mid_frame = True
            if self._dobj.eof:
                data = self._dobj.unused_data
                self._dobj = self._zstd.ZstdDecompressor().decompressobj()
                self._mid_frame = False
            else:
                data = b""

    def read(self, n: int = -1) -> bytes:
        while not self._done and (n < 0 or len(self._buf) < n):
            self._fill()
        if n < 0 or n >= len(self._buf):
            out = bytes(self._buf)
            self._buf.clear()
        else:
            out = bytes(self._buf[:n])
            del self._buf[:n]
        return out

    def close(self) -> None:
        pass


class Prefixed:
    """A read(n) stream that first returns already-read `head` bytes, then the rest of `stream`."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self._head = head
        self._stream = stream

    def read(self, n: int = -1) -> bytes:
        if self._head:
            if n < 0:
                out, self._head = self._head + self._stream.read(), b""
                return out
            out, self._head = self._head[:n], self._head[n:]
            return out
        return self._stream.read(n)


def decompress(stream: BinaryIO, compression: str | None) -> BinaryIO:
    """A streaming decompressing reader (the stream itself when not compressed)."""
    if compression is None:
        return stream
    if compression == "gzip":
        return gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[return-value]
    if compression == "xz":
        return lzma.LZMAFile(stream)  # type: ignore[return-value]
    if compression == "bz2":
        return bz2.BZ2File(stream)  # type: ignore[return-value]
    if compression == "zstd":
        return ZstdReader(stream)  # type: ignore[return-value]
    raise ValueError(f"unknown compression {compression!r}")


def read_up_to(stream: BinaryIO, n: int) -> bytes:
    """Read n bytes (fewer only at the end of the stream); decompressors may return short reads."""
    parts: list[bytes] = []
    got = 0
    while got < n:
        b = stream.read(min(CHUNK, n - got))
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def iter_lines(stream: BinaryIO, cap: int) -> Iterator[tuple[bytes, int]]:
    """(line, full length) per line, without the newline; a line keeps at most `cap` bytes.

    Longer lines are not held in memory: the rest is counted and dropped, so the caller can
    reject the record as too large after reading at most `cap` of it.
    """
    pending = bytearray()
    pending_len = 0  # true length of the partial line (pending keeps at most cap bytes)
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            break
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            end = len(chunk) if nl < 0 else nl
            if pending_len == 0 and nl >= 0:
                length = nl - start
                yield (chunk[start:nl] if length <= cap else chunk[start:start + cap]), length
            else:
                room = cap - len(pending)
                if room > 0:
                    pending += chunk[start:min(end, start + room)]
                pending_len += end - start
                if nl >= 0:
                    yield bytes(pending), pending_len
                    pending.clear()
                    pending_len = 0
            if nl < 0:
                break
            start = nl + 1
    if pending_len:
        yield bytes(pending), pending_len


def decode(data: bytes) -> str:
    """UTF-8 with invalid bytes kept as lone surrogates (the cleaning stage rejects or repairs them)."""
    text = data.decode("utf-8", errors="surrogateescape")
    return text[1:] if text.startswith("\ufeff") else text


def safe_snippet(text: str | bytes) -> str:
    """A snippet that is always valid Unicode (surrogates from bad bytes become U+FFFD)."""
    s = snippet(text)
    return s.encode("utf-8", errors="replace").decode("utf-8") if isinstance(s, str) else s


def looks_binary(head: bytes) -> bool:
    """NUL bytes never occur in UTF-8 text we want; a file (or member) with them is binary."""
    return b"\x00" in head


# ------------------------------------------------------------------ records

def _first(obj: dict[str, Any], names: tuple[str, ...]) -> Any:
    for n in names:
        v = obj.get(n)
        if v is not None:
            return v
    return None


def _opt_str(v: Any) -> str | None:
    if v is None:
        return None
    return v if isinstance(v, str) else str(v)


def text_fields(source: SourceConfig) -> tuple[str, ...]:
    """Field names tried for the text: the configured one; for the default, news-please's too."""
    if source.text_field in TEXT_FIELDS:
        return (source.text_field, *(f for f in TEXT_FIELDS if f != source.text_field))
    return (source.text_field,)


def record_from_object(obj: Any, doc_id: str, source: SourceConfig, raw: str) -> Record:
    """A parsed JSON object (news-please or plain) -> Document, or a Reject saying what is missing."""
    if not isinstance(obj, dict):
        return Reject(doc_id, source.name, "rejected", R_MISSING_TEXT, safe_snippet(raw))
    text = _first(obj, text_fields(source))
    if not isinstance(text, str):
        return Reject(doc_id, source.name, "rejected", R_MISSING_TEXT, safe_snippet(raw))
    if source.languages is not None:
        lang = obj.get("language")
        if isinstance(lang, str) and lang.lower() not in source.languages:
            return Reject(doc_id, source.name, "filtered", R_LANGUAGE_FIELD, safe_snippet(text))
    return Document(doc_id, source.name, text, url=_opt_str(_first(obj, URL_FIELDS)),
                    title=_opt_str(_first(obj, TITLE_FIELDS)), date=_opt_str(_first(obj, DATE_FIELDS)))


def _too_large(doc_id: str, source: SourceConfig, head: bytes) -> Reject:
    return Reject(doc_id, source.name, "filtered", R_TOO_LARGE, safe_snippet(head))


def _json_line(raw: bytes, length: int, doc_id: str, source: SourceConfig, cap: int) -> Record:
    if length > cap:
        return _too_large(doc_id, source, raw)
    line = decode(raw)
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return Reject(doc_id, source.name, "rejected", R_MALFORMED_JSON, safe_snippet(line))
    except RecursionError:  # absurdly nested input
        return Reject(doc_id, source.name, "rejected", R_MALFORMED_JSON, safe_snippet(line))
    return record_from_object(obj, doc_id, source, line)


def read_jsonl(stream: BinaryIO, path: str, source: SourceConfig, cap: int) -> Iterator[Record]:
    """One JSON object per line; whitespace-only lines are not records. doc_id index = line number."""
    for i, (raw, length) in enumerate(iter_lines(stream, cap)):
        if length <= cap and not raw.strip():
            continue
        yield _json_line(raw.rstrip(b"\r"), length, make_doc_id(source.name, path, i), source, cap)


_IN_STRING = re.compile(rb'["\\]')
_OUTSIDE = re.compile(rb'[\[\]{}",]')


def iter_json_array(stream: BinaryIO, cap: int) -> Iterator[tuple[bytes, int]]:
    """(item bytes, full length) per top-level item of a JSON array (its '[' already consumed).

    A small scanner tracks strings, escapes and nesting so items are split without parsing the
    whole array; an item keeps at most `cap` bytes. Malformed input gives malformed items (the
    caller's json.loads rejects them), never an exception.
    """
    item = bytearray()
    item_len = 0
    depth = 0
    in_str = esc = False
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            break
        pos = 0
        n = len(chunk)
        seg_start = 0  # start of the not-yet-copied part of this chunk belonging to the current item
        while pos < n:
            if esc:
                esc = False
                pos += 1
                continue
            m = (_IN_STRING if in_str else _OUTSIDE).search(chunk, pos)
            if m is None:
                pos = n
                break
            c = m.group()
            pos = m.end()
            if in_str:
                if c == b"\\":
                    esc = True
                else:
                    in_str = False
            elif c == b'"':
                in_str = True
            elif c in (b"[", b"{"):
                depth += 1
            elif depth > 0 and c in (b"]", b"}"):
                depth -= 1
            elif depth == 0 and c in (b",", b"]"):
                seg = chunk[seg_start:pos - 1]
                room = cap - len(item)
                if room > 0:
                    item += seg[:room]
                item_len += len(seg)
                if item_len and bytes(item).strip() or item_len > cap:
                    yield bytes(item), item_len
                item.clear()
                item_len = 0
                seg_start = pos
                if c == b"]":
                    return
        seg = chunk[seg_start:n]
        room = cap - len(item)
        if room > 0:
            item += seg[:room]
        item_len += len(seg)
    if bytes(item).strip():  # array never closed: the last item is malformed or cut
        yield bytes(item), item_len


def _skip_ws(stream: BinaryIO) -> bytes:
    """Read until the first non-whitespace byte; returns the bytes read from there on ('' at EOF)."""
    while True:
        b = stream.read(SNIFF)
        if not b:
            return b""
        s = b.lstrip()
        if s.startswith(b"\xef\xbb\xbf"):
            s = s[3:].lstrip()
        if s:
            return s


def read_json(stream: BinaryIO, path: str, source: SourceConfig, cap: int) -> Iterator[Record]:
    """news-please JSON: one object per file, a JSON array of objects, or (misnamed) JSONL."""
    head = _skip_ws(stream)
    if not head:
        return
    if head.startswith(b"["):
        for i, (raw, length) in enumerate(iter_json_array(Prefixed(head[1:], stream), cap)):
            yield _json_line(raw, length, make_doc_id(source.name, path, i), source, cap)
        return
    data = head + read_up_to(stream, cap + 1 - len(head)) if len(head) <= cap else head
    if len(data) <= cap:
        try:
            obj = json.loads(decode(data))
        except json.JSONDecodeError:
            obj = None  # not one object: maybe JSONL under a .json name
        if obj is not None:
            yield record_from_object(obj, make_doc_id(source.name, path, 0), source, decode(data))
            return
        yield from read_jsonl(Prefixed(data, stream), path, source, cap)
        return
    # Over the cap: JSONL if its first line is an object by itself, else one huge object.
    first = data.split(b"\n", 1)[0]
    try:
        json.loads(decode(first))
        is_jsonl = True
    except json.JSONDecodeError:
        is_jsonl = False
    if is_jsonl:
        yield from read_jsonl(Prefixed(data, stream), path, source, cap)
    else:
        yield _too_large(make_doc_id(source.name, path, 0), source, data)


def read_text(stream: BinaryIO, path: str, source: SourceConfig, cap: int) -> Iterator[Record]:
    """Plain text: one document per file, or several separated by `source.delimiter` lines."""
    if source.delimiter is None:
        data = read_up_to(stream, cap + 1)
        doc_id = make_doc_id(source.name, path, 0)
        if len(data) > cap:
            yield _too_large(doc_id, source, data)
        elif data.strip():
            yield Document(doc_id, source.name, decode(data))
        return
    delim = source.delimiter.strip().encode("utf-8")
    parts: list[bytes] = []
    size = 0
    index = 0

    def flush() -> Iterator[Record]:
        nonlocal parts, size, index
        if size > cap:
            yield _too_large(make_doc_id(source.name, path, index), source, b"\n".join(parts))
            index += 1
        elif any(p.strip() for p in parts):
            yield Document(make_doc_id(source.name, path, index), source.name, decode(b"\n".join(parts)))
            index += 1
        parts, size = [], 0

    for raw, length in iter_lines(stream, cap):
        if length <= cap and raw.strip() == delim:
            yield from flush()
            continue
        if size + length + 1 <= cap:
            parts.append(raw)
        size += length + 1
    yield from flush()


def read_parquet(stream: BinaryIO, path: str, source: SourceConfig, cap: int) -> Iterator[Record]:
    """Parquet in record batches: text (or maintext), title, url, date (or date_publish) columns."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(stream)  # type: ignore[arg-type]  # needs a seekable file: fsspec's is
    names = set(pf.schema_arrow.names)
    text_col = next((c for c in text_fields(source) if c in names), None)
    if text_col is None:
        for i in range(pf.metadata.num_rows):
            yield Reject(make_doc_id(source.name, path, i), source.name, "rejected", R_MISSING_TEXT,
                         f"no column {source.text_field!r} in {sorted(names)}"[:200])
        return
    meta = {"url": next((c for c in URL_FIELDS if c in names), None),
            "title": next((c for c in TITLE_FIELDS if c in names), None),
            "date": next((c for c in DATE_FIELDS if c in names), None)}
    lang_col = "language" if source.languages is not None and "language" in names else None
    columns = sorted({text_col, *(c for c in meta.values() if c), *([lang_col] if lang_col else [])})
    i = 0
    for batch in pf.iter_batches(batch_size=256, columns=columns):
        cols = batch.to_pydict()
        for j in range(batch.num_rows):
            doc_id = make_doc_id(source.name, path, i)
            i += 1
            text = cols[text_col][j]
            if not isinstance(text, str):
                yield Reject(doc_id, source.name, "rejected", R_MISSING_TEXT, "")
                continue
            if len(text) > cap:  # characters <= bytes: a cheap first check; cleaning checks bytes
                yield _too_large(doc_id, source, text[:cap].encode("utf-8", "surrogatepass"))
                continue
            if lang_col and isinstance(cols[lang_col][j], str) and cols[lang_col][j].lower() not in source.languages:
                yield Reject(doc_id, source.name, "filtered", R_LANGUAGE_FIELD, safe_snippet(text))
                continue
            yield Document(doc_id, source.name, text, url=_opt_str(cols[meta["url"]][j]) if meta["url"] else None,
                           title=_opt_str(cols[meta["title"]][j]) if meta["title"] else None,
                           date=_opt_str(cols[meta["date"]][j]) if meta["date"] else None)


class TailTracker:
    """A read(n) pass-through that counts bytes and keeps the last block read (tar end checks)."""

    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self.total = 0
        self.tail = b""

    def read(self, n: int = -1) -> bytes:
        b = self._stream.read(n)
        if b:
            self.total += len(b)
            self.tail = (self.tail + b)[-512:]
        return b


TAR_TRAILER_LIMIT = 1 << 20  # padding after a tar's end marker is at most a record (10 KiB) in practice


def check_tar_end(tracked: TailTracker) -> None:
    """Raise if a tar stream did not end with its zero-block end marker.

    tarfile's stream mode stops quietly at a cut header, so a tar truncated between members would
    lose its remaining members without a trace; a complete archive ends with zero blocks and a
    length that is a multiple of 512.
    """
    drained = 0
    while drained <= TAR_TRAILER_LIMIT:
        b = tracked.read(CHUNK)
        if not b:
            break
        drained += len(b)
    else:
        raise tarfile.ReadError("data after the end of the archive (corrupt member header)")
    if tracked.total % 512 or tracked.tail.strip(b"\x00"):
        raise tarfile.ReadError("unexpected end of data: no end-of-archive marker (truncated)")


def read_tar(stream: BinaryIO, path: str, source: SourceConfig, cap: int, depth: int = 0) -> Iterator[Record]:
    """A streamed tar: each regular member is a document (bounded read), or a nested archive /
    JSON(L) file read with its own reader. doc_id: archive path + member index."""
    tracked = TailTracker(stream)
    yield from _read_tar_members(tracked, path, source, cap, depth)
    check_tar_end(tracked)


def _read_tar_members(stream: TailTracker, path: str, source: SourceConfig, cap: int,
                      depth: int) -> Iterator[Record]:
    with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
        index = 0
        for member in tar:
            if not member.isfile():
                continue
            f = tar.extractfile(member)
            if f is None:
                continue
            name = member.name
            inner_path = f"{path}!{name}"
            base, comp = split_compression(posixpath.basename(name))
            fmt = format_by_name(base)
            if comp is not None or fmt in ("tar", "jsonl", "json"):
                # Nested archive or record file: its records are indexed inside it.
                yield from read_stream(f, inner_path, source, cap, fmt, comp, depth + 1)
                continue
            doc_id = make_doc_id(source.name, path, index)
            index += 1
            data = read_up_to(f, cap + 1)
            if len(data) > cap:
                yield _too_large(doc_id, source, data)
            elif looks_binary(data[:SNIFF]):
                yield Reject(doc_id, source.name, "rejected", R_BINARY, safe_snippet(data[:200]))
            else:
                yield Document(doc_id, source.name, decode(data))


READERS: dict[str, Reader] = {"jsonl": read_jsonl, "json": read_json, "text": read_text, "parquet": read_parquet}


def failure_reason(exc: BaseException, archive: bool) -> str:
    """Name why a stream could not be read to its end."""
    if isinstance(exc, EOFError):
        return R_TRUNCATED_ARCHIVE if archive else R_TRUNCATED
    if isinstance(exc, tarfile.ReadError):
        text = str(exc).lower()
        return R_TRUNCATED_ARCHIVE if "unexpected end" in text or "truncated" in text else R_CORRUPT_ARCHIVE
    if isinstance(exc, tarfile.TarError):
        return R_CORRUPT_ARCHIVE
    if isinstance(exc, (gzip.BadGzipFile, lzma.LZMAError, zlib.error, CorruptData)):
        return R_CORRUPT_COMPRESSED
    if isinstance(exc, OSError) and "invalid data stream" in str(exc).lower():  # bz2
        return R_CORRUPT_COMPRESSED
    if "arrow" in type(exc).__module__.lower():
        return R_CORRUPT_PARQUET
    return R_UNREADABLE


def read_stream(raw: BinaryIO, path: str, source: SourceConfig, cap: int, fmt: str | None,
                compression: str | None, depth: int = 0) -> Iterator[Record]:
    """Records of one (possibly compressed) stream; never raises on bad data.

    A stream that yields no record gives one `empty_file` Reject; a stream that breaks part way
    gives one Reject (truncated / corrupt / binary) for its unread rest, after the records read.
    """
    emitted = 0
    failure_id = make_doc_id(source.name, f"{path}!error", 0)
    archive = fmt == "tar"
    try:
        stream = decompress(raw, compression)
        if fmt != "parquet":
            head = read_up_to(stream, SNIFF)
            if fmt is None or fmt == "tar":
                # tar headers carry "ustar" at byte 257; otherwise guess from the first byte.
                if head[257:262] == b"ustar":
                    fmt = "tar"
                elif fmt is None:
                    fmt = "json" if head.lstrip()[:1] in (b"{", b"[") else "text"
            archive = fmt == "tar"
            if fmt == "tar" and depth >= MAX_ARCHIVE_DEPTH:
                yield Reject(failure_id, source.name, "rejected", R_CORRUPT_ARCHIVE, f"archives nested deeper than {depth}")
                return
            if fmt != "tar" and looks_binary(head):
                yield Reject(failure_id, source.name, "rejected", R_BINARY, safe_snippet(head[:200]))
                return
            stream = Prefixed(head, stream)  # type: ignore[assignment]
        if fmt == "tar":
            records = read_tar(stream, path, source, cap, depth)
        else:
            records = READERS[fmt](stream, path, source, cap)
        for rec in records:
            emitted += 1
            yield rec
    except Exception as e:  # noqa: BLE001 - any unreadable input becomes one Reject, never a crash
        if is_transient(e):
            raise  # a dropped connection is not bad data: fail the bundle so the runner retries it
        reason = failure_reason(e, archive)
        yield Reject(failure_id, source.name, "rejected", reason, f"{type(e).__name__}: {e}"[:200])
        return
    if emitted == 0:
        yield Reject(failure_id, source.name, "rejected", R_EMPTY_FILE, "")


def read_file(url: str, source: SourceConfig) -> Iterator[Record]:
    """All records of one file (Documents and Rejects), streamed."""
    fmt = detect_format(url, source)
    base, comp = split_compression(posixpath.basename(url))
    if fmt == "parquet" and comp is not None:
        yield Reject(make_doc_id(source.name, f"{url}!error", 0), source.name, "rejected", R_UNREADABLE,
                     "compressed parquet files are not supported (parquet compresses internally)")
        return
    with open_read(url) as f:
        yield from read_stream(f, url, source, source.max_record_bytes, fmt, comp)


class _ReadFiles(beam.DoFn):
    def __init__(self, source: SourceConfig, total_files: int | None = None):
        self.source = source
        self.total_files = total_files

    def process(self, url: str):
        yield from self._records(url)
        progress.tick(f"read {self.source.name} files", total=self.total_files, unit="file")

    def _records(self, url: str):
        for rec in read_file(url, self.source):
            if isinstance(rec, Reject):
                Metrics.counter("read", f"{rec.bucket}_{rec.reason}").inc()
                yield pvalue.TaggedOutput(REJECTS, rec)
            else:
                Metrics.counter("read", "documents").inc()
                yield rec


class ReadSource(beam.PTransform):
    """Read one configured source: outputs `documents` (main) and `rejects`."""

    def __init__(self, source: SourceConfig, urls: Sequence[str] | None = None):
        """urls: read exactly these files (e.g. one ingest batch) instead of expanding source.input."""
        super().__init__()
        self.source = source
        self.urls = list(urls) if urls is not None else expand_glob(source.input)
        if urls is None and not self.urls:
            raise UserError(f"source {source.name}: no files match {source.input!r}")

    def expand(self, pbegin):
        return (
            pbegin
            | "ListFiles" >> beam.Create(self.urls)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFiles" >> beam.ParDo(_ReadFiles(self.source, len(self.urls))).with_outputs(REJECTS, main="documents")
        )
