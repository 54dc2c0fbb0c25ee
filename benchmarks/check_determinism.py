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
another, from ONE input folder. Document ids hash the input path
(``pipelines.records.make_doc_id``), so two builds of the same text at two paths
legitimately differ (train/valid split, packing groups, tokenizer sample order):
compare builds of one path only.

On a difference it says which files differ, by stage (clean / dedupe index /
rejects / tokenizer / tokenized / shards / manifest), and the first differing
row of each differing Parquet or JSONL intermediate: the earliest stage that
differs is where to look.

Run: ``python benchmarks/check_determinism.py [--mb 3] [--workers 2] [--keep DIR]``
(3 MB: ~40 s on 2 shared cores). Writes benchmarks/results/determinism.md; exit status 1 if
the builds differ.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import ROOT, bench_parser, command_line, machine, scratch_dir, write_results  # noqa: E402

BOILERPLATE = ("Subscribe to our newsletter for the latest local news. "
               "Follow us on social media for daily updates from the region. "
               "All rights reserved by the publisher of this newspaper.")


def write_dup_corpus(folder: Path, megabytes: float, seed: int = 5, files: int = 4) -> int:
    """Write about ``megabytes`` of JSONL with duplicate families into ``files`` files; returns the records.

    Per family an original article and, at random, an exact copy, 1-3 near copies
    (``perturb`` at 1-10 %), a copy with an added paragraph, and (one in ten) the
    boilerplate footer; records are shuffled before they are dealt to the files.
    """
    from shardforge.commands.synth import make_article, perturb

    rng = random.Random(seed)
    target = int(megabytes * 1_000_000)
    texts: list[str] = []
    size = 0
    while size < target:
        base = make_article(rng, rng.randint(12, 32), story=rng.random() < 0.2)
        if rng.random() < 0.1:
            base += "\n\n" + BOILERPLATE
        family = [base]
        if rng.random() < 0.3:
            family.append(base)
        family += [perturb(base, rng, rng.choice((0.01, 0.02, 0.05, 0.1))) for _ in range(rng.choice((0, 1, 1, 2, 3)))]
        if rng.random() < 0.2:
            family.append(base + "\n\n" + make_article(rng, 4))
        texts += family
        size += sum(len(t) for t in family)
    rng.shuffle(texts)
    folder.mkdir(parents=True, exist_ok=True)
    outs = [open(folder / f"part-{i:03d}.jsonl", "w", encoding="utf-8") for i in range(files)]
    try:
        for i, text in enumerate(texts):
            outs[i % files].write(json.dumps({"text": text, "url": f"https://example.org/{i}"}) + "\n")
    finally:
        for f in outs:
            f.close()
    return len(texts)


def build_config(raw: Path, spans: bool) -> dict[str, Any]:
    """The build config of the check (JSON for ``pipelines.jobs.build --config``)."""
    return {
        "sources": [{"name": "web", "input": str(raw / "*.jsonl")}],
        # Template text repeats its 5-10-grams across sentences far more than prose (bench_scaling.py).
        "clean": {"disabled_rules": ["dup_ngrams"]},
        "dedupe": {"near": True, "exact": True, "repeated_spans": spans},
        "tokenizer": {"vocab_size": 4000},
        "packing": {"max_seq_len": 512},
    }


def files_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under root, by relative path (the reports' images included; not the
    stage timings, which measure the run)."""
    from pipelines.report.record import RUN_DEPENDENT_FILES

    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            if n in RUN_DEPENDENT_FILES:
                continue
            p = Path(dirpath) / n
            out[p.relative_to(root).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return dict(sorted(out.items()))


def stage_of(path: str) -> str:
    """Which stage a corpus file comes from (by its folder or name)."""
    for part, stage in (("/clean/", "clean"), ("/dedupe/", "dedupe index"), ("/rejects/", "rejects (duplicates)"),
                        ("/tokenizer/", "tokenizer"), ("/tokenized/", "tokenized")):
        if part in f"/{path}":
            return stage
    if path.endswith(".tar"):
        return "shards"
    return "manifest" if path == "manifest.json" else "report"


def first_row_difference(a: Path, b: Path) -> str:
    """The first row at which two Parquet or JSONL files differ, as one line (or why not)."""
    if a.suffix == ".parquet":
        import pyarrow.parquet as pq

        ta, tb = pq.read_table(a).to_pylist(), pq.read_table(b).to_pylist()
    elif a.suffix == ".jsonl":
        ta, tb = a.read_text().splitlines(), b.read_text().splitlines()
    else:
        return f"{a.stat().st_size} vs {b.stat().st_size} bytes"
    for i, (ra, rb) in enumerate(zip(ta, tb, strict=False)):
        if ra != rb:
            keys = [k for k in ra if ra[k] != rb.get(k)] if isinstance(ra, dict) else []
            who = ra.get("doc_id", "") if isinstance(ra, dict) else str(ra)[:120]
            return f"row {i} ({who}) differs{' in ' + ', '.join(keys) if keys else ''}"
    return f"{len(ta)} vs {len(tb)} rows"


def compare(a: Path, b: Path) -> list[str]:
    """Lines describing every difference between two corpus folders (empty: byte-identical)."""
    da, db = files_digest(a), files_digest(b)
    lines = [f"only in one build: {name}" for name in sorted(set(da) ^ set(db))]
    for name in sorted(set(da) & set(db)):
        if da[name] != db[name]:
            lines.append(f"[{stage_of(name)}] {name}: {first_row_difference(a / name, b / name)}")
    return lines


def build(config: Path, output: Path, beam_args: list[str]) -> dict[str, Any]:
    """One build through the CLI in a fresh process; its summary line (JSON)."""
    res = subprocess.run([sys.executable, "-m", "pipelines.build", "--config", str(config), "--output", str(output),
                          *beam_args], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if res.returncode != 0:
        raise SystemExit(f"build failed ({' '.join(beam_args) or 'in-process'}):\n{res.stderr[-3000:]}")
    out = res.stdout
    return json.loads(out[out.rindex("\n{") + 1 if "\n{" in out else out.index("{"):])  # the summary: the last JSON


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
