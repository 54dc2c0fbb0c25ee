"""``Deduplicate``: exact, near and repeated-span removal wired together, with the index."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from pipelines.dedupe.exact import ExactDedupe, ExactVerdicts, exact_entry
from pipelines.dedupe.index import IndexRow, WriteIndex, index_parts, index_row
from pipelines.dedupe.minhash import normalized_text_hash
from pipelines.dedupe.near import DOC_TAG, LSH_TAG, NearDedupe, SketchBatch, without_line_rules_text
from pipelines.dedupe.sketch import NEW, minhasher
from pipelines.dedupe.spans import SpanDedupe
from pipelines.records import Document, Duplicate
from schemas.config import DedupeConfig
from schemas.errors import UserError
from shardforge.storage import is_within

SIGNATURE_BATCH = 512  # documents the Sketch step hashes together (numpy work is per batch)

def target_key(d: Duplicate) -> tuple[bool, str]:
    """The document a duplicate points at, as the repoint joins key it: an indexed document (an earlier
    corpus's, never removed) apart from this build's document of the same id."""
    return d.dup_of_index, d.dup_of


def removed_key(d: Duplicate) -> tuple[bool, str]:
    """The key of the build's document a duplicate removes (``target_key`` of what points at it)."""
    return False, d.doc_id


def repointed(d: Duplicate, to: Duplicate) -> Duplicate:
    """``d`` pointed at what its removed target ``to`` points at (a similarity measured with the removed
    target is dropped)."""
    return dataclasses.replace(d, dup_of=to.dup_of, dup_of_index=to.dup_of_index, similarity=None)


def _repoint_to_kept(element: tuple[tuple[bool, str], dict[str, Any]]) -> Iterator[Duplicate]:
    """Duplicates of one document, re-pointed at its span target if it was emptied by spans."""
    _, g = element
    span = list(g["span"])
    for d in g["dup"]:
        yield d if not span else repointed(d, span[0])


def _drop_removed(element: tuple[str, dict[str, Any]]) -> Iterator[IndexRow]:
    _, g = element
    if not list(g["removed"]):
        yield from g["entry"]


def _no_row(_: Any) -> None:
    return None


def _verdict_outputs(doc: Document, row: IndexRow | None, exact: bool, near: Duplicate | None) -> Iterator[Any]:
    """What a document becomes once its verdicts are known, by the join or the lookup alike.

    An exact duplicate's record comes from the exact step: here it only leaves the corpus
    and the index. A near duplicate leaves them too and its record is emitted here (tagged
    ``duplicates``); any other document is kept (main) with its index entry (tagged ``index``).
    """
    if exact:
        return
    if near is not None:
        yield beam.pvalue.TaggedOutput("duplicates", near)
        return
    yield doc
    if row is not None:
        yield beam.pvalue.TaggedOutput("index", row)


def _split_final(element: tuple[str, dict[str, Any]]) -> Iterator[Any]:
    """Join a document (with its index entry, or None without an index) with its verdicts."""
    _, g = element
    docs, dups = list(g["doc"]), list(g["dup"])
    if docs:
        doc, row = docs[0]
        yield from _verdict_outputs(doc, row, any(True for _ in g.get("exact", ())), dups[0] if dups else None)


class _ApplyVerdicts(beam.DoFn):
    """``_split_final`` with the verdicts as side inputs (``one_machine``): each document, as the
    Sketch step keyed it, looked up among the exact duplicates' doc_ids and the near duplicates.

    The same outputs as the join: a kept document (main) and its index entry (tagged ``index``), or
    the near duplicate's record (tagged ``duplicates``), or nothing for an exact duplicate. The
    lookups are built once per side input value (a bundle's), not per document."""

    def __init__(self) -> None:
        self._seen: tuple[Any, Any] | None = None
        self._exact: frozenset[str] = frozenset()
        self._near: dict[str, Duplicate] = {}

    def process(self, element: tuple[str, tuple[Document, IndexRow | None]], exact_ids: Any = (),
                near: Any = ()) -> Iterator[Any]:
        if self._seen is None or self._seen[0] is not exact_ids or self._seen[1] is not near:
            self._seen = (exact_ids, near)  # held: the identity check stays valid while it is
            self._exact = frozenset(exact_ids)
            self._near = {d.doc_id: d for d in near}
        doc_id, (doc, row) = element
        yield from _verdict_outputs(doc, row, doc_id in self._exact, self._near.get(doc_id))


def _repoint_exact(element: tuple[tuple[bool, str], dict[str, Any]]) -> Iterator[Duplicate]:
    """Exact duplicates of one document, re-pointed at its near-duplicate target if it has one."""
    _, g = element
    near = list(g["near"])
    for d in g["exact"]:
        yield d if not near else repointed(d, near[0])


def _exact_only_row(d: Document) -> IndexRow:
    """The index entry of a document when near dedupe is off: its exact hash, no signature."""
    return (d.doc_id, d.source, normalized_text_hash(d.text), b"", b"", b"")


class SideInputVerdicts(beam.PTransform):
    """The keyed documents meet their verdicts through side inputs (the local runner's wiring): each one
    is looked up among the exact duplicates' doc_ids and the near duplicates (``_ApplyVerdicts``).
    Outputs ``kept`` (main), ``duplicates`` (the near duplicates' records) and ``index`` (the kept
    documents' index entries). One step: it fuses with the steps that route the kept documents."""

    def __init__(self, near: beam.PCollection, exact_ids: beam.PCollection | None) -> None:
        super().__init__()
        self.near, self.exact_ids = near, exact_ids

    def expand(self, keyed: beam.PCollection):
        verdicts = {"near": beam.pvalue.AsList(self.near)}
        if self.exact_ids is not None:
            verdicts["exact_ids"] = beam.pvalue.AsList(self.exact_ids)
        return keyed | beam.ParDo(_ApplyVerdicts(), **verdicts).with_outputs("duplicates", "index", main="kept")


class JoinedVerdicts(beam.PTransform):
    """The keyed documents meet their verdicts in one CoGroupByKey (a distributed runner's wiring: side
    inputs would send every worker every verdict). The same outputs as ``SideInputVerdicts``."""

    def __init__(self, near: beam.PCollection, exact: beam.PCollection | None) -> None:
        super().__init__()
        self.near, self.exact = near, exact

    def expand(self, keyed: beam.PCollection):
        groups = {"doc": keyed, "dup": self.near | "DupByID" >> beam.Map(lambda d: (d.doc_id, d))}
        if self.exact is not None:
            groups["exact"] = self.exact | "ExactByID" >> beam.Map(lambda d: (d.doc_id, None))
        return (groups
                | "Group" >> beam.CoGroupByKey()
                | "Split" >> beam.FlatMap(_split_final).with_outputs("duplicates", "index", main="kept"))


class RepointExact(beam.PTransform):
    """(exact duplicates, near duplicates) -> the exact duplicates, each pointed at the document that
    stays: an exact duplicate's kept twin may itself be removed as a near duplicate."""

    def expand(self, pcolls):
        exact, near = pcolls
        return ({"exact": exact | "ExactByTarget" >> beam.Map(lambda d: (target_key(d), d)),
                 "near": near | "NearByID" >> beam.Map(lambda d: (removed_key(d), d))}
                | "JoinChains" >> beam.CoGroupByKey()
                | "Repoint" >> beam.FlatMap(_repoint_exact))


class RepointToKept(beam.PTransform):
    """(earlier duplicates, span duplicates) -> the earlier duplicates, each pointed at the kept document
    its target points at when repeated spans emptied that target."""

    def expand(self, pcolls):
        earlier, span_dups = pcolls
        return ({"dup": earlier | "DupByTarget" >> beam.Map(lambda d: (target_key(d), d)),
                 "span": span_dups | "SpanByID" >> beam.Map(lambda d: (removed_key(d), d))}
                | "JoinSpanTargets" >> beam.CoGroupByKey()
                | "RepointSpan" >> beam.FlatMap(_repoint_to_kept))


class DropRemoved(beam.PTransform):
    """(index entries, span duplicates) -> the entries of the documents that stay: documents emptied by
    repeated spans leave the index; trimmed ones keep their untrimmed sketch (spans are within-batch)."""

    def expand(self, pcolls):
        entries, span_dups = pcolls
        return ({"entry": entries | "EntryByID" >> beam.Map(lambda row: (row[0], row)),
                 "removed": span_dups | "RemovedByID" >> beam.Map(lambda d: (d.doc_id, None))}
                | "JoinRemoved" >> beam.CoGroupByKey()
                | "DropRemoved" >> beam.FlatMap(_drop_removed))


class Deduplicate(beam.PTransform):
    """Exact + near-duplicate removal: ``{"kept": PCollection[Document], "duplicates": PCollection[Duplicate]}``.

    ``index_in``: URL of the signature index of an existing corpus (default
    ``cfg.index``); new documents matching it are duplicates of the old
    doc_ids, and old documents are never removed. ``index_out``: where to
    write the index of the result (this run's kept documents plus the old
    index), for the next incremental run.

    With ``cfg.repeated_spans``, ``SpanDedupe`` then runs on the kept
    documents: repeats of ``cfg.span_sentences``-sentence spans are cut, and
    documents left empty become ``Duplicate(kind="span")`` (within this batch;
    the index holds no spans).

    ``one_machine``: wired for the local runner (``pipelines.options.RunnerPlan``), with the same
    output. The documents meet their verdicts through side inputs (``SideInputVerdicts``) instead of a
    CoGroupByKey (``JoinedVerdicts``), whose grouping costs each document four coder passes there;
    and the near step's connected components run in one step (``ConnectedComponents``' ``in_memory``)
    instead of unrolled rounds of GroupByKeys. A distributed runner keeps both shuffles: its side
    inputs would send every worker every verdict.
    """

    def __init__(self, cfg: DedupeConfig, index_in: str | None = None, index_out: str | None = None,
                 index_root: str | None = None, one_machine: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.one_machine = one_machine
        self.index_in = index_in if index_in is not None else cfg.index
        self.index_out = index_out
        self.index_root = index_root
        if self.index_in and self.index_out and (is_within(self.index_out, self.index_in)
                                                 or is_within(self.index_in, self.index_out)):
            raise UserError("dedupe index_in and index_out must be separate folders (the new index lists the "
                            "old one's parts, which must stay as they are)")

    def expand(self, docs: beam.PCollection) -> dict[str, beam.PCollection]:
        cfg = self.cfg
        old_parts = index_parts(self.index_in, cfg) if self.index_in else []
        # (number, url): an indexed document's node names its part (``sketch.old_node``)
        part_urls = docs.pipeline | "IndexParts" >> beam.Create(list(enumerate(old_parts))) if self.index_in else None
        sketches = None
        if cfg.near:
            kept, dup_parts, new_index, sketches = self._near(docs, part_urls)
        elif cfg.exact:
            docs = docs | "DropLineRulesText" >> beam.Map(without_line_rules_text)
            ex = docs | "Exact" >> ExactDedupe(old_parts=part_urls, filter_mb=cfg.index_filter_mb)
            kept, dup_parts = ex["kept"], [ex["duplicates"]]
            new_index = kept | "ExactOnlyIndex" >> beam.Map(_exact_only_row)
        else:
            kept, dup_parts = docs | "DropLineRulesText" >> beam.Map(without_line_rules_text), []
            new_index = kept | "ExactOnlyIndex" >> beam.Map(_exact_only_row)
        if cfg.repeated_spans:
            spans = kept | "Spans" >> SpanDedupe(cfg.span_sentences)
            kept, span_dups = spans["kept"], spans["duplicates"]
            if dup_parts:
                earlier = dup_parts | "EarlierDuplicates" >> beam.Flatten()
                dup_parts = [(earlier, span_dups) | "RepointSpan" >> RepointToKept()]
            dup_parts.append(span_dups)
            if self.index_out:
                new_index = (new_index, span_dups) | "DropRemoved" >> DropRemoved()
        if self.index_out:
            _ = new_index | "WriteIndex" >> WriteIndex(self.index_out, cfg, old_parts, self.index_root,
                                                        sized_by=sketches)
        if dup_parts:
            duplicates = dup_parts | "AllDuplicates" >> beam.Flatten()
        else:
            duplicates = docs.pipeline | "NoDuplicates" >> beam.Create([])
        return {"kept": kept, "duplicates": duplicates}

    def _near(self, docs: beam.PCollection, part_urls: beam.PCollection | None):
        """The near step (with the exact one on sketches): every document is sketched, its exact hash
        coming with the sketch; the exact step groups (hash, doc_id, source) only, and the documents
        cross one join (or lookup) with both verdicts. Returns (kept, duplicate parts, index entries,
        sketches)."""
        cfg = self.cfg
        # Each document also leaves the Sketch step keyed for the verdicts, with its index entry:
        # one element a document carries there, not the document and its entry.
        sketched = docs | "Sketch" >> beam.ParDo(
            SketchBatch(minhasher(cfg), index_row if self.index_out else _no_row, SIGNATURE_BATCH)
        ).with_outputs(LSH_TAG, DOC_TAG, main="sketches")
        sketches = sketched.sketches
        exact = None
        if cfg.exact:
            exact = sketches | "ExactEntries" >> beam.Map(exact_entry) | "Exact" >> ExactVerdicts(part_urls, cfg.index_filter_mb)
        skip = None if exact is None else exact | "ExactNodes" >> beam.Map(lambda d: NEW + d.doc_id)
        near = sketches | "Near" >> NearDedupe(cfg, part_urls, buckets=sketched[LSH_TAG], skip=skip,
                                             components_in_memory=self.one_machine)
        if self.one_machine:
            ids = None if exact is None else exact | "ExactIDs" >> beam.Map(lambda d: d.doc_id)
            split = sketched[DOC_TAG] | "Split" >> SideInputVerdicts(near, ids)
        else:
            split = sketched[DOC_TAG] | "JoinVerdicts" >> JoinedVerdicts(near, exact)
        dup_parts = [split.duplicates]
        if exact is not None:
            dup_parts.insert(0, (exact, split.duplicates) | "Repoint" >> RepointExact())
        return split.kept, dup_parts, split.index, sketches
