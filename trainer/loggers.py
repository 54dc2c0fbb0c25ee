"""Where a run's metrics go: metrics.jsonl (+ TensorBoard), and optionally Weights & Biases and MLflow.

``open_loggers(cfg)`` gives the loop one object with ``log`` / ``flush`` / ``close``
that fans every step record out to the JSONL logger (trainer/metrics.py, always)
and to the trackers the config switches on (``trackers.wandb``, ``trackers.mlflow``).
Both trackers are optional extras (``pip install 'shardforge[wandb]'`` /
``'shardforge[mlflow]'``) and both work offline: ``WANDB_MODE=offline`` (or
``trackers.wandb_mode=offline``) writes a local run that ``wandb sync`` uploads
later; MLflow takes any tracking URI, a local ``file://`` folder included.

``RunCounters`` adds what a step record alone cannot know: tokens seen since the
run began and a smoothed loss. They are checkpointed, so a resumed run continues them.
"""

from __future__ import annotations

import math
import os
import posixpath
import time
from typing import Any

from schemas.config import TrainConfig
from schemas.errors import UserError
from shardforge.storage import redact_url
from trainer.metrics import MetricsLogger


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

