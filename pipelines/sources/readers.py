"""Record readers: one framer per layout cuts records out of a stream, one guarded parse per record.

The two halves are kept apart on purpose. A *framer* (lines, JSON array items, Parquet rows,
tar members, text documents) yields one ``Frame`` per record it read and never parses; the
driver (``read_stream``) counts every frame into the file's ``Tally`` *before* parsing it, then
runs the frame's parse inside a guard: whatever a parse raises becomes a ``parse_error`` Reject
and reading carries on with the next frame. The tally is the build's input count, so a reader
that loses a record after reading it breaks the accounting identity instead of balancing it.
The parses, the reasons and the frame live in ``pipelines.sources.parsing``.
"""

from __future__ import annotations

import gzip
import json
import lzma
import posixpath
import tarfile
import zlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, get_args

from pipelines.records import Reject, doc_id_at, origin_key, position_text
from pipelines.sources.compression import (
    CHUNK,
    Budget,
    CorruptData,
    ExpansionLimit,
    decompress,
    split_compression,
)
from pipelines.sources.naming import file_key
from pipelines.sources.parsing import (
    DATE_FIELDS,
    R_BINARY,
    R_CORRUPT_ARCHIVE,
    R_CORRUPT_COMPRESSED,
    R_CORRUPT_PARQUET,
    R_EMPTY_FILE,
    R_MALFORMED_JSON,
    R_PARSE_ERROR,
    R_TRUNCATED,
    R_TRUNCATED_ARCHIVE,
    R_UNREADABLE,
    TITLE_FIELDS,
    URL_FIELDS,
    Frame,
    Item,
    Record,
    Tally,
    missing_column,
    not_a_file,
    parse_document,
    parse_json,
    parse_parquet_row,
    parse_text,
    text_fields,
    too_large,
)
from pipelines.sources.streams import (
    CUT,
    SNIFF,
    CrLines,
    Prefixed,
    TailTracker,
    Transcoded,
    bom_encoding,
    declared_encoding,
    decode,
    iter_json_array,
    iter_lines,
    mostly_binary,
    read_head,
    read_up_to,
    safe_snippet,
    skip_ws,
)
from pipelines.sources.warc import R_MALFORMED_WARC, MalformedWarc, frame_warc, is_warc
from pipelines.sources.wiki import R_MALFORMED_XML, MalformedXml, frame_wikipedia, is_wikipedia
from schemas.config import SourceConfig, SourceFormat
from shardforge.storage import is_transient

TAR_SUFFIXES = (".tar", ".tgz", ".tbz2", ".txz")
# The layouts a source's format names outright (auto, ccnews and openwebtext pick by extension and content).
NAMED_FORMATS = tuple(f for f in get_args(SourceFormat) if f not in ("auto", "ccnews", "openwebtext"))
MAX_ARCHIVE_DEPTH = 3  # openwebtext.tar.xz > urlsf_subset*.xz > *.txt needs 2
TAR_TRAILER_LIMIT = 1 << 20  # padding after a tar's end marker is at most a record (10 KiB) in practice


# ------------------------------------------------------------------ formats

def format_by_name(name: str) -> str | None:
    """The record layout an (uncompressed) file name announces, or None when it does not say."""
    lower = name.lower()
    if lower.endswith((".jsonl", ".ndjson", ".jsonlines")):
        return "jsonl"
    if lower.endswith(".json"):
        return "json"
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    if lower.endswith((".arrow", ".feather", ".ipc")):
        return "arrow"
    if lower.endswith(TAR_SUFFIXES):
        return "tar"
    if lower.endswith((".txt", ".text", ".md")):
        return "text"
    if lower.endswith((".warc", ".wet")):
        return "warc"
    return None


def sniffed_format(head: bytes) -> str | None:
    """"wikipedia" or "warc" for a stream whose first bytes are a Wikipedia dump / WikiExtractor file or a
    WARC / WET file, whatever its name; None for any other content."""
    if is_wikipedia(head):
        return "wikipedia"
    return "warc" if is_warc(head) else None


