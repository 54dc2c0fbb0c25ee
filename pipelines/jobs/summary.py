"""What a committed build tells its user on the command line: the summary (counts from the manifest,
digests from report.json), and the report and timings files it reads for it."""

from __future__ import annotations

import json
from typing import Any

from pipelines.report.record import (
    REPORT_JSON,
    TIMINGS_HTML,
    build_warnings,
    decontamination_warnings,
    rule_counts,
)
from pipelines.report.summaries import ALL
from pipelines.report.timings import TIMINGS_JSON
from schemas.config import MaskingConfig
from schemas.manifest import FEW_MASKED, Manifest, accounting_totals
from shardforge.console.words import counted
from shardforge.storage import exists, join, read_text, redact_url
from shardforge.storage.contract import more_valid_hint


def summarize(m: Manifest, report: dict[str, Any] | None = None) -> dict[str, Any]:
    """The CLI's summary of a committed build: counts from the manifest, digests from report.json."""
    acc = accounting_totals(m)
    out: dict[str, Any] = {
        "documents_in": acc["input"],
        "kept": acc["kept"],
        "filtered": acc["filtered"],
        "duplicates": acc["duplicate"],
        "rejected": acc["rejected"],
        "shards": len(m.shards),
        "samples": sum(t.samples for t in m.totals.values()),
        "tokens": sum(t.tokens for t in m.totals.values()),
        # {bucket:reason: {source: records, "(all)": records}}: the manifest's accounting per rule
        "rules": rule_counts(m.model_dump(mode="json")),
        "disabled_rules": m.config.get("clean", {}).get("disabled_rules", []),
        # the lines a user should look at (stderr's warning: lines, the report's); [] for none
        "warnings": report["warnings"] if report and "warnings" in report else
        build_warnings(m.model_dump(mode="json")) + decontamination_warnings((report or {}).get("decontamination")),
    }
    if report:
        t = report["tokenizer"]
        out["tokenizer"] = {k: round(t[k], 6) if isinstance(t[k], float) else t[k]
                            for k in ("kind", "model_type", "requested_vocab_size", "vocab_size", "unk_rate",
                                      "tokens_per_word")}
        out["token_share"] = {k: round(v["share"], 4) for k, v in report["token_share"].items()}
        out["fill_rate"] = {k: round(v["fill_rate"], 4) for k, v in report["packing"]["splits"].items()}
        sizes = report["dedupe"]["cluster_sizes"]
        out["dedupe_clusters"] = {"clusters": sum(sizes.values()),
                                  "largest": max((int(k) for k in sizes), default=0)}
        out["pii"] = {k: v["replaced"] for k, v in report.get("pii", {}).get("totals", {}).items()}
        decon = report.get("decontamination")
        if decon:
            out["decontaminated"] = {name: b["documents"] for name, b in decon["benchmarks"].items()}
    return out


def read_report(output: str) -> dict[str, Any] | None:
    """The build's report.json, or None where this build wrote none (a batched build)."""
    url = join(output, REPORT_JSON)
    return json.loads(read_text(url)) if exists(url) else None


