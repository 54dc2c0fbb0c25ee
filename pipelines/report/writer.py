"""Writing the build report: ``write_report`` (report.json, the SVG charts, report.html under a folder)
and ``WriteReport``, the Beam transform that combines the summaries in the pipeline and writes the
report at the corpus root right after the manifest commits.
"""

from __future__ import annotations

import json
from typing import Any

import apache_beam as beam

from pipelines.metrics import CombineTagged
from pipelines.report.html import render_html
from pipelines.report.plots import plot_dedupe, plot_lengths, plot_packing, plot_reasons, plot_tokens
from pipelines.report.record import (
    DEDUPE_SVG,
    LENGTHS_SVG,
    PACKING_SVG,
    REASONS_SVG,
    REPORT_HTML,
    REPORT_JSON,
    TOKENS_SVG,
    build_report,
)
from pipelines.report.summaries import (
    DedupeStats,
    LengthHistogram,
    LengthsAndWords,
    PiiCounts,
    RejectExamples,
    TokenCounts,
    packed_lengths,
)
from shardforge.storage import join, unless_swept, write_text_atomic


def write_report(manifest: dict[str, Any], before: dict[str, list[int]], after: dict[str, list[int]],
                 output: str, extra: dict[str, Any] | None = None) -> str:
    """Write report.json, the SVG charts and report.html under `output`; returns the HTML's URL."""
    report = build_report(manifest, before, after, extra)
    svgs = {REASONS_SVG: plot_reasons(report), LENGTHS_SVG: plot_lengths(report), DEDUPE_SVG: plot_dedupe(report),
            TOKENS_SVG: plot_tokens(report), PACKING_SVG: plot_packing(report)}
    write_text_atomic(join(output, REPORT_JSON), json.dumps(report, sort_keys=True, indent=1) + "\n")
    for name, svg in svgs.items():
        write_text_atomic(join(output, name), svg)
    url = join(output, REPORT_HTML)
    write_text_atomic(url, render_html(report, svgs))
    return url


class WriteReport(beam.PTransform):
    """Committed manifest dict (singleton PCollection) -> report files; emits the report.html URL.

    before: ``(source, words)`` of every document read (``CleanDocuments``' ``raw_words``: counted
    where the clean rules count them); after: the kept Documents. Only their length histograms,
    combined in the pipeline, reach the writer. The optional PCollections feed the report's other
    sections (examples, dedupe, tokenizer, packing), each combined to a small summary first: reject_log (Reject / Duplicate: examples per reason),
    duplicates (cluster sizes, similarity), token_counts (``Tokenize.counts``: tokens, <unk> per source)
    and plans (the packing plans' singleton list from ``WriteCorpus.plans``: sequence lengths),
    training (``TrainTokenizer.stats``: the tokenizer sample and training seconds), pii
    (``CleanDocuments``' per-batch PII summaries) and decontamination (``Decontaminate``'s singleton section).
    """

    def __init__(self, output: str, before, after, reject_log=None, duplicates=None, token_counts=None, plans=None,
                 training=None, pii=None, decontamination=None):
        super().__init__()
        self.output, self.before, self.after = output, before, after
        self.optional = {"reject_log": reject_log, "duplicates": duplicates, "token_counts": token_counts,
                         "plans": plans, "training": training, "pii": pii, "decontamination": decontamination}

    def expand(self, manifest):
        # The small summaries combine in one step (pipelines.metrics.CombineTagged).
        summaries: dict[str, tuple[Any, beam.CombineFn]] = {
            "before": (self.before, LengthHistogram()), "after": (self.after, LengthsAndWords())}
        parts: dict[str, Any] = {}
        o = self.optional
        if o["reject_log"] is not None:
            summaries["examples"] = (o["reject_log"], RejectExamples())
        if o["duplicates"] is not None:
            parts["dedupe"] = o["duplicates"] | "DedupeStats" >> DedupeStats()
        if o["token_counts"] is not None:
            summaries["tokens"] = (o["token_counts"], TokenCounts())
        if o["plans"] is not None:
            parts["packed_lengths"] = o["plans"] | "PackedLengths" >> beam.Map(packed_lengths)
        if o["training"] is not None:
            parts["training"] = o["training"]  # already one small dict (TrainTokenizer.stats)
        if o["pii"] is not None:
            summaries["pii"] = (o["pii"], PiiCounts())
        if o["decontamination"] is not None:
            parts["decontamination"] = o["decontamination"]  # already one small dict (Decontaminate's stats)
        combined = manifest.pipeline | "Summaries" >> CombineTagged(summaries)
        names = sorted(parts)
        output = self.output

        def write(m, summaries, *values) -> str | None:
            b, (a, words) = summaries["before"], summaries["after"]
            named = {**{n: s for n, s in summaries.items() if n not in ("before", "after")},
                     **dict(zip(names, values, strict=True))}
            extra = {"words": words, **dict(sorted(named.items()))}
            # In an attempt's folder (an ingest batch) another writer's commit may sweep it meanwhile.
            written = unless_swept(lambda: write_report(m, b, a, output, extra), "report")
            return join(output, REPORT_HTML) if written else None

        return manifest | "WriteReport" >> beam.Map(
            write, beam.pvalue.AsSingleton(combined), *(beam.pvalue.AsSingleton(parts[n]) for n in names))
