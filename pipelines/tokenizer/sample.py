"""The tokenizer's training sample: a bounded bottom-k of the clean corpus by content hash.

The documents with the smallest keys (a hash of seed and doc_id) are the sample, as many as its bounds
need (documents, sentences, UTF-8 bytes): the same on every runner, and its memory is bounded whatever
the corpus size (``BoundedSample`` combines per worker, then merges, trimming as it goes).
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import apache_beam as beam

from pipelines.coders import TokenizedDocumentCoder  # noqa: F401  (registers the coder of TokenizedDocument)
from pipelines.records import SentencedDocument, stable_hash
from schemas.config import TokenizerConfig

MAX_SENTENCE_CHARS = 8192


def sample_key(seed: int, doc_id: str) -> int:
    return stable_hash(seed, "tokenizer-sample", doc_id)


# One document of the training sample: (sample key, its sentences (cut at MAX_SENTENCE_CHARS) joined,
# their lengths in characters as raw uint32 bytes, their UTF-8 bytes). One string per document, not
# one per sentence: the sample is held whole by the combine that collects it and by the training
# step (below the byte cap, the whole corpus), and a str costs ~49 bytes beside its text.
SampleEntry = tuple[int, str, bytes, int]


def sample_entry(seed: int, doc: SentencedDocument) -> SampleEntry:
    """A document's entry in the training sample (its key, its sentences as training reads them, their bytes)."""
    sents = [s[:MAX_SENTENCE_CHARS] for s in doc.sentences]
    text = "".join(sents)
    return (sample_key(seed, doc.doc_id), text, array("I", map(len, sents)).tobytes(),
            len(text.encode("utf-8", "surrogatepass")))


def entry_count(entry: SampleEntry) -> int:
    """How many sentences a sample entry holds."""
    return len(entry[2]) // 4


def entry_sentences(entry: SampleEntry) -> Iterator[str]:
    """A sample entry's sentences."""
    text, start = entry[1], 0
    for n in array("I", entry[2]):
        yield text[start:start + n]
        start += n


@dataclass(frozen=True)
class SampleBounds:
    """The training sample's bounds: documents, sentences and UTF-8 bytes (TokenizerConfig)."""

    documents: int
    sentences: int
    bytes: int

    @classmethod
    def of(cls, cfg: TokenizerConfig) -> SampleBounds:
        return cls(cfg.sample_docs, cfg.input_sentence_size, cfg.effective_sample_bytes)

    def needed(self, entries: list[SampleEntry]) -> list[SampleEntry]:
        """The entries (sorted by key) that can contribute a sentence: each one before which fewer
        than the bounds' documents, sentences and bytes come. On any subset of a corpus this keeps
        every entry the whole corpus's sample needs (its prefix sums are no larger), so it can trim
        partial accumulators: memory stays bounded by the sample, not the corpus."""
        entries.sort()
        out: list[SampleEntry] = []
        sents = nbytes = 0
        for e in entries:
            if len(out) >= self.documents or sents >= self.sentences or nbytes >= self.bytes:
                break
            out.append(e)
            sents += entry_count(e)
            nbytes += e[3]
        return out


class BoundedSample(beam.CombineFn):
    """The smallest-key documents of the corpus, as many as the sample bounds need (a bottom-k that
    counts documents, sentences and bytes). Associative and order-free: the same sample on every
    runner, bundling and retry."""

    def __init__(self, bounds: SampleBounds):
        self.bounds = bounds

    def create_accumulator(self) -> list:
        return [[], 0, 0]  # entries, sentences, bytes (since the last trim)

    def _add(self, acc: list, entries: Iterable[SampleEntry]) -> list:
        for e in entries:
            acc[0].append(e)
            acc[1] += entry_count(e)
            acc[2] += e[3]
        b = self.bounds
        # Trim once twice the bounds are held: amortized O(log n) per document.
        if len(acc[0]) >= 2 * b.documents or acc[1] >= 2 * b.sentences or acc[2] >= 2 * b.bytes:
            kept = b.needed(acc[0])
            acc = [kept, sum(entry_count(e) for e in kept), sum(e[3] for e in kept)]
        return acc

    def add_input(self, acc: list, entry: SampleEntry) -> list:
        return self._add(acc, (entry,))

    def merge_accumulators(self, accs: Iterable[list]) -> list:
        out = self.create_accumulator()
        for a in accs:
            out = self._add(out, a[0])
        return out

    def extract_output(self, acc: list) -> list[SampleEntry]:
        return self.bounds.needed(acc[0])


def training_plan(sample: list[SampleEntry], bounds: SampleBounds
                  ) -> tuple[list[tuple[SampleEntry, int]], dict[str, object]]:
    """What the tokenizer trains on: (entry, how many of its first sentences) in sample order, and
    what was taken.

    The longest run of the sample's sentences (documents in key order) within the sentence and
    byte bounds. The stats: documents, sentences and bytes taken, and the bound the sample
    reached (``bounded_by``: "sentences", "bytes", "documents" (``sample_docs`` documents sampled)
    or None: the whole corpus). ``plan_sentences`` reads the sentences of a plan one at a time.
    """
    sample = sorted(sample)
    plan: list[tuple[SampleEntry, int]] = []
    sentences = nbytes = docs = 0
    bounded_by: str | None = "documents" if len(sample) >= bounds.documents else None
    for entry in sample:
        count, doc_bytes = entry_count(entry), entry[3]
        if sentences + count <= bounds.sentences and nbytes + doc_bytes <= bounds.bytes:
            plan.append((entry, count))  # the whole document fits (the usual case): no per-sentence work
            sentences += count
            nbytes += doc_bytes
            docs += 1 if count else 0
            continue
        taken = 0
        for s in entry_sentences(entry):
            size = len(s.encode("utf-8", "surrogatepass"))
            if sentences >= bounds.sentences:
                bounded_by = "sentences"
                break
            if nbytes + size > bounds.bytes:
                bounded_by = "bytes"
                break
            sentences += 1
            nbytes += size
            taken += 1
        if taken:
            plan.append((entry, taken))
            docs += 1
        if bounded_by in ("sentences", "bytes"):
            break
    else:  # every document fitted whole: a bound may still be reached exactly at a document's end
        if sentences >= bounds.sentences:
            bounded_by = "sentences"
        elif nbytes >= bounds.bytes:
            bounded_by = "bytes"
    return plan, {"documents": docs, "sentences": sentences, "bytes": nbytes, "bounded_by": bounded_by}


def plan_sentences(plan: list[tuple[SampleEntry, int]]) -> Iterator[str]:
    """The sentences of a training plan, in order, one at a time (the trainer copies what it keeps)."""
    for entry, count in plan:
        yield from itertools.islice(entry_sentences(entry), count)


def training_sentences(sample: list[SampleEntry], bounds: SampleBounds) -> tuple[list[str], dict[str, object]]:
    """``training_plan``'s sentences as a list, and its stats."""
    plan, stats = training_plan(sample, bounds)
    return list(plan_sentences(plan)), stats
