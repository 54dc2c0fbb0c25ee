"""`shardforge plot RUN`: draw a run's metrics (loss, learning rate, throughput, MFU, data wait) to PNG.

The x-axis is tokens seen (comparable across batch sizes and accumulation) when the run
logged them, else the step. Noisy per-step series (loss, gradient norm, accuracy) are drawn
faint with a debiased exponential moving average over them (``--smooth``, 0 to switch off).
"""

from __future__ import annotations

import os
from typing import Any

from schemas.errors import UserError
from shardforge.console.args import ArgumentParser

PANELS = [
    ("loss", "training loss", ["loss", "eval_loss"]),
    ("grad_norm", "gradient norm", ["grad_norm"]),
    ("lr", "learning rate", ["lr"]),
    ("throughput", "tokens / s", ["tokens_per_s"]),
    ("mfu", "model FLOPs utilization", ["mfu"]),
    ("data_wait", "data wait share of step time", ["data_wait_share"]),
    ("accuracy", "accuracy", ["mlm_acc", "eval_mlm_acc", "sentence_acc"]),
]


# Per-step series worth smoothing (evaluations are already averages over many batches).
NOISY = ("loss", "grad_norm", "mlm_acc", "sentence_acc", "tokens_per_s", "data_wait_share", "mfu")


def ema(values: list[float], smooth: float) -> list[float]:
    """Debiased exponential moving average (TensorBoard's smoothing): weight `smooth` on the past."""
    out, acc, weight = [], 0.0, 0.0
    for v in values:
        acc = smooth * acc + (1 - smooth) * v
        weight = smooth * weight + (1 - smooth)
        out.append(acc / weight if weight else v)
    return out


def x_axis(rows: list[dict[str, Any]], x: str = "auto") -> tuple[str, dict[int, float]]:
    """(label, step -> x): tokens seen when the run logged them (x auto or tokens), else the step."""
    seen = {r["step"]: float(r["tokens_seen"]) for r in rows if "tokens_seen" in r}
    if x in ("auto", "tokens") and seen:
        return "tokens seen", seen
    if x == "tokens":
        raise UserError("this run did not log tokens_seen (trained before it existed): use --x step")
    return "step", {r["step"]: float(r["step"]) for r in rows}


def series(rows: list[dict[str, Any]], key: str, xs: dict[int, float],
           smooth: float) -> tuple[list[float], list[float], list[float] | None]:
    """(x, y, smoothed y or None) of one metric; a row is placed by its step's x (none: left out)."""
    pts = [(xs[r["step"]], float(r[key])) for r in rows if key in r and r.get("step") in xs]
    x, y = [p[0] for p in pts], [p[1] for p in pts]
    return x, y, ema(y, smooth) if smooth and key in NOISY and len(y) > 1 else None


def plot_run(run: str, out: str | None = None, smooth: float = 0.9, x: str = "auto") -> str:
    """Write {run}/plots.png (or out) with one panel per metric present; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        from trainer.loggers import read_metrics  # imported only once there is a run to plot

        rows = read_metrics(run)
    except FileNotFoundError:
        raise UserError(f"no metrics.jsonl in {run}: is this a shardforge run folder?") from None
    if not rows:
        raise UserError(f"{run}/metrics.jsonl is empty")
    panels = [(t, keys) for _, t, keys in PANELS if any(k in r for r in rows for k in keys)]
    cols = 2
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(11, 3.2 * nrows), squeeze=False)
    xlabel, xs = x_axis(rows, x)
    for ax, (title, keys) in zip(axes.flat, panels, strict=False):
        for k in keys:
            px, py, sy = series(rows, k, xs, smooth)
            if not px:
                continue
            marker = "o" if len(px) < 30 else None
            if sy is None:
                ax.plot(px, py, marker=marker, markersize=3, label=k)
            else:  # the raw curve faint, its smoothed line over it in the same colour
                (line,) = ax.plot(px, py, alpha=0.25, linewidth=0.8)
                ax.plot(px, sy, color=line.get_color(), label=f"{k} (smoothed {smooth})")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"shardforge run: {run}", fontsize=10)
    fig.tight_layout()
    path = out or os.path.join(run, "plots.png")
    if "://" in path:
        import io

        from shardforge.storage import write_bytes_atomic

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
    p.add_argument("--smooth", type=float, default=0.9,
                   help="EMA weight of the past for noisy per-step curves, in [0, 1) (0: raw only; default 0.9)")
    p.add_argument("--x", choices=("auto", "tokens", "step"), default="auto",
                   help="x-axis: tokens seen (auto: when the run logged them) or step")
    args = p.parse_args(argv)
    if not 0 <= args.smooth < 1:
        raise UserError(f"--smooth must be in [0, 1), got {args.smooth}")
    print(plot_run(args.run, args.out, smooth=args.smooth, x=args.x))
    return 0
