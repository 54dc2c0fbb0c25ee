"""Dedupe index lookups: what every worker holds to probe the index, the new keys themselves (before)
against a filter of them (``pipelines.dedupe.index.KeyFilter``, now), on real prose.

    python benchmarks/bench_index_probe.py [--new-mb 20] [--old-mb 20] [--repeats 3]

A build deduplicating against an old index (``dedupe.index``, ``--batch_mb`` batches, ``serve``)
reads the index parts against a probe of its new documents: their band keys (28 bands and the
anchor keys, ~20 a KB of text) for the LSH step, and their exact hashes. Every worker that reads
index parts holds the probe. Before, it was the keys as a side input list, made sorted unique
(int64) on the worker, and a Python set of the hashes; now it is one filter of each, 20 to 40 bits a
key, built once. Measured in one process, on the same sketches:

* held: the bytes a worker holds for the lookups (the side input as it arrives, and the probe made
  from it), and the peak of Python allocations while making the probe (``tracemalloc``: numpy's
  arrays included); per KB of the new text, which is what it grows with;
* lookup: CPU seconds to read one index part (the old documents) against each probe, and the
  entries read (a filter's false positives are read too, then dropped by the join by key).

Text: ``tests/prose.py`` documents (Wikipedia and ABC news paragraphs from the gensim wheel). The
new documents are other documents of the same pool, 10 % of them near copies of old ones (a word
changed) and 2 % exact copies (upper-cased), so the lookups find matches. Results: benchmarks/results/index-probe.md.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import bench_parser, command_line, machine, write_results  # noqa: E402
from pipelines.dedupe.bloom import Bloom  # noqa: E402
from pipelines.dedupe.index import (  # noqa: E402
    PROBE_BITS_PER_KEY,
    index_bucket_entries,
    index_exact_matches,
    key_filter,
    sketches_to_parquet,
)
from pipelines.dedupe.sketch import minhasher, sketch_documents  # noqa: E402
from pipelines.records import Document  # noqa: E402
from schemas.config import DedupeConfig  # noqa: E402
from tests.prose import write_prose_corpus  # noqa: E402


def _documents(path: Path, mb: float, seed: int, tag: str) -> list[Document]:
    write_prose_corpus(path, mb, seed=seed)
    with path.open(encoding="utf-8") as f:
        return [Document(f"{tag}-{i:07d}", "web", json.loads(line)["text"]) for i, line in enumerate(f)]


def unique_keys(key_arrays: list[bytes]) -> np.ndarray:
    """The probe before the filter: the side input's key arrays made one sorted unique int64 array."""
    return np.unique(np.concatenate([np.frombuffer(k, dtype=np.int64) for k in key_arrays]))