def detect_format(url: str, source: SourceConfig) -> str | None:
    """jsonl | json | parquet | arrow | tar | text | wikipedia | warc from the config or the extension;
    None: sniff the content.

    ``ccnews`` and ``openwebtext`` formats pick by extension like ``auto`` (their field names are
    handled by every reader), so a source may mix JSON, JSONL, Parquet and archives.
    """
    if source.format in NAMED_FORMATS:
        return source.format
    base, _ = split_compression(posixpath.basename(url))
    if base.lower().endswith(".tar"):  # .tar.gz, .tar.xz, ...
        return "tar"
    return format_by_name(base)


# ------------------------------------------------------------------ framers

def frame_jsonl(stream: BinaryIO, path: str, source: SourceConfig, cap: int, tally: Tally) -> Iterator[Frame]:
    """One JSON object per line; whitespace-only lines are not records. doc_id index = line number.

    Lines end in LF or CRLF, or in a lone CR when that is how the file's first line ends. A last
    line the stream broke after is a record only if it is a whole JSON object (else it is part of
    the rest the stream's fault rejects).
    """
    tally.origins[path] = "line"
    key = file_key(source, path)
    lineno = 0
    for raw, length, blank in iter_lines(CrLines(stream), cap):  # type: ignore[arg-type]
        if blank == CUT:
            if length <= cap and _whole_object(raw):
                doc_id = doc_id_at(key, lineno)
                yield Frame(doc_id, parse_json, (raw.rstrip(b"\r"), length, doc_id, source, cap))
            continue
        if blank:
            lineno += blank
            continue
        i = lineno
        lineno += 1
        if length <= cap and not raw.strip():
            continue
        doc_id = doc_id_at(key, i)
        yield Frame(doc_id, parse_json, (raw.rstrip(b"\r"), length, doc_id, source, cap))


def _whole_object(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(decode(raw)), dict)
    except (ValueError, RecursionError):
        return False


def frame_json(stream: BinaryIO, path: str, source: SourceConfig, cap: int, tally: Tally) -> Iterator[Frame]:
    """news-please JSON: one object per file, JSON arrays of objects (one after another, as
    ``cat a.json b.json`` leaves them), objects one after another (pretty-printed, concatenated),
    or (misnamed) JSONL. Bytes after an array that are not another array are one malformed record."""
    head = skip_ws(stream)
    if not head:
        return
    tally.origins[path] = "file"
    if head.startswith(b"["):
        yield from _frame_arrays(Prefixed(head[1:], stream), path, source, cap, tally)
        return
    data = head + read_up_to(stream, cap + 1 - len(head)) if len(head) <= cap else head
    key = file_key(source, path)
    doc_id = doc_id_at(key, 0)
    if len(data) <= cap:
        if _parses_as_one_value(data):
            yield Frame(doc_id, parse_json, (data, len(data), doc_id, source, cap))
            return
        values = None if _parses_as_one_value(data.split(b"\n", 1)[0]) else _concatenated_values(data)
        if values is None:
            yield from frame_jsonl(Prefixed(data, stream), path, source, cap, tally)
            return
        tally.origins[path] = "item"
        for i, raw in enumerate(values):
            doc_id = doc_id_at(key, i)
            yield Frame(doc_id, parse_json, (raw, len(raw), doc_id, source, cap))
        return
    # Over the cap: JSONL if its first line is a value by itself or longer than the cap (the
    # JSONL framer filters that line and reads on), else one huge object.
    newline = data.find(b"\n")
    if newline < 0 or _parses_as_one_value(data[:newline]):
        yield from frame_jsonl(Prefixed(data, stream), path, source, cap, tally)
    else:
        yield Frame(doc_id, too_large, (doc_id, source, data))


