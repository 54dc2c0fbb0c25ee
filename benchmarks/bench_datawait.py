"""Does the GPU (here: CPU) starve? Data-wait share of step time when streaming from GCS.

Builds a small corpus, uploads it to a gcp-storage-emulator on 127.0.0.1, and
trains with 2 DataLoader workers streaming the shards over gcsfs at two model
sizes. Reports the mean share of step time spent waiting for the next batch
(the `data_wait_share` the trainer logs every step), and the same for a local
copy as the baseline.

    python benchmarks/bench_datawait.py [--steps 12] [--sizes tiny base]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import (  # noqa: E402
    bench_parser,
    command_line,
    gcs_emulator,
    machine,
    scratch_dir,
    set_gcsfs_env,
    write_results,
)

set_gcsfs_env()  # before anything imports gcsfs


def run(data: str, out: str, size: str, steps: int, workers: int, batch: int, device: str = "cpu",
        **overrides: object) -> dict[str, float]:
    """Train `steps` steps and summarize the logged data-wait share (``overrides``: more TrainConfig fields)."""
    from schemas.config import TrainConfig
    from trainer.loggers import read_metrics
    from trainer.train import train

    train(TrainConfig.model_validate({
        "data": data, "output": out, "steps": steps, "batch_size": batch, "device": device, "resume": False,
        "num_workers": workers, "model": {"size": size}, "log_every": steps, "shuffle_buffer": 256,
        **overrides,
    }))
    rows = read_metrics(out)[2:]  # skip warm-up steps (worker start, first shard fetch)
    return {"wait_share": statistics.mean(r["data_wait_share"] for r in rows),
            "max_wait_share": max(r["data_wait_share"] for r in rows),
            "step_s": statistics.median(r["step_time"] for r in rows),
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows)}


def corpus_on_emulator(tmp: str, docs_per_source: int = 120, max_seq_len: int = 512) -> tuple[str, str]:
    """Build the demo corpus under ``tmp`` and upload it to the running GCS emulator: (local path, gs:// URL)."""
    import gcsfs

    from pipelines.jobs.build import run_build
    from shardforge.commands.demo import demo_build_config
    from shardforge.commands.synth import write_demo_corpus

    globs = write_demo_corpus(os.path.join(tmp, "raw"), docs_per_source=docs_per_source)
    cfg = demo_build_config(globs).model_copy(deep=True)
    cfg.packing.max_seq_len = max_seq_len
    cfg.shards.target_samples = 32
    local = os.path.join(tmp, "corpus")
    run_build(cfg, local)
    fs = gcsfs.GCSFileSystem(token="anon")
    fs.mkdir("bench")
    fs.put(local, "bench/corpus", recursive=True)
    return local, "gs://bench/corpus"


def main() -> int:
    ap = bench_parser(__doc__, "datawait")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--sizes", nargs="+", default=["tiny", "base"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    with scratch_dir("sf-datawait-") as work, gcs_emulator():
        tmp = str(work)
        local, remote = corpus_on_emulator(tmp)
        rows = []
        for size in args.sizes:
            for where, data in (("local disk", local), ("GCS emulator", remote)):
                r = run(data, os.path.join(tmp, f"run-{size}-{where[:3]}"), size, args.steps, args.workers,
                        args.batch)
                rows.append((size, where, r))
                print(size, where, json.dumps(r))

    lines = ["# Data-wait share of step time (is training starved by the loader?)", "",
             f"Machine: {machine()}.", "",
             f"Command: `{command_line()}` — {args.workers} DataLoader "
             f"workers, batch {args.batch} × up to 512 tokens, CPU training, fp32; mean over steps 3..{args.steps} "
             "(the first steps include worker start-up and the first shard fetch).", "",
             "| model | shards on | mean data wait / step time | max | median step s | tokens/s |",
             "|---|---|---:|---:|---:|---:|"]
    for size, where, r in rows:
        lines.append(f"| {size} | {where} | {100 * r['wait_share']:.1f}% | {100 * r['max_wait_share']:.1f}% | "
                     f"{r['step_s']:.3f} | {r['tokens_per_s']:.0f} |")
    lines += ["", "Baseline in the same run: the same corpus read from local disk. The trainer logs this share "
              "every step and warns when it stays above 10% for 20 steps."]
    print("\n".join(lines))
    write_results(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
