"""The report record: report.json's content as plain JSON-able data, and the names of the report's files.

``build_report`` turns the committed manifest and the pipeline's summaries (``pipelines.report.summaries``)
into per-source accounting (input / kept / filtered / duplicate / rejected, with reasons), reason
totals, document-length histograms before and after cleaning, examples per reason, per-rule counts
per source, the dedupe cluster-size and similarity histograms, tokenizer stats (requested vs actual
vocabulary, ``<unk>`` rate, tokens per word), token share per source, the packed sequence length
histogram and fill rate, the PII replaced (per source and kind, with examples), the decontamination
(per benchmark file), the effective config with each rule on or off, warnings (a rule removing
more than half of a source; a vocabulary smaller than asked; an evaluation file with unread records
or no text long enough to match) and the software versions.
"""

from __future__ import annotations

import importlib.metadata
import math
import platform
from typing import Any

from pipelines.report.summaries import ALL, SIMILARITY_BINS, bin_edges
from schemas.config import MaskingConfig
from schemas.manifest import valid_fraction_for_empty
from shardforge.console.words import counted

# The report's files, written at the corpus root next to the manifest.
REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
REASONS_SVG = "report-reasons.svg"
LENGTHS_SVG = "report-lengths.svg"
DEDUPE_SVG = "report-dedupe.svg"
TOKENS_SVG = "report-tokens.svg"
PACKING_SVG = "report-packing.svg"
# Run-dependent, written by the driver after the run (pipelines.report.timings); report.html only links them.
TIMINGS_JSON = "timings.json"
TIMINGS_HTML = "timings.html"
TIMINGS_SVG = "timings.svg"
# Files that measure the run (seconds): never byte-identical run to run, unlike every other output.
RUN_DEPENDENT_FILES = frozenset({TIMINGS_JSON, TIMINGS_HTML, TIMINGS_SVG})

PACKED_BINS = 32  # equal-width bins of sequence length over [0, max_seq_len]
WARN_RULE_SHARE = 0.5  # a rule removing more than this share of a source's input is worth a look
# Reasons that are the input's structure, not a rule's verdict: most of a Wikipedia dump's pages are
# redirects and pages outside the articles, and no setting should keep them.
STRUCTURAL_REASONS = frozenset({"wiki_redirect", "wiki_namespace"})
# The length rules remove the longest documents, whose share of the text is larger than their count's:
# a source losing more than this share of its documents to them is told so (books, long stories).
LENGTH_REASONS = ("max_words", "max_doc_bytes")
WARN_LENGTH_SHARE = 0.01


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
    from pipelines.clean.lines import LINE_RULES
    from pipelines.clean.rules import RULE_ALIASES, RULE_NAMES, disabled_rules
    from schemas.config import CleanConfig

    clean = CleanConfig.model_validate(config.get("clean", {}))
    off = set(disabled_rules(clean))
    if not clean.line_rules:
        off |= set(LINE_RULES)
    if not clean.english_only:
        off.add("language")
    return {name: name not in off for name in sorted(RULE_NAMES - set(RULE_ALIASES))}


def build_warnings(manifest: dict[str, Any], corpus: str = "CORPUS") -> list[str]:
    """One line per thing a user should look at: a rule removing most of a source, documents that do not
    decode, matches that are no files, a small vocabulary, an empty valid split (the same lines on stderr
    and in the report; ``corpus``: the corpus's URL where a command names it)."""
    out = []
    sources = manifest.get("config", {}).get("sources", [])
    encodings = {s.get("name"): s.get("encoding", "utf-8") for s in sources}
    follows = {s.get("name"): s.get("follow_links", False) for s in sources}
    for name, a in sorted(manifest.get("accounting", {}).items()):
        n_in = a.get("input", 0)
        for bucket in ("filtered", "duplicate"):
            for reason, n in sorted(a.get(bucket, {}).items()):
                if n_in and n > WARN_RULE_SHARE * n_in and reason not in (*STRUCTURAL_REASONS, *LENGTH_REASONS):
                    out.append(f"warning: {bucket} rule '{reason}' removed {n} of {n_in} documents "
                               f"({100 * n / n_in:.0f}%) of source '{name}'")
        long = {r: a.get("filtered", {}).get(r, 0) for r in LENGTH_REASONS}
        if n_in and sum(long.values()) > WARN_LENGTH_SHARE * n_in:
            out.append(_length_warning(name, long, n_in, manifest.get("config", {}).get("clean", {})))
        bad = a.get("rejected", {}).get("invalid_utf8", 0)
        if bad:
            out.append(_invalid_utf8_warning(name, bad, n_in, encodings.get(name, "utf-8")))
        skipped = a.get("rejected", {}).get("not_a_file", 0)
        if skipped and not follows.get(name):
            out.append(f"warning: {counted(skipped, 'match', 'matches')} of source '{name}' "
                       f"{'was' if skipped == 1 else 'were'} not read "
                       "(not_a_file: folders, devices or links; report.html's rejects name each, and where a link "
                       "leads): a link out of the folder the source names is read with --follow_links")
    tok = manifest.get("tokenizer", {})
    asked = manifest.get("config", {}).get("tokenizer", {})
    if not asked.get("model_url") and tok.get("vocab_size", 0) < asked.get("vocab_size", 0):
        out.append(f"warning: the tokenizer's vocabulary came out at {tok['vocab_size']} pieces, "
                   f"smaller than the {asked['vocab_size']} asked (too little text or too few distinct words)")
    fraction = manifest.get("config", {}).get("packing", {}).get("valid_fraction", 0)
    totals = manifest.get("totals", {})
    kept = sum(t.get("documents", 0) for t in totals.values())
    if fraction and kept and not totals.get("valid", {}).get("documents"):
        tokens = sum(t.get("tokens", 0) for t in totals.values())
        want = valid_fraction_for_empty(tokens, kept, MaskingConfig.model_fields["rate"].default)
        out.append(f"warning: the valid split is empty: none of the {kept:,} kept documents fell in it "
                   f"(valid_fraction {fraction:g}), so training on it cannot evaluate; a repack of this "
                   f"corpus with a larger --valid_fraction gives it documents (shardforge repack --tokenized "
                   f"{corpus} --output NEW --valid_fraction {want:.2g})")
    return out