def _frame_arrays(stream: BinaryIO, path: str, source: SourceConfig, cap: int, tally: Tally) -> Iterator[Frame]:
    """The items of a JSON array (its '[' consumed) and of the arrays after it, indexed on; bytes after an
    array that do not start another one are one more record, a ``malformed_json`` Reject."""
    tally.origins[path] = "item"
    key = file_key(source, path)
    i = 0
    while True:
        after: list[bytes] = []
        for raw, length in iter_json_array(stream, cap, after):
            doc_id = doc_id_at(key, i)
            i += 1
            yield Frame(doc_id, parse_json, (raw, length, doc_id, source, cap))
        if not after:  # the stream ended inside the array
            return
        tail = Prefixed(after[0], stream)
        rest = skip_ws(tail)  # type: ignore[arg-type]
        if not rest:
            return
        if not rest.startswith(b"["):
            doc_id = doc_id_at(key, i)
            yield Frame(doc_id, _after_array, (doc_id, source, rest[:200]))
            return
        stream = Prefixed(rest[1:], tail)  # type: ignore[assignment, arg-type]


def _after_array(doc_id: str, source: SourceConfig, rest: bytes) -> Reject:
    return Reject(doc_id, source.name, "rejected", R_MALFORMED_JSON,
                  safe_snippet("data after the JSON array (not read): " + decode(rest)))


def _concatenated_values(data: bytes) -> list[bytes] | None:
    """The bytes of each JSON value when ``data`` is two or more values one after another (only
    whitespace between them); None otherwise."""
    text = decode(data)
    decoder = json.JSONDecoder()
    values: list[bytes] = []
    pos = 0
    try:
        while True:
            while pos < len(text) and text[pos] in " \t\r\n":
                pos += 1
            if pos == len(text):
                break
            _, end = decoder.raw_decode(text, pos)
            values.append(text[pos:end].encode("utf-8", "surrogateescape"))
            pos = end
    except (ValueError, RecursionError):
        return None
    return values if len(values) > 1 else None


def _parses_as_one_value(data: bytes) -> bool:
    """Whether the bytes are one JSON value; valid JSON that Python cannot hold (a 5,000-digit
    integer, nesting past the recursion limit) counts as one value whose parse will fail."""
    try:
        json.loads(decode(data))
    except json.JSONDecodeError:
        return False
    except (ValueError, RecursionError):
        return True
    return True


def frame_text(stream: BinaryIO, path: str, source: SourceConfig, cap: int, tally: Tally) -> Iterator[Frame]:
    """Plain text: one document per file, or several separated by `source.delimiter` lines."""
    tally.origins[path] = "file" if source.delimiter is None else "document"
    if source.delimiter is None:
        data = read_up_to(stream, cap + 1)
        if len(data) > cap or data.strip():
            doc_id = doc_id_at(file_key(source, path), 0)
            yield Frame(doc_id, parse_text, (data, doc_id, source, cap))
        return
    delim = source.delimiter.strip().encode("utf-8")
    parts: list[bytes] = []
    size = 0
    index = 0
    key = file_key(source, path)

    def flush() -> Iterator[Frame]:
        nonlocal parts, size, index
        if size > cap or any(p.strip() for p in parts):
            doc_id = doc_id_at(key, index)
            index += 1
            if size > cap:  # the parts hold only the head of this document
                yield Frame(doc_id, too_large, (doc_id, source, b"\n".join(parts)))
            else:
                yield Frame(doc_id, parse_text, (b"\n".join(parts), doc_id, source, cap))
        parts, size = [], 0

    for raw, length, _ in iter_lines(CrLines(stream), cap):  # type: ignore[arg-type]
        if length <= cap and raw.strip() == delim:
            yield from flush()
            continue
        if size + length + 1 <= cap:
            parts.append(raw)
        size += length + 1
    yield from flush()


