"""C4's repeated-span removal (Raffel et al. 2020): repeats of n-sentence windows are cut."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.clean.sentences import split_sentences
from pipelines.dedupe.minhash import (
    normalize_text,
)
from pipelines.dedupe.sketch import COUNTERS
from pipelines.records import Document, Duplicate

# Pointer-jumping rounds that resolve chains of span duplicates (chains up to 2**rounds long).
SPAN_POINTER_ROUNDS = 5


def span_key(normalized: Sequence[str]) -> bytes | None:
    """blake2b-128 of one window of normalized sentences; None if the window holds no word.

    Sentences are joined with a newline, which ``normalize_text`` never leaves
    inside a sentence, so ("a b", "c") and ("a", "b c") hash differently.
    """
    if not any(normalized):
        return None  # punctuation-only windows ("* * *") carry no text to deduplicate
    data = "\n".join(normalized).encode("utf-8")
    return hashlib.blake2b(data, digest_size=16, person=b"sf-span").digest()


def span_occurrences(doc: Document, n: int) -> Iterator[tuple[bytes, tuple[str, int]]]:
    """(span hash, (doc_id, position)) for every window of n consecutive sentences of doc."""
    norms = [normalize_text(s) for s in split_sentences(doc.text)]
    for i in range(len(norms) - n + 1):
        key = span_key(norms[i:i + n])
        if key is not None:
            yield key, (doc.doc_id, i)


def resolve_span_group(occurrences: Iterable[tuple[str, int]]) -> Iterator[tuple[str, tuple[int, str]]]:
    """One span hash's occurrences -> (doc_id, (position, first doc_id)) for every repeat.

    The first occurrence is the smallest (doc_id, position): a function of the
    data, not of bundle order. Iterates ``occurrences`` twice (Beam's grouped
    iterables allow it) so a boilerplate span seen in millions of documents is
    streamed, never held.
    """
    first: tuple[str, int] | None = None
    for occ in occurrences:
        if first is None or occ < first:
            first = occ
    if first is None:
        return
    for doc_id, pos in occurrences:
        if (doc_id, pos) != first:
            yield doc_id, (pos, first[0])


def remove_sentences(text: str, removed: set[int]) -> str:
    """text without the sentences (indices into ``split_sentences(text)``) in ``removed``.

    Paragraphs (lines) without removals are kept verbatim; a paragraph that
    loses some sentences is rebuilt from the rest, joined by single spaces; one
    that loses all is dropped. ``split_sentences`` of the result gives exactly
    the sentences kept: a kept sentence that has another kept sentence after it
    in its paragraph ended at a sentence boundary, and the one after started a
    sentence, so the new junction splits the same way.
    """
    out: list[str] = []
    idx = 0
    for line in text.split("\n"):
        sents = split_sentences(line)  # the splitter works paragraph by paragraph: same sentences
        k = len(sents)
        if not any(idx + j in removed for j in range(k)):
            # Keep blank separators, but never two in a row where a paragraph was dropped.
            if sents or not out or out[-1].strip():
                out.append(line)
        else:
            kept = [s for j, s in enumerate(sents) if idx + j not in removed]
            if kept:
                out.append(" ".join(kept))
        idx += k
    return "\n".join(out).strip("\n")


@dataclass(frozen=True)
class SpanResult:
    """What ``apply_span_losses`` made of one document."""

    doc: Document | None  # the (possibly trimmed) document, or None if nothing is left
    removed_sentences: int
    removed_spans: int
    target: str | None  # emptied documents: doc_id of the first occurrence of their first removed span


def apply_span_losses(doc: Document, losses: Iterable[tuple[int, str]], n: int) -> SpanResult:
    """Cut every repeated span (position, first doc_id) of ``losses`` out of doc.

    A document that loses every sentence is returned as None with a target.
    Its sentence 0 is covered only by the window at position 0, so that window
    lost to a first occurrence in a strictly smaller doc_id: following targets
    always ends (at a document that keeps some text).
    """
    losses = sorted(set(losses))
    if not losses:
        return SpanResult(doc, 0, 0, None)
    num = len(split_sentences(doc.text))
    removed = {i for pos, _ in losses for i in range(pos, min(pos + n, num))}
    if len(removed) >= num:
        return SpanResult(None, num, len(losses), losses[0][1])
    return SpanResult(replace_text(doc, remove_sentences(doc.text, removed)), len(removed), len(losses), None)


def replace_text(doc: Document, text: str) -> Document:
    """doc with another text (same id, source and metadata)."""
    return dataclasses.replace(doc, text=text, words=None)


class _ResolveSpans(beam.DoFn):
    def __init__(self) -> None:
        self.repeated = Metrics.counter(COUNTERS, "span_repeated")
        self.repeats = Metrics.counter(COUNTERS, "span_removed_occurrences")

    def process(self, element: tuple[bytes, Iterable[tuple[str, int]]]) -> Iterator[tuple[str, tuple[int, str]]]:
        _, occurrences = element
        n = 0
        for loss in resolve_span_group(occurrences):
            n += 1
            yield loss
        if n:
            self.repeated.inc()
            self.repeats.inc(n)


@dataclass(frozen=True)
class _Pointer:
    """An emptied document on its way to a kept target (final: ``ptr`` is kept)."""

    doc_id: str
    source: str
    ptr: str
    final: bool


class _ApplySpans(beam.DoFn):
    def __init__(self, n: int) -> None:
        self.n = n
        self.sentences = Metrics.counter(COUNTERS, "span_removed_sentences")
        self.trimmed = Metrics.counter(COUNTERS, "span_trimmed_documents")

    def process(self, element: tuple[str, dict[str, Any]]) -> Iterator[Any]:
        doc_id, g = element
        docs = list(g["doc"])
        if not docs:
            return
        res = apply_span_losses(docs[0], g["loss"], self.n)
        self.sentences.inc(res.removed_sentences)
        if res.doc is not None:
            if res.removed_spans:
                self.trimmed.inc()
            yield res.doc
            return
        assert res.target is not None
        yield beam.pvalue.TaggedOutput("emptied", _Pointer(doc_id, docs[0].source, res.target, False))
        yield beam.pvalue.TaggedOutput("emptied_docs", (doc_id, docs[0]))


def _jump(element: tuple[str, dict[str, Any]]) -> Iterator[_Pointer]:
    """One pointer-jumping step at document k: everyone pointing at k moves to k's pointer.

    If k is not an emptied document it is kept, so pointers to it are final.
    Each non-final pointer asks at exactly one key, so each document is emitted once.
    """
    k, g = element
    own = list(g["self"])
    if own and own[0].final:
        yield own[0]
    for doc_id, source in g["ask"]:
        if own:
            yield _Pointer(doc_id, source, own[0].ptr, own[0].final)
        else:
            yield _Pointer(doc_id, source, k, True)


def _restore_unresolved(element: tuple[str, dict[str, Any]]) -> Iterator[Document]:
    _, g = element
    if list(g["unresolved"]):
        _unresolved.inc()
        yield from list(g["doc"])[:1]


_unresolved = Metrics.counter(COUNTERS, "span_unresolved_kept_whole")
_span_dups = Metrics.counter(COUNTERS, "span_duplicates")


def _span_duplicate(ptr: _Pointer) -> Duplicate:
    _span_dups.inc()
    return Duplicate(doc_id=ptr.doc_id, source=ptr.source, dup_of=ptr.ptr, kind="span")


class SpanDedupe(beam.PTransform):
    """C4's repeated-span removal: ``{"kept": PCollection[Document], "duplicates": PCollection[Duplicate]}``.

    Every window of ``n`` consecutive sentences is keyed by its hash; each
    hash's occurrences are grouped and all but the smallest (doc_id, position)
    become losses; losses are joined with their documents, whose text loses
    those sentences. A document that loses all its text becomes
    ``Duplicate(kind="span")`` of the first occurrence of its first removed
    span; if that document was emptied too, pointer jumping follows the chain
    (``SPAN_POINTER_ROUNDS`` rounds; a chain longer than that keeps its
    document whole, counted in ``dedupe/span_unresolved_kept_whole``), so
    ``dup_of`` always names a kept document.
    """

    def __init__(self, n: int, rounds: int | None = None) -> None:
        super().__init__()
        self.n = n
        self.rounds = SPAN_POINTER_ROUNDS if rounds is None else rounds

    def expand(self, docs: beam.PCollection) -> dict[str, beam.PCollection]:
        n = self.n
        losses = (
            docs
            | "Occurrences" >> beam.FlatMap(span_occurrences, n)
            | "GroupSpans" >> beam.GroupByKey()
            | "Resolve" >> beam.ParDo(_ResolveSpans())
        )
        applied = (
            {"doc": docs | "DocByID" >> beam.Map(lambda d: (d.doc_id, d)), "loss": losses}
            | "JoinLosses" >> beam.CoGroupByKey()
            | "Apply" >> beam.ParDo(_ApplySpans(n)).with_outputs("emptied", "emptied_docs", main="kept")
        )
        ptrs = applied.emptied
        for r in range(self.rounds):
            ptrs = (
                {"self": ptrs | f"Self{r}" >> beam.Map(lambda p: (p.doc_id, p)),
                 "ask": ptrs | f"Ask{r}" >> beam.FlatMap(lambda p: [] if p.final else [(p.ptr, (p.doc_id, p.source))])}
                | f"JoinPointers{r}" >> beam.CoGroupByKey()
                | f"Jump{r}" >> beam.FlatMap(_jump)
            )
        resolved = ptrs | "Final" >> beam.Partition(lambda p, _: 0 if p.final else 1, 2)
        restored = (
            {"unresolved": resolved[1] | "UnresolvedByID" >> beam.Map(lambda p: (p.doc_id, None)),
             "doc": applied.emptied_docs}
            | "JoinUnresolved" >> beam.CoGroupByKey()
            | "Restore" >> beam.FlatMap(_restore_unresolved)
        )
        kept = (applied.kept, restored) | "Kept" >> beam.Flatten()
        return {"kept": kept, "duplicates": resolved[0] | "SpanDuplicates" >> beam.Map(_span_duplicate)}
