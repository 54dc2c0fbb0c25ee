"""Source readers: raw files (any fsspec URL / glob) -> Documents, or Rejects.

One reader per layout the real corpora ship in:

* JSONL (one object per line; CC-News news-please dumps, OpenWebText/Stories exports),
* JSON (news-please: one object per file, or a JSON array of objects),
* Parquet (``text``, ``title``, ``url``, ``domain``, ``date`` columns), read in record batches,
* Arrow IPC (a Hugging Face dataset on disk; Feather v2), read as Parquet is,
* tar archives of ``.txt`` members, nested too (OpenWebText: ``urlsf_subset*.xz`` are xz-compressed
  tars of documents, and the outer ``openwebtext.tar.xz`` holds those),
* Wikipedia: MediaWiki XML dumps (each article's prose, BERT's text passages) and WikiExtractor's
  ``<doc>`` files, recognised by their content,
* WET (Common Crawl's extracted text: ``*.warc.wet.gz``), one document per conversion record,
* plain text, one document per file or several separated by a delimiter line (Stories);
  UTF-16/32 text with a byte-order mark, and text in the source's ``encoding``, is re-encoded to UTF-8.

Compression follows the extension (.gz, .xz, .zst, .bz2). Everything streams: lines, array items
and archive members are read with a byte cap (``SourceConfig.max_record_bytes``), so a 200 MB
"document" costs a bounded buffer and ends as ``filtered/max_doc_bytes``; decompression is
bounded per file (``max_expansion_ratio``, ``max_decompressed_bytes``), so a bomb costs a bounded
amount of work and rejects the rest of its file.

Accounting contract: every record read gives exactly one Document or one Reject, and a file that
cannot be read (not a file, a link out of the listed folder, unreadable, truncated or corrupt
compression, binary junk, empty, over its budget) still gives one Reject for the part that could
not be read, after every record that decoded before it, so nothing is lost silently and nothing
raises. Besides records, the reader emits per file how many records it *read* (``read_counts``,
counted by the framers before parsing): that is the build's input count, checked against the
outcomes by ``pipelines.report.accounting``; and the paths its doc ids name (``origins``), so
every reject-log entry can name its file and its place in it.

Layout: ``compression`` (bytes: decompression that keeps what decodes before a fault, budgets),
``streams`` (bytes: encodings, binary sniffing, line / array framing),
``parsing`` (one record: the reasons, the frame and tally, one parse per record kind),
``readers`` (records: one framer per format, the guarded driver ``read_stream``),
``files`` (one file's records: ``read_file``), ``listing`` (globs -> judged inputs), ``naming`` (the
name a file's doc ids hash: its path under the input's folder), ``rawfiles``
(the input files of a versioned build, with their content fingerprints) and ``transforms`` (the
Beam transforms ``ReadSource`` / ``ReadSources``).

Everything but ``transforms`` is plain Python: a batch's process unpickles ``rawfiles.RawFile`` before
it sets up its allocator, so this package loads Beam only when ``ReadSources`` is first used. Imports
the records, the metrics, the local runner's progress bars, storage and the contract.

Invalid UTF-8 in the text is decoded with ``surrogateescape`` and judged by the cleaning stage,
which owns the ``invalid_utf8: reject | repair`` policy; metadata fields are repaired here.
"""

from typing import TYPE_CHECKING, Any

from pipelines.sources.compression import split_compression
from pipelines.sources.files import read_file, read_input

if TYPE_CHECKING:
    from pipelines.sources.transforms import ReadSource, ReadSources

__all__ = ["ReadSource", "ReadSources", "read_file", "read_input", "split_compression"]


def __getattr__(name: str) -> Any:
    if name == "ReadSources":
        from pipelines.sources.transforms import ReadSources

        return ReadSources
    if name == "ReadSource":
        from pipelines.sources.transforms import ReadSource

        return ReadSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
