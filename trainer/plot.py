"""`shardforge plot RUN`: draw a run's metrics (loss, learning rate, throughput, MFU, data wait) to PNG."""

from __future__ import annotations

import os

from schemas.errors import UserError
from shardforge.cliargs import ArgumentParser
from trainer.metrics import read_metrics

PANELS = [
    ("loss", "training loss", ["loss", "eval_loss"]),
    ("lr", "learning rate", ["lr"]),
    ("throughput", "tokens / s", ["tokens_per_s"]),
    ("mfu", "model FLOPs utilization", ["mfu"]),
    ("data_wait", "data wait share of step time", ["data_wait_share"]),
    ("accuracy", "accuracy", ["mlm_acc", "eval_mlm_acc", "sentence_acc"]),
]


def plot_run(run: str, out: str | None = None) -> str:
    """Write {run}/plots.png (or out) with one panel per metric present; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        rows = read_metrics(run)
    except FileNotFoundError:
        raise UserError(f"no metrics.jsonl in {run}: is this a shardforge run folder?") from None
    if not rows:
        raise UserError(f"{run}/metrics.jsonl is empty")
    panels = [(t, keys) for _, t, keys in PANELS if any(k in r for r in rows for k in keys)]
    cols = 2
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(11, 3.2 * nrows), squeeze=False)
    for ax, (title, keys) in zip(axes.flat, panels, strict=False):
        for k in keys:
            pts = [(r["step"], r[k]) for r in rows if k in r]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, marker="o" if len(pts) < 30 else None, markersize=3, label=k)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"shardforge run: {run}", fontsize=10)
    fig.tight_layout()
    path = out or os.path.join(run, "plots.png")
    if "://" in path:
        import io

        from storage import write_bytes_atomic

        buf = io.BytesIO()
        fig.savefig(buf, dpi=110)
        write_bytes_atomic(path, buf.getvalue())
    else:
        fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="shardforge plot", description=__doc__)
    p.add_argument("run", help="Run folder (local or fsspec URL) holding metrics.jsonl")
    p.add_argument("--out", help="PNG path (default RUN/plots.png)")
    args = p.parse_args(argv)
    print(plot_run(args.run, args.out))
    return 0
