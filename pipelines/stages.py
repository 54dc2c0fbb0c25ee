"""Named steps of the build graph around plain functions: cleaning, decontamination, sentences, the tokenizer model, empties.

Each is a composite transform around a plain function of ``pipelines.clean.rules`` /
``pipelines.clean.sentences`` / ``pipelines.tokenizer``, so ``pipelines.graph`` is only a chain of
names, and the modules of the functions import no Beam (a document process, ``pipelines.localrunner.docpool``,
runs them without it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import apache_beam as beam
from apache_beam import pvalue

from pipelines.clean.lines import line_rules_for
from pipelines.clean.pii import tally
from pipelines.clean.rules import RAW_WORDS, REJECTS, check_rule_names, clean_batch
from pipelines.clean.sentences import split_batch
from pipelines.dedupe.decontaminate import Decontaminate
from pipelines.localrunner.batching import PooledBatches
from pipelines.metrics import counted, counter
from pipelines.records import Document, SentencedDocument, TokenizedDocument
from pipelines.sources.parsing import R_MALFORMED_JSON, R_MISSING_TEXT
from pipelines.tokenizer.model import load_model, model_path, store_model, stored_path
from pipelines.tokenizer.train import TrainTokenizer
from schemas.config import BuildConfig, CleanConfig, DecontaminateConfig, SourceConfig

PII = "pii"  # CleanDocuments' per-batch PII summaries
CLEAN_BATCH = 64  # documents the clean step hands to a document process at a time (~200 KB of prose)


class _Clean(PooledBatches):
    def __init__(self, cfg: CleanConfig, line_rules: dict[str, bool]):
        super().__init__(CLEAN_BATCH)
        self.cfg = cfg
        self.line_rules = line_rules

    def batch_task(self, batch: list[Document]):
        return clean_batch, (batch, self.cfg, self.line_rules)

    def batch_outputs(self, batch: list[Document], result) -> Iterable:
        found = []
        for doc, (out, lines, words, pii) in zip(batch, result, strict=True):
            for rule, n in lines.items():
                counter("clean_lines", rule).inc(n)
            if pii is not None:
                found.append((doc.doc_id, doc.source, pii))
                for kind, n in pii.counts:
                    counter("pii", kind).inc(n)
            yield pvalue.TaggedOutput(RAW_WORDS, (doc.source, words))
            yield counted("clean", out, "kept", REJECTS)
        if found:  # one small summary per batch (the report sums them: pipelines.report.summaries.PiiCounts)
            yield pvalue.TaggedOutput(PII, tally(found))


class CleanDocuments(beam.PTransform):
    """Documents -> cleaned Documents (main, `documents`; PII replaced: ``pipelines.clean.pii``), `rejects`,
    `raw_words`: for every document, ``(source, words of its text as read)`` (the report's histogram
    before cleaning), and `pii`: per batch that replaced any, ``pipelines.clean.pii.tally``'s summary.

    sources: the build's SourceConfigs, for per-source line rules (SourceConfig.line_rules).
    """

    def __init__(self, cfg: CleanConfig, sources: Iterable[SourceConfig] = ()):
        super().__init__()
        check_rule_names(cfg)
        self.cfg = cfg
        srcs = list(sources)
        self.line_rules = {s.name: line_rules_for(s.name, srcs, cfg) for s in srcs}

    def expand(self, docs):
        return docs | "Clean" >> beam.ParDo(_Clean(self.cfg, self.line_rules)).with_outputs(
            REJECTS, RAW_WORDS, PII, main="documents")


def decontaminate(documents, cfg: DecontaminateConfig) -> tuple[Any, list[Any], Any]:
    """Cleaned documents -> (the documents that do not overlap the evaluation sets, or trimmed; a list
    of their Rejects' PCollection (empty when off); the report's section, or None when off). Off when
    ``cfg.paths`` is empty: no step is added (``pipelines.dedupe.decontaminate``)."""
    if not cfg.paths:
        return documents, [], None
    out = documents | "Decontaminate" >> Decontaminate(cfg)
    return out["documents"], [out["rejects"]], out["stats"]


SPLIT_BATCH = 64  # documents the sentence step hands to a document process at a time


class _Split(PooledBatches):
    """Kept documents as their sentences (the unit of tokenizer training, encoding and packing)."""

    def __init__(self) -> None:
        super().__init__(SPLIT_BATCH)

    def batch_task(self, batch: list[Document]):
        return split_batch, ([d.text for d in batch],)

    def batch_outputs(self, batch: list[Document], result) -> Iterable[SentencedDocument]:
        for d, sentences in zip(batch, result, strict=True):
            yield SentencedDocument(d.doc_id, d.source, sentences)


class SplitSentences(beam.PTransform):
    """Documents -> SentencedDocuments."""

    def expand(self, docs):
        return docs | "Split" >> beam.ParDo(_Split())


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


REPETITION_HINT = ("Gopher's repetition rules found every document repetitive (templated or generated text): "
                   "where that text is what you want, switch them off (clean: {disabled_rules: [dup_ngrams, "
                   "top_ngrams]} in a --config file; docs/cleaning.md)")
# What to check when every document left for one reason (the error of a build with nothing left).
LOSS_HINTS = {
    R_MISSING_TEXT: "no record holds text under the source's text field: name the JSON field or Parquet column "
                    "that does (--text_field FIELD, or text_field in the source's config; default text)",
    R_MALFORMED_JSON: "the inputs do not parse as JSON Lines or a JSON array: check the source's format",
    "malformed_xml": "the inputs are no Wikipedia dumps (MediaWiki XML or WikiExtractor's <doc> files), or their "
                     "XML breaks: check the source's format",
    "warc_record_type": "no WARC record holds a page's text: shardforge reads Common Crawl's WET files (the crawl's "
                        "text, *.warc.wet.gz), not a WARC file's HTML responses: give the WET files, or extract the "
                        "text first (news-please, as CC-News was; trafilatura)",
    "malformed_warc": "the inputs are no WARC / WET files, or they break: check the source's format",
    "wiki_redirect": "every page of the Wikipedia dump is a redirect: a pages-articles dump holds the articles "
                     "(enwiki-…-pages-articles*.xml.bz2)",
    "wiki_namespace": "no page of the Wikipedia dump is an article (namespace 0): a pages-articles dump holds "
                      "them (enwiki-…-pages-articles*.xml.bz2; pages-meta and talk dumps hold other namespaces)",
    "invalid_utf8": "no input decodes as its source's encoding (UTF-8 by default): name the encoding of the text "
                    "(--encoding CODEC, e.g. cp1252 or latin-1; or encoding: in the source's config)",
    "max_doc_bytes": "a document is over clean.max_doc_bytes (1,000,000 bytes by default), and a text file is "
                     "one document: for a file of many, name the line between them (--delimiter LINE, e.g. "
                     "'<|endoftext|>', or '' for blank lines); for long documents (books) raise the limit "
                     "(--max_doc_bytes BYTES, e.g. 16MB)",
    "max_words": "every document is over clean.max_words words (100,000 by default, Gopher's rule for web pages): "
                 "for books and long stories raise it (--max_words N, e.g. 1000000)",
    "language": "the language rule kept none: give the corpus's languages (--languages CODES, e.g. en,de), or "
                "--languages any to keep every language",
    "empty_after_line_rules": "C4's line rules left no line (a line under clean.line_min_words words, or without "
                              "an end mark, is removed): for text unlike news or web prose switch them off "
                              "(clean: {line_rules: false} in a --config file, or name the source stories)",
    "min_words": "every document is under clean.min_words words: lower it for short texts (--min_words N)",
    "dup_ngrams": REPETITION_HINT,
    "top_ngrams": REPETITION_HINT,
}


def tokenizer_model(p: beam.Pipeline, sentenced, cfg: BuildConfig, output: str,
                    make_room: Callable[[], object] | None = None, lost=None):
    """(singleton PCollection of the model bytes, its path under ``output``, the training's cost
    as a singleton PCollection for the report, or None for a reused model). ``make_room``: called
    before training (``pipelines.options.RunnerPlan``). ``lost``: the Rejects and Duplicates, whose
    reasons the error of a corpus left empty counts."""
    if cfg.tokenizer.model_url:
        reuse = ReuseTokenizer(cfg.tokenizer.model_url, output)
        return p | "Tokenizer" >> reuse, reuse.path, None
    trainer = TrainTokenizer(cfg.tokenizer, cfg.seed, output, make_room=make_room, losses=lost, hints=LOSS_HINTS)
    trained = sentenced | "TrainTokenizer" >> trainer
    return trained, model_path(cfg.tokenizer.model_type), trainer.stats
