"""`shardforge plot RUN`: draw a run's metrics (loss, learning rate, throughput, MFU, data wait) to PNG.

The x-axis is tokens seen (comparable across batch sizes and accumulation) when the run
logged them, else the step. Noisy per-step series (loss, gradient norm, accuracy) are drawn
faint with a debiased exponential moving average over them (``--smooth``, 0 to switch off).
The losses are labelled with the masking rate each was measured at (training at its own,
evaluation at ``eval_masking``'s). The MFU panel is always there: where the device's peak is
unknown (CPUs) it draws the model FLOP/s the run achieved and says why.
"""

from __future__ import annotations

import os
import posixpath
import sys
from typing import Any

from schemas.errors import UserError
from shardforge.console.args import ArgumentParser
from shardforge.console.words import counted
from trainer.run_folder import read_records

PANELS = [
    ("loss", "loss (nats)", ["loss", "mlm_loss", "eval_loss"]),
    ("grad_norm", "gradient norm", ["grad_norm"]),
    ("lr", "learning rate", ["lr"]),
    ("throughput", "tokens / s", ["tokens_per_s"]),
    ("mfu", "model FLOPs utilization", ["mfu"]),
    ("data_wait", "data wait share of step time", ["data_wait_share"]),
    ("accuracy", "accuracy", ["mlm_acc", "eval_mlm_acc", "sentence_acc", "eval_sentence_acc"]),
]
ALWAYS = ("mfu",)  # drawn even when the run logged none of its keys: it says why

# Per-step series worth smoothing (evaluations are already averages over many batches).
NOISY = ("loss", "mlm_loss", "grad_norm", "mlm_acc", "sentence_acc", "tokens_per_s", "data_wait_share", "mfu", "flops_per_s")
LABELS = {"loss": "training loss", "mlm_loss": "training loss (MLM)", "eval_loss": "eval loss (MLM)", "mlm_acc": "training MLM accuracy",
          "eval_mlm_acc": "eval MLM accuracy", "sentence_acc": "sentence head accuracy",
          "eval_sentence_acc": "eval sentence head accuracy",
          "flops_per_s": "model FLOP/s", "tokens_per_s": "tokens/s",
          "data_wait_share": "data wait (the loader's start-up apart)"}
# The records' masking rate of each loss (trainer/metrics.py), shown in its label.
RATE_KEYS = {"loss": "mask_rate", "mlm_loss": "mask_rate", "eval_loss": "eval_mask_rate", "mlm_acc": "mask_rate",
             "eval_mlm_acc": "eval_mask_rate"}


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


def label(rows: list[dict[str, Any]], key: str) -> str:
    """A series' legend: the loss or accuracy with the masking rate it was measured at (``40% masked``)."""
    text = LABELS.get(key, key)
    if key == "loss" and any("mlm_loss" in r for r in rows):
        text += " (all heads)"  # beside its MLM part, which compares with the eval loss
    rates = sorted({float(r[RATE_KEYS[key]]) for r in rows if key in r and RATE_KEYS[key] in r}) \
        if key in RATE_KEYS else []
    if rates:
        text += f", {' / '.join(f'{100 * rate:g}%' for rate in rates)} masked"
    return text


def panel_keys(rows: list[dict[str, Any]], name: str, title: str, keys: list[str]) -> tuple[str, list[str]]:
    """(the panel's title, the keys it draws): the MFU panel falls back on the model FLOP/s, and says so."""
    present = [k for k in keys if any(k in r for r in rows)]
    if name != "mfu" or present:
        return title, present
    if any("flops_per_s" in r for r in rows):
        return ("MFU: this device's peak FLOP/s is unknown (CPU, unlisted GPU)\n"
                "model FLOP/s achieved; SHARDFORGE_PEAK_FLOPS=peak gives MFU"), ["flops_per_s"]
    return "MFU: not logged by this run\n(logged on GPUs of known peak FLOP/s)", []


