"""Training metrics: the step record, JSONL (any fsspec URL), TensorBoard (local runs), a progress bar.

Per step we log loss, learning rate, tokens/s, model FLOPs utilization and the
share of step time spent waiting for data; a sustained data wait above a
threshold is warned about (the GPU is starving). ``StepStats`` sums a step's
micro-batch outputs on the device; ``TrainMetrics`` turns them into the step
record (``step_record``), writes it, and prints the log line and progress text.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections import deque
from typing import Any

import torch

from shardforge.storage import get_fs, join, protocol_of

log = logging.getLogger(__name__)
train_log = logging.getLogger("shardforge.train")  # the step lines, under the trainer's name
METRICS_FILE = "metrics.jsonl"


# Dense bf16 tensor-core peaks (vendor datasheets), for model FLOPs utilization.
PEAK_BF16_FLOPS = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12, "L4": 121e12, "A10": 125e12,
                   "L40S": 362e12, "B200": 2250e12}


def device_peak_flops(device_name: str | None) -> float | None:
    """Peak bf16 FLOP/s of a GPU by name (None when unknown, e.g. CPUs); SHARDFORGE_PEAK_FLOPS overrides."""
    env = os.environ.get("SHARDFORGE_PEAK_FLOPS")
    if env:
        return float(env)
    if not device_name:
        return None
    for key, peak in PEAK_BF16_FLOPS.items():
        if key in device_name.upper():
            return peak
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


class MetricsLogger:
    """Append-only JSONL of metrics dicts (+ TensorBoard scalars when the run folder is local)."""

    def __init__(self, run: str, enabled: bool = True, tensorboard: bool = True):
        self.enabled = enabled
        self.url = join(run, METRICS_FILE)
        self._fs, self._path = get_fs(self.url)
        self._lines: list[str] = []
        self._tb = None
        if enabled:
            parent = self._path.rsplit("/", 1)[0]
            self._fs.makedirs(parent, exist_ok=True)
            if tensorboard and protocol_of(self._fs) in ("file", "local"):
                try:
                    from torch.utils.tensorboard import SummaryWriter

                    self._tb = SummaryWriter(os.path.join(parent, "tb"))
                except ImportError:  # tensorboard is optional
                    self._tb = None

    def log(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self._lines.append(json.dumps(record, sort_keys=True))
        if self._tb is not None and "step" in record:
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)):
                    self._tb.add_scalar(k, v, record["step"])

    def flush(self) -> None:
        """Append buffered lines (object stores have no append: rewrite local, re-put remote)."""
        if not self.enabled or not self._lines:
            return
        data = "".join(line + "\n" for line in self._lines)
        if protocol_of(self._fs) in ("file", "local"):
            with open(self._path, "a") as f:
                f.write(data)
        else:
            old = self._fs.cat_file(self._path).decode() if self._fs.exists(self._path) else ""
            self._fs.pipe_file(self._path, (old + data).encode())
        self._lines.clear()
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        self.flush()
        if self._tb is not None:
            self._tb.close()


def read_metrics(run: str) -> list[dict[str, Any]]:
    from shardforge.storage import read_text

    return [json.loads(line) for line in read_text(join(run, METRICS_FILE)).splitlines() if line.strip()]


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

    def add(self, out: dict[str, torch.Tensor], tokens: int, scale: float) -> None:
        """Add one micro-batch's outputs (its loss weighted by scale) and its real token count."""
        self._acc("loss", out["loss"].detach().float() * scale)
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
    flops_per_token: the model's FLOPs per token; peak_flops: the peak FLOP/s of
    all ranks together (None when unknown, e.g. on CPUs: no MFU).
    """
    record = {"step": step, "loss": v["loss"], "lr": lr,
              "mlm_acc": v["mlm_correct"] / max(v["mlm_count"], 1.0), "tokens_per_s": tokens / dt,
              "step_time": dt, "data_wait_share": wait / dt, "epoch": epoch}
    if v["sentence_count"]:
        record["sentence_acc"] = v["sentence_correct"] / v["sentence_count"]
    if "grad_norm" in v:
        record["grad_norm"] = v["grad_norm"]
    if peak_flops:
        record["mfu"] = flops_per_token * tokens / dt / peak_flops
    return record


def progress_postfix(record: dict[str, Any]) -> dict[str, str]:
    """The progress bar's text for a step record."""
    postfix = {"loss": f"{record['loss']:.3f}", "tok/s": f"{record['tokens_per_s']:.0f}",
               "wait": f"{100 * record['data_wait_share']:.0f}%"}
    if "mfu" in record:
        postfix["mfu"] = f"{100 * record['mfu']:.0f}%"
    return postfix


class TrainMetrics:
    """What the loop reports per step: the record (JSONL + TensorBoard), the log line, the bar, starvation.

    Only the main rank writes; every rank builds records (their values are
    this rank's, the token rate is scaled to the world).
    """

    def __init__(self, run: str | Any, *, enabled: bool, total_steps: int, start_step: int, log_every: int,
                 world_size: int, flops_per_token: float, peak_flops: float | None, show_bar: bool):
        self.enabled, self.total_steps, self.log_every, self.world_size = enabled, total_steps, log_every, world_size
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

        The step's one host sync (``stats.values()``) happens here, inside the step's time.
        """
        v = stats.values()
        dt = time.perf_counter() - started
        record = step_record(step, v, stats.tokens * self.world_size, lr, dt, wait, epoch,
                             self.flops_per_token, self.peak_flops)
        self.starvation.update(record["data_wait_share"])
        self.first_loss = v["loss"] if self.first_loss is None else self.first_loss
        self.last_loss = v["loss"]
        return record

    def log(self, record: dict[str, Any]) -> None:
        """Write the record; every log_every steps (and the last) flush and print a line; move the bar."""
        step = record["step"]
        self.logger.log(record)
        if self.enabled and (step % self.log_every == 0 or step == self.total_steps):
            self.logger.flush()
            train_log.info("step %d loss %.4f lr %.2e tok/s %.0f wait %.0f%%", step, record["loss"], record["lr"],
                           record["tokens_per_s"], 100 * record["data_wait_share"])
        self.bar.set_postfix(progress_postfix(record))
        self.bar.update(1)

    def close(self) -> None:
        """Close the bar and flush what is buffered."""
        self.bar.close()
        self.logger.close()
