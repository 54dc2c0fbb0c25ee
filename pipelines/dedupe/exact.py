"""Exact duplicates: documents grouped by the hash of their normalized text."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.dedupe.index import IndexLookup, KeyFilter, filter_probe, index_exact_matches
from pipelines.dedupe.minhash import (
    normalized_text_hash,
)
from pipelines.dedupe.sketch import COUNTERS, Sketch
from pipelines.records import Document, Duplicate


def resolve_exact_group(docs: Iterable[Document], old_ids: Iterable[str] = ()) -> Iterator[Document | Duplicate]:
    """One exact-hash group -> the kept document (smallest doc_id) and Duplicates of it.

    If the group matches documents of an existing corpus (``old_ids``), every
    new document is a duplicate of the smallest old doc_id, even one with that
    very doc_id (the same record read again: it is in the old corpus already).
    Iterates ``docs`` twice (Beam's grouped iterables allow it) so only one
    document is held.
    """
    target = min(old_ids, default=None)
    old = target is not None
    if target is None:
        keep: Document | None = None
        for d in docs:
            if keep is None or d.doc_id < keep.doc_id:
                keep = d
        if keep is None:
            return
        yield keep
        target = keep.doc_id
    for d in docs:
        if old or d.doc_id != target:
            yield Duplicate(doc_id=d.doc_id, source=d.source, dup_of=target, kind="exact", dup_of_index=old)


class _ResolveExact(beam.DoFn):
    def __init__(self) -> None:
        self.dups = Metrics.counter(COUNTERS, "exact_duplicates")

    def process(self, element: tuple[str, dict[str, Any]]) -> Iterator[Any]:
        _, groups = element
        for out in resolve_exact_group(groups["new"], groups.get("old", ())):
            if isinstance(out, Duplicate):
                self.dups.inc()
                yield beam.pvalue.TaggedOutput("duplicates", out)
            else:
                yield out


def _old_exact_hashes(old_parts: beam.PCollection, new_hashes: beam.PCollection,
                      filter_mb: float | None) -> beam.PCollection:
    """(exact_hash, old doc_id) of the index entries whose hash occurs among ``new_hashes`` (and the few a
    filter of them lets through: the join by hash that follows drops those)."""
    new_filter = new_hashes | "NewHashFilter" >> KeyFilter(filter_mb, hashes=True)
    return old_parts | "OldHashes" >> beam.ParDo(
        IndexLookup("index_exact_entries_read", filter_probe, index_exact_matches),
        beam.pvalue.AsSingleton(new_filter, default_value=None))


class ExactDedupe(beam.PTransform):
    """Exact duplicates by normalized-text hash, optionally against an old corpus's hashes.

    ``old_hashes``: PCollection[(exact_hash, doc_id)] of an old corpus, or
    ``old_parts``: a PCollection of the signature index's parts, ``(number, url)``, from which only
    the entries whose hash occurs among this run's documents are read, give or take the few that a
    filter of the hashes lets through and the join drops (so the old corpus never passes through the
    shuffle, whatever its size). ``filter_mb``: the most that filter may take
    (``dedupe.index_filter_mb``; None: sized for the hashes alone)."""

    def __init__(self, old_hashes: beam.PCollection | None = None, old_parts: beam.PCollection | None = None,
                 filter_mb: float | None = None) -> None:
        super().__init__()
        if old_hashes is not None and old_parts is not None:
            raise ValueError("ExactDedupe: give old_hashes or old_parts, not both")
        self.old_hashes = old_hashes
        self.old_parts = old_parts
        self.filter_mb = filter_mb

    def expand(self, docs: beam.PCollection) -> dict[str, beam.PCollection]:
        keyed = docs | "KeyByHash" >> beam.Map(lambda d: (normalized_text_hash(d.text), d))
        groups: dict[str, beam.PCollection] = {"new": keyed}
        old = self.old_hashes
        if self.old_parts is not None:
            old = _old_exact_hashes(self.old_parts, keyed | "NewHashes" >> beam.Keys(), self.filter_mb)
        if old is not None:
            groups["old"] = old
        res = (
            groups
            | "Group" >> beam.CoGroupByKey()
            # Hashes seen only in the old corpus have no new documents: nothing is emitted.
            | "Resolve" >> beam.ParDo(_ResolveExact()).with_outputs("duplicates", main="kept")
        )
        return {"kept": res.kept, "duplicates": res.duplicates}


class _Member(NamedTuple):
    """A document of an exact-hash group as ``resolve_exact_group`` reads it (never shuffled)."""

    doc_id: str
    source: str


def exact_entry(s: Sketch) -> tuple[str, tuple[str, str]]:
    """What the exact step needs of a sketched document: (its exact hash, (doc_id, source))."""
    return s.exact_hash, (s.doc_id, s.source)


def exact_verdicts(members: Iterable[tuple[str, str]], old_ids: Iterable[str] = ()) -> Iterator[Duplicate]:
    """The Duplicates ``resolve_exact_group`` makes of one group of (doc_id, source) entries."""
    group = [_Member(*m) for m in members]
    for out in resolve_exact_group(group, old_ids):
        if isinstance(out, Duplicate):
            yield out


class _ExactVerdicts(beam.DoFn):
    def __init__(self) -> None:
        self.dups = Metrics.counter(COUNTERS, "exact_duplicates")

    def process(self, element: tuple[str, dict[str, Any] | Iterable[tuple[str, str]]]) -> Iterator[Duplicate]:
        _, groups = element  # a CoGroupByKey's {"new", "old"}, or a GroupByKey's new entries alone
        new, old = (groups["new"], groups.get("old", ())) if isinstance(groups, dict) else (groups, ())
        for d in exact_verdicts(new, old):
            self.dups.inc()
            yield d


class ExactVerdicts(beam.PTransform):
    """Exact duplicates from ``exact_entry`` records: PCollection[Duplicate], the documents never shuffled.

    The same verdicts as ``ExactDedupe`` (``resolve_exact_group``: the smallest doc_id of a hash
    stays, or every new document is a duplicate of the smallest old doc_id matching it), grouped on
    (hash, doc_id, source) tuples instead of whole documents. ``Deduplicate`` uses it when near
    dedupe runs: the hash comes with each document's sketch, and the documents join their verdicts
    once, with the near-duplicate ones. ``old_parts``: as in ``ExactDedupe``.
    """

    def __init__(self, old_parts: beam.PCollection | None = None, filter_mb: float | None = None) -> None:
        super().__init__()
        self.old_parts = old_parts
        self.filter_mb = filter_mb

    def expand(self, entries: beam.PCollection) -> beam.PCollection:
        if self.old_parts is None:
            # Nothing to join: a GroupByKey of the entries (a CoGroupByKey of one input tags, flattens
            # and regroups every entry, ~4 steps per document for nothing).
            return entries | "Group" >> beam.GroupByKey() | "Resolve" >> beam.ParDo(_ExactVerdicts())
        groups: dict[str, beam.PCollection] = {"new": entries}
        groups["old"] = _old_exact_hashes(self.old_parts, entries | "NewHashes" >> beam.Keys(), self.filter_mb)
        return groups | "Group" >> beam.CoGroupByKey() | "Resolve" >> beam.ParDo(_ExactVerdicts())