def batched_report(output: str) -> dict[str, Any] | None:
    """What summarize() reads from report.json, merged over the batches of a batched build (each version's
    report in its own folder): the tokenizer's rates over all batches' tokens and words, token shares, fill
    rates, dedupe clusters, PII and the documents decontamination removed summed (what it says of the
    evaluation files themselves, the first batch's). None where a batch's report is missing."""
    from pipelines.corpus.commit import committed_tags
    from schemas.naming import work_dir

    tags = committed_tags(output)
    reports = []
    for n in sorted(tags):
        url = join(output, work_dir(tags[n]), REPORT_JSON)
        if not exists(url):
            return None
        reports.append(json.loads(read_text(url)))
    if not reports:
        return None
    first = reports[0]
    tokens, words, unk = (sum(r["tokenizer"][k] for r in reports) for k in ("tokens", "words", "unk_tokens"))
    tok = {**first["tokenizer"], "tokens": tokens, "words": words, "unk_tokens": unk,
           "tokens_per_word": tokens / words if words else 0.0, "unk_rate": unk / tokens if tokens else 0.0}
    share: dict[str, int] = {}
    splits: dict[str, dict[str, int]] = {}
    clusters: dict[str, int] = {}
    pii: dict[str, int] = {}
    for r in reports:
        for name, v in r["token_share"].items():
            share[name] = share.get(name, 0) + v["tokens"]
        for split, v in r["packing"]["splits"].items():
            acc = splits.setdefault(split, {"sequences": 0, "tokens": 0})
            acc["sequences"] += v["sequences"]
            acc["tokens"] += v["tokens"]
        for size, count in r["dedupe"]["cluster_sizes"].items():
            clusters[size] = clusters.get(size, 0) + count
        for kind, v in r.get("pii", {}).get("totals", {}).items():
            pii[kind] = pii.get(kind, 0) + v["replaced"]
    total = sum(share.values()) or 1
    width = first["packing"]["max_seq_len"]
    out: dict[str, Any] = {
        "tokenizer": tok,
        "token_share": {k: {"share": v / total, "tokens": v} for k, v in share.items()},
        "packing": {"splits": {k: {**v, "fill_rate": v["tokens"] / (v["sequences"] * width) if v["sequences"] else 0.0}
                               for k, v in splits.items()}},
        "dedupe": {"cluster_sizes": clusters},
        "pii": {"totals": {k: {"replaced": v} for k, v in pii.items()}},
    }
    decons = [r["decontamination"] for r in reports if r.get("decontamination")]
    if decons:  # every batch read the same evaluation files: their own counts are the first batch's
        out["decontamination"] = {**decons[0], "benchmarks": {
            name: {**b, **{k: sum(d["benchmarks"].get(name, {}).get(k, 0) for d in decons)
                           for k in ("documents", "matched_ngrams")}}
            for name, b in decons[0]["benchmarks"].items()}}
    return out


def read_timings(output: str) -> dict[str, Any] | None:
    """The build's timings.json (``pipelines.report.timings``), or None where none was written."""
    url = join(output, TIMINGS_JSON)
    return json.loads(read_text(url)) if exists(url) else None


def shards_line(m: Manifest) -> str:
    """``  shards     19 (train 17, valid 2): 1,138 sequences of at most 128 tokens, 117,866 tokens, rule sop``"""
    splits = ", ".join(f"{name} {t.shards}" for name, t in sorted(m.totals.items()))
    return (f"  shards     {len(m.shards):,} ({splits}): {sum(t.samples for t in m.totals.values()):,} sequences of "
            f"at most {m.max_seq_len} tokens, {sum(t.tokens for t in m.totals.values()):,} tokens, "
            f"rule {m.packing_rule}")


def valid_line(m: Manifest, root: str, say_empty: bool = False) -> list[str]:
    """A valid split too small for a steady evaluation loss (under FEW_MASKED predicted tokens at the
    trainer's default masking rate): its size, and the repack (or build) whose valid fraction gives about
    that many; with ``say_empty`` (a repack: a build warns of it), an empty one its valid fraction asked
    for. [] for a split large enough, or none asked for."""
    valid = m.totals.get("valid")
    rate = MaskingConfig.model_fields["rate"].default
    masked = round(valid.tokens * rate) if valid is not None else 0
    fraction = m.config.get("packing", {}).get("valid_fraction")
    if (valid is None or not valid.samples) and fraction and say_empty:
        kept = sum(t.documents for t in m.totals.values())
        return [f"  valid      none: none of the {counted(kept, 'document')} fell in it at valid_fraction "
                f"{fraction:g}, so training on it cannot evaluate ({more_valid_hint(m, root, 0)})"]
    if valid is None or not valid.samples or masked >= FEW_MASKED:
        return []
    docs = f" from {counted(valid.documents, 'document')}" if valid.documents else ""
    return [f"  valid      {counted(valid.samples, 'sequence')}{docs}, {valid.tokens:,} tokens: ~{masked:,} predicted at "
            f"{rate:.0%} masking, under the ~{FEW_MASKED:,} a steady evaluation loss needs "
            f"({more_valid_hint(m, root, masked)})"]


