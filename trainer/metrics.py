"""What a training step measures and how it is shown: the step record, run counters, progress text.

Per step we log loss, learning rate, tokens/s, model FLOP/s and utilization and the
share of step time spent waiting for data; a sustained data wait above a
threshold is warned about (the GPU is starving). The loader's start-up (the
first batch of a process) is measured apart (``data_startup_s``), not as a
step's data wait. A progress line (step, loss, tokens/s, ETA, and the
evaluation when there is one) is printed at the first step, every
``log_every`` steps and at the last. ``StepStats`` sums a step's
micro-batch outputs on the device; ``TrainMetrics`` turns them into the step
record (``step_record``), hands it to a logger (trainer/loggers.py: where
records go) and prints the log line and progress text. ``RunCounters`` adds
what a step record alone cannot know: tokens seen since the run began and a
smoothed loss. They are checkpointed, so a resumed run continues them.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from trainer.loggers import MetricsLogger

log = logging.getLogger(__name__)
train_log = logging.getLogger("shardforge.train")  # the step lines, under the trainer's name


# Dense bf16 tensor-core peaks (vendor datasheets: the "with sparsity" figures halved), for model FLOPs
# utilization, by the model's name in the device name and, where one model ships as several boards of different
# clocks, the board's word (torch reports e.g. "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA L40S").
PEAK_BF16_FLOPS: dict[str, dict[str | None, float]] = {
    "H100": {None: 989.4e12, "PCIE": 756.5e12, "NVL": 835.5e12},
    "H200": {None: 989.4e12, "NVL": 835.5e12},
    "GH200": {None: 989.4e12},
    "A100": {None: 312e12},
    "A10": {None: 125e12},
    "L4": {None: 121e12},
    "L40S": {None: 362e12},
    "B200": {None: 2250e12},
}


def device_peak_flops(device_name: str | None) -> float | None:
    """Peak bf16 FLOP/s of a GPU by name (None when unknown, e.g. CPUs); SHARDFORGE_PEAK_FLOPS overrides.
    The name's words are matched whole: an L40S is not an L4, an A10G (no published figure) not an A10."""
    env = os.environ.get("SHARDFORGE_PEAK_FLOPS")
    if env:
        return float(env)
    words = re.split(r"[\s_-]+", (device_name or "").upper())
    for word in words:
        boards = PEAK_BF16_FLOPS.get(word)
        if boards is not None:
            return next((boards[w] for w in words if w in boards), boards[None])
    return None


class StarvationMonitor:
    """Warn when data wait exceeds `threshold` of step time for `window` consecutive steps."""

    def __init__(self, threshold: float = 0.1, window: int = 20):
        self.threshold, self.window = threshold, window
        self.recent: deque[float] = deque(maxlen=window)
        self.warned = False

    def update(self, wait_share: float) -> bool:
        self.recent.append(wait_share)
        starving = len(self.recent) == self.window and min(self.recent) > self.threshold
        if starving and not self.warned:
            log.warning("data loading is the bottleneck: waiting > %.0f%% of step time for %d steps "
                        "(add DataLoader workers, bigger read blocks, or move shards closer)",
                        100 * self.threshold, self.window)
        self.warned = starving
        return starving


def progress_bar(total: int, initial: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, unit="step", dynamic_ncols=True,
                file=sys.stderr, mininterval=1.0)


class StepStats:
    """Sums of a step's micro-batch outputs, kept on the device: one host sync per step, not per micro-batch."""

    KEYS = ("mlm_correct", "mlm_count", "sentence_correct", "sentence_count")

    def __init__(self) -> None:
        self._sums: dict[str, torch.Tensor] = {}
        self.tokens = 0
        self.epoch = 0  # the epoch of the step's last micro-batch

    def add(self, out: dict[str, torch.Tensor], tokens: int, scale: float) -> None:
        """Add one micro-batch's outputs (its loss weighted by scale) and its real token count."""
        self._acc("loss", out["loss"].detach().float() * scale)
        if "sentence_loss" in out or "sbo_loss" in out:  # the loss sums heads: its MLM part, as evaluated
            self._acc("mlm_loss", out["mlm_loss"].detach().float() * scale)
        for k in self.KEYS:
            if k in out:
                self._acc(k, out[k].detach().float())
        self.tokens += tokens

    def add_value(self, key: str, value: torch.Tensor) -> None:
        """A device scalar read back with the step's one sync (e.g. the gradient norm)."""
        self._acc(key, value.detach().float())

    def _acc(self, key: str, value: torch.Tensor) -> None:
        self._sums[key] = self._sums[key] + value if key in self._sums else value

    def values(self) -> dict[str, float]:
        """Host values (the one sync); missing keys are 0."""
        keys = list(self._sums)
        host = torch.stack([self._sums[k].reshape(()) for k in keys]).cpu().tolist() if keys else []
        vals = dict.fromkeys(("loss", *self.KEYS), 0.0)
        vals.update(zip(keys, host, strict=True))
        return vals


