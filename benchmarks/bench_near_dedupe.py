"""Near-duplicate quality and speed on REAL text, shardforge against datasketch, rensa and datatrove.

Run from the repository root:

    PYTHONPATH=$PWD python -m benchmarks.bench_near_dedupe [--quick] [--out benchmarks/results/near_dedupe.md]
    PYTHONPATH=$PWD python -m benchmarks.bench_near_dedupe --stage   # CPU-s and peak RSS of Deduplicate only

Text: the Lee news corpus that gensim ships (``tests/realtext.py``: 343 ABC
news articles of ~200 words nobody here wrote). Base documents are runs of
consecutive articles reaching ~450 words (news length) and ~1,600 words (full
length); articles 0-199 make bases, 200-342 are held out for inserted
paragraphs, boilerplate and the bodies of the negatives. A paragraph is three
consecutive sentences (``pipelines.clean.sentences.split_sentences``). The corpus and its
scoring are ``tests/near_dedupe_corpus.py`` (tests/test_dedupe.py's real-text test uses them too).

Edit families (one copy of each per base document, ``copies`` with other seeds):

- ``sub1 sub2 sub3 sub5 sub10 sub20``: that % of words replaced by random words of the corpus
- ``para_insert`` / ``para_delete``: one held-out paragraph inserted / one paragraph (not the lead) dropped
- ``block_insert`` / ``block_delete``: at least 35% of the paragraphs (consecutive) inserted / dropped
  (a dropped block leaves 3-gram Jaccard ~0.6: only containment catches it)
- ``boilerplate``: a fixed header and footer (held-out sentences, the same for every copy)
- ``sent_reorder`` (sentences shuffled inside each paragraph), ``para_reorder`` (paragraphs shuffled)
- ``syndication``: 3% of words substituted and 5 words deleted

"Same-article" families (the recall target): boilerplate, both reorders,
paragraph insert/delete, syndication and 1-5% substitution. 10% and 20% are
graded edits reported for the curve, not targets.

Negatives (must NOT be merged with their base or each other):

- ``neg_template``: the boilerplate header/footer around a held-out body (same template, other body)
- ``neg_lead``: the base's lead paragraph followed by held-out text of the same length (shared lead)
- ``neg_half``: the base's first half followed by held-out text (Jaccard ~0.3, containment ~0.5)

Every document is in a family (its base, or itself for a negative). A copy is
caught when it ends in the same cluster as its original (removed with
``dup_of`` the original, or both pointing at one kept document). Precision: of
all removed documents, the share whose ``dup_of`` is of the same family.

Methods: shardforge's real Beam ``Deduplicate`` (FnApiRunner) with the
default config and with the old defaults (ngram 5, 14x8, threshold 0.8, no
containment); datasketch 2.0 ``MinHashLSH`` (112 permutations, 14x8 bands,
word 5-grams, no verification: a document is dropped when a query finds an
earlier one, the usual streaming use); rensa ``RMinHashLSH`` the same way;
datatrove 0.10 ``MinhashDedup*`` stages with its default ``MinhashConfig``
(5-gram, 14 buckets x 8 hashes, no verification; it needs ``spacy`` for its
English word tokenizer). Peers that are not installed are reported as such.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from pipelines.dedupe.minhash import (  # noqa: E402
    KERNEL_AFTER,
    KERNEL_ENV,
    MinHasher,
    normalize_text,
    overlap,
    shingle_sets,
)
from pipelines.records import Document  # noqa: E402
from schemas.config import DedupeConfig  # noqa: E402
from tests.near_dedupe_corpus import FAMILIES, NEGATIVES, Item, build_corpus, score  # noqa: E402

LENGTHS = {"news": 450, "full": 1600}
OLD_DEFAULTS = DedupeConfig(ngram=5, bands=14, rows=8, threshold=0.8, containment=None)


# ------------------------------------------------------------------ methods

def run_shardforge(items: list[Item], cfg: DedupeConfig) -> dict[str, str]:
    """The real Beam Deduplicate (FnApiRunner): doc_id -> dup_of."""
    from tests.dedupe_corpus import run_dedupe

    docs = [Document(doc_id=it.doc_id, source="bench", text=it.text) for it in items]
    _, dups = run_dedupe(docs, cfg)
    return {d.doc_id: d.dup_of for d in dups}


def _word_shingles(text: str, n: int = 5) -> list[bytes]:
    w = normalize_text(text).split()
    return [" ".join(w[i:i + n]).encode() for i in range(max(1, len(w) - n + 1))]


def _stream(items: list[Item], query_insert) -> dict[str, str]:
    """Streaming LSH use: in doc_id order, a document whose query hits is dropped (dup_of the smallest hit)."""
    out: dict[str, str] = {}
    for it in sorted(items, key=lambda x: x.doc_id):
        hits = query_insert(it)
        if hits:
            out[it.doc_id] = min(hits)
    return out


def run_datasketch(items: list[Item]) -> dict[str, str]:
    """datasketch MinHashLSH, 112 permutations as 14 bands x 8 rows, word 5-grams, no verification."""
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(num_perm=112, params=(14, 8))

    def qi(it: Item) -> list[str]:
        m = MinHash(num_perm=112, seed=1)
        m.update_batch(_word_shingles(it.text))
        hits = lsh.query(m)
        if not hits:
            lsh.insert(it.doc_id, m)
        return hits

    return _stream(items, qi)


def run_rensa(items: list[Item]) -> dict[str, str] | None:
    """rensa RMinHashLSH, 112 permutations in 14 bands, word 5-grams, no verification (None: not installed)."""
    try:
        from rensa import RMinHash, RMinHashLSH
    except ImportError:
        return None
    lsh = RMinHashLSH(threshold=0.5, num_perm=112, num_bands=14)
    keys: list[str] = []

    def qi(it: Item) -> list[str]:
        m = RMinHash(num_perm=112, seed=42)
        m.update([s.decode() for s in _word_shingles(it.text)])
        hits = [keys[k] for k in lsh.query(m)]
        if not hits:
            lsh.insert(len(keys), m)
            keys.append(it.doc_id)
        return hits

    return _stream(items, qi)


def run_datatrove(items: list[Item]) -> dict[str, str] | None:
    """datatrove's MinHash dedup with its default ``MinhashConfig`` (None: not installed).

    Its four file-based stages (signatures, buckets, clusters; the filter's
    ``.remove`` list read directly), one task each except the buckets (one per
    bucket, as its docs run them), in a temporary folder. A removed document's
    ``dup_of`` is the document its cluster keeps (the union-find root).
    """
    try:
        from datatrove.data import Document as DTDocument
        from datatrove.executor import LocalPipelineExecutor
        from datatrove.pipeline.dedup.minhash import (
            MinhashConfig,
            MinhashDedupBuckets,
            MinhashDedupCluster,
            MinhashDedupSignature,
        )
    except ImportError:
        return None
    import struct
    import tempfile

    import datatrove.utils.hashes.xxhash as dt_xxhash
    import xxhash

    # datatrove 0.10.1 hands str to xxhash, which xxhash >= 4 refuses; xxhash 3 hashed
    # the UTF-8 bytes, so this is the same default hash function.
    dt_xxhash.xxhash64 = lambda data: xxhash.xxh64_intdigest(data.encode() if isinstance(data, str) else data)
    ordered = sorted(items, key=lambda x: x.doc_id)
    docs = [DTDocument(text=it.text, id=it.doc_id) for it in ordered]
    cfg = MinhashConfig()
    with tempfile.TemporaryDirectory() as tmp:
        def run(steps: list, tasks: int, name: str) -> None:
            LocalPipelineExecutor(pipeline=steps, tasks=tasks, workers=1, logging_dir=f"{tmp}/logs/{name}").run()

        run([docs, MinhashDedupSignature(output_folder=f"{tmp}/sigs", config=cfg)], 1, "sigs")
        run([MinhashDedupBuckets(input_folder=f"{tmp}/sigs", output_folder=f"{tmp}/buckets", config=cfg)],
            cfg.num_buckets, "buckets")
        run([MinhashDedupCluster(input_folder=f"{tmp}/buckets", output_folder=f"{tmp}/remove", config=cfg,
                                 save_cluster_id=True)], 1, "clusters")

        def tuples(path: str, fmt: str) -> list[tuple[int, ...]]:
            if not os.path.exists(path):
                return []
            with open(path, "rb") as f:
                data = f.read()
            return list(struct.iter_unpack(fmt, data))

        removed = {i for (i,) in tuples(f"{tmp}/remove/000000.remove", "<I")}
        clusters = tuples(f"{tmp}/remove/000000.clusters", "<2I")
    keeper = {c: i for i, c in clusters if i not in removed}
    return {ordered[i].doc_id: ordered[keeper[c]].doc_id for i, c in clusters if i in removed}


# ------------------------------------------------------------------ speed

def signature_speed(texts: list[str], repeat: int = 5) -> dict[str, float]:
    """Documents per CPU-second (one core) of signatures (112 permutations, word shingles) on the same texts."""
    out: dict[str, float] = {}
    hasher = MinHasher(ngram=3, bands=28, rows=4)

    def ours(kernel: str) -> Callable[[], None]:
        def run() -> None:
            os.environ[KERNEL_ENV] = kernel
            hasher.signatures(shingle_sets(texts, hasher.ngram))
        return run

    def ours_5() -> None:
        shingle_sets(texts, 5)
        MinHasher(ngram=5, bands=14, rows=8).signatures(shingle_sets(texts, 5))

    before = os.environ.get(KERNEL_ENV)
    runs = {"shardforge (3-gram, 28x4), compiled kernel (a build's path past KERNEL_AFTER)": ours("numba"),
            "shardforge (3-gram, 28x4), numpy path (a small job's)": ours("numpy")}
    try:
        from rensa import RMinHash

        def rensa_run() -> None:
            for t in texts:
                w = normalize_text(t).split()
                m = RMinHash(num_perm=112, seed=42)
                m.update([" ".join(w[i:i + 3]) for i in range(max(1, len(w) - 2))])
                m.digest()

        runs["rensa RMinHash (3-gram, same normalization)"] = rensa_run
    except ImportError:
        pass
    from datasketch import MinHash

    def ds_run() -> None:
        for t in texts:
            m = MinHash(num_perm=112, seed=1)
            m.update_batch(_word_shingles(t, 3))

    runs["datasketch MinHash (3-gram)"] = ds_run
    # CPU time of this process (per core, whatever else the machine runs), best of
    # `repeat`, the methods interleaved so that a busy spell hits them alike.
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeat):
        for name, fn in runs.items():
            t0 = time.process_time()
            fn()
            best[name] = min(best[name], time.process_time() - t0)
    if before is None:
        os.environ.pop(KERNEL_ENV, None)
    else:
        os.environ[KERNEL_ENV] = before
    for name in runs:
        out[name] = len(texts) / best[name]
    return out


def kernel_load_seconds() -> float:
    """Wall seconds a fresh process spends importing numba and loading the cached MinHash kernel (median of 3)."""
    code = ("import time, numpy as np; t = time.perf_counter(); "
            "from pipelines.dedupe.minhash_kernel import min_affine; "
            "min_affine(np.zeros(1, np.uint32), np.array([0, 1]), np.ones(2, np.uint64), np.ones(2, np.uint64), "
            "np.zeros((1, 2), np.uint64)); print(time.perf_counter() - t)")
    times = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                  cwd=Path(__file__).resolve().parents[1]).stdout) for _ in range(3)]
    return sorted(times)[1]


def near_shuffle_bytes(texts: list[str], cfg: DedupeConfig | None = None) -> dict[str, float]:
    """Bytes per document that the near step hands to its shuffles, encoded with the coder Beam uses for them.

    The elements are those ``NearDedupe`` and ``Deduplicate`` emit (bucket
    entries as LSH shard batches of ``SIGNATURE_BATCH``-document batches,
    the Sketch step's largest; signatures for the two screening joins, shingle sets for
    verification, index rows), encoded by ``FastPrimitivesCoder`` with a
    fallback that refuses to pickle: what crosses a shuffle of the local and
    the Dataflow runner alike.
    """
    import apache_beam as beam

    from pipelines.dedupe.candidates import lsh_shard_batches
    from pipelines.dedupe.deduplicate import SIGNATURE_BATCH
    from pipelines.dedupe.index import index_row
    from pipelines.dedupe.near import shingles_by_node, signature_by_node
    from pipelines.dedupe.sketch import minhasher, sketch_documents

    class _Refuse(beam.coders.Coder):
        def encode(self, value):
            raise TypeError(f"{type(value).__name__} would be pickled")

        def decode(self, encoded):
            raise TypeError("never")

    coder = beam.coders.FastPrimitivesCoder(fallback_coder=_Refuse())
    docs = [Document(doc_id=f"doc-{i:07d}", source="bench", text=t) for i, t in enumerate(texts)]
    sketches = sketch_documents(docs, minhasher(cfg or DedupeConfig()))
    parts = {
        "bucket entries": [e for i in range(0, len(sketches), SIGNATURE_BATCH)
                           for e in lsh_shard_batches(sketches[i:i + SIGNATURE_BATCH], minhasher(cfg or DedupeConfig()))],
        "signatures (x2 joins)": [e for s in sketches for e in signature_by_node(s)] * 2,
        "shingle sets": [e for s in sketches for e in shingles_by_node(s)],
        "index rows": [(s.doc_id, index_row(s)) for s in sketches],
    }
    out = {name: sum(len(coder.encode(e)) for e in els) / len(docs) for name, els in parts.items()}
    entries = sum(len(nodes) for _, (_, _, nodes, _) in parts["bucket entries"])
    out["bucket entries per document"] = entries / len(docs)
    out["bytes per bucket entry"] = out["bucket entries"] / max(1.0, out["bucket entries per document"])
    out["LSH shard elements per document"] = len(parts["bucket entries"]) / len(docs)
    out["text bytes per document"] = sum(len(t.encode()) for t in texts) / len(docs)
    return out


def stage_cost(items: list[Item], cfg: DedupeConfig | None = None) -> dict[str, float]:
    """CPU seconds and peak RSS of the real Beam ``Deduplicate`` on ``items`` (one process, FnApiRunner).

    Run it in a fresh process to read peak RSS as the stage's (``--stage``).
    """
    import resource

    docs = [Document(doc_id=it.doc_id, source="bench", text=it.text) for it in items]
    from tests.dedupe_corpus import run_dedupe

    run_dedupe(docs[:20], cfg)  # imports and the runner's first start, not the stage

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    c0, t0 = cpu(), time.perf_counter()
    _, dups = run_dedupe(docs, cfg)
    return {"documents": len(docs), "MB": sum(len(d.text.encode()) for d in docs) / 1e6, "duplicates": len(dups),
            "cpu_s": cpu() - c0, "wall_s": time.perf_counter() - t0,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def s_curve(bands: int, rows: int, points=(0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9)) -> list[float]:
    """P(candidate) at each Jaccard of ``points`` for bands x rows."""
    return [1 - (1 - s ** rows) ** bands for s in points]


# ------------------------------------------------------------------ main

def _row(name: str, q: dict | None, secs: float | None) -> str:
    if q is None:
        return f"| {name} | not installed |" + " |" * (len(FAMILIES) + 4)
    cells = " | ".join(f"{q['recall'][e]:.2f}" for e in FAMILIES)
    return (f"| {name} | {q['same_article_recall']:.3f} | {q['precision']:.3f} ({q['false_removals']}/{q['removed']}) "
            f"| {q['negatives_merged']}/{q['negatives']} | {cells} | {secs:.1f} |")


def main(argv: list[str] | None = None) -> None:
    from tests.realtext import news_documents

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer bases (a smoke run)")
    ap.add_argument("--out", default="benchmarks/results/near_dedupe.md")
    ap.add_argument("--stage", action="store_true",
                    help="only the CPU time and peak RSS of Deduplicate on both corpora (run in a fresh process)")
    ap.add_argument("--speed", action="store_true",
                    help="only the signature speed section (against rensa and datasketch), to --out")
    args = ap.parse_args(argv)
    articles = news_documents()
    if args.speed:
        lines = ["# MinHash signature speed on real text (bench_near_dedupe.py --speed)", "",
                 f"{platform.platform()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}, "
                 f"load average {os.getloadavg()[0]:.1f} at the start. Lee news corpus (gensim)."]
        lines += speed_section(texts_for_speed(articles, args.quick))
        _write(args.out, lines)
        return
    if args.stage:
        items = build_corpus(articles, LENGTHS["full"], copies=2) + build_corpus(articles, LENGTHS["news"], copies=1)
        print(stage_cost(items))
        return
    lines = ["# Near-duplicate dedupe on real text (bench_near_dedupe.py)", "",
             "Command: `PYTHONPATH=$PWD python -m benchmarks.bench_near_dedupe`",
             f"{platform.platform()}, Python {platform.python_version()}, 1 process. Lee news corpus (gensim).",
             "Columns: same-article recall, precision (false/removed), negatives merged, recall per edit family, "
             "seconds.", ""]
    dt_note = ("datatrove: its default MinhashConfig (5-gram shingles of its spaCy word tokenizer, 14 buckets x 8 "
               "hashes, xxhash64) through its own signature, bucket and cluster stages (LocalPipelineExecutor); "
               "a removed document's dup_of is the document its cluster keeps. No verification, like the "
               "datasketch and rensa rows.")
    for label, words in LENGTHS.items():
        copies = 1 if label == "news" else 2
        items = build_corpus(articles, words, copies=copies, max_bases=(12 if args.quick else None))
        n_words = np.mean([len(it.text.split()) for it in items if it.edit == "orig"])
        lines += [f"## {label}: {sum(it.edit == 'orig' for it in items)} originals of {n_words:.0f} words, "
                  f"{len(items)} documents", "",
                  "| method | same-article recall | precision | negatives merged | "
                  + " | ".join(FAMILIES) + " | s |",
                  "|---|---|---|---|" + "---|" * len(FAMILIES) + "---|"]
        methods = [("shardforge (default: 3-gram, 28x4, J>=0.7 or C>=0.9)", lambda i: run_shardforge(i, DedupeConfig())),
                   ("shardforge old default (5-gram, 14x8, J>=0.8)", lambda i: run_shardforge(i, OLD_DEFAULTS)),
                   ("datasketch 2.0 MinHashLSH 14x8, 5-gram, no verification", run_datasketch),
                   ("rensa RMinHashLSH 14 bands, 5-gram, no verification", run_rensa),
                   ("datatrove 0.10 MinHash dedup, default config (5-gram, 14x8, no verification)", run_datatrove)]
        for name, fn in methods:
            t0 = time.perf_counter()
            res = fn(items)
            secs = time.perf_counter() - t0
            q = None if res is None else score(items, res)
            lines.append(_row(name, q, secs))
            print(lines[-1], flush=True)
        # True similarity of each edit to its original, to read the recall against.
        orig = {it.family: it.text for it in items if it.edit == "orig"}
        sims: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for it in items:
            key = it.edit if it.edit in FAMILIES + NEGATIVES else None
            if key:
                base = it.family.rsplit("-", 1)[0] if it.edit in NEGATIVES else it.family
                a, b = shingle_sets([orig[base], it.text], 3)
                sims[key].append(overlap(a, b))
        lines += ["", "True 3-gram similarity to the original (median Jaccard / median containment, min Jaccard):", "",
                  "| edit | J median | C median | J min |", "|---|---|---|---|"]
        for k, v in sims.items():
            j, c = np.array(v).T
            lines.append(f"| {k} | {np.median(j):.3f} | {np.median(c):.3f} | {j.min():.3f} |")
        lines.append("")
    lines += [dt_note, ""]
    # S-curves.
    pts = (0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9)
    lines += ["## S-curve: P(candidate) at Jaccard s", "", "| bands x rows | " + " | ".join(map(str, pts)) + " |",
              "|---|" + "---|" * len(pts)]
    for b, r in ((28, 4), (20, 5), (14, 8)):
        lines.append(f"| {b}x{r} | " + " | ".join(f"{p:.3f}" for p in s_curve(b, r, pts)) + " |")
    texts = texts_for_speed(articles, args.quick)
    lines += speed_section(texts)
    sb = near_shuffle_bytes(texts)
    lines += ["", "## What the near step shuffles, per document (FastPrimitivesCoder, no pickle fallback)", "",
              "| element | bytes per document |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in sb.items()]
    _write(args.out, lines)


def texts_for_speed(articles: list[str], quick: bool) -> list[str]:
    """News-length documents (450 words) built from the real articles: the speed section's input."""
    return [it.text for it in build_corpus(articles, 450, max_bases=(12 if quick else 60))]


def speed_section(texts: list[str]) -> list[str]:
    """Markdown lines: signatures per second per core of each implementation, and the kernel's load cost."""
    sp = signature_speed(texts)
    total_words = sum(len(t.split()) for t in texts)
    lines = ["", f"## Signature speed, one core: {len(texts)} documents, {total_words} words (news length)", "",
             "| implementation | docs/s | vs rensa |", "|---|---|---|"]
    ref = next((v for k, v in sp.items() if k.startswith("rensa")), None)
    for k, v in sp.items():
        lines.append(f"| {k} | {v:.0f} | {v / ref:.2f}x |" if ref else f"| {k} | {v:.0f} | - |")
    load = kernel_load_seconds()
    lines += ["", f"The compiled kernel's one-time cost in a fresh process (numba's import and its cached code): "
              f"{load:.2f} s wall. A build switches to it after {KERNEL_AFTER:,} shingle x permutation "
              "products (`pipelines.dedupe.minhash.KERNEL_AFTER`); the numpy path gives the same signatures."]
    return lines


def _write(out: str, lines: list[str]) -> None:
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
