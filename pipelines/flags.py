"""The Beam commands' own flags and their --help, without Beam (importing it takes ~2 s).

``python -m pipelines.build`` / ``repack`` / ``serve`` (and ``shardforge build`` / ``repack``) answer
``--help`` from here before anything imports Beam (``exit_on_help``); the same adders register the
flags on Beam's ``PipelineOptions`` (``pipelines.options.BuildOptions`` …), so the help and the parser
the job runs with are one list. A command's description is its module's docstring, read from the
source (``module_doc``) so that the module need not be imported. ``--help_beam`` (Beam's own options)
needs Beam: ``pipelines.options.handle_help``.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from shardforge.console.args import ArgumentParser

DEFAULT_SPILL_MB = 32

BEAM_HELP_NOTE = (
    "\nEvery standard Beam pipeline option (--runner, --project, --region, --temp_location, "
    "--sdk_container_image, --direct_num_workers, ...) is accepted too (--help_beam lists them); any other "
    "flag is an error. Without --runner the job runs locally on Beam's FnApiRunner (nothing is downloaded): "
    "--doc_processes N cleans, sketches and splits documents in N processes beside the runner (0: one per "
    "core; the faster way to use a machine's cores, docs/scaling.md), --direct_num_workers N runs N Beam "
    "worker processes instead, and stage data past --spill_mb MB per buffer "
    f"({DEFAULT_SPILL_MB:g}; -1 keeps it all in memory) goes to temporary files under --spill_dir.")


SERVE_HELP_NOTE = """
Build flags of `python -m pipelines.build` (--config, --rule, --max_seq_len,
--vocab_size, --tokenizer, …; not --input/--output) shape version 1.
"""


def add_build_flags(parser: Any) -> None:
    """``python -m pipelines.build``'s flags (``BuildOptions``)."""
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
    g.add_argument("--tokenizer", default=None, help="Reuse an existing tokenizer instead of training: an spm.model, a "
                   "tokenizer.json (ours, or an existing model's: docs/continued-pretraining.md) or "
                   "a Hugging Face model folder holding one.")
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


def add_local_runner_flags(parser: Any) -> None:
    """The local runner's cores and memory (``LocalRunnerOptions``): every command that runs a pipeline."""
    g = parser.add_argument_group("local runner cores and memory")
    g.add_argument("--doc_processes", type=int, default=None,
                   help="Local runner: clean (with language ID), sketch and split documents into sentences "
                        "in this many processes beside the runner, which goes on with the rest (0: one per "
                        "core; default 1: in the runner). Output does not depend on it. See docs/scaling.md "
                        "for it against --direct_num_workers.")
    g.add_argument("--spill_mb", type=float, default=None,
                   help="Local runner: MB of encoded data each stage-to-stage buffer keeps in memory; the rest "
                        "goes to temporary files, and stages stream their input and output (default "
                        f"{DEFAULT_SPILL_MB}; 0 spills everything; -1 keeps everything in memory, as Beam "
                        "does). Output does not depend on it.")
    g.add_argument("--spill_dir", default=None,
                   help="Local runner: folder for the spilled data (default: the system temporary folder; "
                        "files are unlinked at creation and gone when the build ends).")


def add_repack_flags(parser: Any) -> None:
    """``python -m pipelines.repack``'s flags (``RepackOptions``)."""
    g = parser.add_argument_group("shardforge repack")

    def add(*names: str, **kw: Any) -> None:
        # Beam parses every PipelineOptions subclass with one parser, so a flag that
        # BuildOptions already defines (same name, type and meaning) must not be added twice.
        try:
            g.add_argument(*names, **kw)
        except argparse.ArgumentError:
            pass

    add("--tokenized", default=None, help="Parent corpus root (or its manifest.json, or its tokenized/ folder).")
    add("--output", default=None, help="New corpus URL (must differ from the parent's).")
    add("--rule", default=None, help="Packing rule: full_sentences | doc_sentences | segment_pair_nsp | "
                                     "sentence_pair_nsp | sop (default: the parent's).")
    add("--max_seq_len", type=int, default=None, help="Max tokens per sequence (default: the parent's).")
    add("--short_seq_prob", type=float, default=None,
        help="Share of shorter target lengths (default: 0.1 for pair rules, else 0).")
    add("--seed", type=int, default=None, help="Seed of the split and packing coins (default: the parent's).")
    add("--valid_fraction", type=float, default=None, help="Share of documents in valid (default: the parent's).")
    add("--shard_bytes", type=int, default=None, help="Target shard size in bytes (default: the parent's).")
    add("--shard_samples", type=int, default=None, help="Target shard size in samples (default: the parent's).")
    add("--groups", type=int, default=None, help="Packing groups (default: from the token count).")
    add("--tokenizer_ref", action="store_true", default=False,
        help="Refused: a manifest names only files inside its corpus, so the tokenizer is always copied.")


