"""The report's summaries, combined inside the pipeline: each a small accumulator, so no stage ever
collects documents.

* ``LengthHistogram`` / ``LengthsAndWords``: document lengths over fixed log-scale bins of word counts
  (``length_bin``, ``bin_edges``), per source and overall (``ALL``), and words per source;
* ``RejectExamples``: the few examples per reason of the records that left the corpus;
* ``TokenCounts``: the Tokenize step's documents, tokens and ``<unk>`` per source;
* ``PiiCounts``: the PII the clean step replaced, per source and kind, with examples;
* ``DedupeStats``: duplicate cluster sizes and the near duplicates' similarity histogram;
* ``packed_lengths``: the packing plans' sequence lengths per split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import apache_beam as beam

from pipelines.records import Document, Duplicate, Reject, count_words, reason_key

EXAMPLES_PER_REASON = 3
SIMILARITY_BINS = 20  # [0, 0.05), [0.05, 0.1), ... [0.95, 1.0]
ALL = "(all)"  # the key of every source together (histograms, rule counts, packing)

# Bin 0 holds empty documents; bin k >= 1 holds [10**((k-1)/BINS_PER_DECADE), 10**(k/BINS_PER_DECADE)) words.
# 2.3 % wide: fine enough for the report's chart to choose its bars from the data (pipelines.report.plots).
BINS_PER_DECADE = 100
DECADES = 7  # up to 10 million words; longer documents land in the last bin
NUM_BINS = 1 + BINS_PER_DECADE * DECADES


def bin_edges() -> list[float]:
    """Lower edges of the bins (words): 0, then 1, 10**0.25, ... (the last bin is open-ended)."""
    return [0.0] + [10 ** ((k - 1) / BINS_PER_DECADE) for k in range(1, NUM_BINS)]


def length_bin(words: int) -> int:
    """The histogram bin of a document with `words` words."""
    if words <= 0:
        return 0
    k = int(math.floor(math.log10(words) * BINS_PER_DECADE + 1e-9)) + 1
    return min(k, NUM_BINS - 1)


def words_of_document(doc: Document) -> int:
    """``count_words(doc.text)``: counted by the clean stage already for a cleaned document."""
    return doc.words if doc.words is not None else count_words(doc.text)


class LengthHistogram(beam.CombineFn):
    """``(source, words)`` per document -> {source: counts per length bin}, plus an ALL entry;
    accumulators merge by addition."""

    def create_accumulator(self) -> dict[str, list[int]]:
        return {}

    def add_input(self, acc: dict[str, list[int]], source_words: tuple[str, int]) -> dict[str, list[int]]:
        return self.add_length(acc, *source_words)

    @staticmethod
    def add_length(acc: dict[str, list[int]], source: str, words: int) -> dict[str, list[int]]:
        b = length_bin(words)
        for key in (source, ALL):
            counts = acc.get(key)
            if counts is None:
                counts = acc[key] = [0] * NUM_BINS
            counts[b] += 1
        return acc

    def merge_accumulators(self, accs: Iterable[dict[str, list[int]]]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for acc in accs:
            for key, counts in acc.items():
                mine = out.get(key)
                if mine is None:
                    out[key] = list(counts)
                else:
                    for i, c in enumerate(counts):
                        mine[i] += c
        return out

    def extract_output(self, acc: dict[str, list[int]]) -> dict[str, list[int]]:
        return dict(sorted(acc.items()))


def _merge_dicts(accs: Iterable[dict[str, Any]], merge) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for acc in accs:
        for k, v in acc.items():
            out[k] = merge(out[k], v) if k in out else v
    return out


def _add_counts(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in sorted(set(a) | set(b))}


def example_of(r: Reject | Duplicate) -> dict[str, Any]:
    """What the report shows of one record that left the corpus."""
    ex: dict[str, Any] = {"doc_id": r.doc_id, "source": r.source}
    if isinstance(r, Duplicate):
        ex["dup_of"] = r.dup_of
        if r.similarity is not None:
            ex["similarity"] = r.similarity
        if r.dup_of_index:
            ex["dup_of_index"] = True
    else:
        ex["snippet"] = r.snippet
        if r.language is not None:
            ex["language"] = r.language
    return ex


class RejectExamples(beam.CombineFn):
    """Reject log -> {bucket:reason: the EXAMPLES_PER_REASON examples of smallest doc_id}.

    Smallest doc_id, not first seen: the same build gives the same examples on any runner.
    """

    def __init__(self, k: int = EXAMPLES_PER_REASON):
        self.k = k

    def create_accumulator(self) -> dict[str, list[dict[str, Any]]]:
        return {}

    def _keep(self, examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(examples, key=lambda e: e["doc_id"])[: self.k]

    def add_input(self, acc, r):
        key = reason_key(r)
        acc[key] = self._keep(acc.get(key, []) + [example_of(r)])
        return acc

    def merge_accumulators(self, accs):
        return _merge_dicts(accs, lambda a, b: self._keep(a + b))

    def extract_output(self, acc):
        return dict(sorted(acc.items()))


class TokenCounts(beam.CombineFn):
    """The Tokenize step's per-batch counts (``Tokenize.counts``: ``{source: (documents, tokens, unk)}``)
    -> ``{source: {documents, tokens, unk}}`` (document tokens, before packing)."""

    def create_accumulator(self) -> dict[str, dict[str, int]]:
        return {}

    def add_input(self, acc, batch: dict[str, tuple[int, int, int]]):
        for source, (documents, tokens, unk) in batch.items():
            c = acc.setdefault(source, {"documents": 0, "tokens": 0, "unk": 0})
            c["documents"] += documents
            c["tokens"] += tokens
            c["unk"] += unk
        return acc

    def merge_accumulators(self, accs):
        return _merge_dicts(accs, _add_counts)

    def extract_output(self, acc):
        return dict(sorted(acc.items()))


class PiiCounts(beam.CombineFn):
    """The clean step's per-batch PII summaries (``pipelines.clean.pii.tally``) -> ``{"counts": {source:
    {kind: {"replaced", "documents"}}}, "examples": {kind: [{doc_id, source, context}]}}``, the
    EXAMPLES_PER_REASON examples of smallest doc_id per kind (the same on any runner)."""

    def create_accumulator(self) -> dict[str, Any]:
        return {"counts": {}, "examples": {}}

    def add_input(self, acc, batch: dict[str, Any]):
        for source, kinds in batch["counts"].items():
            mine = acc["counts"].setdefault(source, {})
            for kind, (replaced, documents) in kinds.items():
                c = mine.setdefault(kind, [0, 0])
                c[0] += replaced
                c[1] += documents
        for kind, examples in batch["examples"].items():
            acc["examples"][kind] = sorted(acc["examples"].get(kind, []) + examples)[:EXAMPLES_PER_REASON]
        return acc

    def merge_accumulators(self, accs):
        out = self.create_accumulator()
        for acc in accs:
            self.add_input(out, acc)
        return out

    def extract_output(self, acc):
        counts = {source: {kind: {"replaced": c[0], "documents": c[1]} for kind, c in sorted(kinds.items())}
                  for source, kinds in sorted(acc["counts"].items())}
        examples = {kind: [{"doc_id": d, "source": s, "context": c} for d, s, c in ex]
                    for kind, ex in sorted(acc["examples"].items())}
        return {"counts": counts, "examples": examples}


class WordCounts(beam.CombineFn):
    """Documents -> {source: whitespace-separated words} (the unit of the length histograms)."""

    def create_accumulator(self) -> dict[str, int]:
        return {}

    def add_input(self, acc, doc: Document):
        acc[doc.source] = acc.get(doc.source, 0) + count_words(doc.text)
        return acc

    def merge_accumulators(self, accs):
        return _merge_dicts(accs, lambda a, b: a + b)

    def extract_output(self, acc):
        return dict(sorted(acc.items()))


class LengthsAndWords(beam.CombineFn):
    """Documents -> (``LengthHistogram``'s output, ``WordCounts``'s output), splitting each text once."""

    def __init__(self) -> None:
        self.lengths, self.words = LengthHistogram(), WordCounts()

    def create_accumulator(self) -> tuple[dict[str, list[int]], dict[str, int]]:
        return {}, {}

    def add_input(self, acc, doc: Document):
        n = words_of_document(doc)
        LengthHistogram.add_length(acc[0], doc.source, n)
        acc[1][doc.source] = acc[1].get(doc.source, 0) + n
        return acc

    def merge_accumulators(self, accs):
        accs = list(accs)
        return (self.lengths.merge_accumulators(a[0] for a in accs),
                self.words.merge_accumulators(a[1] for a in accs))

    def extract_output(self, acc):
        return self.lengths.extract_output(acc[0]), self.words.extract_output(acc[1])


def similarity_bin(sim: float) -> int:
    return min(SIMILARITY_BINS - 1, max(0, int(math.floor(sim * SIMILARITY_BINS + 1e-9))))


class SimilarityHistogram(beam.CombineFn):
    """Near duplicates -> counts per similarity bin (the verified Jaccard with the kept document)."""

    def create_accumulator(self) -> list[int]:
        return [0] * SIMILARITY_BINS

    def add_input(self, acc, d: Duplicate):
        if d.similarity is not None:
            acc[similarity_bin(d.similarity)] += 1
        return acc

    def merge_accumulators(self, accs):
        out = [0] * SIMILARITY_BINS
        for acc in accs:
            out = [a + b for a, b in zip(out, acc, strict=True)]
        return out

    def extract_output(self, acc):
        return acc


class DedupeStats(beam.PTransform):
    """Duplicates -> {"cluster_sizes": {size: clusters}, "similarity": [counts per bin]}.

    A cluster is one kept document and the duplicates that point at it (``dup_of``), so its
    size is removed + 1; a kept document with no duplicate is not a cluster.
    """

    def expand(self, duplicates):
        sizes = (
            duplicates
            | "ByTarget" >> beam.Map(lambda d: ((d.dup_of_index, d.dup_of), 1))
            | "Removed" >> beam.CombinePerKey(sum)
            | "Size" >> beam.Map(lambda kv: (str(kv[1] + 1), 1))
            | "Clusters" >> beam.CombinePerKey(sum)
            | "SizeList" >> beam.combiners.ToList()
        )
        sims = (duplicates | "Near" >> beam.Filter(lambda d: d.kind == "near")
                | "Similarity" >> beam.CombineGlobally(SimilarityHistogram()))
        return sizes | "DedupeStats" >> beam.Map(
            lambda s, h: {"cluster_sizes": dict(sorted(s, key=lambda kv: int(kv[0]))), "similarity": h},
            beam.pvalue.AsSingleton(sims))


def packed_lengths(plans: list[tuple[Any, dict[str, Any]]]) -> dict[str, dict[str, int]]:
    """Packing plans (``pipelines.corpus.shards``) -> {split: {length: sequences}} (lengths as strings)."""
    out: dict[str, dict[int, int]] = {}
    for key, plan in plans:
        mine = out.setdefault(key[0], {})
        for n, c in plan.get("seq_lengths", {}).items():
            mine[int(n)] = mine.get(int(n), 0) + c
    return {split: {str(n): c for n, c in sorted(d.items())} for split, d in sorted(out.items())}
