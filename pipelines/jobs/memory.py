"""What a one-shot local build will hold in memory, estimated before it runs, and the hint a large
estimate prints (build in batches, reuse a tokenizer, or run on Dataflow).

A cheap look at the input (a few records of a few files per source, cleaned) says how much of its text
cleaning keeps; the model below scales the memory measured per kept byte and per tokenizer sample byte
by that. Used by ``pipelines.jobs.build`` before a local run; it never stops a build.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from itertools import islice
from typing import Any

from pipelines.clean.lines import line_rules_for
from pipelines.clean.rules import clean_document
from pipelines.records import Document
from pipelines.sources import read_file, split_compression
from pipelines.sources.compression import decompress
from pipelines.sources.rawfiles import list_raw_files
from pipelines.sources.streams import read_up_to
from schemas.config import BuildConfig
from shardforge.console.words import counted
from shardforge.storage import open_read
from shardforge.storage.retry import not_connected

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
    if compression is None:
        return 1.0
    with open_read(url) as raw:
        data = read_up_to(decompress(raw, compression), SAMPLE_BYTES)
        consumed = raw.tell()
    return len(data) / consumed if consumed else 1.0


def _compression(url: str) -> str | None:
    return split_compression(url.rsplit("/", 1)[-1])[1]


def sample_input(cfg: BuildConfig, listed: dict[str, list[Any]]) -> InputSample:
    """Clean a small sample of the input (the first SAMPLE_RECORDS records of a few files per source).

    listed: each source's files (``pipelines.sources.rawfiles.list_raw_files``).
    """
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
    try:
        listed = {src.name: list_raw_files(src.input, src.follow_links) for src in cfg.sources}
        files = [f for fs in listed.values() for f in fs]
        # Compressed input may be far bigger than it is stored: then always look (a sample is cheap).
        if sum(f.size for f in files) < HINT_INPUT_BYTES and not any(_compression(f.url) for f in files):
            return None
        sample = sample_input(cfg, listed)
    except Exception as e:  # noqa: BLE001 - the build itself reports unreadable inputs properly
        if not_connected(e):  # but a store that cannot be reached at all is the build's one line now
            raise
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
            f"sample of {counted(sample.records, 'record')} from {counted(sample.files, 'file')}, {100 * sample.kept_share:.0f}% of "
            f"the text passed cleaning, so expect roughly {estimate / 1e9:,.1f} GB{ram_note} (a rough estimate from "
            f"that sample; {bound / 1e9:,.1f} GB if everything were kept). {fix}")