def add_serve_flags(p: Any) -> None:
    """``python -m pipelines.serve``'s own flags (the rest are build flags and Beam options)."""
    p.add_argument("--watch", default=None,
                   help="Glob or folder URL of raw files to ingest (default: the one recorded in the corpus).")
    p.add_argument("--corpus", required=True, help="Corpus root URL (created at the first batch).")
    p.add_argument("--source", default=None, help="Source name of the watched files (default: recorded, else 'other').")
    p.add_argument("--poll", type=float, default=30.0, help="Seconds between looks at the watch glob.")
    p.add_argument("--settle", type=float, default=5.0,
                   help="A file is taken only once its modification time is this many seconds old "
                        "(a local file may still be being written).")
    p.add_argument("--max_files", type=int, default=256, help="Most files per batch (= per version).")
    p.add_argument("--once", action="store_true", help="Ingest what is pending now, then exit.")
    p.add_argument("--batch_retries", type=int, default=3,
                   help="How many times a batch that failed on a transient error (the store could not be "
                        "reached, a 5xx, a dropped connection) is tried again in place, after pauses of "
                        "--poll seconds doubling each time, before the service stops (0: stop at once; "
                        "--once never waits).")
    p.add_argument("--log_level", default="INFO")


def module_doc(module: str) -> str | None:
    """A module's docstring, read from its source without importing it (``module.__doc__`` once imported)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    return ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8")), clean=False)


def command_parser(prog: str, description: str | None,
                   add: Callable[[argparse.ArgumentParser], None]) -> ArgumentParser:
    """The --help parser of a Beam command: its own flags plus --help_beam."""
    parser = ArgumentParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add(parser)
    parser.add_argument("--help_beam", action="store_true",
                        help="List every Apache Beam pipeline option (--runner, --project, --region, …) and exit.")
    return parser


def build_parser() -> ArgumentParser:
    return command_parser("python -m pipelines.build", module_doc("pipelines.jobs.build"), add_build_flags)


def repack_parser() -> ArgumentParser:
    return command_parser("python -m pipelines.repack", module_doc("pipelines.jobs.repack"), add_repack_flags)


def serve_parser() -> ArgumentParser:
    p = command_parser("python -m pipelines.serve", (module_doc("pipelines.jobs.serve") or "") + SERVE_HELP_NOTE,
                       lambda _: None)
    add_serve_flags(p)
    return p


def wants_help(argv: Sequence[str]) -> bool:
    """-h / --help, and not --help_beam (Beam lists its own options; that needs Beam)."""
    return "--help_beam" not in argv and ("-h" in argv or "--help" in argv)


def print_help(parser: argparse.ArgumentParser) -> None:
    parser.print_help()
    print(BEAM_HELP_NOTE)


def answer_help(parser: Callable[[], argparse.ArgumentParser], argv: Sequence[str]) -> bool:
    """Print the command's --help if argv asks for it; True if it did."""
    if not wants_help(argv):
        return False
    print_help(parser())
    return True


def exit_on_help(parser: Callable[[], argparse.ArgumentParser], argv: Sequence[str]) -> None:
    """As the program (before Beam is imported): print --help and exit 0 if argv asks for it."""
    if answer_help(parser, argv):
        sys.stdout.flush()
        raise SystemExit(0)


def build_help(argv: Sequence[str]) -> bool:
    """``shardforge build --help`` before the build module (and Beam) is imported; True if answered."""
    return answer_help(build_parser, argv)


def repack_help(argv: Sequence[str]) -> bool:
    """``shardforge repack --help`` before the repack module (and Beam) is imported; True if answered."""
    return answer_help(repack_parser, argv)


def serve_help(argv: Sequence[str]) -> bool:
    """``shardforge serve --help`` before the serve module (and Beam) is imported; True if answered."""
    return answer_help(serve_parser, argv)
