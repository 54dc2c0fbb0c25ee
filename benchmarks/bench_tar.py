"""Shard encoding: samples -> .npy members -> a deterministic USTAR tar, ours vs tarfile + np.save.

    python benchmarks/bench_tar.py                     # 4,000 samples of 512 tokens, both rules
    python benchmarks/bench_tar.py --samples 20000 --rounds 7

Ours: ``schemas.sample.encode_sample`` (a cached .npy header + the raw ids) and
``schemas.sample.write_tar`` (headers from a template checked against tarfile, one write per
sample). Baseline: the same functions as they were before (``tests/reference_tar.py``: ``np.save``
per member, ``tarfile.TarFile.addfile`` per member). Both encode the same packed sequences into one
in-memory shard; the bytes are checked equal. Timed interleaved (baseline, ours, baseline, ...);
the median round is reported. Results go to benchmarks/results/tar.md.
"""

from __future__ import annotations

import io
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import bench_parser, command_line, interleaved, machine, write_results  # noqa: E402
from pipelines.records import TokenIds, token_ids  # noqa: E402
from schemas import sample  # noqa: E402
from tests import reference_tar  # noqa: E402

Sequence = tuple[str, TokenIds, TokenIds | None, int | None, dict]


def packed_sequences(n: int, seq_len: int, vocab: int, pairs: bool, seed: int = 0) -> list[Sequence]:
    """Sequences shaped like a build's: full length but for BERT's 10% short targets, 1-3 documents each."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = seq_len if rng.random() >= 0.1 else rng.randint(2, seq_len)
        ids = token_ids([rng.randrange(vocab) for _ in range(length)])  # what packing hands the writer
        types = token_ids([0 if j < length // 2 else 1 for j in range(length)]) if pairs else None
        meta = {"doc_ids": [f"web-{rng.getrandbits(48):012x}-{rng.randrange(10**6):08d}"
                            for _ in range(rng.randint(1, 3))]}
        out.append((f"train-00000-{i:08d}", ids, types, rng.randrange(2) if pairs else None, meta))
    return out


def shard(encode, write, seqs: list[Sequence], vocab: int) -> bytes:
    buf = io.BytesIO()
    write(buf, ((key, encode(ids, vocab, types, label, meta)) for key, ids, types, label, meta in seqs))
    return buf.getvalue()


def main() -> int:
    ap = bench_parser(__doc__, "tar")
    ap.add_argument("--samples", type=int, default=4000, help="Packed sequences per shard.")
    ap.add_argument("--seq_len", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=50265, help="Vocabulary size (<= 65536: uint16 ids).")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rows = []
    for rule, pairs in (("FULL-SENTENCES (input_ids + json)", False),
                        ("SEGMENT-PAIR+NSP (+ token_type_ids + label)", True)):
        seqs = packed_sequences(args.samples, args.seq_len, args.vocab, pairs)
        fns = {
            "baseline": lambda s=seqs: shard(reference_tar.encode_sample, reference_tar.write_tar, s, args.vocab),
            "ours": lambda s=seqs: shard(sample.encode_sample, sample.write_tar, s, args.vocab),
        }
        ref, ours = fns["baseline"](), fns["ours"]()
        if ref != ours:
            raise SystemExit(f"{rule}: the shards differ ({len(ours)} vs {len(ref)} bytes)")
        times = interleaved(fns, args.rounds)
        cpu = {name: statistics.median(t.cpu for t in ts) for name, ts in times.items()}
        mb = len(ours) / 1e6
        rows.append(f"| {rule} | {args.samples:,} | {mb:.1f} | {mb / cpu['baseline']:.0f} | {mb / cpu['ours']:.0f} "
                    f"| **{cpu['baseline'] / cpu['ours']:.1f}x** | {1e6 * cpu['ours'] / args.samples:.1f} |")
    lines = [
        "# Shard encoding: ours vs tarfile + np.save", "", f"`{command_line()}`", "", machine("numpy", load=True), "",
        "CPU time, median of the interleaved rounds; the shard's bytes are equal in both.", "",
        "| rule | samples per shard | shard MB | baseline MB/s | ours MB/s | speed-up | ours us/sample |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]
    print("\n".join(lines))
    write_results(args.out, lines + [""])
    return 0


if __name__ == "__main__":
    sys.exit(main())
