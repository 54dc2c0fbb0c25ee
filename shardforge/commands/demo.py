"""`shardforge demo`: the whole path on a generated corpus, in a local folder.

1. writes a small synthetic multi-source raw corpus (with duplicates and junk),
2. builds it with the Beam job on the local FnApiRunner (nothing downloaded),
3. trains a small RoBERTa-style encoder on the shards with the `cpu` recipe
   (trainer/recipes/cpu.yaml: fewer steps than its full run, so the demo stays short),
4. prints a summary: documents in / kept / duplicates / rejected, shards, tokens, loss (and writes
   the same numbers as JSON to summary.json in the output folder).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import time

from schemas.config import BuildConfig, SourceConfig
from schemas.errors import UserError
from shardforge.console.args import ArgumentParser, at_least
from shardforge.console.words import counted

DEMO_SOURCES = ("ccnews", "openwebtext", "stories")
SUMMARY_JSON = "summary.json"  # the summary as data, in the output folder
DEMO_ENTRIES = ("raw", "corpus", "run")  # the folders a demo writes beside it


def demo_build_config(globs: dict[str, str]) -> BuildConfig:
    return BuildConfig.model_validate({
        "sources": [SourceConfig(name=n, input=globs[n]).model_dump() for n in DEMO_SOURCES],
        # The generated text reuses a few dozen phrases, so Gopher's repetition
        # rules (rightly) reject it; everything else runs with the defaults.
        "clean": {"disabled_rules": ["dup_ngrams", "top_ngrams"]},
        "tokenizer": {"vocab_size": 800},
        # 0.1: a valid split on the smallest demo (at 0.05, 75 kept documents gave none 2 % of the
        # time, over corpora of other doc ids).
        "packing": {"max_seq_len": 128, "valid_fraction": 0.1},
        "shards": {"target_samples": 64},
    })


def check_demo_folder(path: str) -> None:
    """UserError unless ``path`` is a folder the demo may clear: empty, or holding only what a demo writes."""
    if not os.path.exists(path):
        return
    if not os.path.isdir(path):
        raise UserError(f"--output {path} is a file, not a folder: give the demo a folder of its own")
    foreign = sorted(set(os.listdir(path)) - {*DEMO_ENTRIES, SUMMARY_JSON})
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise UserError(f"--output {path} holds {shown}, which no demo wrote; the demo clears its folder first: "
                        "give it a new or empty folder (or an earlier demo's)")


class _LineFormatter(logging.Formatter):
    """A log record as the commands' own lines read: ``warning: ...`` (the level in lowercase)."""

    def format(self, record: logging.LogRecord) -> str:
        record = logging.makeLogRecord(record.__dict__)
        record.levelname = record.levelname.lower()
        return super().format(record)


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="shardforge demo", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", default="demo-output",
                   help="Local folder for raw data, corpus and run, cleared first: new, empty, or an earlier "
                        "demo's (default: %(default)s).")
    p.add_argument("--docs", type=at_least(3), default=80,
                   help="Documents per generated source, 3 or more (default: %(default)s).")
    p.add_argument("--steps", type=int, default=60,
                   help="Training steps of the cpu recipe (its full run: 4000; default: %(default)s).")
    p.add_argument("--keep", action="store_true", help="Do not clear the output folder first.")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error(f"argument --steps: {args.steps} is not a step count (1 or more)")
    handler = logging.StreamHandler()
    handler.setFormatter(_LineFormatter("%(levelname)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])  # "warning: ...", as the build's lines
    if os.path.exists(args.output) and not args.keep:
        check_demo_folder(args.output)
        shutil.rmtree(args.output)
    raw, corpus, run = (os.path.join(args.output, d) for d in DEMO_ENTRIES)

    from pipelines.options import quiet_beam
    from shardforge.commands.synth import write_demo_corpus

    quiet_beam()
    t0 = time.perf_counter()
    print(f"[1/3] generating a synthetic corpus in {raw}")
    globs = write_demo_corpus(raw, docs_per_source=args.docs)

    from pipelines.jobs.build import run_build
    from pipelines.jobs.summary import summarize

    print(f"[2/3] building shards in {corpus} (Beam FnApiRunner)")
    manifest = run_build(demo_build_config(globs), corpus)
    built = summarize(manifest)
    t1 = time.perf_counter()

    from trainer.recipes import resolve_train_config
    from trainer.train import train

    print(f"[3/3] training with the cpu recipe for {counted(args.steps, 'step')} in {run}")
    # The recipe's warmup is for its full run: a short demo warms up over its first tenth (none under 10 steps).
    warmup = min(100, args.steps // 10)
    result = train(resolve_train_config("cpu", None, {"data": corpus, "output": run, "steps": args.steps}, [
        f"optim.warmup_steps={warmup}", "log_every=10", f"eval_every={args.steps}", "eval_batches=4",
        "resume=false"]))
    t2 = time.perf_counter()
    summary = {
        **built,
        "first_loss": round(result["first_loss"], 4),
        "last_loss": round(result["last_loss"], 4),
        "build_seconds": round(t1 - t0, 1),
        "train_seconds": round(t2 - t1, 1),
        "manifest": os.path.join(corpus, "manifest.json"),
        "report": os.path.join(corpus, "report.html"),
        "checkpoints": os.path.join(run, "checkpoints"),
    }
    # The same numbers as data, for a script: beside the corpus and the run, not again on the screen.
    summary_file = os.path.join(args.output, SUMMARY_JSON)
    with open(summary_file, "w", encoding="utf-8") as f:
        f.write(json.dumps(summary, indent=1) + "\n")
    print("\nshardforge demo summary")
    print(f"  documents in {summary['documents_in']:,}: kept {summary['kept']:,}, duplicates {summary['duplicates']:,}, "
          f"filtered {summary['filtered']:,}, rejected {summary['rejected']:,}")
    print(f"  shards {summary['shards']:,}, samples {summary['samples']:,}, tokens {summary['tokens']:,}")
    print(f"  loss {summary['first_loss']} (step 1) -> {summary['last_loss']} (step {result['steps']})")
    print(f"  report: {summary['report']}")
    print(f"  (these numbers and more as JSON: {summary_file})")
    return 0
