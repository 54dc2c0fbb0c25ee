"""Source readers: raw files (any fsspec URL / glob) -> Documents, or Rejects.

One reader per layout the real corpora ship in:

* JSONL (one object per line; CC-News news-please dumps, OpenWebText/Stories exports),
* JSON (news-please: one object per file, or a JSON array of objects),
* Parquet (``text``, ``title``, ``url``, ``domain``, ``date`` columns), read in record batches,
* tar archives of ``.txt`` members, nested too (OpenWebText: ``urlsf_subset*.xz`` are xz-compressed
  tars of documents, and the outer ``openwebtext.tar.xz`` holds those),
* plain text, one document per file or several separated by a delimiter line (Stories);
  UTF-16/32 text with a byte-order mark is re-encoded to UTF-8.

Compression follows the extension (.gz, .xz, .zst, .bz2). Everything streams: lines, array items
and archive members are read with a byte cap (``SourceConfig.max_record_bytes``), so a 200 MB
"document" costs a bounded buffer and ends as ``filtered/max_doc_bytes``; decompression is
bounded per file (``max_expansion_ratio``, ``max_decompressed_bytes``), so a bomb costs a bounded
amount of work and rejects the rest of its file.

Accounting contract: every record read gives exactly one Document or one Reject, and a file that
cannot be read (not a file, unreadable, truncated or corrupt compression, binary junk, empty,
over its budget) still gives one Reject for the part that could not be read, so nothing is lost
silently and nothing raises. Besides records, the reader emits per file how many records it
*read* (``read_counts``, counted by the framers before parsing): that is the build's input
count, checked against the outcomes by ``pipelines.accounting``.

Layout: ``streams`` (bytes: compression, budgets, encodings, line / array framing),
``readers`` (records: one framer and parse per format, the guarded driver ``read_stream``),
``listing`` (globs -> judged inputs); this module holds the Beam transform.

Invalid UTF-8 in the text is decoded with ``surrogateescape`` and judged by the cleaning stage,
which owns the ``invalid_utf8: reject | repair`` policy; metadata fields are repaired here.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Sequence

import apache_beam as beam
from apache_beam import pvalue

from pipelines import progress
from pipelines.metrics import counted
from pipelines.records import Reject, make_doc_id
from pipelines.sources.listing import Input, judge_urls, list_inputs, local_file_problem
from pipelines.sources.readers import (
    R_UNREADABLE,
    Record,
    Tally,
    detect_format,
    failure_reason,
    format_by_name,
    read_stream,
    record_from_object,
)
from pipelines.sources.streams import (
    Budget,
    RawCounter,
    decode,
    iter_json_array,
    iter_lines,
    safe_snippet,
    split_compression,
)
from schemas.config import SourceConfig
from schemas.errors import UserError
from storage import is_transient, open_read

__all__ = ["REJECTS", "READ_COUNTS", "ReadSource", "ReadSources", "Tally", "decode", "detect_format", "failure_reason",
           "format_by_name", "iter_json_array", "iter_lines", "read_file", "read_input", "read_stream",
           "record_from_object", "split_compression"]

REJECTS = "rejects"
READ_COUNTS = "read_counts"


def _reject(url: str, source: SourceConfig, reason: str, detail: str) -> Reject:
    return Reject(make_doc_id(source.name, f"{url}!error", 0), source.name, "rejected", reason, safe_snippet(detail))


def budget_for(source: SourceConfig) -> Budget:
    """A fresh decompression budget for one file of this source."""
    return Budget(source.max_expansion_ratio, source.max_decompressed_bytes)


def read_file(url: str, source: SourceConfig, tally: Tally | None = None) -> Iterator[Record]:
    """All records of one file (Documents and Rejects), streamed; `tally` counts what was read.

    Never raises on bad input: a path that is not a regular file, or that cannot be opened,
    gives one Reject (transient storage errors still raise, for the runner to retry).
    """
    tally = tally if tally is not None else Tally()
    fmt = detect_format(url, source)
    base, comp = split_compression(posixpath.basename(url))
    if fmt == "parquet" and comp is not None:
        tally.read += 1
        yield _reject(url, source, R_UNREADABLE, "compressed parquet files are not supported (parquet compresses internally)")
        return
    problem = local_file_problem(url)
    if problem is not None:
        tally.read += 1
        yield _reject(url, source, *problem)
        return
    try:
        f = open_read(url)
    except Exception as e:  # noqa: BLE001 - a file we cannot open is one rejected input
        if is_transient(e):
            raise
        tally.read += 1
        yield _reject(url, source, failure_reason(e, False), f"{type(e).__name__}: {e}")
        return
    budget = budget_for(source)
    with f:
        if fmt == "parquet":  # pyarrow needs the seekable file itself: its size is what was read
            size = getattr(f, "size", None)
            if not isinstance(size, int):
                size = f.seek(0, 2)
                f.seek(0)
            budget.raw = size
            yield from read_stream(f, url, source, source.max_record_bytes, fmt, comp, tally=tally, budget=budget)
        else:
            yield from read_stream(RawCounter(f, budget), url, source, source.max_record_bytes, fmt, comp,  # type: ignore[arg-type]
                                   tally=tally, budget=budget)


def read_input(entry: Input, source: SourceConfig, tally: Tally) -> Iterator[Record]:
    """Records of one listed input: a skipped one (with its reason) is one Reject."""
    url, skip = entry
    if skip is not None:
        tally.read += 1
        yield _reject(url, source, skip, url)
        return
    yield from read_file(url, source, tally)


class _ReadFiles(beam.DoFn):
    def __init__(self, source: SourceConfig, total_files: int | None = None):
        self.source = source
        self.total_files = total_files

    def process(self, entry: Input):
        tally = Tally()
        yield from self._records(entry, tally)
        # What this file contributed to the input count: records read, whatever they parsed to.
        yield pvalue.TaggedOutput(READ_COUNTS, (self.source.name, tally.read))
        progress.tick(f"read {self.source.name} files", total=self.total_files, unit="file")

    def _records(self, entry: Input, tally: Tally):
        for rec in read_input(entry, self.source, tally):
            yield counted("read", rec, "documents", REJECTS)


class ReadSource(beam.PTransform):
    """Read one configured source: outputs `documents` (main), `rejects` and `read_counts`
    (``(source, records read)`` per file: the input count of the accounting)."""

    def __init__(self, source: SourceConfig, urls: Sequence[str] | None = None):
        """urls: read exactly these files (e.g. one ingest batch) instead of expanding source.input."""
        super().__init__()
        self.source = source
        self.inputs = judge_urls(urls) if urls is not None else list_inputs(source.input)
        if urls is None and not self.inputs:
            raise UserError(f"source {source.name}: no files match {source.input!r}")

    @property
    def urls(self) -> list[str]:
        """The inputs that will be opened (skipped ones excluded)."""
        return [u for u, skip in self.inputs if skip is None]

    def expand(self, pbegin):
        return (
            pbegin
            | "ListFiles" >> beam.Create(self.inputs)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFiles" >> beam.ParDo(_ReadFiles(self.source, len(self.inputs))).with_outputs(
                REJECTS, READ_COUNTS, main="documents")
        )




class ReadSources(beam.PTransform):
    """Read every configured source: a ``pvalue.DoOutputsTuple``-like result with ``documents``,
    ``rejects`` and ``read_counts`` of all sources together (each source read by ``Read[name]``).

    files: read exactly these URLs per source name (an ingest batch) instead of each glob.
    """

    def __init__(self, sources: Sequence[SourceConfig], files: dict[str, list[str]] | None = None):
        super().__init__()
        # Listing (and its one-line errors) happens here, at construction, as ReadSource does.
        self.readers = [(src.name, ReadSource(src, None if files is None else files.get(src.name, [])))
                        for src in sources]

    def expand(self, pbegin):
        reads = [pbegin | f"Read[{name}]" >> reader for name, reader in self.readers]
        return _SourceOutputs(
            documents=[r.documents for r in reads] | "AllDocuments" >> beam.Flatten(),
            rejects=[r.rejects for r in reads] | "AllReadRejects" >> beam.Flatten(),
            read_counts=[r.read_counts for r in reads] | "AllReadCounts" >> beam.Flatten(),
        )


class _SourceOutputs(dict):
    """The three outputs of ReadSources, by attribute or by key (Beam accepts a dict of PCollections)."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None
