"""Encoding the documents with the corpus's tokenizer, in batches: one library call per batch of
sentences, token counts per source for the report."""

from __future__ import annotations

import os
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.coders import TokenizedDocumentCoder  # noqa: F401  (registers the coder of TokenizedDocument)
from pipelines.localrunner import progress
from pipelines.localrunner.batching import BundleBatches
from pipelines.records import SentencedDocument, TokenizedDocument, token_ids
from schemas.tokenizer_files import (
    load_tokenizer,
)
from shardforge.storage import sha256_bytes


def resolve_threads(num_threads: int) -> int:
    """Encode threads: num_threads if > 0, else the CPUs this worker process may use."""
    if num_threads > 0:
        return num_threads
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


# EncodeBatches's tagged output: a batch's {source: (documents, tokens, <unk> tokens)}. <unk> is the
# tokenizer's own unknown id (an hf_json tokenizer's: BERT's [UNK] is 100), none if it has no such token;
# a special token's string written in the text is encoded as text (schemas.tokenizer_files), so it
# never counts as one.
TOKEN_COUNTS = "token_counts"


class EncodeBatches(BundleBatches):
    """Batched encoding: one library call per batch of sentences, never per sentence.

    Documents come one at a time; the DoFn encodes them in batches of ``batch_docs`` (fewer at a
    bundle's end: ``pipelines.localrunner.batching``). Each document's tokens do not depend on its batch.

    SentencePiece encodes a list on `num_threads` C++ threads (the GIL is
    released), the parallelism that helps on a worker (ENVIRONMENT.md: Beam's
    multi-process mode does not, on 2 cores); `tokenizers` (byte_bpe) uses its
    own thread pool. Encoding does not depend on the thread count, so this
    setting never changes the corpus.
    """

    def __init__(self, batch_docs: int, num_threads: int = 0):
        super().__init__(batch_docs)
        self.num_threads = num_threads
        self._threads = 1
        self._tok = None
        self._unk = -1  # the tokenizer's <unk> id (-1: none)
        self._model_sha: str | None = None
        self._model_ref: bytes | None = None
        self.empty = Metrics.counter("tokenize", "empty_documents")
        self.sentences = Metrics.counter("tokenize", "sentences")

    def setup(self) -> None:
        self._threads = resolve_threads(self.num_threads)

    def _tokenizer(self, model: bytes):
        # The side input is usually the same object batch after batch: skip hashing it then.
        if self._tok is not None and model is self._model_ref:
            return self._tok
        sha = sha256_bytes(model)
        if self._tok is None or sha != self._model_sha:
            self._tok, self._model_sha = load_tokenizer(model), sha
            self._unk = self._tok.special_ids.get("<unk>", -1)
        self._model_ref = model
        return self._tok

    def process(self, doc: SentencedDocument, model: bytes):
        self._tokenizer(model)  # the batch is encoded with the model of its last document
        yield from self.add(doc)

    def handle_batch(self, batch: Sequence[SentencedDocument]):
        """The batch's TokenizedDocuments, then (tagged TOKEN_COUNTS) its counts."""
        tok = self._tok
        flat = [s for d in batch for s in d.sentences]
        # One thread per ~64 sentences at most: tiny batches are not worth the thread start-up.
        threads = max(1, min(self._threads, len(flat) // 64))
        ids = tok.encode(flat, num_threads=threads)
        self.sentences.inc(len(flat))
        progress.tick("tokenize documents", len(batch), unit="doc")
        counts: dict[str, list[int]] = {}
        pos = 0
        for d in batch:
            doc_ids = ids[pos: pos + len(d.sentences)]
            pos += len(d.sentences)
            # map/filter keep the per-sentence conversion mostly in C (it rivals the encode itself
            # otherwise); TokenIds, not int tuples, for memory (pipelines.records.TokenIds).
            sents = tuple(filter(None, map(token_ids, doc_ids)))
            if not sents:
                self.empty.inc()
            n = sum(map(len, sents))
            c = counts.get(d.source)
            if c is None:
                c = counts[d.source] = [0, 0, 0]
            c[0] += 1
            c[1] += n
            c[2] += sum(s.count(self._unk) for s in doc_ids)  # the encoder's int lists: a count in C
            yield TokenizedDocument(d.doc_id, d.source, sents, n)
        yield beam.pvalue.TaggedOutput(TOKEN_COUNTS, {k: tuple(v) for k, v in sorted(counts.items())})


def encode_documents(docs: Sequence[SentencedDocument], model: bytes, num_threads: int = 1,
                     batch_docs: int | None = None) -> list[TokenizedDocument]:
    """Plain-Python form of the Tokenize stage (for tests and benchmarks): one DoFn, batches of batch_docs."""
    batch = batch_docs or max(1, len(docs))
    fn = EncodeBatches(batch, num_threads)
    fn.setup()
    fn._tokenizer(model)
    return [t for i in range(0, len(docs), batch) for t in fn.handle_batch(docs[i: i + batch])
            if isinstance(t, TokenizedDocument)]


class Tokenize(beam.PTransform):
    """Sentenced documents + model (singleton side input) -> TokenizedDocuments.

    batch_docs: documents per encode call (fewer at a bundle's end);
    num_threads: SentencePiece threads per call (0: the worker's CPUs).
    After expansion, ``counts`` holds each batch's ``{source: (documents, tokens, <unk> tokens)}``
    (document tokens; documents without tokens included), counted as the batch is encoded: what
    the report's tokenizer section sums (``pipelines.report.summaries.TokenCounts``).
    """

    def __init__(self, model, batch_docs: int = 64, num_threads: int = 0):
        super().__init__()
        self.model = model
        self.batch_docs = batch_docs
        self.num_threads = num_threads
        self.counts = None  # set by expand

    def expand(self, docs):
        out = (
            docs
            | "Encode" >> beam.ParDo(EncodeBatches(self.batch_docs, self.num_threads),
                                     model=beam.pvalue.AsSingleton(self.model)
                                     ).with_output_types(TokenizedDocument  # its compact coder
                                                         ).with_outputs(TOKEN_COUNTS, main="documents")
        )
        self.counts = out[TOKEN_COUNTS]
        return out.documents
