"""The build report: where every record went, why, and how document lengths changed.

Written at the corpus root right after the manifest commits:

* ``report.json``: per-source accounting (input / kept / filtered / duplicate / rejected, with
  reasons), reason totals, and document-length histograms before and after cleaning;
* ``report.html``: the same as tables plus the plots, self-contained (inline SVG, ``pipelines.report.charts``);
* ``report-reasons.svg``, ``report-lengths.svg``, ``report-dedupe.svg``, ``report-tokens.svg``,
  ``report-packing.svg``: the plots as files (the HTML inlines them and links each file).

Since #17 the report also holds: examples of filtered / duplicate / rejected records per reason,
per-rule counts per source, the dedupe cluster-size and similarity histograms, tokenizer stats
(requested vs actual vocabulary, ``<unk>`` rate, tokens per word), token share per source, the
packed sequence length histogram and fill rate, the effective config with each rule on or off, and
warnings (a rule removing more than half of a source; a vocabulary smaller than asked).

Length histograms are computed inside the pipeline by a CombineFn over fixed log-scale bins of
word counts (combinable, tiny accumulators): no stage ever collects documents.
"""

from __future__ import annotations

import html
import importlib.metadata
import json
import math
import platform
from collections.abc import Iterable
from typing import Any

import apache_beam as beam

from pipelines.metrics import CombineTagged
from pipelines.records import Document, Duplicate, Reject, count_words
from pipelines.report import charts
from schemas.config import SAMPLE_BYTES_MIN, SAMPLE_BYTES_PER_PIECE, default_sample_bytes
from shardforge.storage import join, unless_swept, write_text_atomic

REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
REASONS_SVG = "report-reasons.svg"
LENGTHS_SVG = "report-lengths.svg"
DEDUPE_SVG = "report-dedupe.svg"
TOKENS_SVG = "report-tokens.svg"
PACKING_SVG = "report-packing.svg"
# Run-dependent, written by the driver after the run (pipelines.report.timings); this page only links them.
TIMINGS_JSON = "timings.json"
TIMINGS_HTML = "timings.html"
TIMINGS_SVG = "timings.svg"
# Files that measure the run (seconds): never byte-identical run to run, unlike every other output.
RUN_DEPENDENT_FILES = frozenset({TIMINGS_JSON, TIMINGS_HTML, TIMINGS_SVG})


def page_head(title: str) -> str:
    """The opening of a report page (report.html, timings.html): one style for both, up to its <h1>."""
    t = html.escape(title)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{t}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