def plan_panels(rows: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(title, keys) of every panel the plot draws: each metric the run logged, and the MFU panel always."""
    panels = []
    for name, title, keys in PANELS:
        title, drawn = panel_keys(rows, name, title, keys)
        if drawn or name in ALWAYS:
            panels.append((title, drawn))
    return panels


def draw_panel(ax: Any, title: str, keys: list[str], rows: list[dict[str, Any]], xs: dict[int, float],
               xlabel: str, smooth: float) -> None:
    """One panel: every key's curve (noisy ones faint, their smoothed line over them)."""
    for k in keys:
        px, py, sy = series(rows, k, xs, smooth)
        if not px:
            continue
        marker = "o" if len(px) < 30 else None
        if sy is None:
            ax.plot(px, py, marker=marker, markersize=3, label=label(rows, k))
        else:  # the raw curve faint, its smoothed line over it in the same colour
            (line,) = ax.plot(px, py, alpha=0.25, linewidth=0.8)
            ax.plot(px, sy, color=line.get_color(), label=f"{label(rows, k)} (smoothed {smooth})")
    ax.set_title(title, fontsize=12 if "\n" not in title else 9)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    if keys:
        ax.legend(fontsize=8)


def import_pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, without its notes on its font cache and cache folder."""
    import logging

    # "Matplotlib is building the font cache; this may take a moment." (first use, a busy machine) and
    # "created a temporary cache directory" (no writable home) say nothing a user of the plot acts on.
    for name in ("matplotlib", "matplotlib.font_manager"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def no_metrics(run: str) -> str:
    """Why there is nothing to plot: a corpus, a folder of runs, a run that logged nothing yet, or nothing."""
    from shardforge.storage import exists
    from shardforge.storage.contract import folder_kind, kinds_under

    kind = folder_kind(run)
    if kind == "corpus":
        return f"{run} is a corpus, not a training run: give a run folder (the --output of a run)"
    if kind == "run":
        return f"no metrics.jsonl in {run} yet: the run has logged no step"
    if kind == "model":
        return f"{run} is a Hugging Face model folder, not a training run: give a run folder (the --output of a run)"
    if not exists(run):
        return f"{run} does not exist: give a run folder (the --output of a run)"
    return f"no metrics.jsonl in {run}: not a training run folder (the --output of a run){kinds_under(run)}"


def plot_run(run: str, out: str | None = None, smooth: float = 0.9, x: str = "auto") -> str:
    """Write {run}/plots.png (or out) with one panel per metric present (and MFU always); returns the path."""
    plt = import_pyplot()
    try:
        rows, torn = read_records(run)
    except FileNotFoundError:
        raise UserError(no_metrics(run)) from None
    if torn:
        print(f"warning: skipped {counted(torn, 'line')} of {run}/metrics.jsonl that {'holds' if torn == 1 else 'hold'} no step record (a line torn by a "
              "killed run)", file=sys.stderr)
    if not rows:
        raise UserError(f"{run}/metrics.jsonl " + ("holds no step record" if torn else "is empty"))
    panels = plan_panels(rows)
    cols = 2
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(11, 3.2 * nrows), squeeze=False)
    xlabel, xs = x_axis(rows, x)
    for ax, (title, keys) in zip(axes.flat, panels, strict=False):
        draw_panel(ax, title, keys, rows, xs, xlabel, smooth)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"shardforge run: {run}", fontsize=10)
    fig.tight_layout()
    path = out or os.path.join(run, "plots.png")
    if not posixpath.splitext(path.rstrip("/"))[1]:  # what matplotlib would write: the name said, not a guess
        path += ".png"
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
    p = ArgumentParser(prog="python -m trainer.plot", description=__doc__)
    p.add_argument("run", help="Run folder (local or fsspec URL) holding metrics.jsonl")
    p.add_argument("--out", help="PNG path (default RUN/plots.png)")
    p.add_argument("--smooth", type=float, default=0.9,
                   help="EMA weight of the past for noisy per-step curves, in [0, 1) (0: raw only; default 0.9)")
    p.add_argument("--x", choices=("auto", "tokens", "step"), default="auto",
                   help="x-axis: tokens seen (auto: when the run logged them) or step (default auto)")
    args = p.parse_args(argv)
    if not 0 <= args.smooth < 1:
        raise UserError(f"--smooth must be in [0, 1), got {args.smooth}")
    print(plot_run(args.run, args.out, smooth=args.smooth, x=args.x))
    return 0


if __name__ == "__main__":
    from shardforge.console.run import run_cli

    sys.exit(run_cli(lambda: main(sys.argv[1:]), sys.argv[1:]))