def _traced(fn):
    """(result, peak bytes of Python allocations while ``fn`` ran)."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _cpu(fn, repeats: int):
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t)
    return out, best


def main() -> int:
    ap = bench_parser(__doc__, "index-probe")
    ap.add_argument("--new-mb", type=float, default=20.0, help="MB of new documents (default: %(default)s).")
    ap.add_argument("--old-mb", type=float, default=20.0, help="MB of indexed documents (default: %(default)s).")
    ap.add_argument("--repeats", type=int, default=3, help="Best of this many lookups (default: %(default)s).")
    args = ap.parse_args()
    hasher = minhasher(DedupeConfig())
    with tempfile.TemporaryDirectory() as tmp:
        old = _documents(Path(tmp) / "old.jsonl", args.old_mb, 7, "old")
        new = _documents(Path(tmp) / "new.jsonl", args.new_mb, 8, "new")
        rng = random.Random(3)
        copied = rng.sample(old, len(new) // 10 + len(new) // 50)
        for i, d in enumerate(copied[:len(new) // 10]):
            words = d.text.split()
            words[len(words) // 2] = "changed"
            new[i] = Document(new[i].doc_id, "web", " ".join(words))
        for i, d in enumerate(copied[len(new) // 10:], start=len(new) // 10):
            new[i] = Document(new[i].doc_id, "web", d.text.upper())  # the same text once normalized
        old_sketches = sketch_documents(old, hasher)
        part = Path(tmp) / "part-00000.parquet"
        part.write_bytes(sketches_to_parquet(old_sketches))
        new_sketches = sketch_documents(new, hasher)
        text_kb = sum(len(d.text.encode("utf-8")) for d in new) / 1000

        # What the side inputs carry: one key array per document, one hash per document.
        key_arrays = [s.band_keys.tobytes() for s in new_sketches if s.shingles.size]
        hashes = [s.exact_hash for s in new_sketches]
        n_keys = sum(len(k) // 8 for k in key_arrays)
        list_bytes = sys.getsizeof(key_arrays) + sum(sys.getsizeof(k) for k in key_arrays)

        keys, keys_peak = _traced(lambda: unique_keys(key_arrays))
        hash_set, set_peak = _traced(lambda: set(hashes))
        set_bytes = sys.getsizeof(hash_set) + sum(sys.getsizeof(h) for h in hash_set)
        hash_list_bytes = sys.getsizeof(hashes) + sum(sys.getsizeof(h) for h in hashes)
        key_wire, filter_peak = _traced(lambda: key_filter(key_arrays))
        hash_wire, hash_filter_peak = _traced(lambda: key_filter(hashes, hashes=True))
        key_bloom, hash_bloom = Bloom.from_wire(key_wire), Bloom.from_wire(hash_wire)

        url = str(part)
        got_keys, cpu_keys = _cpu(lambda: sum(1 for _ in index_bucket_entries(url, keys)), args.repeats)
        got_filter, cpu_filter = _cpu(lambda: sum(1 for _ in index_bucket_entries(url, key_bloom)), args.repeats)
        got_set, cpu_set = _cpu(lambda: sum(1 for _ in index_exact_matches(url, hash_set)), args.repeats)
        got_hfilter, cpu_hfilter = _cpu(lambda: sum(1 for _ in index_exact_matches(url, hash_bloom)), args.repeats)

    def row(what: str, side: int, held: int, peak: int, cpu: float, read: int) -> str:
        return (f"| {what} | {side / 1e6:.2f} | {held / 1e6:.2f} | {peak / 1e6:.2f} | "
                f"{(side + held) / text_kb:.1f} | {cpu:.3f} | {read:,} |")

    lines = [
        "# Dedupe index lookups: the new keys against a filter of them",
        "",
        f"`{command_line()}`",
        "",
        f"Machine: {machine('apache-beam', 'pyarrow', 'numpy')}",
        "",
        f"New documents: {len(new):,} ({text_kb / 1000:.1f} MB of text), {n_keys:,} band and anchor keys "
        f"({n_keys / text_kb:.1f} a KB); index part: {len(old):,} documents. Filter: {PROBE_BITS_PER_KEY} "
        f"bits a key at least, {len(key_wire[1]) * 8 / n_keys:.1f} here ({key_wire[0]} probes).",
        "",
        "Side input: what arrives on a worker; probe: what the lookup makes of it and holds beside it;"
        " peak: Python allocations while making the probe (tracemalloc); lookup: CPU seconds for the part,"
        f" best of {args.repeats}; read: entries the lookup yields.",
        "",
        "| probe | side input MB | probe MB | peak making it MB | bytes held per KB of new text | lookup CPU s | read |",
        "|---|---|---|---|---|---|---|",
        row("band keys, sorted unique (before)", list_bytes, keys.nbytes, keys_peak, cpu_keys, got_keys),
        row("band keys, filter (now)", len(key_wire[1]), 0, filter_peak, cpu_filter, got_filter),
        row("exact hashes, set (before)", hash_list_bytes, set_bytes, set_peak, cpu_set, got_set),
        row("exact hashes, filter (now)", len(hash_wire[1]), 0, hash_filter_peak, cpu_hfilter, got_hfilter),
        "",
        f"Held per worker, band keys: {(list_bytes + keys.nbytes) / len(key_wire[1]):.1f}x less with the filter; "
        f"exact hashes: {(hash_list_bytes + set_bytes) / len(hash_wire[1]):.1f}x less. "
        f"Lookup CPU, filter / keys: {cpu_filter / cpu_keys:.2f} (band keys), {cpu_hfilter / cpu_set:.2f} (hashes). "
        f"Extra entries read (false positives, dropped by the join): {got_filter - got_keys} of band keys, "
        f"{got_hfilter - got_set} of hashes.",
    ]
    print("\n".join(lines))
    write_results(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
