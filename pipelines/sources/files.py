"""One raw file's records, streamed: the per-file driver of the readers (no Beam).

``read_file`` opens a file and hands its bytes to ``readers.read_stream``; ``read_input`` does the
same for a listed input, a skipped one becoming its one Reject. Never raises on bad input; a transient
storage error still raises, for the runner to retry the file.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from typing import BinaryIO

from pipelines.records import Reject, doc_id_at
from pipelines.sources.compression import Budget, RawCounter, split_compression
from pipelines.sources.listing import Input, local_file_problem, skip_detail
from pipelines.sources.naming import file_key
from pipelines.sources.parsing import R_UNREADABLE, Record, Tally
from pipelines.sources.readers import detect_format, failure_reason, read_stream
from pipelines.sources.streams import safe_snippet
from schemas.config import SourceConfig
from shardforge.storage import check_unreadable, is_transient, open_checked, open_read, redact_url


def _reject(url: str, source: SourceConfig, reason: str, detail: str) -> Reject:
    """The one Reject of a file that is not read at all."""
    return Reject(doc_id_at(file_key(source, f"{url}!error"), 0), source.name, "rejected", reason, safe_snippet(detail),
                  file=url, position="whole file")


def budget_for(source: SourceConfig) -> Budget:
    """A fresh decompression budget for one file of this source."""
    return Budget(source.max_expansion_ratio, source.max_decompressed_bytes)


def sniffed_columnar(f: BinaryIO) -> str | None:
    """"parquet" or "arrow" for a seekable file that starts and ends with Parquet's magic (``PAR1``) or the
    Arrow file format's (``ARROW1``), whatever its name (a Hugging Face hub cache's ``blobs/``, Spark's
    ``_common_metadata``); None for any other (text that starts with those letters too). Reads its first
    six and last bytes, then seeks back to the start (a fault here is left to the reader, which meets it
    again and counts it)."""
    try:
        if not f.seekable():
            return None
        head = f.read(6)
        fmt, magic = next(((fmt, magic) for fmt, magic in (("parquet", b"PAR1"), ("arrow", b"ARROW1"))
                           if head.startswith(magic)), (None, b""))
        if fmt is not None:  # the magic again at the end, after a footer's length (4 bytes) at least
            size = f.seek(0, 2)
            tail = b""
            if size >= 2 * len(magic) + 4:
                f.seek(size - len(magic))
                tail = f.read(len(magic))
            fmt = fmt if tail == magic else None
        f.seek(0)
    except Exception as e:  # noqa: BLE001 - re-raised when transient, else the reader's to count
        if is_transient(e):
            raise
        return None
    return fmt


def read_file(url: str, source: SourceConfig, tally: Tally | None = None,
              expect: str | None = None) -> Iterator[Record]:
    """All records of one file (Documents and Rejects), streamed; `tally` counts what was read.

    Never raises on bad input: a path that is not a regular file, or that cannot be opened,
    gives one Reject (transient storage errors still raise, for the runner to retry).
    expect: the content fingerprint the build's attempt tag was made from; the bytes read are
    checked against it once the file is read (``storage.InputChanged`` if it changed meanwhile).
    """
    tally = tally if tally is not None else Tally()
    fmt = detect_format(url, source)
    base, comp = split_compression(posixpath.basename(url))
    if fmt in ("parquet", "arrow") and comp is not None:
        tally.read += 1
        yield _reject(url, source, R_UNREADABLE, f"compressed {fmt} files are not supported ({fmt} compresses "
                                                 "internally)")
        return
    problem = local_file_problem(url)
    if problem is not None:
        tally.read += 1
        yield _reject(url, source, *problem)
        return
    try:
        f = open_read(url) if expect is None else open_checked(url, expect)
    except Exception as e:  # noqa: BLE001 - a file we cannot open is one rejected input
        if is_transient(e):
            raise
        if expect is not None:
            check_unreadable(url, expect, e)  # it was read when the build listed it: it changed
        tally.read += 1
        yield _reject(url, source, failure_reason(e, False), f"{type(e).__name__}: {e}")
        return
    budget = budget_for(source)
    with f:
        if fmt is None and comp is None:  # a name that says nothing: Parquet and Arrow files by their magic
            fmt = sniffed_columnar(f) or fmt
        if fmt in ("parquet", "arrow"):  # pyarrow needs the seekable file itself: its size is what was read
            size = getattr(f, "size", None)
            if not isinstance(size, int):
                size = f.seek(0, 2)
                f.seek(0)
            budget.raw = size
            yield from read_stream(f, url, source, source.max_record_bytes, fmt, comp, tally=tally, budget=budget)
        else:
            yield from read_stream(RawCounter(f, budget), url, source, source.max_record_bytes, fmt, comp,  # type: ignore[arg-type]
                                   tally=tally, budget=budget)
        if expect is not None:
            f.check()  # type: ignore[union-attr]


def read_input(entry: Input, source: SourceConfig, tally: Tally, expect: str | None = None) -> Iterator[Record]:
    """Records of one listed input: a skipped one (with its reason) is one Reject; ``expect``: see read_file."""
    url, skip = entry
    if skip is not None:
        tally.read += 1
        yield _reject(url, source, skip, redact_url(skip_detail(url, skip)))
        return
    yield from read_file(url, source, tally, expect)
