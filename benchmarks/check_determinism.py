"""Check: two builds of the same input at the same path, in-process and with worker processes, are byte-identical.

The standard (docs/architecture.md, "Determinism"): the same input and config give
byte-identical shards and manifest, and the multi-process local build
(``--direct_num_workers N``) gives the bytes of the single-process one. Worker
processes change how each stage's input is split into bundles and in which order
elements arrive at every GroupByKey and combine, which is what an order-dependent
step would show.

The input is a near-duplicate-heavy corpus (``write_dup_corpus``): English-like
articles (``shardforge.commands.synth.make_article``) with exact copies, near copies at
word edit rates of 1-10 %, copies that add a paragraph (containment) and a shared
boilerplate footer (repeated spans), shuffled over several files so that the
copies of a family land in different files and bundles. Each build runs in a
fresh process through the real CLI (``python -m pipelines.build``), one after
another, from one input folder (a copy elsewhere builds the same corpus: document
ids hash a file's name under its input's folder, ``pipelines.sources.naming``). The input, the builds and the comparison are
``tests/determinism.py`` (tests/test_determinism.py runs the same check, smaller).

On a difference it says which files differ, by stage (clean / dedupe index /
rejects / tokenizer / tokenized / shards / manifest), and the first differing
row of each differing Parquet or JSONL intermediate: the earliest stage that
differs is where to look.

Run: ``python benchmarks/check_determinism.py [--mb 3] [--workers 2] [--keep DIR]``
(3 MB: ~40 s on 2 shared cores). Writes benchmarks/results/determinism.md; exit status 1 if
the builds differ.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import bench_parser, command_line, machine, scratch_dir, write_results  # noqa: E402
from tests.determinism import build, build_config, compare, write_dup_corpus  # noqa: E402


def main() -> int:
    ap = bench_parser(__doc__, "determinism")
    ap.add_argument("--mb", type=float, default=3.0, help="Input size in MB.")
    ap.add_argument("--files", type=int, default=4, help="Input files the records are dealt to.")
    ap.add_argument("--workers", type=int, default=2, help="--direct_num_workers of the second build.")
    ap.add_argument("--no-spans", action="store_true", help="Leave repeated-span removal off.")
    ap.add_argument("--keep", default=None, help="Keep the input and both corpora in this folder (an input "
                    "already there is reused; the corpora are rebuilt).")
    args = ap.parse_args()
    with scratch_dir("sf-determinism-", args.keep) as work:
        raw = work / "raw"
        if not raw.exists():
            print(f"{write_dup_corpus(raw, args.mb, files=args.files)} records in {args.files} files", flush=True)
        config = work / "config.json"
        config.write_text(json.dumps(build_config(raw, not args.no_spans)))
        runs = {"in-process": [], f"{args.workers} workers": ["--direct_num_workers", str(args.workers)]}
        outs, rows = [], []
        for name, beam_args in runs.items():
            out = work / name.replace(" ", "-")
            shutil.rmtree(out, ignore_errors=True)  # a kept folder from an earlier check
            s = build(config, out, beam_args)
            rows.append(f"| {name} | {s['documents_in']} | {s['kept']} | {s['duplicates']} | {s['tokens']:,} | "
                        f"{s['shards']} |")
            print(rows[-1], flush=True)
            outs.append(out)
        records = sum(1 for f in raw.glob("*.jsonl") for _ in f.open())
        diffs = compare(*outs)
    verdict = ("**NOT byte-identical**:\n\n" + "\n".join(f"- {d}" for d in diffs) if diffs else
               "**byte-identical**: every shard, the manifest, the report and every intermediate "
               "(clean, dedupe index, rejects, tokenizer, tokenized).")
    print(verdict, flush=True)
    write_results(args.out, [
        "# Determinism: in-process vs worker processes, one input path", "",
        f"Machine: {machine('apache-beam', load=True)}.", "",
        f"Command: `{command_line()}`", "",
        f"Input: {records} JSONL records ({args.mb:g} MB of `write_dup_corpus`: articles with exact, near, "
        f"containment and repeated-span copies) dealt to {args.files} files. Both builds through "
        "`python -m pipelines.build --config`, each in a fresh process, one after the other.", "",
        "| build | records | kept | duplicates | tokens | shards |", "|---|---:|---:|---:|---:|---:|",
        *rows, "", verdict])
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
