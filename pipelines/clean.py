"""Cleaning: normalize text and apply named document rules.

Each rule is a plain function ``(Document, CleanConfig) -> reason | None``;
a document failing a rule becomes a ``Reject(bucket="filtered", reason=rule)``.
Rules are configuration (thresholds in ``CleanConfig``), switched off by name
with ``disabled_rules``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from pipelines.records import Document, Reject, snippet
from schemas.config import CleanConfig

REJECTS = "rejects"

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200b\u3000]+")
_BLANK_LINES = re.compile(r"\n{3,}")


def normalize_text(text: str) -> str:
    """NFC, control characters stripped, runs of spaces collapsed, lines trimmed."""
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    text = _SPACES.sub(" ", text)
    text = "\n".join(line.strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", text).strip()


def rule_empty(doc: Document, cfg: CleanConfig) -> str | None:
    return "empty" if not doc.text else None


def rule_max_doc_bytes(doc: Document, cfg: CleanConfig) -> str | None:
    return "max_doc_bytes" if len(doc.text.encode("utf-8")) > cfg.max_doc_bytes else None


def rule_min_words(doc: Document, cfg: CleanConfig) -> str | None:
    return "min_words" if len(doc.text.split()) < cfg.min_words else None


Rule = Callable[[Document, CleanConfig], "str | None"]
# Order matters only for which reason a document is charged with: cheapest first.
DOC_RULES: list[tuple[str, Rule]] = [
    ("empty", rule_empty),
    ("max_doc_bytes", rule_max_doc_bytes),
    ("min_words", rule_min_words),
]


def clean_document(doc: Document, cfg: CleanConfig) -> Document | Reject:
    """Normalize a document and apply the enabled rules; the first failing rule names the reason."""
    if len(doc.text) > 4 * cfg.max_doc_bytes:  # don't even normalize gigantic documents
        return Reject(doc.doc_id, doc.source, "filtered", "max_doc_bytes", snippet(doc.text))
    norm = Document(doc.doc_id, doc.source, normalize_text(doc.text), doc.url, doc.title, doc.date)
    for name, rule in DOC_RULES:
        if name in cfg.disabled_rules and name != "empty":
            continue
        reason = rule(norm, cfg)
        if reason:
            return Reject(doc.doc_id, doc.source, "filtered", reason, snippet(norm.text))
    return norm


class _Clean(beam.DoFn):
    def __init__(self, cfg: CleanConfig):
        self.cfg = cfg

    def process(self, doc: Document):
        out = clean_document(doc, self.cfg)
        if isinstance(out, Reject):
            Metrics.counter("clean", f"filtered_{out.reason}").inc()
            yield pvalue.TaggedOutput(REJECTS, out)
        else:
            Metrics.counter("clean", "kept").inc()
            yield out


class CleanDocuments(beam.PTransform):
    """Documents -> cleaned Documents (main) and `rejects`."""

    def __init__(self, cfg: CleanConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, docs):
        return docs | "Clean" >> beam.ParDo(_Clean(self.cfg)).with_outputs(REJECTS, main="documents")