def frame_parquet(stream: BinaryIO, path: str, source: SourceConfig, cap: int, tally: Tally,
                  budget: Budget | None = None) -> Iterator[Frame]:
    """Parquet in record batches of 256 rows (``frame_batches``)."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(stream)  # type: ignore[arg-type]  # needs a seekable file: fsspec's is
    yield from frame_batches(path, source, cap, tally, budget, pf.schema_arrow.names, pf.metadata.num_rows,
                             lambda columns: pf.iter_batches(batch_size=256, columns=columns))


def frame_arrow(stream: BinaryIO, path: str, source: SourceConfig, cap: int, tally: Tally,
                budget: Budget | None = None) -> Iterator[Frame]:
    """Arrow IPC in its record batches (``frame_batches``): the stream format (a Hugging Face dataset's
    ``save_to_disk`` and cache files), or the file format (``ARROW1``; Feather v2)."""
    import pyarrow as pa

    is_file = stream.read(6) == b"ARROW1"
    stream.seek(0)
    reader: Any = pa.ipc.open_file(stream) if is_file else pa.ipc.open_stream(stream)

    def batches(columns: list[str]) -> Iterator[Any]:
        each = (reader.get_batch(i) for i in range(reader.num_record_batches)) if is_file else reader
        for batch in each:
            yield batch.select(columns)

    yield from frame_batches(path, source, cap, tally, budget, reader.schema.names, None, batches)


def frame_batches(path: str, source: SourceConfig, cap: int, tally: Tally, budget: Budget | None,
                  names: list[str], num_rows: int | None, batches: Callable[[list[str]], Iterator[Any]]
                  ) -> Iterator[Frame]:
    """Columnar records (Parquet, Arrow) a record batch at a time: text (or maintext), title, url, date
    (or date_publish) columns. A file with no text column gives one missing_column record per row
    (``num_rows``, or counted from the batches).

    Every batch's size (its Arrow bytes, or its decoded text if larger) is charged to the file's
    budget: a small file can decode to gigabytes of repeated strings through dictionary encoding.
    """
    tally.origins[path] = "row"
    have = set(names)
    text_cols = tuple(c for c in text_fields(source) if c in have)
    key = file_key(source, path)
    if not text_cols:
        rows = num_rows if num_rows is not None else sum(b.num_rows for b in batches([]))
        for i in range(rows):
            doc_id = doc_id_at(key, i)
            yield Frame(doc_id, missing_column, (doc_id, source, sorted(have)))
        return
    meta = {"url": next((c for c in URL_FIELDS if c in have), None),
            "title": next((c for c in TITLE_FIELDS if c in have), None),
            "date": next((c for c in DATE_FIELDS if c in have), None)}
    lang_col = "language" if source.languages is not None and "language" in have else None
    columns = sorted({*text_cols, *(c for c in meta.values() if c), *([lang_col] if lang_col else [])})
    i = 0
    for batch in batches(columns):
        try:
            cols: dict[str, list] | None = batch.to_pydict()
        except Exception:  # noqa: BLE001 - e.g. invalid UTF-8 in a string column: convert row by row
            cols = None
        if budget is not None:  # dictionary-encoded columns are small in Arrow, not once decoded
            texts = [t for c in text_cols for t in cols[c]] if cols is not None else ()
            budget.add_inflated(max(batch.nbytes, sum(len(t) for t in texts if isinstance(t, str))))
        for j in range(batch.num_rows):
            doc_id = doc_id_at(key, i)
            i += 1
            yield Frame(doc_id, parse_parquet_row, (cols, batch, j, doc_id, source, cap, text_cols, meta, lang_col))


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


def member_kind(member: tarfile.TarInfo) -> str:
    """What a non-regular tar member is, in words (for the not_a_file snippet)."""
    for test, word in ((member.isdir, "directory"), (member.issym, "symlink"), (member.islnk, "hard link"),
                       (member.ischr, "character device"), (member.isblk, "block device"), (member.isfifo, "fifo")):
        if test():
            return word
    return f"tar type {member.type!r}"


def unique_member_path(path: str, name: str, used: set[str]) -> str:
    """``path!name``, or ``path!name#k`` with the least k >= 1 not in ``used`` when a member of that
    name came before; added to ``used``."""
    inner = f"{path}!{name}"
    k = 0
    while inner in used:
        k += 1
        inner = f"{path}!{name}#{k}"
    used.add(inner)
    return inner


def frame_tar(stream: BinaryIO, path: str, source: SourceConfig, cap: int, depth: int, tally: Tally,
              budget: Budget | None) -> Iterator[Item]:
    """A streamed tar: each regular member is a document (bounded read), or a nested archive /
    JSON(L) / Wikipedia / WET file read with its own reader; a directory member is skipped (it holds no
    data: the files under it are members of their own); every other member (link, device, FIFO) is one `not_a_file`
    record. doc_id: archive path + member index (non-files: their own index); a nested
    file's records: ``archive!member`` + their index, where a member name that repeats (``tar -r``
    appends a new copy under the same name) gets ``#k`` on its k-th repeat, so no two records share an id."""
    tally.origins[path] = "member"
    tracked = TailTracker(stream)
    member_key = file_key(source, path)
    nested: set[str] = set()  # the inner paths of nested files so far
    with tarfile.open(fileobj=tracked, mode="r|") as tar:  # type: ignore[call-overload]
        index = 0
        others = 0
        for member in tar:
            name = member.name
            if member.isdir():  # structure, no data: the files under it are members of their own
                tally.last_member[path] = name
                continue
            if not member.isfile():
                doc_id = doc_id_at(file_key(source, f"{path}!not_a_file"), others)
                others += 1
                yield Frame(doc_id, not_a_file, (doc_id, source, f"{member_kind(member)}: {name}"[:200], path, name))
                tally.last_member[path] = name
                continue
            f = tar.extractfile(member)
            base, comp = split_compression(posixpath.basename(name))
            fmt = format_by_name(base)
            head = b"" if comp is not None or fmt is not None else read_up_to(f, SNIFF)
            if head and (sniffed := sniffed_format(head)):  # WikiExtractor's wiki_00, a dump, a WET file
                fmt, f = sniffed, Prefixed(head, f)  # type: ignore[assignment]
            if comp is not None or fmt in ("tar", "jsonl", "json", "wikipedia", "warc"):  # files of records
                inner_path = unique_member_path(path, name, nested)
                # Nested archive or record file: its records are indexed (and counted) inside it.
                yield from read_stream(f, inner_path, source, cap, fmt, comp, depth + 1, tally, budget)
                tally.last_member[path] = name
                continue
            doc_id = doc_id_at(member_key, index)
            index += 1
            data = head + read_up_to(f, cap + 1 - len(head))  # type: ignore[arg-type]
            yield Frame(doc_id, parse_document, (data, doc_id, source, cap))
            tally.last_member[path] = name
    check_tar_end(tracked)


