"""The build job: raw text -> clean -> dedupe -> sentences -> tokenizer -> tokenize -> pack -> shards.

    python -m pipelines.build --input 'data/*.jsonl' --output out/corpus
    python -m pipelines.build --input ccnews=gs://raw/cc/*.jsonl.gz --output gs://corpus/v1 \\
        --runner DataflowRunner --project P --region R --temp_location gs://tmp/beam

The driver of a one-shot build: options, the attempt tag, one run of the graph
(``pipelines.graph``), the summary. ``--batch_mb`` hands the build to ``pipelines.jobs.batched``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from apache_beam.options.pipeline_options import StandardOptions

from pipelines.corpus.commit import check_output, one_shot_tag
from pipelines.flags import build_parser
from pipelines.graph import build_pipeline
from pipelines.localrunner import progress
from pipelines.options import (
    LOCAL_RUNNER,
    BuildOptions,
    build_config_from_options,
    check_beam_args,
    finalize_options,
    handle_help,
    make_pipeline,
    quiet_beam,
    spill_settings,
)
from pipelines.report.report import build_warnings
from pipelines.report.timings import (
    TIMINGS_JSON,
    BuildTimings,
    describe_runner,
    measure,
    summary_line,
    write_timings,
)
from schemas.config import BuildConfig
from schemas.errors import UserError
from schemas.manifest import MANIFEST_NAME, Manifest
from shardforge.console.run import DATA_JOB_INTERRUPTED, run_cli
from shardforge.storage import exists, join, redact_url


def run_build(cfg: BuildConfig, output: str, beam_args: list[str] | None = None,
              batch_mb: float | None = None, timings: dict[str, float] | None = None) -> Manifest:
    """Run the build on the configured runner and return the committed manifest.

    batch_mb: build in batches of that much input (``pipelines.jobs.batched``).
    timings: filled with the driver's wall time per phase, in seconds: ``tag`` (listing and
    fingerprinting the inputs), ``pipeline`` (the Beam run: every stage, the commit and the
    report), or ``batched`` for a batched build.

    A committed build also gets ``timings.json`` / ``timings.html`` next to its report: those
    phases and the seconds per stage Beam measured (``pipelines.report.timings``; run-dependent, so
    outside report.json).
    """
    from shardforge.storage.contract import load_manifest

    timings = {} if timings is None else timings
    start = time.monotonic()
    if batch_mb is not None:
        from pipelines.corpus.commit import check_folder
        from pipelines.jobs.batched import build_in_batches

        check_folder(output)
        m = build_in_batches(cfg, output, batch_mb, beam_args or [])  # writes the sum over its batches
        timings["batched"] = time.monotonic() - start
        return m
    from pipelines.corpus.commit import raise_if_lost

    opts = finalize_options(BuildOptions(beam_args or []))  # first: a runner that cannot run says so at once
    runner = describe_runner(opts)  # before make_pipeline, which rewrites the running mode
    tag = one_shot_tag(cfg)
    check_output(output, tag)
    timings["tag"] = time.monotonic() - start
    start = time.monotonic()
    try:
        with progress.local_bars(opts), make_pipeline(opts) as p:
            build_pipeline(p, cfg, output, tag=tag)
    except Exception:
        raise_if_lost(output, MANIFEST_NAME, tag)  # another build committed meanwhile: that is the reason
        raise
    timings["pipeline"] = time.monotonic() - start
    raise_if_lost(output, MANIFEST_NAME, tag)  # the commit step lost: say so (its objects are gone)
    if not exists(join(output, MANIFEST_NAME)):  # the commit step found objects of this attempt removed
        raise UserError(f"{redact_url(output)}: nothing was committed: objects of this build were removed while "
                        "it wrote them (the warnings above name them). Run one writer per output; a rerun "
                        "starts again.")
    write_timings(output, BuildTimings(dict(timings), [("", measure(p.result, runner, timings["pipeline"]))]))
    manifest, _ = load_manifest(output)
    return manifest


# What a one-shot build on the local runner holds (benchmarks/results/scaling-memory.md, synthetic
# English that cleaning almost entirely keeps). With the runner's stage data spilled to disk
# (pipelines.localrunner.spill, the default) the build stays near LOCAL_RSS_BASE plus ~1 MB per MB of kept text,
# except for the tokenizer sample: held as strings and by SentencePiece's trainer, ~22 MB per MB of
# sample, and the sample is the kept text up to ``tokenizer.effective_sample_bytes`` (by default
# 2,000 bytes per vocabulary piece, at least 16 MB: ~0.35 GB at the default 8k pieces).
# Without spilling (--spill_mb -1) Beam's runner holds every stage's output: ~33 MB per MB kept.
LOCAL_RSS_BASE = 600_000_000
LOCAL_RSS_PER_KEPT_BYTE = 1
LOCAL_RSS_PER_SAMPLE_BYTE = 22
LOCAL_RSS_PER_KEPT_BYTE_IN_MEMORY = 33
HINT_INPUT_BYTES = 100_000_000  # below this, no sampling and no hint (even all kept: < 4 GB)
HINT_RSS_BYTES = 4_000_000_000  # warn from this estimate on (or from 80% of the machine's memory if less)
SAMPLE_FILES = 4  # per source, spread over its file list
SAMPLE_RECORDS = 500  # per sampled file
SAMPLE_BYTES = 4_000_000  # decompressed bytes read to measure a compressed file's expansion


@dataclass(frozen=True)
class InputSample:
    """What a cheap look at the input found: its stored size and how much of its text cleaning keeps."""

    stored_bytes: int  # total stored size of every input file
    text_bytes: float  # estimated decompressed size of the whole input
    kept_share: float  # share of the sampled records' text that passed cleaning
    records: int
    files: int


def _spread(items: list[Any], k: int) -> list[Any]:
    """k items evenly spread over a list (its first, last and in between)."""
    if len(items) <= k:
        return items
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]


def _expansion(url: str, compression: str | None) -> float:
    """Decompressed bytes per stored byte, from the first SAMPLE_BYTES of the file (1.0 when not compressed)."""
    from pipelines.sources.streams import decompress, read_up_to
    from shardforge.storage import open_read

    if compression is None:
        return 1.0
    with open_read(url) as raw:
        data = read_up_to(decompress(raw, compression), SAMPLE_BYTES)
        consumed = raw.tell()
    return len(data) / consumed if consumed else 1.0


def _compression(url: str) -> str | None:
    from pipelines.sources import split_compression

    return split_compression(url.rsplit("/", 1)[-1])[1]


def sample_input(cfg: BuildConfig, listed: dict[str, list[Any]]) -> InputSample:
    """Clean a small sample of the input (the first SAMPLE_RECORDS records of a few files per source).

    listed: each source's files (``pipelines.sources.rawfiles.list_raw_files``).
    """
    from itertools import islice

    from pipelines.clean.rules import clean_document, line_rules_for
    from pipelines.records import Document
    from pipelines.sources import read_file

    stored = text = 0.0
    seen = kept = records = files = 0
    for src in cfg.sources:
        on = line_rules_for(src.name, cfg.sources, cfg.clean)
        ratios = []
        for f in _spread(listed[src.name], SAMPLE_FILES):
            files += 1
            ratios.append(_expansion(f.url, _compression(f.url)))
            for rec in islice(read_file(f.url, src), SAMPLE_RECORDS):
                records += 1
                if isinstance(rec, Document):
                    seen += len(rec.text)
                    out = clean_document(rec, cfg.clean, on)
                    kept += len(out.text) if isinstance(out, Document) else 0
        size = sum(f.size for f in listed[src.name])
        stored += size
        text += size * (sum(ratios) / len(ratios) if ratios else 1.0)
    return InputSample(int(stored), text, kept / seen if seen else 1.0, records, files)


def local_rss_estimate(cfg: BuildConfig, kept_text_bytes: float, spilled: bool = True) -> float:
    """Peak RSS of a one-shot local build that keeps this much text (the model above)."""
    if not spilled:
        return LOCAL_RSS_BASE + LOCAL_RSS_PER_KEPT_BYTE_IN_MEMORY * kept_text_bytes
    sample = 0.0 if cfg.tokenizer.model_url else min(kept_text_bytes, cfg.tokenizer.effective_sample_bytes)
    return LOCAL_RSS_BASE + LOCAL_RSS_PER_KEPT_BYTE * kept_text_bytes + LOCAL_RSS_PER_SAMPLE_BYTE * sample


def machine_memory() -> int | None:
    """This machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def batching_hint(cfg: BuildConfig, spilled: bool = True) -> str | None:
    """A warning for a one-shot local build whose estimated memory is large, or None.

    The estimate (``local_rss_estimate``) scales the measured RSS per kept byte and per tokenizer
    sample byte by the input's (decompressed) size and by the share of a small sample's text that
    passes cleaning; the message says so, and gives the all-kept bound next to it. It warns from
    HINT_RSS_BYTES on, or from 80% of this machine's memory if that is less.
    """
    from pipelines.sources.rawfiles import list_raw_files

    try:
        listed = {src.name: list_raw_files(src.input) for src in cfg.sources}
        files = [f for fs in listed.values() for f in fs]
        # Compressed input may be far bigger than it is stored: then always look (a sample is cheap).
        if sum(f.size for f in files) < HINT_INPUT_BYTES and not any(_compression(f.url) for f in files):
            return None
        sample = sample_input(cfg, listed)
    except Exception:  # noqa: BLE001 - the build itself reports unreadable inputs properly
        return None
    estimate = local_rss_estimate(cfg, sample.text_bytes * sample.kept_share, spilled)
    ram = machine_memory()
    limit = min(HINT_RSS_BYTES, 0.8 * ram) if ram else HINT_RSS_BYTES
    if estimate < limit:
        return None
    bound = local_rss_estimate(cfg, sample.text_bytes, spilled)
    size = f"{sample.stored_bytes / 1e6:,.0f} MB of input"
    if abs(sample.text_bytes - sample.stored_bytes) > 0.05 * sample.stored_bytes:
        size += f" (~{sample.text_bytes / 1e6:,.0f} MB decompressed)"
    if spilled:
        why = (f"A one-shot build on the local runner keeps its stage data on disk past --spill_mb, but the tokenizer "
               f"trains in memory on a sample of the kept text of up to tokenizer.sample_bytes "
               f"({cfg.tokenizer.effective_sample_bytes / 1e6:,.0f} MB): about {LOCAL_RSS_PER_SAMPLE_BYTE} MB of RAM per MB "
               "of sample")
        fix = ("Lower tokenizer.sample_bytes, reuse a trained tokenizer (--tokenizer URL), pass --batch_mb 64 to "
               "build in batches (docs/scaling.md), or run on Dataflow.")
    else:
        why = (f"A one-shot build on the local runner with --spill_mb -1 holds the text that survives cleaning in "
               f"memory (Beam's FnApiRunner keeps each stage's output): about {LOCAL_RSS_PER_KEPT_BYTE_IN_MEMORY} "
               "MB of RAM per MB kept")
        fix = "Drop --spill_mb -1, pass --batch_mb 64 to build in batches (docs/scaling.md), or run on Dataflow."
    ram_note = f" (this machine has {ram / 1e9:,.1f} GB)" if ram else ""
    return (f"note: {size}. {why}, measured on synthetic English (benchmarks/results/scaling-memory.md). In a "
            f"sample of {sample.records:,} records from {sample.files} file(s), {100 * sample.kept_share:.0f}% of "
            f"the text passed cleaning, so expect roughly {estimate / 1e9:,.1f} GB{ram_note} (a rough estimate from "
            f"that sample; {bound / 1e9:,.1f} GB if everything were kept). {fix}")