def step_record(step: int, v: dict[str, float], tokens: int, lr: float, dt: float, wait: float, epoch: int,
                flops_per_token: float, peak_flops: float | None) -> dict[str, Any]:
    """The metrics record of one optimizer step.

    v: StepStats values; tokens: real tokens of the step over all ranks; dt and
    wait: the step's wall time and the part of it spent waiting for data;
    flops_per_token: the model's FLOPs per token (``flops_per_s``: what the
    step achieved); peak_flops: the peak FLOP/s of all ranks together (None
    when unknown, e.g. on CPUs: no MFU).
    """
    record = {"step": step, "loss": v["loss"], "lr": lr,
              "mlm_acc": v["mlm_correct"] / max(v["mlm_count"], 1.0), "tokens_per_s": tokens / dt,
              "step_time": dt, "data_wait_share": wait / dt, "epoch": epoch,
              "flops_per_s": flops_per_token * tokens / dt}
    if "mlm_loss" in v:
        record["mlm_loss"] = v["mlm_loss"]
    if v["sentence_count"]:
        record["sentence_acc"] = v["sentence_correct"] / v["sentence_count"]
    if "grad_norm" in v:
        record["grad_norm"] = v["grad_norm"]
    if peak_flops:
        record["mfu"] = flops_per_token * tokens / dt / peak_flops
    return record


def duration(seconds: float) -> str:
    """45s, 3m12s, 1h02m, 2d03h."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def progress_line(record: dict[str, Any], total_steps: int, eta_s: float | None,
                  eval_mask_rate: float | None = None) -> str:
    """The log line of a step record: step of total, loss, lr, tokens/s, data wait, ETA, and its evaluation."""
    step = record["step"]
    mlm = f" (MLM {record['mlm_loss']:.4f})" if "mlm_loss" in record else ""  # beside the eval loss's MLM alone
    line = (f"step {step}/{total_steps} loss {record['loss']:.4f}{mlm} lr {record['lr']:.2e} "
            f"tok/s {record['tokens_per_s']:.0f} wait {100 * record['data_wait_share']:.0f}%")
    if "mfu" in record:
        line += f" mfu {100 * record['mfu']:.0f}%"
    if eta_s is not None and step < total_steps:
        line += f" eta {duration(eta_s)}"
    if "eval_loss" in record:
        masked = f", {100 * eval_mask_rate:g}% masked" if eval_mask_rate is not None else ""
        line += (f" | eval loss {record['eval_loss']:.4f} (MLM nats{masked}) ppl {record['eval_ppl']:.1f} "
                 f"acc {record['eval_mlm_acc']:.3f}")
    return line


def progress_postfix(record: dict[str, Any]) -> dict[str, str]:
    """The progress bar's text for a step record."""
    postfix = {"loss": f"{record['loss']:.3f}", "tok/s": f"{record['tokens_per_s']:.0f}",
               "wait": f"{100 * record['data_wait_share']:.0f}%"}
    if "mfu" in record:
        postfix["mfu"] = f"{100 * record['mfu']:.0f}%"
    return postfix


class RunCounters:
    """Tokens seen so far and a debiased exponential moving average of the training loss."""

    def __init__(self, smoothing: float = 0.98):
        self.smoothing = smoothing
        self.tokens_seen = 0
        self._ema = 0.0
        self._weight = 0.0  # sum of the EMA's weights so far: dividing by it removes the zero-start bias

    def update(self, loss: float, tokens: int) -> dict[str, float]:
        """Count a step's tokens and loss; returns the record fields tokens_seen and loss_smooth."""
        self.tokens_seen += int(tokens)
        if math.isfinite(loss):  # one inf/nan step must not poison the curve for good
            self._ema = self.smoothing * self._ema + (1 - self.smoothing) * loss
            self._weight = self.smoothing * self._weight + (1 - self.smoothing)
        out: dict[str, float] = {"tokens_seen": self.tokens_seen}
        if self._weight:
            out["loss_smooth"] = self._ema / self._weight
        return out

    def state_dict(self) -> dict[str, float]:
        return {"tokens_seen": self.tokens_seen, "ema": self._ema, "weight": self._weight}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tokens_seen = int(state.get("tokens_seen", 0))
        self._ema = float(state.get("ema", 0.0))
        self._weight = float(state.get("weight", 0.0))


