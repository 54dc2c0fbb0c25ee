"""Loader throughput: ShardLoader vs plain webdataset.WebDataset on the same local shards.

Both read, decode input_ids (np.load, allow_pickle=False: never webdataset's
default decoder), shuffle in a buffer of the same size and collate padded
int64 batches of the same size, in one process (samples/s per worker). Ours
also verifies every shard's sha256 / size / counts and tracks resume state;
the baseline does neither. Optional: ours reading the same shards from the GCS
emulator (gcp-storage-emulator on 127.0.0.1), and ours with 2 DataLoader workers.

    python benchmarks/bench_loader.py [--shards 12 --samples 2000 --repeat 3 --no-gcs]
"""

from __future__ import annotations

import io
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import (  # noqa: E402
    bench_parser,
    command_line,
    gcs_emulator,
    interleaved,
    machine,
    set_gcsfs_env,
    write_results,
)

set_gcsfs_env()  # before anything imports gcsfs

import numpy as np  # noqa: E402
import torch  # noqa: E402

from schemas import PAD_ID  # noqa: E402
from schemas.manifest import Manifest, ShardInfo, TokenizerInfo  # noqa: E402
from schemas.sample import encode_sample, tar_bytes  # noqa: E402
from shardforge.storage import sha256_bytes  # noqa: E402
from trainer.loader import ShardLoader  # noqa: E402

VOCAB = 32000


def make_corpus(root: Path, shards: int, samples: int, seed: int = 0) -> list[Path]:
    """Uneven shards (±50% samples) of 64..512-token samples, plus a manifest."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    infos, paths, gid = [], [], 0
    for s in range(shards):
        n = int(samples * rng.uniform(0.5, 1.5))
        items, tokens = [], 0
        for _ in range(n):
            ids = rng.integers(5, VOCAB, size=int(rng.integers(64, 513)))
            items.append((f"s{gid:09d}", encode_sample(ids, VOCAB)))
            tokens += len(ids)
            gid += 1
        data = tar_bytes(items)
        name = f"train-{s:06d}.tar"
        (root / name).write_bytes(data)
        paths.append(root / name)
        infos.append(ShardInfo(name=name, split="train", samples=n, tokens=tokens, bytes=len(data),
                               sha256=sha256_bytes(data)))
    m = Manifest(config={}, packing_rule="full_sentences", max_seq_len=512, ids_dtype="uint16",
                 members=["input_ids.npy"],
                 tokenizer=TokenizerInfo(path="tokenizer/spm.model", sha256="0" * 64, model_type="unigram",
                                         vocab_size=VOCAB, normalization_rule="nmt_nfkc"),
                 shards=infos, totals={}, accounting={})
    (root / "manifest.json").write_text(m.to_json())
    return paths


def pad_collate(rows: list[np.ndarray]) -> dict[str, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), PAD_ID, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        mask[i, : len(r)] = 1
    return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}


def webdataset_epoch(paths: list[Path], batch_size: int, buffer: int) -> Iterable[dict[str, torch.Tensor]]:
    import webdataset as wds

    def decode(sample: dict) -> np.ndarray:
        return np.load(io.BytesIO(sample["input_ids.npy"]), allow_pickle=False)

    ds = (wds.WebDataset([str(p) for p in paths], shardshuffle=False, empty_check=False)
          .shuffle(buffer).map(decode).batched(batch_size, collation_fn=pad_collate, partial=True))
    return ds


def one_epoch(make: Callable[[], Iterable[dict[str, torch.Tensor]]]) -> int:
    """Samples in one full epoch of a freshly made loader."""
    n = 0
    for b in make():
        # pad rows (replays that even out workers / ranks) are not new samples
        n += int((~b["is_pad"]).sum()) if "is_pad" in b else b["input_ids"].shape[0]
    return n


def measure(makers: list[Callable[[], Iterable[dict[str, torch.Tensor]]]], repeat: int) -> list[tuple[float, int]]:
    """Best-of-repeat (samples/s, samples) of each maker, epochs interleaved (A B A B ...)."""
    times = interleaved({str(i): (lambda m=make: one_epoch(m)) for i, make in enumerate(makers)}, repeat, warmup=0)
    return [max((t.result / t.wall, t.result) for t in runs) for runs in times.values()]


def main() -> None:
    ap = bench_parser(__doc__, "loader")
    ap.add_argument("--shards", type=int, default=12)
    ap.add_argument("--samples", type=int, default=2000, help="mean samples per shard")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--buffer", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-gcs", action="store_true")
    ap.add_argument("--no-workers", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "corpus"
        paths = make_corpus(root, args.shards, args.samples)
        total = sum(p.stat().st_size for p in paths)
        url = str(root / "manifest.json")
        kw = dict(batch_size=args.batch_size, shuffle_buffer=args.buffer, epochs=1)
        rows: list[tuple[str, float, int]] = []

        (base, n_base), (ours, n_ours) = measure(
            [lambda: webdataset_epoch(paths, args.batch_size, args.buffer), lambda: ShardLoader(url, **kw)],
            args.repeat)
        rows.append(("webdataset.WebDataset (baseline), local, 1 process", base, n_base))
        rows.append(("ShardLoader, local, num_workers=0", ours, n_ours))
        if not args.no_workers:
            [(w2, n)] = measure([lambda: ShardLoader(url, num_workers=2, **kw)], args.repeat)
            rows.append(("ShardLoader, local, num_workers=2 (total)", w2, n))
        gcs_note = "skipped (--no-gcs)"
        if not args.no_gcs:
            with gcs_emulator() as emu:
                import gcsfs

                fs = gcsfs.GCSFileSystem(token="anon")
                fs.mkdir("bench-loader")
                for p in root.iterdir():
                    fs.pipe_file(f"bench-loader/corpus/{p.name}", p.read_bytes())
                fs.invalidate_cache()
                [(g, n)] = measure([lambda: ShardLoader("gs://bench-loader/corpus", **kw)], args.repeat)
                rows.append(("ShardLoader, GCS emulator, num_workers=0", g, n))
                gcs_note = f"gcp-storage-emulator (in-memory) at {emu}"

    ratio = ours / base
    lines = [
        "# Loader throughput",
        "",
        f"Machine: {machine()}.",
        "",
        f"Corpus: {args.shards} uneven shards, {n_ours} samples of 64-512 tokens (uint16), "
        f"{total / 1e6:.1f} MB; batch_size {args.batch_size}, shuffle buffer {args.buffer}; "
        f"best of {args.repeat} full epochs, baseline and ours interleaved. GCS: {gcs_note}.",
        "",
        "| reader | samples/s | samples |",
        "|---|---:|---:|",
        *[f"| {name} | {sps:,.0f} | {n} |" for name, sps, n in rows],
        "",
        f"**Ratio ShardLoader / webdataset, one process: {ratio:.2f}x** "
        "(ours also hashes every byte and checks the manifest's sha256, size, sample and token counts).",
        "",
        f"Command: `{command_line()}`",
        "",
    ]
    print("\n".join(lines))
    write_results(args.out, lines)
    print(f"ratio ours/webdataset: {ratio:.2f}")


if __name__ == "__main__":
    main()