def summarize(m: Manifest, report: dict[str, Any] | None = None) -> dict[str, Any]:
    """The CLI's summary of a committed build: counts from the manifest, digests from report.json."""
    from pipelines.report.report import rule_counts

    acc = m.accounting
    out: dict[str, Any] = {
        "documents_in": sum(a.input for a in acc.values()),
        "kept": sum(a.kept for a in acc.values()),
        "filtered": sum(sum(a.filtered.values()) for a in acc.values()),
        "duplicates": sum(sum(a.duplicate.values()) for a in acc.values()),
        "rejected": sum(sum(a.rejected.values()) for a in acc.values()),
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
    from pipelines.report.report import REPORT_JSON
    from shardforge.storage import exists, read_text

    url = join(output, REPORT_JSON)
    return json.loads(read_text(url)) if exists(url) else None


def read_timings(output: str) -> dict[str, Any] | None:
    """The build's timings.json (``pipelines.report.timings``), or None where none was written."""
    from shardforge.storage import exists, read_text

    url = join(output, TIMINGS_JSON)
    return json.loads(read_text(url)) if exists(url) else None


def main(argv: list[str] | None = None) -> int:
    """CLI entry (`python -m pipelines.build`, `shardforge build`); 2 with one line on user errors."""
    quiet_beam()
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if handle_help(parser, argv):
        return 0

    def body() -> int:
        check_beam_args(argv)  # Beam would silently drop a flag no option knows (a typo, --vocab-size)
        opts = BuildOptions(argv)
        o = opts.view_as(BuildOptions)
        if not o.output:
            raise UserError("--output URL is required")
        cfg = build_config_from_options(opts)
        _, beam_args = parser.parse_known_args(argv)
        if o.batch_mb is None and opts.view_as(StandardOptions).runner in (None, LOCAL_RUNNER):
            hint = batching_hint(cfg, spilled=spill_settings(opts) is not None)
            if hint:
                print(hint, file=sys.stderr)
        timings: dict[str, float] = {}
        manifest = run_build(cfg, o.output, beam_args, batch_mb=o.batch_mb, timings=timings)
        report = read_report(o.output)
        summary = summarize(manifest, report)
        # Wall time this driver process saw per phase, in seconds (the pipeline's includes writing
        # the report); where the time went inside the pipeline is stage_seconds, below.
        summary["wall_seconds"] = {k: round(v, 2) for k, v in timings.items()}
        # Seconds per stage as Beam measured them (None where the runner returns none): timings.json.
        stage_doc = read_timings(o.output)
        if stage_doc is not None:
            summary["stage_seconds"] = stage_doc["stages"] and {k: round(v, 2) for k, v in stage_doc["stages"].items()}
            summary["timings"] = redact_url(join(o.output, TIMINGS_JSON))
            print(summary_line(stage_doc), file=sys.stderr)
        for w in build_warnings(manifest.model_dump(mode="json")):
            print(w, file=sys.stderr)
        summary["manifest"] = redact_url(join(o.output, "manifest.json"))
        summary["report"] = redact_url(join(o.output, "report.html"))
        print(json.dumps(summary, indent=1))
        return 0

    return run_cli(body, argv, interrupted=DATA_JOB_INTERRUPTED)