FRAMERS: dict[str, Callable[[BinaryIO, str, SourceConfig, int, Tally], Iterator[Frame]]] = {
    "jsonl": frame_jsonl, "json": frame_json, "text": frame_text, "wikipedia": frame_wikipedia, "warc": frame_warc}
# Columnar formats: read from the seekable file itself (never decompressed or sniffed), with the file's budget.
COLUMNAR: dict[str, Callable[..., Iterator[Frame]]] = {"parquet": frame_parquet, "arrow": frame_arrow}


# ------------------------------------------------------------------ the driver

def failure_reason(exc: BaseException, archive: bool, fmt: str | None = None) -> str:
    """Name why a stream could not be read to its end."""
    if isinstance(exc, ExpansionLimit):
        return exc.reason
    if isinstance(exc, MalformedXml):
        return R_MALFORMED_XML
    if isinstance(exc, MalformedWarc):
        return R_MALFORMED_WARC
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
    # pyarrow raises a plain OSError (no errno) for a footer whose metadata does not deserialize
    if fmt in ("parquet", "arrow") and not (isinstance(exc, OSError) and exc.errno is not None):
        return R_CORRUPT_PARQUET
    return R_UNREADABLE


def parse_guarded(frame: Frame, source: SourceConfig) -> Record:
    """The frame's record; any exception from its parse rejects this record alone."""
    try:
        return frame.parse(*frame.args)
    except Exception as e:  # noqa: BLE001 - one bad record must never end the file or the build
        return Reject(frame.doc_id, source.name, "rejected", R_PARSE_ERROR, safe_snippet(f"{type(e).__name__}: {e}"))