td:first-child, td:last-child {{ text-align: left; }}
tr.total td {{ font-weight: bold; }}
ul.warn {{ color: #a00; }}
pre {{ background: #f6f6f6; padding: 1em; font-size: 85%; }}
figure {{ margin: 1em 0; }}
figure svg {{ max-width: 100%; height: auto; display: block; }}
</style></head><body>
<h1>{t}</h1>"""
EXAMPLES_PER_REASON = 3
SIMILARITY_BINS = 20  # [0, 0.05), [0.05, 0.1), ... [0.95, 1.0]
PACKED_BINS = 32  # equal-width bins of sequence length over [0, max_seq_len]
WARN_RULE_SHARE = 0.5  # a rule removing more than this share of a source's input is worth a look
ALL = "(all)"

# Bin 0 holds empty documents; bin k >= 1 holds [10**((k-1)/BINS_PER_DECADE), 10**(k/BINS_PER_DECADE)) words.
BINS_PER_DECADE = 4
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


def reason_key(r: Reject | Duplicate) -> str:
    """The report's name of a record's reason: ``bucket:reason`` (``duplicate:kind`` for duplicates)."""
    return f"duplicate:{r.kind}" if isinstance(r, Duplicate) else f"{r.bucket}:{r.reason}"


def example_of(r: Reject | Duplicate) -> dict[str, Any]:
    """What the report shows of one record that left the corpus."""
    ex: dict[str, Any] = {"doc_id": r.doc_id, "source": r.source}
    if isinstance(r, Duplicate):
        ex["dup_of"] = r.dup_of
        if r.similarity is not None:
            ex["similarity"] = r.similarity
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
            | "ByTarget" >> beam.Map(lambda d: (d.dup_of, 1))
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


# ------------------------------------------------------------------ report content

def rule_counts(manifest: dict[str, Any]) -> dict[str, dict[str, int]]:
    """{bucket:reason: {source: records, ALL: records}} straight from the manifest's accounting."""
    out: dict[str, dict[str, int]] = {}
    for name, a in sorted(manifest.get("accounting", {}).items()):
        for bucket in ("filtered", "duplicate", "rejected"):
            for reason, n in a.get(bucket, {}).items():
                row = out.setdefault(f"{bucket}:{reason}", {ALL: 0})
                row[name] = n
                row[ALL] += n
    return dict(sorted(out.items()))


def rules_enabled(config: dict[str, Any]) -> dict[str, bool]:
    """Every cleaning rule of the effective config, on (True) or off (False)."""
    from pipelines.clean.rules import LINE_RULES, RULE_ALIASES, RULE_NAMES, disabled_rules
    from schemas.config import CleanConfig

    clean = CleanConfig.model_validate(config.get("clean", {}))
    off = set(disabled_rules(clean))
    if not clean.line_rules:
        off |= set(LINE_RULES)
    if not clean.english_only:
        off.add("language")
    return {name: name not in off for name in sorted(RULE_NAMES - set(RULE_ALIASES))}


def build_warnings(manifest: dict[str, Any]) -> list[str]:
    """One line per thing a user should look at: a rule removing most of a source, a small vocabulary."""
    out = []
    for name, a in sorted(manifest.get("accounting", {}).items()):
        n_in = a.get("input", 0)
        for bucket in ("filtered", "duplicate"):
            for reason, n in sorted(a.get(bucket, {}).items()):
                if n_in and n > WARN_RULE_SHARE * n_in:
                    out.append(f"warning: {bucket} rule '{reason}' removed {n} of {n_in} documents "
                               f"({100 * n / n_in:.0f}%) of source '{name}'")
    tok = manifest.get("tokenizer", {})
    asked = manifest.get("config", {}).get("tokenizer", {})
    if not asked.get("model_url") and tok.get("vocab_size", 0) < asked.get("vocab_size", 0):
        out.append(f"warning: the tokenizer's vocabulary came out at {tok['vocab_size']} pieces, "
                   f"smaller than the {asked['vocab_size']} asked (too little text or too few distinct words)")
    return out


def token_stats(manifest: dict[str, Any], tokens: dict[str, dict[str, int]], words: dict[str, int],
                training: dict[str, Any] | None = None) -> dict[str, Any]:
    """Tokenizer section: requested vs actual vocabulary, <unk> rate, tokens per word, and the
    training's cost (``training``: documents, sentences and bytes sampled, the bound that cut the
    sample; None for a reused model)."""
    tok = manifest.get("tokenizer", {})
    asked = manifest.get("config", {}).get("tokenizer", {})
    n_tok = sum(c["tokens"] for c in tokens.values())
    n_unk = sum(c["unk"] for c in tokens.values())
    n_words = sum(words.values())
    return {
        "kind": tok.get("kind"), "model_type": tok.get("model_type"),
        "reused": bool(asked.get("model_url")),
        "requested_vocab_size": asked.get("vocab_size"), "vocab_size": tok.get("vocab_size"),
        "tokens": n_tok, "unk_tokens": n_unk, "unk_rate": n_unk / n_tok if n_tok else 0.0,
        "words": n_words, "tokens_per_word": n_tok / n_words if n_words else 0.0,
        "unit": "document tokens before packing (no special tokens); words split on whitespace",
        "training": training,
    }


def token_share(tokens: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """{source: {tokens, share}}: each source's part of the document tokens."""
    total = sum(c["tokens"] for c in tokens.values())
    return {s: {"tokens": c["tokens"], "share": c["tokens"] / total if total else 0.0}
            for s, c in sorted(tokens.items())}


def packing_stats(manifest: dict[str, Any], lengths: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Packed sequence length histogram (PACKED_BINS equal-width bins) and fill rate, per split and overall."""
    max_len = int(manifest.get("max_seq_len", 0)) or 1
    width = max(1, math.ceil(max_len / PACKED_BINS))
    nbins = max_len // width + 1  # bin i holds [i*width, (i+1)*width); max_seq_len itself is in the last
    splits: dict[str, Any] = {}
    every: dict[str, int] = {}
    for split, d in list(sorted(lengths.items())) + [(ALL, None)]:
        d = every if d is None else d
        if split != ALL:
            for n, c in d.items():
                every[n] = every.get(n, 0) + c
        counts = [0] * nbins
        for n, c in d.items():
            counts[min(nbins - 1, int(n) // width)] += c
        seqs = sum(d.values())
        toks = sum(int(n) * c for n, c in d.items())
        splits[split] = {"sequences": seqs, "tokens": toks,
                         "fill_rate": toks / (seqs * max_len) if seqs else 0.0, "counts": counts}
    return {"max_seq_len": max_len, "bin_width": width,
            "bin_lower_edges": [i * width for i in range(nbins)], "splits": splits,
            "unit": "ids per sequence, special tokens included; fill = ids / (sequences x max_seq_len)"}


# The libraries whose versions decide what a build writes (the tokenizer's training and encoding, the
# Parquet and numeric code, language ID, the runner): the same input and config on other versions of
# these can give other bytes (sentencepiece trains other models across versions), so the report names them.
SOFTWARE = ("shardforge", "apache-beam", "sentencepiece", "tokenizers", "pyarrow", "numpy", "numba", "pycld2")


def software_versions() -> dict[str, str]:
    """Python and each of ``SOFTWARE`` as installed where the report is written ("not installed" if absent)."""
    out = {"python": platform.python_version()}
    for name in SOFTWARE:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def build_report(manifest: dict[str, Any], before: dict[str, list[int]], after: dict[str, list[int]],
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report as plain JSON-able data (deterministic: sorted keys, no wall-clock fields; the
    tokenizer's training time is logged by the build, its sample size is here).

    extra: what the pipeline combined besides the length histograms (``WriteReport``):
    examples, dedupe, tokens, words, packed_lengths; a missing part gives an empty section.
    """
    extra = extra or {}
    sources: dict[str, Any] = {}
    reasons: dict[str, int] = {}
    for name, a in sorted(manifest.get("accounting", {}).items()):
        row = {
            "input": a.get("input", 0),
            "kept": a.get("kept", 0),
            "filtered": sum(a.get("filtered", {}).values()),
            "duplicate": sum(a.get("duplicate", {}).values()),
            "rejected": sum(a.get("rejected", {}).values()),
            "reasons": {f"{bucket}:{r}": n for bucket in ("filtered", "duplicate", "rejected")
                        for r, n in sorted(a.get(bucket, {}).items())},
        }
        row["balanced"] = row["input"] == row["kept"] + row["filtered"] + row["duplicate"] + row["rejected"]
        sources[name] = row
        for k, n in row["reasons"].items():
            reasons[k] = reasons.get(k, 0) + n
    totals = {k: sum(s[k] for s in sources.values()) for k in ("input", "kept", "filtered", "duplicate", "rejected")}
    return {
        "kind": "shardforge-build-report",
        "sources": sources,
        "totals": totals,
        "reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        "lengths": {"unit": "words", "bin_lower_edges": bin_edges(), "before_clean": before, "after_clean": after},
        "shards": len(manifest.get("shards", [])),
        "totals_by_split": manifest.get("totals", {}),
        "counters": manifest.get("counters", {}),
        "reject_log": manifest.get("intermediates", {}).get("rejects", ""),
        "rule_counts": rule_counts(manifest),
        "examples": extra.get("examples", {}),
        "dedupe": {
            "cluster_sizes": extra.get("dedupe", {}).get("cluster_sizes", {}),
            "similarity": {"bin_lower_edges": [i / SIMILARITY_BINS for i in range(SIMILARITY_BINS)],
                           "counts": extra.get("dedupe", {}).get("similarity", [0] * SIMILARITY_BINS),
                           "unit": "verified shingle Jaccard of each removed near duplicate with its kept document"},
        },
        "tokenizer": token_stats(manifest, extra.get("tokens", {}), extra.get("words", {}), extra.get("training")),
        "token_share": token_share(extra.get("tokens", {})),
        "packing": packing_stats(manifest, extra.get("packed_lengths", {})),
        "config": manifest.get("config", {}),
        "rules_enabled": rules_enabled(manifest.get("config", {})),
        "warnings": build_warnings(manifest),
        "software": software_versions(),
    }


BUCKET_COLORS = {"filtered": "#e69f00", "duplicate": "#56b4e9", "rejected": "#d55e00"}


def plot_reasons(report: dict[str, Any]) -> str:
    """Horizontal bars: records per bucket:reason, all sources together, largest on top."""
    title = f"Records not kept, by reason ({report['totals']['input']} in, {report['totals']['kept']} kept)"
    items = list(report["reasons"].items())
    if not items:
        return charts.message_chart(title, "every record was kept")
    labels = [k for k, _ in items]
    values = [v for _, v in items]
    colors = [BUCKET_COLORS.get(k.split(":", 1)[0], "gray") for k in labels]
    return charts.hbar_chart(title, labels, values, colors, [str(v) for v in values], "records", integer_x=True)


def plot_lengths(report: dict[str, Any]) -> str:
    """Length histograms (log-scale word bins) before and after cleaning, per source and overall."""
    lengths = report["lengths"]
    before, after = lengths["before_clean"], lengths["after_clean"]
    keys = [ALL] + sorted(k for k in set(before) | set(after) if k != ALL)
    edges = bin_edges()
    # Draw each bin [lo, hi) on a log axis; the empty-document bin is drawn at 0.5 words.
    lows = [0.5] + edges[1:]
    highs = [1.0] + [10 ** (k / BINS_PER_DECADE) for k in range(1, NUM_BINS)]
    # Show the populated range (one empty bin either side), not all seven decades.
    used = [b for d in (before, after) for counts in d.values() for b, c in enumerate(counts) if c]
    x_range = (lows[max(0, min(used) - 1)], highs[min(NUM_BINS - 1, max(used) + 1)]) if used else (0.5, 10.0)
    panels = []
    for key in keys:
        series = [("before cleaning", before.get(key, [0] * NUM_BINS), "#999999", 0.35),
                  ("after cleaning + dedupe", after.get(key, [0] * NUM_BINS), "#0072b2", 0.6)]
        top = max((c for _, counts, _, _ in series for c in counts), default=0) or 1
        panels.append(charts.Panel(
            title="all sources" if key == ALL else key, xlabel="words per document", ylabel="documents",
            xlim=x_range, ylim=(0, top * 1.15), logx=True, integer_y=True,
            marks=[charts.step_area(lows, highs, counts, color, op) for _, counts, color, op in series],
            legend=[(f"{name} ({sum(counts)})", color, op) for name, counts, color, op in series]))
    cols = min(2, len(keys))
    return charts.figure(panels, width=550 * cols, panel_height=300, cols=cols,
                         title="document lengths before and after cleaning")


def plot_dedupe(report: dict[str, Any]) -> str:
    """Two bar charts: clusters per size (kept + removed), near duplicates per verified similarity."""
    d = report["dedupe"]
    sizes = d["cluster_sizes"]
    if sizes:
        xs = [int(k) for k in sizes]
        counts = list(sizes.values())
        left = charts.Panel(title=f"Duplicate clusters ({sum(counts)})", xlabel="documents per cluster (1 kept + removed)",
                            ylabel="clusters", xlim=(min(xs) - 1, max(xs) + 1), ylim=(0, max(counts) * 1.1),
                            integer_x=True, integer_y=True,
                            marks=[charts.vbars([x - 0.4 for x in xs], counts, 0.8, "#56b4e9")])
    else:
        left = charts.Panel(title="Duplicate clusters", empty="no duplicates removed")
    sim = d["similarity"]
    if sum(sim["counts"]):
        right = charts.Panel(title=f"Removed near duplicates ({sum(sim['counts'])})",
                             xlabel="verified similarity with the kept document", ylabel="near duplicates",
                             xlim=(0.0, 1.0), ylim=(0, max(sim["counts"]) * 1.1), integer_y=True,
                             marks=[charts.vbars(sim["bin_lower_edges"], sim["counts"], 1 / SIMILARITY_BINS,
                                                 "#0072b2")])
    else:
        right = charts.Panel(title="Removed near duplicates", empty="no near duplicates removed")
    return charts.figure([left, right], width=1100, panel_height=320, cols=2,
                         title="dedupe cluster sizes and similarity")


def plot_tokens(report: dict[str, Any]) -> str:
    """Horizontal bars: each source's share of the document tokens."""
    share = report["token_share"]
    if not share:
        return charts.message_chart("Token share per source", "no tokens")
    names = list(share)
    vals = [100 * share[n]["share"] for n in names]
    notes = [f"{100 * share[n]['share']:.1f}% ({share[n]['tokens']})" for n in names]
    return charts.hbar_chart("Token share per source", names, vals, ["#009e73"] * len(names), notes,
                             "% of document tokens", xmax=115)


def plot_packing(report: dict[str, Any]) -> str:
    """Packed sequence length histogram per split, with its fill rate."""
    pk = report["packing"]
    splits = [k for k in pk["splits"] if k != ALL]
    if not splits:
        return charts.message_chart("Packed sequences", "no sequences")
    panels = []
    for split in splits:
        sp = pk["splits"][split]
        edges = pk["bin_lower_edges"]
        panels.append(charts.Panel(
            title=f"{split}: {sp['sequences']} sequences, fill {100 * sp['fill_rate']:.1f}%",
            xlabel=f"ids per sequence (max_seq_len {pk['max_seq_len']})", ylabel="sequences",
            xlim=(0, (edges[-1] + pk["bin_width"]) if edges else 1), ylim=(0, (max(sp["counts"], default=0) or 1) * 1.1),
            integer_x=True, integer_y=True, marks=[charts.vbars(edges, sp["counts"], pk["bin_width"], "#cc79a7")]))
    return charts.figure(panels, width=1100, panel_height=320, cols=len(panels),
                         title="packed sequence length histogram")


def _table(header: list[str], rows: list[list[Any]]) -> str:
    esc = [["" if v is None else html.escape(str(v)) for v in r] for r in rows]
    return ("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{v}</td>" for v in r) + "</tr>" for r in esc) + "</table>")


def _warnings(report: dict[str, Any]) -> str:
    """The warnings block (top of the page), or nothing."""
    if not report["warnings"]:
        return ""
    return ("<h2>Warnings</h2><ul class=warn>"
            + "".join(f"<li>{html.escape(w)}</li>" for w in report["warnings"]) + "</ul>")


def _sections(report: dict[str, Any], img) -> str:
    """The #17 sections of the page: rules, examples, dedupe, tokens, packing, config."""
    parts = []
    sources = sorted(report["sources"])
    rc = report["rule_counts"]
    parts.append("<h2>Records removed per rule and source</h2>"
                 + (_table(["rule"] + sources + ["all"], [[k] + [v.get(s, 0) for s in sources] + [v[ALL]]
                                                         for k, v in rc.items()]) if rc else "<p>none</p>"))
    ex_rows = []
    for key, exs in report["examples"].items():
        for e in exs:
            what = e.get("snippet")
            if what is None:
                what = f"duplicate of {e['dup_of']}" + (f" (similarity {e['similarity']:.3f})"
                                                        if "similarity" in e else "")
            ex_rows.append([key, e["source"], e["doc_id"], what])
    parts.append(f"<h2>Examples per reason</h2><p>The {EXAMPLES_PER_REASON} smallest doc_ids per reason; "
                 "every record is in the reject log.</p>"
                 + (_table(["reason", "source", "doc_id", "snippet / kept document"], ex_rows)
                    if ex_rows else "<p>none</p>"))
    parts.append("<h2>Dedupe clusters and similarity</h2>" + img(DEDUPE_SVG, "dedupe cluster sizes and similarity"))
    t = report["tokenizer"]
    parts.append("<h2>Tokenizer</h2>" + _table(
        ["kind", "model type", "requested vocabulary", "actual vocabulary", "tokens", "<unk> tokens",
         "<unk> rate", "tokens per word"],
        [[t["kind"], t["model_type"], "reused model" if t["reused"] else t["requested_vocab_size"], t["vocab_size"],
          t["tokens"], t["unk_tokens"], f"{100 * t['unk_rate']:.4f}%", f"{t['tokens_per_word']:.3f}"]])
        + f"<p>{html.escape(t['unit'])}.</p>" + _training_html(t.get("training"), report["config"]))
    parts.append("<h2>Token share per source</h2>" + img(TOKENS_SVG, "token share per source"))
    pk = report["packing"]
    parts.append("<h2>Packed sequences</h2>" + _table(
        ["split", "sequences", "ids", "fill rate"],
        [[k, v["sequences"], v["tokens"], f"{100 * v['fill_rate']:.2f}%"] for k, v in pk["splits"].items()])
        + img(PACKING_SVG, "packed sequence length histogram"))
    off = [r for r, on in report["rules_enabled"].items() if not on]
    parts.append("<h2>Effective config</h2><p>Rules switched off: "
                 + (html.escape(", ".join(off)) if off else "none") + "</p><pre>"
                 + html.escape(json.dumps(report["config"], sort_keys=True, indent=1)) + "</pre>")
    sw = report["software"]
    parts.append("<h2>Software</h2><p>Where the report was written; the same input and config on other versions "
                 "of these can give other bytes (another tokenizer model, say).</p>"
                 + _table(list(sw), [list(sw.values())]))
    return "\n".join(parts)


def sample_bound_text(bounded_by: str, config: dict[str, Any]) -> str:
    """The training sample's bound that cut it, with its value and its config field."""
    tok = config.get("tokenizer", {})
    if bounded_by == "bytes":
        given = tok.get("sample_bytes")
        value = given if given is not None else default_sample_bytes(tok.get("vocab_size", 0))
        how = "" if given is not None else (f", unset: {SAMPLE_BYTES_PER_PIECE:,} bytes per vocabulary piece, "
                                            f"at least {SAMPLE_BYTES_MIN / 1e6:,.0f} MB")
        size = f"{value / 1e6:,.1f} MB" if value >= 100_000 else f"{value:,} bytes"
        return f"the bytes bound ({size}: tokenizer.sample_bytes{how})"
    field = {"sentences": "input_sentence_size", "documents": "sample_docs"}.get(bounded_by)
    if field is None or tok.get(field) is None:
        return f"the {bounded_by} bound"
    return f"the {bounded_by} bound ({tok[field]:,}: tokenizer.{field})"


def _training_html(training: dict[str, Any] | None, config: dict[str, Any]) -> str:
    """One line on the tokenizer's training sample and cost (nothing for a reused model)."""
    if not training:
        return ""
    cut = f", cut by {sample_bound_text(training['bounded_by'], config)}" if training.get("bounded_by") else ""
    return html.escape(f"Trained on {training['sentences']:,} sentences ({training['bytes'] / 1e6:,.1f} MB) "
                       f"from {training['documents']:,} documents{cut}.").join(
        ("<p>", "</p>"))


def _timings_link() -> str:
    """The "Stage timings" section: a link only. Timings differ run to run and this page must not
    (the same build gives the same bytes on every runner mode), so the driver writes them after the
    run next to this page (``pipelines.report.timings``)."""
    return ("<h2>Stage timings</h2><p>Where this build's time went, per stage (read, clean, dedupe, sentences, "
            "tokenizer training, encode, packing, shard writing, intermediates, report), is measured by the "
            f'run and kept out of this page: <a href="{TIMINGS_HTML}">{TIMINGS_HTML}</a> (table and plot), '
            f'<a href="{TIMINGS_JSON}">{TIMINGS_JSON}</a>. The build driver writes them when the run has finished; '
            "a pipeline started without it (a Dataflow template) has none.</p>")


def figure_html(name: str, alt: str, svg: str) -> str:
    """A chart inline in a page, linking its own file (`name`); `alt` names it for screen readers."""
    return f'<figure><a href="{name}" aria-label="{html.escape(alt)}">{svg.rstrip()}</a></figure>'


def render_html(report: dict[str, Any], svgs: dict[str, str]) -> str:
    """One self-contained HTML page (inline CSS, the charts inline as SVG, each linking its file)."""
    def img(name: str, alt: str) -> str:
        return figure_html(name, alt, svgs[name])

    def cell(v: Any) -> str:
        return f"<td>{html.escape(str(v))}</td>"

    rows = []
    for name, s in report["sources"].items():
        reasons = ", ".join(f"{k} {v}" for k, v in s["reasons"].items()) or "-"
        rows.append("<tr>" + cell(name) + "".join(cell(s[k]) for k in ("input", "kept", "filtered", "duplicate",
                                                                     "rejected"))
                    + cell("yes" if s["balanced"] else "NO") + cell(reasons) + "</tr>")
    t = report["totals"]
    rows.append("<tr class=total>" + cell("total") + "".join(cell(t[k]) for k in ("input", "kept", "filtered",
                                                                                  "duplicate", "rejected"))
                + cell("") + cell("") + "</tr>")
    splits = "".join(f"<li>{html.escape(k)}: {v.get('documents', 0)} documents, {v.get('samples', 0)} samples, "
                     f"{v.get('tokens', 0)} tokens in {v.get('shards', 0)} shards</li>"
                     for k, v in sorted(report["totals_by_split"].items()))
    return f"""{page_head("shardforge build report")}
<p>Every input record ends in exactly one bucket: input = kept + filtered + duplicate + rejected.
Data: <a href="{REPORT_JSON}">{REPORT_JSON}</a>; reject log with reasons and snippets: <code>{html.escape(report["reject_log"] or "rejects")}/part-*.jsonl</code>.</p>
{_warnings(report)}
<h2>Records per source</h2>
<table><tr><th>source</th><th>input</th><th>kept</th><th>filtered</th><th>duplicate</th><th>rejected</th>
<th>balanced</th><th>reasons</th></tr>
{chr(10).join(rows)}
</table>
<ul>{splits}</ul>
<h2>Why records were not kept</h2>
{img(REASONS_SVG, "records per filter / reject reason")}
<h2>Document lengths before and after cleaning</h2>
<p>Log-scale bins of {BINS_PER_DECADE} per decade of words; "after" counts the documents that reach the shards.</p>
{img(LENGTHS_SVG, "document length histograms")}
{_sections(report, img)}
{_timings_link()}
</body></html>
"""


def write_report(manifest: dict[str, Any], before: dict[str, list[int]], after: dict[str, list[int]],
                 output: str, extra: dict[str, Any] | None = None) -> str:
    """Write report.json, the PNGs and report.html under `output`; returns the HTML's URL."""
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
    combined in the pipeline, reach the writer. The optional PCollections feed the #17 sections,
    each combined to a small summary first: reject_log (Reject / Duplicate: examples per reason),
    duplicates (cluster sizes, similarity), token_counts (``Tokenize.counts``: tokens, <unk> per source)
    and plans (the packing plans' singleton list from ``WriteCorpus.plans``: sequence lengths), and
    training (``TrainTokenizer.stats``: the tokenizer sample and training seconds).
    """

    def __init__(self, output: str, before, after, reject_log=None, duplicates=None, token_counts=None, plans=None,
                 training=None):
        super().__init__()
        self.output, self.before, self.after = output, before, after
        self.optional = {"reject_log": reject_log, "duplicates": duplicates, "token_counts": token_counts,
                         "plans": plans, "training": training}

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
