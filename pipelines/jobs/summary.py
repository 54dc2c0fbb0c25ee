"""What a committed build tells its user on the command line: the summary (counts from the manifest,
digests from report.json), and the report and timings files it reads for it."""

from __future__ import annotations

import json
from typing import Any

from pipelines.report.record import REPORT_JSON, rule_counts
from pipelines.report.timings import TIMINGS_JSON
from schemas.manifest import Manifest, accounting_totals
from shardforge.storage import exists, join, read_text


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
    return out


def read_report(output: str) -> dict[str, Any] | None:
    """The build's report.json, or None where this build wrote none (a batched build)."""
    url = join(output, REPORT_JSON)
    return json.loads(read_text(url)) if exists(url) else None


def read_timings(output: str) -> dict[str, Any] | None:
    """The build's timings.json (``pipelines.report.timings``), or None where none was written."""
    url = join(output, TIMINGS_JSON)
    return json.loads(read_text(url)) if exists(url) else None
