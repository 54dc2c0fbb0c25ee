"""What one record becomes: the reasons a reader gives, the frame and tally the framers fill, and one
parse per record kind (a JSON object, a text document, a tar member, a Parquet row).

A parse never reads from the stream: ``pipelines.sources.readers`` cuts the record's bytes (or row)
out first, counts it, then runs the parse under its guard.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipelines.records import Document, Reject
from pipelines.sources.streams import (
    SNIFF,
    bom_encoding,
    declared_encoding,
    decode,
    looks_binary,
    safe_snippet,
    valid_unicode,
)
from schemas.config import SourceConfig

# Reasons a reader gives (bucket "rejected" unless noted).
R_MALFORMED_JSON = "malformed_json"
R_PARSE_ERROR = "parse_error"  # any other exception while parsing one record
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
R_NOT_A_FILE = "not_a_file"  # a directory / link / device matching the glob, or such a tar member
R_INVALID_FILE_NAME = "invalid_file_name"  # a file name that is not valid UTF-8
R_HIDDEN_FILE = "hidden_file"  # a name with a leading '.' that a glob or folder matched: a writer's temporary

# Field names by layout: the first present one wins (news-please writes `maintext`).
TEXT_FIELDS = ("maintext", "text")
URL_FIELDS = ("url",)
TITLE_FIELDS = ("title",)
DATE_FIELDS = ("date_publish", "date", "date_modify", "date_download", "timestamp")  # timestamp: C4's

Record = Document | Reject


@dataclass
class Tally:
    """What was read from one input file, counted by the framers, independent of what parsed.

    ``read``: records cut from the file (lines, items, rows, members, documents), plus one for
    each part that could not be read at all (an unreadable file, a corrupt or truncated rest).
    ``origins``: each path its records' doc ids name (the file, or ``archive!member`` of a nested
    stream) -> the unit its record index counts (``pipelines.records.position_text``): the reject
    log's way back from a doc id to the file and the place in it.
    ``last_member``: each tar's path -> the name of the last member it read to its end (of any
    kind): where a tar that breaks after it broke.
    """

    read: int = 0
    origins: dict[str, str] = field(default_factory=dict)
    last_member: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Frame:
    """One record as read, not yet parsed: ``parse(*args)`` makes its Document or Reject."""

    doc_id: str
    parse: Callable[..., Record]
    args: tuple


Item = Frame | Record  # framers yield frames, and the already-counted records of nested streams


def first_present(obj: dict[str, Any], names: tuple[str, ...]) -> Any:
    for n in names:
        v = obj.get(n)
        if v is not None:
            return v
    return None


def meta_str(v: Any) -> str | None:
    """A kept metadata field as valid Unicode (lone surrogates -> U+FFFD; other types as str)."""
    if v is None:
        return None
    return valid_unicode(v if isinstance(v, str) else str(v))


def text_fields(source: SourceConfig) -> tuple[str, ...]:
    """Field names tried for the text: the configured one; for the default, news-please's too."""
    if source.text_field in TEXT_FIELDS:
        return (source.text_field, *(f for f in TEXT_FIELDS if f != source.text_field))
    return (source.text_field,)


def record_from_object(obj: Any, doc_id: str, source: SourceConfig, raw: str) -> Record:
    """A parsed JSON object (news-please or plain) -> Document, or a Reject saying what is missing."""
    if not isinstance(obj, dict):
        return Reject(doc_id, source.name, "rejected", R_MISSING_TEXT, safe_snippet(raw))
    text = first_present(obj, text_fields(source))
    if not isinstance(text, str):
        return Reject(doc_id, source.name, "rejected", R_MISSING_TEXT, safe_snippet(raw))
    if source.languages is not None:
        lang = obj.get("language")
        if isinstance(lang, str) and lang.lower() not in source.languages:
            return Reject(doc_id, source.name, "filtered", R_LANGUAGE_FIELD, safe_snippet(text))
    return Document(doc_id, source.name, text, url=meta_str(first_present(obj, URL_FIELDS)),
                    title=meta_str(first_present(obj, TITLE_FIELDS)), date=meta_str(first_present(obj, DATE_FIELDS)))


def too_large(doc_id: str, source: SourceConfig, head: bytes) -> Reject:
    return Reject(doc_id, source.name, "filtered", R_TOO_LARGE, safe_snippet(head))


