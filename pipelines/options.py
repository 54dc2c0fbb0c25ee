"""Beam pipeline options for the build jobs.

`BuildOptions` is a `PipelineOptions` subclass, so `--help`, `--runner`,
`--project`, `--region`, `--temp_location`, `--sdk_container_image` … all work
the standard Beam way. With no `--runner`, jobs run on Beam's in-process
`FnApiRunner`: apache-beam 2.77's default DirectRunner first tries to download
the Prism runner from the internet, which fails (slowly) offline.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from apache_beam.options.pipeline_options import (
    PipelineOptions,
    SetupOptions,
    StandardOptions,
)

from schemas.config import BuildConfig, SourceConfig, load_config, parse_config
from schemas.errors import UserError

LOCAL_RUNNER = "FnApiRunner"


def quiet_beam() -> None:
    """Silence Beam's import-time noise (the harmless 'apitools not found' warning)."""
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    logging.getLogger().setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="apache_beam")


class BuildOptions(PipelineOptions):
    """Options of `python -m pipelines.build` (run with --help to list them)."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        g = parser.add_argument_group("shardforge build")
        g.add_argument("--input", action="append", default=None,
                       help="Raw input URL or glob (local, gs://, s3://). Repeat for several sources; "
                            "prefix with NAME= to tag a source (e.g. ccnews=gs://b/cc/*.jsonl).")
        g.add_argument("--output", default=None, help="Corpus output URL (a local folder, gs://…, s3://…).")
        g.add_argument("--config", default=None, help="Build config (YAML/JSON, any fsspec URL); flags override it.")
        g.add_argument("--format", default=None, help="Input format for --input sources (default: auto by extension).")
        g.add_argument("--rule", default=None,
                       help="Packing rule: full_sentences | doc_sentences | segment_pair_nsp | sentence_pair_nsp | sop.")
        g.add_argument("--max_seq_len", type=int, default=None, help="Max tokens per sequence, specials included (512).")
        g.add_argument("--vocab_size", type=int, default=None, help="SentencePiece vocabulary size to train.")
        g.add_argument("--tokenizer", default=None, help="Reuse an existing SentencePiece model (URL) instead of training.")
        g.add_argument("--valid_fraction", type=float, default=None, help="Share of documents in the valid split.")
        g.add_argument("--shard_bytes", type=int, default=None, help="Target shard size in bytes (256 MB).")
        g.add_argument("--shard_samples", type=int, default=None, help="Target shard size in samples.")
        g.add_argument("--seed", type=int, default=None, help="Seed of every content-keyed random choice.")
        g.add_argument("--min_words", type=int, default=None, help="Minimum words per document (Gopher: 50).")
        g.add_argument("--no_near_dedupe", action="store_true", default=False, help="Exact dedupe only.")
        g.add_argument("--dedupe_index", default=None,
                       help="Signature index of an existing corpus to deduplicate against (incremental builds).")
        g.add_argument("--batch_mb", type=float, default=None,
                       help="Build in batches of at most this many MB of input files, each appended to the "
                            "corpus as a version: memory bounded by the batch, not the corpus (local runs; "
                            "see docs/scaling.md). A rerun resumes after the last committed batch.")


def split_input(arg: str) -> tuple[str, str]:
    """'ccnews=gs://b/x/*.jsonl' -> ('ccnews', url); an untagged URL gets the name 'other'."""
    if "=" in arg and "://" not in arg.split("=", 1)[0]:
        name, url = arg.split("=", 1)
        return name.strip(), url.strip()
    return "other", arg


def build_config_from_options(opts: BuildOptions) -> BuildConfig:
    """Merge --config (if any) with the command-line flags into a validated BuildConfig."""
    o = opts.view_as(BuildOptions)
    data: dict[str, Any] = load_config(BuildConfig, o.config).model_dump() if o.config else {}
    if o.input:
        sources = []
        for i, arg in enumerate(o.input):
            name, url = split_input(arg)
            if name == "other" and len(o.input) > 1:
                name = f"other{i}"
            src: dict[str, Any] = {"name": name, "input": url}
            if o.format:
                src["format"] = o.format
            sources.append(SourceConfig.model_validate(src).model_dump())
        data["sources"] = sources
    if not data.get("sources"):
        raise UserError("no input: give --input URL (or a --config with sources)")

    def put(section: str, key: str, value: Any) -> None:
        if value is not None:
            data.setdefault(section, {})[key] = value

    put("packing", "rule", o.rule)
    put("packing", "max_seq_len", o.max_seq_len)
    put("packing", "valid_fraction", o.valid_fraction)
    put("tokenizer", "vocab_size", o.vocab_size)
    put("tokenizer", "model_url", o.tokenizer)
    put("shards", "target_bytes", o.shard_bytes)
    put("shards", "target_samples", o.shard_samples)
    put("clean", "min_words", o.min_words)
    put("dedupe", "index", o.dedupe_index)
    if o.no_near_dedupe:
        put("dedupe", "near", False)
    if o.seed is not None:
        data["seed"] = o.seed
    return parse_config(BuildConfig, data, what="build config")


def finalize_options(opts: PipelineOptions) -> PipelineOptions:
    """Default to the local FnApiRunner; keep the main session off (our DoFns are module-level)."""
    std = opts.view_as(StandardOptions)
    if not std.runner:
        std.runner = LOCAL_RUNNER
    opts.view_as(SetupOptions).save_main_session = False
    return opts