def repack_summary(m: Manifest) -> dict[str, Any]:
    """Repack's summary as data (``--json``): its parent, rule, shards and totals per split."""
    return {"parent": redact_url(m.parent) if m.parent else None, "packing_rule": m.packing_rule,
            "shards": len(m.shards), "totals": {split: t.model_dump() for split, t in m.totals.items()}}


def documents_packed_line(m: Manifest) -> str:
    """``  documents  353 of the 353 kept, in train 317 and valid 36``: the documents the rule gave a
    sequence, of those the origin kept, and the one the rule gave none, where any."""
    kept, packed = accounting_totals(m)["kept"], sum(t.documents for t in m.totals.values())
    splits = " and ".join(f"{name} {t.documents:,}" for name, t in sorted(m.totals.items()))
    lost = f"; {counted(kept - packed, 'document')} gave no {m.packing_rule} sequence" if packed < kept else ""
    return f"  documents  {packed:,} of the {kept:,} kept, in {splits}{lost}"


def repack_summary_text(m: Manifest, output: str) -> str:
    """Repack's summary for a person: the new corpus, its parent, its shards, and how to look at it."""
    parent = redact_url(m.parent).removesuffix("/manifest.json") if m.parent else "?"
    root = redact_url(output.rstrip("/"))
    return "\n".join([f"repacked corpus {root}", f"  from       {parent} (its tokenized documents and tokenizer)",
                      documents_packed_line(m), shards_line(m), *valid_line(m, root, say_empty=True),
                      f"  look       shardforge inspect {root}  (samples, and what a label means)"])


def where_records_went(acc: dict[str, int]) -> str:
    """``accounting_totals`` in words: "301 in, 159 kept; 2 duplicates, 139 filtered, 1 rejected"."""
    return (f"{acc['input']:,} in, {acc['kept']:,} kept; {counted(acc['duplicate'], 'duplicate')}, "
            f"{acc['filtered']:,} filtered, {acc['rejected']:,} rejected")


def summary_text(summary: dict[str, Any], m: Manifest) -> str:
    """The build's summary for a person: a few lines, the report's path last (``--json``: ``summary``)."""
    lines = [
        f"built corpus {summary['manifest'].rsplit('/', 1)[0]}",
        "  documents  " + where_records_went(accounting_totals(m)),
    ]
    if len(m.accounting) > 1:  # what each source gave: one that gave a document or two stands out
        tokens = sum(a.tokens for a in m.accounting.values()) or 1
        lines.append("  sources    " + "; ".join(
            f"{name} {a.input:,} in, {a.kept:,} kept, {100 * a.tokens / tokens:.1f}% of the tokens"
            for name, a in m.accounting.items()))
    tok = summary.get("tokenizer")
    if tok:
        lines.append(f"  tokenizer  {tok['model_type']}, {tok['vocab_size']:,} pieces; {tok['tokens_per_word']:.2f} "
                     f"tokens per word, <unk> {100 * tok['unk_rate']:.2f}%")
    fill = summary.get("fill_rate", {})
    fills = ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(fill.items()) if k != ALL)
    lines.append(shards_line(m) + (f"; fill rate {fills}" if fills else ""))
    lines += valid_line(m, summary["manifest"].rsplit("/", 1)[0])
    if summary.get("pii"):
        lines.append("  pii        " + ", ".join(f"{n:,} {k}" for k, n in summary["pii"].items())
                     + " replaced by placeholders")
    if "decontaminated" in summary:
        lines.append("  evaluation " + ", ".join(f"{name}: {counted(n, 'document')}" for name, n in summary["decontaminated"].items())
                     + " overlapping (docs/dedupe.md: removed, or trimmed in spans mode)")
    root = summary["manifest"].rsplit("/", 1)[0]
    if summary.get("timings"):
        lines.append(f"  timings    {join(root, TIMINGS_HTML)}  (where the time went, per stage)")
    lines.append(f"  report     {summary['report']}  (what was kept, filtered and deduplicated, and why)")
    return "\n".join(lines)