def parse_json(raw: bytes, length: int, doc_id: str, source: SourceConfig, cap: int) -> Record:
    """One JSON line / array item -> Document or Reject (other exceptions: the driver's guard)."""
    if length > cap:
        return too_large(doc_id, source, raw)
    if looks_binary(raw):  # a NUL byte is never in JSON text: this record is binary, not the file
        return Reject(doc_id, source.name, "rejected", R_BINARY, safe_snippet(raw))
    line = decode(raw)
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, RecursionError):  # RecursionError: absurdly nested input
        return Reject(doc_id, source.name, "rejected", R_MALFORMED_JSON, safe_snippet(line))
    return record_from_object(obj, doc_id, source, line)


def parse_text(data: bytes, doc_id: str, source: SourceConfig, cap: int) -> Record:
    """A text document of a text file (already re-encoded) -> Document, or ``binary`` for NUL bytes
    in its first ``SNIFF`` bytes (as a tar member's document)."""
    if len(data) > cap:
        return too_large(doc_id, source, data)
    if looks_binary(data[:SNIFF]):
        return Reject(doc_id, source.name, "rejected", R_BINARY, safe_snippet(data[:200]))
    return Document(doc_id, source.name, decode(data))


def parse_document(data: bytes, doc_id: str, source: SourceConfig, cap: int) -> Record:
    """A whole text document (a file, a delimited part, a tar member) -> Document or Reject."""
    if len(data) > cap:
        return too_large(doc_id, source, data)
    enc = bom_encoding(data[:4])
    if enc is not None:  # UTF-16/32 text: NUL bytes are part of the encoding, not binary junk
        return Document(doc_id, source.name, data.decode(enc, errors="replace"))
    declared = declared_encoding(source.encoding)
    if declared is not None:  # undecodable bytes stay lone surrogates, as decode() leaves them
        text = data.decode(declared, errors="surrogateescape")
        if "\x00" in text[:SNIFF]:
            return Reject(doc_id, source.name, "rejected", R_BINARY, safe_snippet(data[:200]))
        return Document(doc_id, source.name, text)
    if looks_binary(data[:SNIFF]):
        return Reject(doc_id, source.name, "rejected", R_BINARY, safe_snippet(data[:200]))
    return Document(doc_id, source.name, decode(data))


def not_a_file(doc_id: str, source: SourceConfig, what: str, path: str, member: str) -> Reject:
    return Reject(doc_id, source.name, "rejected", R_NOT_A_FILE, what, file=path, position=f"member {member}")


def parse_parquet_row(cols: dict[str, list] | None, batch: Any, j: int, doc_id: str, source: SourceConfig,
                      cap: int, text_cols: tuple[str, ...], meta: dict[str, str | None],
                      lang_col: str | None) -> Record:
    """Row j of a record batch (already converted to Python as `cols`, or None: convert this row).
    The text is the first of ``text_cols`` that is not null in this row, as for a JSON record."""
    if cols is None:  # the batch as a whole did not convert: convert this row alone (it may raise)
        cols = {k: [v] for k, v in batch.slice(j, 1).to_pylist()[0].items()}
        j = 0
    text_col = next((c for c in text_cols if cols[c][j] is not None), text_cols[0])
    text = cols[text_col][j]
    if not isinstance(text, str):
        what = (f"column {text_col!r} is {batch.schema.field(text_col).type}, not text" if text is not None
                else f"{' and '.join(repr(c) for c in text_cols)} null in this row")
        return Reject(doc_id, source.name, "rejected", R_MISSING_TEXT, what)
    if len(text) > cap:  # characters <= bytes: a cheap first check; cleaning checks bytes
        return too_large(doc_id, source, text[:cap].encode("utf-8", "surrogatepass"))
    if lang_col and isinstance(cols[lang_col][j], str) and cols[lang_col][j].lower() not in source.languages:
        return Reject(doc_id, source.name, "filtered", R_LANGUAGE_FIELD, safe_snippet(text))
    return Document(doc_id, source.name, text,
                    url=meta_str(cols[meta["url"]][j]) if meta["url"] else None,
                    title=meta_str(cols[meta["title"]][j]) if meta["title"] else None,
                    date=meta_str(cols[meta["date"]][j]) if meta["date"] else None)


def missing_column(doc_id: str, source: SourceConfig, names: list[str]) -> Reject:
    return Reject(doc_id, source.name, "rejected", R_MISSING_TEXT,
                  f"no column {source.text_field!r} in {names}"[:200])
