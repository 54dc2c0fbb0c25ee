"""The sources as Beam transforms: ``ReadSources`` (every configured source) and ``ReadSource`` (one).

Each file is one element, reshuffled so files spread over workers; its records come out as
``documents`` (main output) and ``rejects``, the number of records it read as ``read_counts``
(the accounting's input count, ``pipelines.report.accounting``), and as ``origins`` the paths its
doc ids name (``(path_key, (path, unit))``: the reject log's way from a doc id to a file and a place).
"""

from __future__ import annotations

from collections.abc import Sequence

import apache_beam as beam
from apache_beam import pvalue

from pipelines.localrunner import progress
from pipelines.metrics import counted
from pipelines.sources.files import read_input
from pipelines.sources.listing import Input, check_some_readable, judge_urls, list_inputs, no_match
from pipelines.sources.naming import file_key, pinned
from pipelines.sources.parsing import Tally
from schemas.config import SourceConfig
from shardforge.storage import check_listed

REJECTS = "rejects"
READ_COUNTS = "read_counts"
ORIGINS = "origins"
RECORDS_TICK = 1000  # records read between two ticks of the progress count (a tick takes a lock)


class _ReadFiles(beam.DoFn):
    def __init__(self, source: SourceConfig, total_files: int | None = None, expect: dict[str, str] | None = None):
        self.source = source
        self.total_files = total_files
        self.expect = expect or {}  # URL -> the content fingerprint the attempt tag was made from

    def process(self, entry: Input):
        tally = Tally()
        yield from self._records(entry, tally)
        # What this file contributed to the input count: records read, whatever they parsed to.
        yield pvalue.TaggedOutput(READ_COUNTS, (self.source.name, tally.read))
        for path, unit in sorted(tally.origins.items()):
            yield pvalue.TaggedOutput(ORIGINS, (file_key(self.source, path), (path, unit)))
        progress.tick(f"read {self.source.name} files", total=self.total_files, unit="file")

    def _records(self, entry: Input, tally: Tally):
        stage, n = f"read {self.source.name} records", 0
        for rec in read_input(entry, self.source, tally, self.expect.get(entry[0])):
            n += 1
            if n % RECORDS_TICK == 0:
                progress.tick(stage, RECORDS_TICK, unit="record")
            yield counted("read", rec, "documents", REJECTS)
        if n % RECORDS_TICK:
            progress.tick(stage, n % RECORDS_TICK, unit="record")


class ReadSource(beam.PTransform):
    """Read one configured source: outputs `documents` (main), `rejects` and `read_counts`
    (``(source, records read)`` per file: the input count of the accounting)."""

    def __init__(self, source: SourceConfig, urls: Sequence[str] | None = None,
                 expect: dict[str, str] | None = None):
        """urls: read exactly these files (e.g. one ingest batch) instead of expanding source.input.
        expect: URL -> content fingerprint the attempt tag was made from; every file read is checked
        against it (``storage.open_checked``), and the listing must name the same files."""
        super().__init__()
        # Workers name files relative to the input's folder (doc ids): a local one as this process resolves it.
        self.source = source.model_copy(update={"input": pinned(source.input)})
        self.inputs = (judge_urls(urls, source.input, source.follow_links) if urls is not None
                       else list_inputs(source.input, source.follow_links))
        if urls is None and not self.inputs:
            raise no_match(source.name, source.input)
        if urls is None:
            check_some_readable(source.name, source.input, self.inputs, source.follow_links)
        self.expect = expect
        if expect is not None:
            check_listed(source.name, [u for u, skip in self.inputs if skip is None], expect)

    @property
    def urls(self) -> list[str]:
        """The inputs that will be opened (skipped ones excluded)."""
        return [u for u, skip in self.inputs if skip is None]

    def expand(self, pbegin):
        return (
            pbegin
            | "ListFiles" >> beam.Create(self.inputs)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFiles" >> beam.ParDo(_ReadFiles(self.source, len(self.inputs), self.expect)).with_outputs(
                REJECTS, READ_COUNTS, ORIGINS, main="documents")
        )




class ReadSources(beam.PTransform):
    """Read every configured source: a ``pvalue.DoOutputsTuple``-like result with ``documents``,
    ``rejects`` and ``read_counts`` of all sources together (each source read by ``Read[name]``).

    files: read exactly these URLs per source name (an ingest batch) instead of each glob.
    """

    def __init__(self, sources: Sequence[SourceConfig], files: dict[str, list[str]] | None = None,
                 expect: dict[str, dict[str, str]] | None = None):
        """expect: per source name, URL -> content fingerprint (see ReadSource)."""
        super().__init__()
        # Listing (and its one-line errors) happens here, at construction, as ReadSource does.
        self.readers = [(src.name, ReadSource(src, None if files is None else files.get(src.name, []),
                                              None if expect is None else expect.get(src.name, {})))
                        for src in sources]

    def expand(self, pbegin):
        reads = [pbegin | f"Read[{name}]" >> reader for name, reader in self.readers]
        return _SourceOutputs(
            documents=[r.documents for r in reads] | "AllDocuments" >> beam.Flatten(),
            rejects=[r.rejects for r in reads] | "AllReadRejects" >> beam.Flatten(),
            read_counts=[r.read_counts for r in reads] | "AllReadCounts" >> beam.Flatten(),
            origins=[r.origins for r in reads] | "AllOrigins" >> beam.Flatten(),
        )


class _SourceOutputs(dict):
    """The four outputs of ReadSources, by attribute or by key (Beam accepts a dict of PCollections)."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None
