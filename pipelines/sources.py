"""Source readers: raw files (any fsspec URL / glob) -> Documents, or Rejects.

Reading is parallel across files (one element per file, reshuffled so files
spread over workers) and streams each file line by line. Every record gives
exactly one Document or one Reject (malformed input never crashes the job).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import apache_beam as beam
from apache_beam import pvalue

from pipelines.records import Document, Reject, make_doc_id, snippet
from schemas.config import SourceConfig
from schemas.errors import UserError
from schemas.storage import expand_glob, open_read

REJECTS = "rejects"


def detect_format(url: str, source: SourceConfig) -> str:
    if source.format != "auto":
        return source.format
    name = url.lower()
    for ext in (".gz", ".xz", ".zst", ".bz2"):
        if name.endswith(ext):
            name = name[: -len(ext)]
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if name.endswith(".txt"):
        return "text"
    return "jsonl"


def read_jsonl(stream: io.BufferedIOBase, url: str, source: SourceConfig) -> Iterator[Document | Reject]:
    """One JSON object per line with a text field; bad lines become Rejects."""
    for i, raw in enumerate(stream):
        doc_id = make_doc_id(source.name, url, i)
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            yield Reject(doc_id, source.name, "rejected", "invalid_utf8", snippet(raw))
            continue
        if not line.strip():
            yield Reject(doc_id, source.name, "rejected", "blank_line", "")
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            yield Reject(doc_id, source.name, "rejected", "malformed_json", snippet(line))
            continue
        text = rec.get(source.text_field) if isinstance(rec, dict) else None
        if not isinstance(text, str):
            yield Reject(doc_id, source.name, "rejected", "missing_text_field", snippet(line))
            continue
        yield Document(doc_id, source.name, text, url=rec.get("url"), title=rec.get("title"))


def read_text_file(stream: io.BufferedIOBase, url: str, source: SourceConfig) -> Iterator[Document | Reject]:
    data = stream.read()
    doc_id = make_doc_id(source.name, url, 0)
    try:
        yield Document(doc_id, source.name, data.decode("utf-8"))
    except UnicodeDecodeError:
        yield Reject(doc_id, source.name, "rejected", "invalid_utf8", snippet(data))


READERS = {"jsonl": read_jsonl, "json": read_jsonl, "text": read_text_file}


def read_file(url: str, source: SourceConfig) -> Iterator[Document | Reject]:
    fmt = detect_format(url, source)
    reader = READERS.get(fmt)
    if reader is None:
        raise UserError(f"source {source.name}: format {fmt!r} is not supported")
    with open_read(url) as f:
        yield from reader(f, url, source)


class _ReadFiles(beam.DoFn):
    def __init__(self, source: SourceConfig):
        self.source = source

    def process(self, url: str):
        for rec in read_file(url, self.source):
            if isinstance(rec, Reject):
                yield pvalue.TaggedOutput(REJECTS, rec)
            else:
                yield rec


class ReadSource(beam.PTransform):
    """Read one configured source: outputs main (Documents) and `rejects`."""

    def __init__(self, source: SourceConfig):
        super().__init__()
        self.source = source
        self.urls = expand_glob(source.input)
        if not self.urls:
            raise UserError(f"source {source.name}: no files match {source.input!r}")

    def expand(self, pbegin):
        return (
            pbegin
            | "ListFiles" >> beam.Create(self.urls)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFiles" >> beam.ParDo(_ReadFiles(self.source)).with_outputs(REJECTS, main="documents")
        )
