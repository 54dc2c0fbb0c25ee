"""Benchmark: how the full build scales with input size on the local runner.

Generates English-like JSONL corpora of several sizes with
`shardforge.synth.make_article` (deterministic), runs the whole build
(`pipelines.build.run_build`: clean, exact + near dedupe, sentences, tokenizer
training, tokenize, pack, shards, manifest) on Beam's FnApiRunner, one size per
fresh child process, and records wall time and peak RSS (the child's
`ru_maxrss`: FnApiRunner executes in-process, and SentencePiece trains in the
same process; grandchildren, if any, are added from RUSAGE_CHILDREN).

The baseline is the smallest size: the printed ratio is throughput (MB/s) at
the largest size / at the smallest, and the exponent is the log-log slope of
time against size (1.0 = linear). Writes benchmarks/results/scaling.md.

Run: ``python benchmarks/bench_scaling.py [--sizes 5,10,20] [--no-near-dedupe]``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import ROOT, bench_parser, machine, scratch_dir, write_results  # noqa: E402


def write_corpus(path: Path, megabytes: float, seed: int = 11) -> tuple[int, int]:
    """JSONL articles until `megabytes` of text; returns (documents, bytes)."""
    from shardforge.synth import make_article

    rng = random.Random(seed)
    target = int(megabytes * 1_000_000)
    docs = size = 0
    with open(path, "w", encoding="utf-8") as f:
        while size < target:
            text = make_article(rng, rng.randint(12, 40), story=rng.random() < 0.2)
            line = json.dumps({"text": text, "url": f"https://example.org/{docs}"}) + "\n"
            f.write(line)
            docs += 1
            size += len(line.encode())
    return docs, size


def child(megabytes: float, near: bool) -> dict[str, float]:
    """Run one build (in this process) and report time, memory and output counts."""
    from pipelines.build import run_build, summarize
    from pipelines.options import quiet_beam
    from schemas.config import BuildConfig

    quiet_beam()
    with scratch_dir("sf-scaling-") as work:
        docs, nbytes = write_corpus(work / "raw.jsonl", megabytes)
        cfg = BuildConfig.model_validate({
            "sources": [{"name": "web", "input": str(work / "raw.jsonl")}],
            # Template text repeats its 5-10-grams across sentences far more than prose,
            # so Gopher's duplicated-n-gram rule would drop every document: switch it off.
            "clean": {"disabled_rules": ["dup_ngrams"]},
            "dedupe": {"near": near},
            "tokenizer": {"vocab_size": 8000},
            "packing": {"max_seq_len": 512},
        })
        t0 = time.perf_counter()
        manifest = run_build(cfg, str(work / "corpus"))
        wall = time.perf_counter() - t0
        s = summarize(manifest)
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"megabytes": nbytes / 1e6, "docs": docs, "wall_s": wall, "peak_rss_mb": kb / 1024,
            "kept": s["kept"], "duplicates": s["duplicates"], "tokens": s["tokens"], "shards": s["shards"]}


def loglog_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) on log(x)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


def shape_note(slope: float, mem_slope: float) -> str:
    """One honest sentence on what the fitted exponents mean at these small sizes."""
    if slope < 0.9:
        t = ("Time grows sub-linearly here: the fixed start-up cost (pipeline construction, tokenizer training "
             "on a capped sample) is still being amortized at these sizes. ")
    elif slope <= 1.1:
        t = "Time grows about linearly with input: no stage shows super-linear cost at these sizes. "
    else:
        t = "Time grows super-linearly: some stage's cost grows faster than its input (look at dedupe first). "
    return t + (f"Peak RSS grows as size^{mem_slope:.2f}: FnApiRunner runs in one process and holds a fused "
                "stage's data in memory, so single-machine runs stop scaling long before Dataflow does; "
                "these numbers say nothing direct about 320 MB on one machine.")


def main() -> int:
    ap = bench_parser(__doc__, "scaling")
    ap.add_argument("--sizes", default="5,10,20", help="Input sizes in MB, comma-separated.")
    ap.add_argument("--no-near-dedupe", action="store_true", help="Exact dedupe only.")
    ap.add_argument("--child", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    near = not args.no_near_dedupe
    if args.child is not None:
        print(json.dumps(child(args.child, near)))
        return 0

    sizes = [float(s) for s in args.sizes.split(",")]
    rows = []
    for mb in sizes:
        cmd = [sys.executable, __file__, "--child", str(mb)] + (["--no-near-dedupe"] if not near else [])
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if res.returncode != 0:
            print(res.stderr[-3000:], file=sys.stderr)
            return 1
        row = json.loads(res.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{row['megabytes']:.1f} MB ({row['docs']} docs): {row['wall_s']:.1f} s, "
              f"{row['megabytes'] / row['wall_s']:.3f} MB/s, peak RSS {row['peak_rss_mb']:.0f} MB", flush=True)

    xs, ts = [r["megabytes"] for r in rows], [r["wall_s"] for r in rows]
    slope = loglog_slope(xs, ts)
    mem_slope = loglog_slope(xs, [r["peak_rss_mb"] for r in rows])
    ratio = (xs[-1] / ts[-1]) / (xs[0] / ts[0])
    # The part of the time that grows with input: fit t = a + b * MB (fixed start-up + per-MB cost).
    n = len(xs)
    mx, mt = sum(xs) / n, sum(ts) / n
    b = sum((x - mx) * (t - mt) for x, t in zip(xs, ts, strict=True)) / sum((x - mx) ** 2 for x in xs)
    a = mt - b * mx
    print(f"time ~ size^{slope:.2f}; throughput ratio largest/smallest: {ratio:.2f}x; "
          f"fit t = {a:.1f} s + {b:.1f} s/MB; peak RSS ~ size^{mem_slope:.2f}")

    lines = [
        "# Build scaling (local runner)",
        "",
        f"Machine: {machine('apache-beam')}.",
        "",
        f"Command: `python benchmarks/bench_scaling.py --sizes {args.sizes}"
        f"{' --no-near-dedupe' if not near else ''}`",
        "",
        "Full build (`run_build`: clean, exact"
        f"{' + near (MinHash/LSH)' if near else ''} dedupe, sentences, SentencePiece unigram 8k training, "
        "tokenize, FULL-SENTENCES 512 packing, shards, manifest) on FnApiRunner, in-process, one fresh child "
        "process per size. Input: synthetic English-like JSONL from `shardforge.synth.make_article` "
        "(12-40 sentences per document; Gopher's `dup_ngrams` rule disabled because template text repeats "
        "n-grams far more than prose). Peak memory is the child's ru_maxrss.",
        "",
        "| input MB | documents | kept | duplicates | tokens | shards | wall s | MB/s | peak RSS MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['megabytes']:.1f} | {r['docs']} | {r['kept']} | {r['duplicates']} | {r['tokens']:,} | "
                     f"{r['shards']} | {r['wall_s']:.1f} | {r['megabytes'] / r['wall_s']:.3f} | "
                     f"{r['peak_rss_mb']:.0f} |")
    lines += [
        "",
        f"**Exponent of time vs size (log-log slope): {slope:.2f}** (1.0 = linear). "
        f"Throughput at the largest size / at the smallest: **{ratio:.2f}x**. "
        f"Linear fit: t = {a:.1f} s + {b:.1f} s/MB (fixed start-up, then {1 / b if b > 0 else float('nan'):.3f} MB/s "
        f"marginal). Peak RSS grows as size^{mem_slope:.2f}.",
        "",
        f"Sizes: the issue suggests 20, 80, 320 MB; on this shared 2-core machine the full pipeline runs at "
        f"the rate above, so these runs use {', '.join(f'{x:g}' for x in sizes)} MB to stay within a few minutes. "
        + shape_note(slope, mem_slope),
        "",
    ]
    write_results(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
