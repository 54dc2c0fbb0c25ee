"""Small named steps of the build graph between the big stages: sentences, the tokenizer model, empties.

Each is a composite transform around a plain function of ``pipelines.sentences`` /
``pipelines.tokenizer``, so ``pipelines.graph`` is only a chain of names.
"""

from __future__ import annotations

import apache_beam as beam

from pipelines.records import Document, SentencedDocument, TokenizedDocument
from pipelines.sentences import split_sentences
from pipelines.tokenizer import TrainTokenizer, load_model, model_path, store_model, stored_path
from schemas.config import BuildConfig


def to_sentences(doc: Document) -> SentencedDocument:
    """A kept document as its sentences (the unit of tokenizer training, encoding and packing)."""
    return SentencedDocument(doc.doc_id, doc.source, tuple(split_sentences(doc.text)))


class SplitSentences(beam.PTransform):
    """Documents -> SentencedDocuments."""

    def expand(self, docs):
        return docs | "Split" >> beam.Map(to_sentences)


class DropEmpty(beam.PTransform):
    """Tokenized documents with at least one token (an empty one is accounted as ``no_tokens``)."""

    def expand(self, tokenized):
        return tokenized | "HasTokens" >> beam.Filter(_has_tokens)


def _has_tokens(d: TokenizedDocument) -> bool:
    return d.num_tokens > 0


class ReuseTokenizer(beam.PTransform):
    """A given tokenizer model -> a singleton with its bytes, copied into the corpus at ``output``.

    The model is read at construction (a relative path means the caller's working directory):
    the corpus's manifest then names the copy (``path``), like a trained model (the path rule).
    """

    def __init__(self, url: str, output: str):
        super().__init__()
        self.model = load_model(url)
        self.output = output
        self.path = stored_path(self.model)

    def expand(self, pbegin):
        return (pbegin | "ReuseTokenizer" >> beam.Create([self.model])
                | "CopyTokenizer" >> beam.Map(store_model, self.output))


def tokenizer_model(p: beam.Pipeline, sentenced, cfg: BuildConfig, output: str):
    """(singleton PCollection of the model bytes, its path under ``output``, the training's cost
    as a singleton PCollection for the report, or None for a reused model)."""
    if cfg.tokenizer.model_url:
        reuse = ReuseTokenizer(cfg.tokenizer.model_url, output)
        return p | "Tokenizer" >> reuse, reuse.path, None
    trainer = TrainTokenizer(cfg.tokenizer, cfg.seed, output)
    trained = sentenced | "TrainTokenizer" >> trainer
    return trained, model_path(cfg.tokenizer.model_type), trainer.stats
