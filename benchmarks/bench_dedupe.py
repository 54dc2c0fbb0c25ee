"""Dedupe benchmark: MinHash + LSH throughput (ours vs datasketch) and precision / recall.

    python benchmarks/bench_dedupe.py [--speed_docs 3000] [--families 300] [--words 300]

1. Speed: documents/s on one core for signatures + LSH banding (index build),
   ours (``pipelines.dedupe.minhash``, numpy over batches) vs ``datasketch`` MinHash +
   MinHashLSH with the same shingles and the same bands x rows, same documents,
   same process. The documents are real prose (tests/prose.py's paragraphs, 3-9 a
   document); the build's dedupe settings.
2. Quality: a generated corpus with known exact duplicates, near duplicates at
   word edit rates 1%..20% and unrelated documents, run through the Beam
   ``Deduplicate`` transform (FnApiRunner); precision and recall.
Results: benchmarks/results/dedupe.md.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import bench_parser, machine, write_results  # noqa: E402
from pipelines.dedupe.minhash import normalize_text  # noqa: E402
from tests.dedupe_corpus import evaluate, make_corpus, run_dedupe  # noqa: E402
from tests.prose import PARAGRAPHS_PER_DOC, prose_document  # noqa: E402


def prose_texts(n: int, seed: int = 7) -> list[str]:
    """n documents of real paragraphs drawn by a seeded RNG (no paragraph twice in a document)."""
    import random

    rng = random.Random(seed)
    return [prose_document(rng) for _ in range(n)]

# ------------------------------------------------------------------ speed

def bench_ours(texts: list[str], ngram: int, bands: int, rows: int, batch: int = 512) -> float:
    """Seconds for signatures + LSH bucket index of all texts with pipelines.dedupe.minhash."""
    from pipelines.dedupe.minhash import MinHasher, shingle_sets

    hasher = MinHasher(ngram=ngram, bands=bands, rows=rows, seed=1)
    buckets: dict[int, list[int]] = defaultdict(list)
    t0 = time.perf_counter()
    for lo in range(0, len(texts), batch):
        chunk = texts[lo : lo + batch]
        keys = hasher.band_keys(hasher.signatures(shingle_sets(chunk, ngram)))
        for i, row in enumerate(keys.tolist()):
            for k in row:
                buckets[k].append(lo + i)
    return time.perf_counter() - t0


def bench_datasketch(texts: list[str], ngram: int, bands: int, rows: int) -> float:
    """Seconds for the same work with datasketch MinHash (update_batch) + MinHashLSH."""
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(num_perm=bands * rows, params=(bands, rows))
    t0 = time.perf_counter()
    for i, t in enumerate(texts):
        w = normalize_text(t).split()
        sh = {" ".join(w[j : j + ngram]).encode("utf-8") for j in range(max(1, len(w) - ngram + 1))}
        m = MinHash(num_perm=bands * rows, seed=1)
        m.update_batch(list(sh))
        lsh.insert(i, m, check_duplication=False)
    return time.perf_counter() - t0



# ------------------------------------------------------------------ main

def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, "dedupe")
    ap.add_argument("--speed_docs", type=int, default=3000)
    ap.add_argument("--families", type=int, default=300)
    ap.add_argument("--unrelated", type=int, default=1000)
    ap.add_argument("--words", type=int, default=300, help="words per generated document (quality)")
    args = ap.parse_args(argv)
    from schemas.config import DedupeConfig

    cfg = DedupeConfig()
    # Speed on unrelated documents (the common case at corpus scale).
    texts = prose_texts(args.speed_docs)
    words = sorted(len(t.split()) for t in texts)
    bench_ours(texts[:200], cfg.ngram, cfg.bands, cfg.rows)  # warm caches and imports
    t_ours = bench_ours(texts, cfg.ngram, cfg.bands, cfg.rows)
    t_ds = bench_datasketch(texts, cfg.ngram, cfg.bands, cfg.rows)
    n = len(texts)
    ratio = t_ds / t_ours
    print(f"signatures + LSH, {n} docs: ours {n / t_ours:,.0f} docs/s, datasketch {n / t_ds:,.0f} docs/s, "
          f"ratio {ratio:.2f}x")

    docs, truth = make_corpus(args.families, args.unrelated, args.words, seed=11)
    t0 = time.perf_counter()
    kept, dups = run_dedupe(docs, cfg)
    t_pipe = time.perf_counter() - t0
    assert len(kept) + len(dups) == len(docs), "a document was lost or duplicated"
    q = evaluate(docs, truth, dups, cfg.ngram, cfg.threshold)
    print(f"quality on {len(docs)} docs: precision {q['precision']:.4f}, recall@J>=0.85 {q['recall']:.4f} "
          f"({q['pairs_at_recall_threshold']} pairs), pipeline {len(docs) / t_pipe:,.0f} docs/s end to end")

    lines = [
        "# Dedupe benchmark",
        "",
        f"Machine: {machine('numpy')}.",
        f"Config: ngram {cfg.ngram}, bands {cfg.bands} x rows {cfg.rows}, threshold {cfg.threshold}.",
        "",
        "## Signatures + LSH (one process, one core)",
        "",
        "| implementation | docs | docs/s |",
        "|---|---:|---:|",
        f"| ours (pipelines.dedupe.minhash, numpy batches of 512) | {n} | {n / t_ours:,.0f} |",
        f"| datasketch MinHash.update_batch + MinHashLSH | {n} | {n / t_ds:,.0f} |",
        "",
        f"**Ratio: {ratio:.2f}x** (ours / datasketch throughput), documents of real prose (tests/prose.py's "
        f"paragraphs, {PARAGRAPHS_PER_DOC[0]}-{PARAGRAPHS_PER_DOC[1]} a document): median {words[len(words) // 2]} "
        f"words, {words[0]}-{words[-1]}.",
        "",
        "## Quality (Beam Deduplicate on FnApiRunner)",
        "",
        f"Generated text, so that every pair's truth is known (on real text: bench_near_dedupe.py). "
        f"{len(docs)} documents: {args.families} families (original, exact copy, one near copy per edit rate) "
        f"+ {args.unrelated} unrelated; end-to-end pipeline {len(docs) / t_pipe:,.0f} docs/s "
        "(FnApiRunner, in-process).",
        "",
        "| metric | value | target |",
        "|---|---:|---:|",
        f"| precision (removed doc in the same family as its kept doc) | {q['precision']:.4f} | >= 0.99 |",
        f"| recall, pairs with true Jaccard >= 0.85 ({q['pairs_at_recall_threshold']} pairs): "
        f"not both left in the corpus | {q['recall']:.4f} | >= 0.95 |",
        f"| same pairs: both in one cluster (one kept, the other its duplicate) "
        f"| {q['recall_same_cluster']:.4f} | |",
        f"| exact copies caught | {q['exact_recall']:.4f} | 1.0 |",
        f"| near removals with true Jaccard to kept doc >= {cfg.threshold} | {q['near_verified_frac']:.4f} | 1.0 |",
        "",
        "Near copy vs its original, per word edit rate (substitutions, insertions, deletions):",
        "",
        "| word edit rate | near copies | mean true Jaccard to original | near copy removed "
        "| same cluster as original |",
        "|---:|---:|---:|---:|---:|",
    ]
    for rate, (cnt, removed_frac, clustered, mj) in q["per_rate"].items():  # type: ignore[union-attr]
        lines.append(f"| {rate:.0%} | {cnt} | {mj:.3f} | {removed_frac:.3f} | {clustered:.3f} |")
    write_results(args.out, lines)


if __name__ == "__main__":
    main()
