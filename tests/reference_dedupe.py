"""``Deduplicate`` as it was wired before exact dedupe ran on the sketches: the reference for the new wiring.

A frozen copy of ``pipelines/dedupe/deduplicate.py`` at 0f12feb (exact dedupe shuffles whole
documents by hash, then near dedupe runs on the exact-kept documents), kept only so that
tests/test_dedupe_wiring.py can prove the current wiring (exact verdicts from the sketches, one
join of the documents) removes the same documents with the same records and writes the same
index. It imports the package's steps (exact, near, spans, index); only the wiring is frozen.
Never imported by the package. Do not "fix" it.
"""

# ruff: noqa

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from pipelines.dedupe.exact import ExactDedupe
from pipelines.dedupe.index import IndexRow, WriteIndex, index_parts, index_row
from pipelines.dedupe.near import LSH_TAG, NearDedupe, SketchBatch
from pipelines.dedupe.sketch import minhasher
from pipelines.dedupe.spans import SpanDedupe
from pipelines.dedupe.minhash import (
    normalized_text_hash,
)
from pipelines.records import Document, Duplicate
from schemas.config import DedupeConfig
from schemas.errors import UserError
from shardforge.storage import (
    is_within,
)

SIGNATURE_BATCH = 512  # documents sketched together (numpy work is per batch)

def _repoint_to_kept(element: tuple[str, dict[str, Any]]) -> Iterator[Duplicate]:
    """Duplicates of one document, re-pointed at its span target if it was emptied by spans."""
    _, g = element
    span = list(g["span"])
    for d in g["dup"]:
        yield d if not span else Duplicate(d.doc_id, d.source, span[0].dup_of, d.kind)


def _drop_removed(element: tuple[str, dict[str, Any]]) -> Iterator[IndexRow]:
    _, g = element
    if not list(g["removed"]):
        yield from g["entry"]



def _split_final(element: tuple[str, dict[str, Any]]) -> Iterator[Any]:
    """Join a document with its near-duplicate verdict (and its sketch, for the index)."""
    _, g = element
    docs, dups, sk = list(g["doc"]), list(g["dup"]), list(g.get("sketch", ()))
    if not docs:
        return
    if dups:
        yield beam.pvalue.TaggedOutput("duplicates", dups[0])
        return
    yield docs[0]
    if sk:
        yield beam.pvalue.TaggedOutput("index", sk[0])


def _repoint_exact(element: tuple[str, dict[str, Any]]) -> Iterator[Duplicate]:
    """Exact duplicates of one document, re-pointed at its near-duplicate target if it has one."""
    _, g = element
    near = list(g["near"])
    for d in g["exact"]:
        yield d if not near else Duplicate(d.doc_id, d.source, near[0].dup_of, d.kind)


def _exact_only_row(d: Document) -> IndexRow:
    """The index entry of a document when near dedupe is off: its exact hash, no signature."""
    return (d.doc_id, d.source, normalized_text_hash(d.text), b"", b"", b"")


