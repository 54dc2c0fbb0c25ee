"""Training metrics: JSONL (any fsspec URL), TensorBoard (local runs), a progress bar.

Per step we log loss, learning rate, tokens/s, model FLOPs utilization and the
share of step time spent waiting for data; a sustained data wait above a
threshold is warned about (the GPU is starving).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import deque
from typing import Any

from storage import get_fs, join, protocol_of

log = logging.getLogger(__name__)
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
    from storage import read_text

    return [json.loads(line) for line in read_text(join(run, METRICS_FILE)).splitlines() if line.strip()]


def progress_bar(total: int, initial: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, unit="step", dynamic_ncols=True,
                file=sys.stderr, mininterval=1.0)
