"""Where a run's step records go: metrics.jsonl (+ TensorBoard), and optionally Weights & Biases and MLflow.

``MetricsLogger`` appends each record to the run's metrics.jsonl (any fsspec URL)
and, when the run folder is local, to TensorBoard; ``read_metrics`` reads the file
back. ``open_loggers(cfg)`` gives the loop one object with ``log`` / ``flush`` /
``close`` that fans every step record out to the JSONL logger (always) and to the
trackers the config switches on (``trackers.wandb``, ``trackers.mlflow``).
Both trackers are optional extras (``pip install 'shardforge[wandb]'`` /
``'shardforge[mlflow]'``) and both work offline: ``WANDB_MODE=offline`` (or
``trackers.wandb_mode=offline``) writes a local run that ``wandb sync`` uploads
later; MLflow takes any tracking URI, a local ``file://`` folder included.
What goes into a record is trainer/metrics.py's concern.
"""

from __future__ import annotations

import json
import os
import posixpath
import time
from typing import Any

from schemas.config import TrainConfig
from schemas.errors import UserError
from schemas.run_folder import METRICS_FILE
from shardforge.storage import get_fs, is_local_fs, join, redact_url
from trainer.run_folder import read_records


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
            if tensorboard and is_local_fs(self._fs):
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
        if is_local_fs(self._fs):
            with open(self._path, "ab", buffering=0) as f:
                end = f.seek(0, os.SEEK_END)
                rest = memoryview(data.encode("utf-8"))
                try:
                    while rest:
                        rest = rest[f.write(rest):]
                except OSError as e:  # a full disk: no half line stays for a resumed run to append after
                    f.truncate(end)
                    raise OSError(e.errno, e.strerror, self._path) from e
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


def trim_metrics(run: str, step: int) -> int:
    """Drop the records of steps after ``step`` from a run's metrics.jsonl (a run resumed from its
    checkpoint of ``step`` logs those steps again; at 0, an earlier run that never checkpointed); the
    number dropped. The main rank calls it before it logs."""
    url = join(run, METRICS_FILE)
    fs, path = get_fs(url)
    if not fs.exists(path):
        return 0
    lines = [line for line in fs.cat_file(path).decode("utf-8", "replace").splitlines() if line.strip()]

    def keep(line: str) -> bool:  # a line cut by a killed writer does not parse: it goes too
        try:
            record = json.loads(line)
        except ValueError:
            return False
        return isinstance(record, dict) and record.get("step", 0) <= step

    kept = [line for line in lines if keep(line)]
    dropped = len(lines) - len(kept)
    if dropped:
        fs.pipe_file(path, "".join(line + "\n" for line in kept).encode("utf-8"))
    return dropped


def read_metrics(run: str) -> list[dict[str, Any]]:
    """A run's step records (a torn line of a killed writer skipped: run_folder.read_records counts them)."""
    return read_records(run)[0]


def flat_params(cfg: TrainConfig) -> dict[str, str]:
    """The config as flat dotted key -> string (trackers' parameter tables), URLs without credentials."""
    out: dict[str, str] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}{k}.")
        else:
            value = "" if node is None else str(node)
            out[prefix[:-1]] = redact_url(value) if "://" in value else value

    walk(cfg.model_dump(mode="json"), "")
    return out


def numeric(record: dict[str, Any]) -> dict[str, float]:
    """The numbers of a step record, without the step itself (trackers take it separately)."""
    return {k: float(v) for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


def run_name(cfg: TrainConfig) -> str:
    return cfg.trackers.run_name or posixpath.basename(cfg.output.rstrip("/")) or "run"


class WandbLogger:
    """Weights & Biases: one wandb run per training process, the config as its config."""

    def __init__(self, cfg: TrainConfig):
        try:
            import wandb
        except ImportError:
            raise UserError("trackers.wandb needs Weights & Biases: pip install 'shardforge[wandb]'") from None
        t = cfg.trackers
        local = "://" not in cfg.output or cfg.output.startswith("file://")
        folder = cfg.output.removeprefix("file://") if local else None
        if folder:
            os.makedirs(folder, exist_ok=True)
        self._run = wandb.init(project=t.wandb_project, entity=t.wandb_entity, name=run_name(cfg),
                               mode=t.wandb_mode, dir=folder, config=flat_params(cfg), reinit="create_new")

    def log(self, record: dict[str, Any]) -> None:
        self._run.log(numeric(record), step=int(record["step"]))

    def flush(self) -> None:
        """wandb sends in the background; nothing to do per flush."""

    def close(self) -> None:
        self._run.finish()


class MlflowLogger:
    """MLflow through its client API (no global active run): parameters once, metrics per flush."""

    def __init__(self, cfg: TrainConfig):
        t = cfg.trackers
        uri = t.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if uri and uri.startswith("file:"):
            # MLflow 3 refuses its file store unless asked; a local folder is what offline users have.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        try:
            from mlflow.entities import Metric, Param
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise UserError("trackers.mlflow needs MLflow: pip install 'shardforge[mlflow]'") from None
        self._metric = Metric
        self._client = MlflowClient(tracking_uri=uri)
        exp = self._client.get_experiment_by_name(t.mlflow_experiment)
        exp_id = exp.experiment_id if exp else self._client.create_experiment(t.mlflow_experiment)
        self.run_id = self._client.create_run(exp_id, run_name=run_name(cfg)).info.run_id
        params = [Param(k, v[:6000]) for k, v in sorted(flat_params(cfg).items())]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 parameters per batch
            self._client.log_batch(self.run_id, params=params[i:i + 100])
        self._pending: list[Any] = []

    def log(self, record: dict[str, Any]) -> None:
        ts, step = int(time.time() * 1000), int(record["step"])
        self._pending.extend(self._metric(k, v, ts, step) for k, v in numeric(record).items())

    def flush(self) -> None:
        while self._pending:  # at most 1000 metrics per batch
            batch, self._pending = self._pending[:1000], self._pending[1000:]
            self._client.log_batch(self.run_id, metrics=batch)

    def close(self) -> None:
        self.flush()
        self._client.set_terminated(self.run_id)


class Loggers:
    """The JSONL logger and the trackers behind one log / flush / close."""

    def __init__(self, jsonl: MetricsLogger, trackers: list[Any]):
        self.jsonl = jsonl
        self.trackers = trackers

    def log(self, record: dict[str, Any]) -> None:
        self.jsonl.log(record)
        for t in self.trackers:
            t.log(record)

    def flush(self) -> None:
        self.jsonl.flush()
        for t in self.trackers:
            t.flush()

    def close(self) -> None:
        self.jsonl.close()
        for t in self.trackers:
            t.close()


def open_loggers(cfg: TrainConfig, enabled: bool = True) -> Loggers:
    """metrics.jsonl (+ TensorBoard) and the configured trackers; only the main rank (enabled) logs."""
    jsonl = MetricsLogger(cfg.output, enabled=enabled, tensorboard=cfg.trackers.tensorboard)
    trackers: list[Any] = []
    if enabled and cfg.trackers.wandb:
        trackers.append(WandbLogger(cfg))
    if enabled and cfg.trackers.mlflow:
        trackers.append(MlflowLogger(cfg))
    return Loggers(jsonl, trackers)