def _stream_items(raw: BinaryIO, path: str, source: SourceConfig, cap: int, fmt: str | None,
                  compression: str | None, depth: int, tally: Tally, budget: Budget | None,
                  failure: Callable[[str, str], Reject]) -> Iterator[Item]:
    """The items of one stream: its framer's frames (with the records of nested streams), or one
    counted ``failure`` Reject for a stream that is binary data or archives nested too deep."""
    stream = decompress(raw, compression, budget)
    if fmt in COLUMNAR:
        yield from COLUMNAR[fmt](stream, path, source, cap, tally, budget)
        return
    head = read_head(stream, SNIFF)
    enc = bom_encoding(head[:4]) if fmt != "tar" else None
    declared = declared_encoding(source.encoding) if fmt != "tar" and head[257:262] != b"ustar" else None
    if enc is not None:  # UTF-16/32 text with a byte-order mark: read it as UTF-8
        stream = Transcoded(Prefixed(head, stream), enc)  # type: ignore[assignment]
        head = read_head(stream, SNIFF)
    elif declared is not None:  # the source's own encoding (cp1252, latin-1, ...): read it as UTF-8
        stream = Transcoded(Prefixed(head, stream), declared, "surrogateescape")  # type: ignore[assignment]
        head = read_head(stream, SNIFF)
    if fmt is None or fmt == "tar":
        # tar headers carry "ustar" at byte 257; otherwise guess from the first byte.
        if head[257:262] == b"ustar":
            fmt = "tar"
        elif fmt is None:
            fmt = sniffed_format(head) or ("json" if head.lstrip()[:1] in (b"{", b"[") else "text")
    if fmt == "tar" and depth >= MAX_ARCHIVE_DEPTH:
        tally.read += 1
        yield failure(R_CORRUPT_ARCHIVE, f"archives nested deeper than {depth}")
        return
    if fmt != "tar" and mostly_binary(head):  # a stray NUL byte rejects its record, not the file
        tally.read += 1
        yield failure(R_BINARY, safe_snippet(head[:200]))
        return
    stream = Prefixed(head, stream)  # type: ignore[assignment]
    if fmt == "tar":
        yield from frame_tar(stream, path, source, cap, depth, tally, budget)
    else:
        yield from FRAMERS[fmt](stream, path, source, cap, tally)


def read_stream(raw: BinaryIO, path: str, source: SourceConfig, cap: int, fmt: str | None,
                compression: str | None, depth: int = 0, tally: Tally | None = None,
                budget: Budget | None = None) -> Iterator[Record]:
    """Records of one (possibly compressed) stream; never raises on bad data.

    Every frame is counted into `tally` before it is parsed. A stream that yields no record
    gives one `empty_file` Reject; a stream that breaks part way (or exceeds its `budget`) gives
    one Reject for its unread rest, after the records read; each of these counts as one read.
    Those Rejects name the stream and where it broke: after its last record (a tar: after the name
    of its last member read), or the whole file.
    """
    tally = tally if tally is not None else Tally()
    emitted = 0
    own = file_key(source, path) + "-"
    last: str | None = None  # the doc id of this stream's last frame

    def failure(reason: str, snippet: str) -> Reject:
        unit, key = tally.origins.get(path), origin_key(last) if last is not None else None
        where = "whole file" if key is None or unit is None else f"after {position_text(unit, key[1])}"
        if path in tally.last_member:  # a tar: its members' names say where, whatever their kind
            where = f"after member {tally.last_member[path]}"
        return Reject(doc_id_at(file_key(source, f"{path}!error"), 0), source.name, "rejected", reason, snippet,
                      file=path, position=where)

    try:
        for item in _stream_items(raw, path, source, cap, fmt, compression, depth, tally, budget, failure):
            if type(item) is Frame:
                tally.read += 1
                if item.doc_id.startswith(own):
                    last = item.doc_id
                item = parse_guarded(item, source)
            emitted += 1
            yield item  # type: ignore[misc]
    except Exception as e:  # noqa: BLE001 - any unreadable input becomes one Reject, never a crash
        if is_transient(e):
            raise  # a dropped connection is not bad data: fail the bundle so the runner retries it
        if isinstance(e, ExpansionLimit) and depth > 0:
            raise  # the budget is the whole file's: reject the rest of the file, not one member
        tally.read += 1
        yield failure(failure_reason(e, fmt == "tar" or tally.origins.get(path) == "member", fmt),
                      safe_snippet(f"{type(e).__name__}: {e}"))
        return
    if emitted == 0:
        tally.read += 1
        yield failure(R_EMPTY_FILE, "")