def _length_warning(name: str, long: dict[str, int], n_in: int, clean: dict[str, Any]) -> str:
    """Documents left out whole for their length, what each rule's limit is, and the flags that raise them."""
    from schemas.config import CleanConfig

    cfg = CleanConfig.model_validate(clean)
    n = sum(long.values())
    parts = [f"{long['max_words']:,} max_words: over {cfg.max_words:,} words"] if long["max_words"] else []
    if long["max_doc_bytes"]:
        parts.append(f"{long['max_doc_bytes']:,} max_doc_bytes: over {cfg.max_doc_bytes:,} bytes")
    return (f"warning: {n:,} of {n_in:,} documents of source '{name}' ({100 * n / n_in:.0f}%) were longer than the "
            f"length rules allow and left out whole ({'; '.join(parts)}): books and long stories are kept with "
            "--max_words N and --max_doc_bytes BYTES above their length (e.g. --max_words 1000000 --max_doc_bytes "
            "16MB); a text file of many documents is split by the line between them (--delimiter LINE)")


def _invalid_utf8_warning(name: str, bad: int, n_in: int, encoding: str) -> str:
    """Documents rejected for bytes their source's encoding does not decode, and the two ways to keep them."""
    read_as = "UTF-8" if encoding == "utf-8" else encoding
    line = (f"warning: {bad} of {n_in} documents of source '{name}' were rejected as invalid_utf8 (bytes that are "
            f"not {read_as}; report.html's rejects name the files): ")
    if encoding == "utf-8":
        line += ("where the files are in another encoding, --encoding CODEC reads them (e.g. cp1252, latin-1; or "
                 "encoding: in the source's config); else ")
    return line + "clean: {invalid_utf8: repair} in a --config file keeps them with U+FFFD for the bad bytes"


def pii_stats(manifest: dict[str, Any], pii: dict[str, Any] | None) -> dict[str, Any]:
    """PII section: each kind on or off with its placeholder (the effective config), what was replaced
    per source and kind and in all (``replaced`` matches, ``documents`` holding one), the examples."""
    from pipelines.clean.pii import KINDS
    from schemas.config import CleanConfig

    cfg = CleanConfig.model_validate(manifest.get("config", {}).get("clean", {})).pii
    pii = pii or {"counts": {}, "examples": {}}
    totals: dict[str, dict[str, int]] = {}
    for kinds in pii["counts"].values():
        for kind, c in kinds.items():
            t = totals.setdefault(kind, {"replaced": 0, "documents": 0})
            t["replaced"] += c["replaced"]
            t["documents"] += c["documents"]
    return {"kinds": {k: {"on": getattr(cfg, k), "placeholder": getattr(cfg, f"{k}_placeholder")}
                      for k in KINDS},
            "ip_public_only": cfg.ip_public_only, "sources": pii["counts"], "totals": dict(sorted(totals.items())),
            "examples": pii["examples"],
            "unit": "matches replaced by placeholders in kept documents; documents holding at least one"}


def decontamination_warnings(section: dict[str, Any] | None) -> list[str]:
    """A benchmark file with records that did not parse, or with no text long enough to match."""
    out = []
    for name, b in sorted((section or {}).get("benchmarks", {}).items()):
        if b["bad_records"]:
            out.append(f"warning: decontamination: {counted(b['bad_records'], 'record')} of '{name}' "
                       + ("is not JSON and was not read" if b["bad_records"] == 1 else "are not JSON and were not read"))
        if not b["texts"]:
            out.append(f"warning: decontamination: no text of '{name}' has {section['ngram']} words; it cannot "
                       "match any document (set decontaminate.ngram lower)")
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
        "unit": "document tokens before packing (no special tokens); words split on whitespace (Chinese and "
                "Japanese: 1.7 characters a word)",
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
        "pii": pii_stats(manifest, extra.get("pii")),
        "decontamination": extra.get("decontamination"),
        "config": manifest.get("config", {}),
        "rules_enabled": rules_enabled(manifest.get("config", {})),
        "warnings": build_warnings(manifest) + decontamination_warnings(extra.get("decontamination")),
        "software": software_versions(),
    }
