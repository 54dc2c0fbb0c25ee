"""Benchmark decontamination: documents that share a word n-gram with evaluation sets leave the corpus.

``--decontaminate PATH`` (``DecontaminateConfig``): JSONL, JSON, Parquet or text files of evaluation sets, any
fsspec URL or glob. A document sharing a word n-gram (13 words by default, as GPT-3 did) with any of
their texts is removed as ``Reject(filtered, "decontaminated")`` (its snippet: the first overlapping
words), or with ``mode: spans`` only the overlapping words are cut out (GPT-3's and lm-eval's
approach, without their 200-character margin): a document cut in more than ``max_spans`` places, or
left with fewer words than an n-gram, is removed whole. Words are ``\\w+`` runs (apostrophes inside a
word dropped), lower-cased (NFKC for non-ASCII words), on NFC text on both sides, so case,
punctuation and spacing do not hide an overlap. A JSON record is one text (its string values, or
``fields``, joined: n-grams may span a question and its answer); a text file's paragraphs
(blank-line separated) are texts. A text shorter than an n-gram cannot match and is counted as
short; a JSON line that does not parse is counted as bad. The files, the hashes and the filter are
``pipelines.dedupe.evalsets`` (no Beam); this module is the stage.

How it scales (docs/dedupe.md, "Decontamination"): every n-gram is a 64-bit hash (blake2b words,
a polynomial over the n words, a 64-bit mixer). The evaluation n-grams make two things: a Bloom
filter of at most ``filter_mb`` (sized from the files' bytes), the only side input (every worker
holds it: bounded whatever the evaluation sets' size), which every document's n-grams are tested
against in memory, a batch of documents at a time; and an index hash-partitioned by the hashes' top
bits into partitions of ~2**18 hashes each. Documents with a filter hit (the contaminated ones, and
the filter's false positives) send their hit hashes, split by partition, to a ``GroupByKey`` on the
partition with the index: one partition's evaluation hashes are held, the candidates' streamed past
them, exact matches only (a set bigger than the filter holds makes more documents candidates: more
work, never a wrong removal). The candidates then meet their matches by doc id. Removed documents
are counted as ``filtered: decontaminated`` in the accounting; the report's ``decontamination``
section names each benchmark file with its counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam import pvalue

from pipelines.dedupe.bloom import Bloom
from pipelines.dedupe.evalsets import (
    WORD,
    EvalFile,
    batch_ngram_hashes,
    eval_files,
    eval_text,
    expected_words,
    filter_shape,
    ngram_hashes,
    overlap_spans,
    readable_texts,
    split_parts,
    text_words,
    window_of,
)
from pipelines.localrunner.batching import BundleBatches
from pipelines.records import Document, Reject, count_words
from schemas.config import DecontaminateConfig

DECONTAMINATED = "decontaminated"  # the filtered reason of a removed document
EXAMPLES = 3
SNIPPET_CHARS = 200


# ------------------------------------------------------------------ the evaluation n-grams (Beam)


class BloomOf(beam.CombineFn):
    """Hash arrays (``(name, hashes)`` pairs) -> one ``Bloom``."""

    def __init__(self, log2_bits: int, k: int):
        self.log2_bits, self.k = log2_bits, k

    def create_accumulator(self) -> Bloom:
        return Bloom.empty(self.log2_bits, self.k)

    def add_input(self, acc: Bloom, element: tuple[str, np.ndarray]) -> Bloom:
        acc.add(element[1])
        return acc

    def merge_accumulators(self, accs: Iterable[Bloom]) -> Bloom:
        it = iter(accs)
        out = next(it)
        for a in it:
            out.merge(a)
        return out

    def extract_output(self, acc: Bloom) -> Bloom:
        return acc


class _ReadEval(beam.DoFn):
    """An EvalFile -> its n-gram hashes in chunks ``(name, int64 array)`` (main) and its counts (STATS)."""

    CHUNK = 1 << 16

    def __init__(self, n: int, fields: list[str] | None):
        self.n, self.fields = n, fields

    def process(self, ef: EvalFile):
        counts = {"texts": 0, "ngrams": 0, "short_texts": 0, "bad_records": 0}
        pending: list[np.ndarray] = []
        held = 0
        for text in readable_texts(ef, self.fields):
            if text is None:
                counts["bad_records"] += 1
                continue
            hashes = ngram_hashes(eval_text(text), self.n)
            if not len(hashes):
                if WORD.search(text):
                    counts["short_texts"] += 1
                continue
            counts["texts"] += 1
            counts["ngrams"] += len(hashes)
            pending.append(hashes)
            held += len(hashes)
            if held >= self.CHUNK:
                yield ef.name, np.unique(np.concatenate(pending))
                pending, held = [], 0
        if pending:
            yield ef.name, np.unique(np.concatenate(pending))
        yield pvalue.TaggedOutput(STATS, ("file", ef.name, counts))


STATS = "stats"
SUSPECTS = "suspects"
HITS = "hits"
REJECTS = "rejects"


# ------------------------------------------------------------------ documents


class _Probe(BundleBatches):
    """Documents against the evaluation filter, a batch at a time: clear ones (main), or the candidates
    ``(doc_id, doc)`` (SUSPECTS) with their hit hashes per index partition ``(partition, (doc_id,
    hashes))`` (HITS)."""

    BATCH = 256

    def __init__(self, n: int, log2_parts: int):
        super().__init__(self.BATCH)
        self.n, self.log2_parts = n, log2_parts
        self._bloom: Bloom | None = None

    def process(self, doc: Document, bloom: Bloom):
        self._bloom = bloom
        yield from self.add(doc)

    def handle_batch(self, batch: list[Document]) -> Iterator[Any]:
        hashes, owner = batch_ngram_hashes([d.text for d in batch], self.n)
        hit = np.flatnonzero(self._bloom.contains(hashes)) if len(hashes) and self._bloom is not None else []
        suspects: dict[int, np.ndarray] = {}
        if len(hit):
            owners, firsts = np.unique(owner[hit], return_index=True)
            for d, part in zip(owners.tolist(), np.split(hashes[hit], firsts[1:]), strict=True):
                suspects[d] = part
        for i, doc in enumerate(batch):
            found = suspects.get(i)
            if found is None:
                yield doc
                continue
            yield pvalue.TaggedOutput(SUSPECTS, (doc.doc_id, doc))
            for part, hashes_in in split_parts(found, self.log2_parts):
                yield pvalue.TaggedOutput(HITS, (part, (doc.doc_id, hashes_in)))


def _eval_parts(named: tuple[str, np.ndarray], log2_parts: int) -> Iterator[tuple[int, tuple[str, np.ndarray]]]:
    """An evaluation chunk ``(name, hashes)`` -> ``(partition, (name, its hashes there))``."""
    name, hashes = named
    for part, hashes_in in split_parts(hashes, log2_parts):
        yield part, (name, hashes_in)


EVAL, DOCS = "e", "d"  # the two sides of the hash join, tagged in one GroupByKey


def _tagged(tag: str):
    return lambda kv: (kv[0], (tag, kv[1]))


def _matches(grouped: tuple[int, Iterable[tuple[str, tuple[str, np.ndarray]]]]
             ) -> Iterator[tuple[str, tuple[str, np.ndarray]]]:
    """One index partition: its evaluation hashes per file (held: ~PART_HASHES of them) against each
    candidate's hit hashes -> ``(doc_id, (benchmark, the hashes it shares))``.

    Two passes over the grouped values (a GroupByKey's values may be iterated again; a runner pages a
    large group in from its shuffle): the first keeps only the evaluation side, the second streams the
    candidates past it, so a partition's candidates are never held, however many the corpus sends
    (``CoGroupByKey`` would hold both sides as lists)."""
    _, values = grouped
    index: dict[str, list[np.ndarray]] = {}
    for tag, (name, hashes) in values:
        if tag == EVAL:
            index.setdefault(name, []).append(hashes)
    if not index:
        return
    held = {name: np.unique(np.concatenate(parts)) for name, parts in sorted(index.items())}
    for tag, (doc_id, hashes) in values:
        if tag != DOCS:
            continue
        for name, known in held.items():
            shared = hashes[np.isin(hashes, known, assume_unique=True)]
            if len(shared):
                yield doc_id, (name, shared)


class _Verdict(beam.DoFn):
    """A candidate and its exact matches -> the document (no match, or its overlaps cut out), or a Reject
    (REJECTS); and one ``("doc", ...)`` record for the report (STATS) per document matched."""

    def __init__(self, cfg: DecontaminateConfig):
        self.cfg = cfg

    def process(self, joined: tuple[str, dict[str, list[Any]]]):
        doc_id, sides = joined
        docs, found = sides["doc"], sides["match"]
        if not docs:
            return
        doc: Document = docs[0]
        yield pvalue.TaggedOutput(STATS, ("candidate", doc.source, {}))
        if not found:
            yield doc
            return
        matched = {h for _, shared in found for h in shared.tolist()}
        per_bench: dict[str, int] = {}
        for name, shared in found:
            per_bench[name] = per_bench.get(name, 0) + len(shared)
        spans = overlap_spans(doc.text, self.cfg.ngram, matched)
        first = doc.text[spans[0][0]:spans[0][1]][:SNIPPET_CHARS] if spans else ""
        kept, removed_words = self._cut(doc, spans)
        record = {"source": doc.source, "doc_id": doc_id, "benchmarks": dict(sorted(per_bench.items())),
                  "removed": kept is None, "words": removed_words, "overlap": first}
        yield pvalue.TaggedOutput(STATS, ("doc", doc.source, record))
        if kept is None:
            yield pvalue.TaggedOutput(REJECTS, Reject(doc_id, doc.source, "filtered", DECONTAMINATED, first))
        else:
            yield kept

    def _cut(self, doc: Document, spans: list[tuple[int, int]]) -> tuple[Document | None, int]:
        """``mode: spans``: the document without its overlaps (None: removed whole), and the words cut
        (``count_words``, the report's unit)."""
        if self.cfg.mode == "document" or len(spans) > self.cfg.max_spans:
            return None, 0
        cut = sum(count_words(doc.text[s:e]) for s, e in spans)
        pieces, pos = [], 0
        for s, e in spans:
            pieces.append(doc.text[pos:s].strip())
            pos = e
        pieces.append(doc.text[pos:].strip())
        text = "\n\n".join(p for p in pieces if p)
        words = text_words(text)
        if len(words) < window_of(text, words, self.cfg.ngram):
            return None, 0
        return replace(doc, text=text, words=None), cut


# ------------------------------------------------------------------ the report's section


class DecontaminationSummary(beam.CombineFn):
    """``("file", name, counts)`` and ``("doc", source, record)`` records -> the report's section:
    per benchmark file its texts, n-grams, short texts, bad records, documents it matched and
    n-grams matched; per source documents removed and trimmed (words cut); the candidates (documents
    the filter let through to the exact join: the matched ones and the filter's false positives);
    the examples of smallest doc id."""

    def __init__(self, cfg: DecontaminateConfig):
        self.cfg = cfg

    def create_accumulator(self) -> dict[str, Any]:
        return {"benchmarks": {}, "sources": {}, "examples": [], "candidates": 0}

    def add_input(self, acc: dict[str, Any], item: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
        kind, key, rec = item
        if kind == "candidate":
            acc["candidates"] += 1
            return acc
        if kind == "file":
            b = acc["benchmarks"].setdefault(key, _bench())
            for k, v in rec.items():
                b[k] += v
            return acc
        s = acc["sources"].setdefault(key, {"removed": 0, "trimmed": 0, "words_cut": 0})
        s["removed" if rec["removed"] else "trimmed"] += 1
        s["words_cut"] += 0 if rec["removed"] else rec["words"]
        for name, n in rec["benchmarks"].items():
            b = acc["benchmarks"].setdefault(name, _bench())
            b["documents"] += 1
            b["matched_ngrams"] += n
        ex = {"doc_id": rec["doc_id"], "source": key, "benchmarks": sorted(rec["benchmarks"]),
              "removed": rec["removed"], "overlap": rec["overlap"]}
        acc["examples"] = sorted(acc["examples"] + [ex], key=lambda e: e["doc_id"])[:EXAMPLES]
        return acc

    def merge_accumulators(self, accs: Iterable[dict[str, Any]]) -> dict[str, Any]:
        out = self.create_accumulator()
        for acc in accs:
            out["candidates"] += acc["candidates"]
            for name, b in acc["benchmarks"].items():
                mine = out["benchmarks"].setdefault(name, _bench())
                for k, v in b.items():
                    mine[k] += v
            for src, s in acc["sources"].items():
                mine = out["sources"].setdefault(src, {"removed": 0, "trimmed": 0, "words_cut": 0})
                for k, v in s.items():
                    mine[k] += v
            out["examples"] = sorted(out["examples"] + acc["examples"], key=lambda e: e["doc_id"])[:EXAMPLES]
        return out

    def extract_output(self, acc: dict[str, Any]) -> dict[str, Any]:
        return {"ngram": self.cfg.ngram, "mode": self.cfg.mode, "reason": f"filtered:{DECONTAMINATED}",
                "candidates": acc["candidates"], "benchmarks": dict(sorted(acc["benchmarks"].items())),
                "sources": dict(sorted(acc["sources"].items())), "examples": acc["examples"]}


def _bench() -> dict[str, int]:
    return {"texts": 0, "ngrams": 0, "short_texts": 0, "bad_records": 0, "documents": 0, "matched_ngrams": 0}


# ------------------------------------------------------------------ the stage


class Decontaminate(beam.PTransform):
    """Documents -> ``{"documents": kept (or trimmed) Documents, "rejects": Reject(filtered,
    "decontaminated"), "stats": a singleton, the report's ``decontamination`` section}``.

    The evaluation files are listed here, at construction (``eval_files``: one clear line when a path
    matches nothing); they are read inside the pipeline.
    """

    PART_HASHES = 1 << 18  # evaluation hashes an index partition holds at most, about (2 MB)
    MAX_LOG2_PARTS = 16

    def __init__(self, cfg: DecontaminateConfig):
        super().__init__()
        self.cfg = cfg
        self.files = eval_files(cfg)
        expected = sum(expected_words(f) for f in self.files)
        self.shape = filter_shape(expected, int(cfg.filter_mb * (1 << 20)))
        self.log2_parts = min(self.MAX_LOG2_PARTS, max(0, math.ceil(math.log2(max(1, expected / self.PART_HASHES)))))

    def expand(self, docs):
        cfg, p = self.cfg, docs.pipeline
        read = (p | "EvalFiles" >> beam.Create(self.files) | "SpreadEvalFiles" >> beam.Reshuffle()
                | "ReadEval" >> beam.ParDo(_ReadEval(cfg.ngram, cfg.fields)).with_outputs(STATS, main="ngrams"))
        bloom = read.ngrams | "EvalFilter" >> beam.CombineGlobally(BloomOf(*self.shape))
        probe = docs | "Probe" >> beam.ParDo(_Probe(cfg.ngram, self.log2_parts), pvalue.AsSingleton(bloom)).with_outputs(
            SUSPECTS, HITS, main="clear")
        index = read.ngrams | "EvalIndex" >> beam.FlatMap(_eval_parts, self.log2_parts)
        matches = ((index | "TagEval" >> beam.Map(_tagged(EVAL)), probe[HITS] | "TagDocs" >> beam.Map(_tagged(DOCS)))
                   | "HashSides" >> beam.Flatten() | "JoinHashes" >> beam.GroupByKey()
                   | "Matches" >> beam.FlatMap(_matches))
        verdict = ({"doc": probe[SUSPECTS], "match": matches} | "JoinCandidates" >> beam.CoGroupByKey()
                   | "Verdict" >> beam.ParDo(_Verdict(cfg)).with_outputs(REJECTS, STATS, main="documents"))
        kept = (probe.clear, verdict.documents) | "Kept" >> beam.Flatten()
        stats = ((read[STATS], verdict[STATS]) | "AllStats" >> beam.Flatten()
                 | "Summary" >> beam.CombineGlobally(DecontaminationSummary(cfg)))
        return {"documents": kept, "rejects": verdict[REJECTS], "stats": stats}