class ReferenceDeduplicate(beam.PTransform):
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
    """

    def __init__(self, cfg: DedupeConfig, index_in: str | None = None, index_out: str | None = None,
                 index_root: str | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.index_in = index_in if index_in is not None else cfg.index
        self.index_out = index_out
        self.index_root = index_root
        if self.index_in and self.index_out and (is_within(self.index_out, self.index_in)
                                                 or is_within(self.index_in, self.index_out)):
            raise UserError("dedupe index_in and index_out must be separate folders (the new index lists the "
                            "old one's parts, which must stay as they are)")

    def expand(self, docs: beam.PCollection) -> dict[str, beam.PCollection]:
        cfg = self.cfg
        p = docs.pipeline
        old_parts: list[str] = []
        part_urls = None
        if self.index_in:
            old_parts = index_parts(self.index_in, cfg)
            part_urls = p | "IndexParts" >> beam.Create(list(enumerate(old_parts)))  # (number, url)

        dup_parts: list[beam.PCollection] = []
        kept = docs
        if cfg.exact:
            ex = kept | "Exact" >> ExactDedupe(old_parts=part_urls, filter_mb=cfg.index_filter_mb)
            kept = ex["kept"]
            dup_parts.append(ex["duplicates"])

        sketches = None
        if cfg.near:
            sketched = (
                kept
                # (the old wiring batched with BatchElements; SketchBatch now batches by itself)
                | "Sketch" >> beam.ParDo(SketchBatch(minhasher(cfg), None, SIGNATURE_BATCH)
                                         ).with_outputs(LSH_TAG, main="sketches")
            )
            sketches = sketched.sketches
            near = sketches | "Near" >> NearDedupe(cfg, part_urls, buckets=sketched[LSH_TAG])
            groups = {
                "doc": kept | "DocByID" >> beam.Map(lambda d: (d.doc_id, d)),
                "dup": near | "DupByID" >> beam.Map(lambda d: (d.doc_id, d)),
            }
            if self.index_out:
                groups["sketch"] = sketches | "IndexRowByID" >> beam.Map(lambda s: (s.doc_id, index_row(s)))
            split = (
                groups
                | "JoinVerdicts" >> beam.CoGroupByKey()
                | "Split" >> beam.FlatMap(_split_final).with_outputs("duplicates", "index", main="kept")
            )
            kept = split.kept
            if dup_parts:
                # An exact duplicate's kept twin may be removed now as a near
                # duplicate: point it at the document that stays.
                dup_parts = [
                    {"exact": dup_parts[0] | "ExactByTarget" >> beam.Map(lambda d: (d.dup_of, d)),
                     "near": split.duplicates | "NearByID" >> beam.Map(lambda d: (d.doc_id, d))}
                    | "JoinChains" >> beam.CoGroupByKey()
                    | "Repoint" >> beam.FlatMap(_repoint_exact)
                ]
            dup_parts.append(split.duplicates)
            new_index = split.index
        else:
            new_index = kept | "ExactOnlyIndex" >> beam.Map(_exact_only_row)

        if cfg.repeated_spans:
            spans = kept | "Spans" >> SpanDedupe(cfg.span_sentences)
            kept, span_dups = spans["kept"], spans["duplicates"]
            if dup_parts:
                # A kept document that spans then emptied can be the target of exact
                # or near duplicates: point them at the kept document it points at.
                earlier = dup_parts | "EarlierDuplicates" >> beam.Flatten()
                dup_parts = [
                    {"dup": earlier | "DupByTarget" >> beam.Map(lambda d: (d.dup_of, d)),
                     "span": span_dups | "SpanByID" >> beam.Map(lambda d: (d.doc_id, d))}
                    | "JoinSpanTargets" >> beam.CoGroupByKey()
                    | "RepointSpan" >> beam.FlatMap(_repoint_to_kept)
                ]
            dup_parts.append(span_dups)
            if self.index_out:
                # Emptied documents leave the corpus, so they leave the index; trimmed
                # ones stay with their untrimmed sketch (spans are within-batch only).
                new_index = (
                    {"entry": new_index | "EntryByID" >> beam.Map(lambda row: (row[0], row)),
                     "removed": span_dups | "RemovedByID" >> beam.Map(lambda d: (d.doc_id, None))}
                    | "JoinRemoved" >> beam.CoGroupByKey()
                    | "DropRemoved" >> beam.FlatMap(_drop_removed)
                )

        if self.index_out:
            _ = new_index | "WriteIndex" >> WriteIndex(self.index_out, cfg, old_parts, self.index_root)

        if dup_parts:
            duplicates = dup_parts | "AllDuplicates" >> beam.Flatten()
        else:
            duplicates = p | "NoDuplicates" >> beam.Create([])
        return {"kept": kept, "duplicates": duplicates}