class TrainMetrics:
    """What the loop reports per step: the record (JSONL + TensorBoard), the log line, the bar, starvation.

    Only the main rank writes; every rank builds records. ``combine`` sums a list of values over the ranks
    (trainer.distributed.all_reduce_sum): a record's loss, accuracies and tokens are then the step's over
    the global batch, each rank's loss being its share of it. Without it they are this rank's, the token
    rate scaled to the world.
    """

    def __init__(self, run: str | Any, *, enabled: bool, total_steps: int, start_step: int, log_every: int,
                 world_size: int, flops_per_token: float, peak_flops: float | None, show_bar: bool,
                 mask_rate: float | None = None, eval_mask_rate: float | None = None,
                 combine: Callable[[list[float]], list[float]] | None = None):
        self.enabled, self.total_steps, self.log_every, self.world_size = enabled, total_steps, log_every, world_size
        self.combine = combine
        self.step_tokens = 0  # the last record's real tokens (all ranks)
        self.start_step = start_step
        # The masking rates the losses are measured at (records: mask_rate, eval_mask_rate; the plot's labels).
        self.mask_rate, self.eval_mask_rate = mask_rate, eval_mask_rate
        self.startup_s: float | None = None  # the first batch's wait: the loader's start-up
        self._first_done: float | None = None  # perf_counter when this process's first step ended (the ETA's base)
        self.last_eval: dict[str, Any] | None = None  # {"step", "eval_loss", ...} of the newest evaluation
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops * world_size if peak_flops else None
        # A run folder (metrics.jsonl + TensorBoard) or a logger fan-out (trainer.loggers.open_loggers).
        self.logger = MetricsLogger(run, enabled=enabled) if isinstance(run, str) else run
        self.starvation = StarvationMonitor()
        self.bar = progress_bar(total_steps, start_step, enabled=enabled and show_bar)
        self.first_loss: float | None = None
        self.last_loss: float | None = None

    def record(self, step: int, stats: StepStats, lr: float, started: float, wait: float,
               epoch: int) -> dict[str, Any]:
        """The record of a step that began at ``started`` (perf_counter); watches data wait and the loss.

        The step's one host sync (``stats.values()``) and its sum over ranks happen here, inside the
        step's time.
        """
        v = stats.values()
        tokens = stats.tokens * self.world_size
        if self.combine is not None:
            keys = ("loss", *StepStats.KEYS, *(("mlm_loss",) if "mlm_loss" in v else ()))
            *sums, total = self.combine([v[k] for k in keys] + [float(stats.tokens)])
            v.update(zip(keys, sums, strict=True))
            tokens = int(total)
        self.step_tokens = tokens
        dt = time.perf_counter() - started
        record = step_record(step, v, tokens, lr, dt, wait, epoch, self.flops_per_token, self.peak_flops)
        if self._first_done is None:
            self._first_done = started + dt
            record["total_steps"] = self.total_steps  # this process's planned length (shardforge status reads it)
            if self.startup_s is not None:
                record["data_startup_s"] = self.startup_s
        if self.mask_rate is not None:
            record["mask_rate"] = self.mask_rate
        self.starvation.update(record["data_wait_share"])
        self.first_loss = v["loss"] if self.first_loss is None else self.first_loss
        self.last_loss = v["loss"]
        return record

    def started(self, seconds: float) -> None:
        """The first batch came ``seconds`` after the loader was asked (its start-up: workers, first reads)."""
        self.startup_s = seconds
        if self.enabled:
            train_log.info("first batch after %.1f s (the loader's start-up, not counted as data wait)", seconds)

    def eta(self, step: int) -> float | None:
        """Seconds left at this process's mean time per step after its first (evaluations and checkpoints
        included); None before the second. The first step carries one-time costs (torch.compile's
        compilation, the allocator's first blocks): on CPU an ALBERT step 1 took 7x the next, and a compiled
        step 1 is minutes against a fraction of a second."""
        done = step - self.start_step
        if self._first_done is None or done < 2:
            return None
        return (time.perf_counter() - self._first_done) / (done - 1) * (self.total_steps - step)

    def log(self, record: dict[str, Any]) -> None:
        """Write the record; at the first step, every log_every steps, evaluations and the last step, flush
        and print a progress line; move the bar."""
        step = record["step"]
        if "eval_loss" in record:
            if self.eval_mask_rate is not None:
                record["eval_mask_rate"] = self.eval_mask_rate
            self.last_eval = {k: v for k, v in record.items() if k == "step" or k.startswith("eval_")}
        self.logger.log(record)
        if self.enabled and (self.log_every > 0 and step % self.log_every == 0 or step in (self.start_step + 1, self.total_steps)
                             or "eval_loss" in record):
            self.logger.flush()
            train_log.info("%s", progress_line(record, self.total_steps, self.eta(step), self.eval_mask_rate))
        self.bar.set_postfix(progress_postfix(record))
        self.bar.update(1)

    def close(self) -> None:
        """Close the bar and flush what is buffered."""
        self.bar.close()
        self.logger.close()
