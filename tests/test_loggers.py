"""Loggers: W&B and MLflow in their offline modes, tokens seen, smoothed loss, plots.

Both trackers are real: wandb writes its offline run file (read back here with its own
protobuf records), MLflow writes a local file:// store (read back with its client).
"""

from __future__ import annotations

import glob
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from forkserver import run_python

from schemas.config import TrainConfig
from schemas.errors import UserError
from trainer.loggers import open_loggers
from trainer.metrics import RunCounters
from trainer.plot import ema, plot_run, series, x_axis

REPO = Path(__file__).resolve().parent.parent

RECORDS = [{"step": s, "loss": 9.0 - s, "lr": 1e-3 * s, "grad_norm": 2.0 / s, "tokens_seen": 100 * s,
            "epoch": 0} for s in range(1, 6)]


def wandb_records(path: str) -> list[Any]:
    """The protobuf Records of a wandb offline run file (LevelDB log format: 32 KiB blocks, 7-byte headers)."""
    from wandb.proto import wandb_internal_pb2 as pb

    block, data = 32768, Path(path).read_bytes()
    assert data[:4] == b":W&B"
    pos, buf, out = 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if kind == 0 and length == 0:
            break
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def wandb_history(run_dir: Path) -> tuple[dict[int, dict[str, float]], dict[str, Any]]:
    """(step -> metrics, config) of the offline wandb runs under run_dir (a resumed training makes two)."""
    paths = sorted(glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb")))
    assert paths, f"no offline wandb run under {run_dir}"
    history: dict[int, dict[str, float]] = {}
    config: dict[str, Any] = {}
    def items(entries: Any) -> dict[str, Any]:
        return {(i.key or ".".join(i.nested_key)): json.loads(i.value_json) for i in entries}

    records: list[Any] = []
    for path in paths:
        # wandb's service process writes the file: finish() can return before the last records land.
        deadline = time.monotonic() + 60
        while True:
            recs = wandb_records(path)
            if any(r.WhichOneof("record_type") == "exit" for r in recs):
                break
            assert time.monotonic() < deadline, f"{path} has no exit record"
            time.sleep(0.2)
        records.extend(recs)
    for rec in records:
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            row = items(rec.history.item)
            history[int(row.pop("_step"))] = {k: v for k, v in row.items() if not k.startswith("_")}
        elif kind == "run":  # the run record carries the config
            config.update(items(rec.run.config.update))
    return history, config


def mlflow_runs(uri: str, experiment: str = "shardforge") -> tuple[Any, list[Any]]:
    """(client, runs of the experiment) of an MLflow file store."""
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    return client, client.search_runs([exp.experiment_id])


def cfg_for(tmp_path: Path, **trackers: Any) -> TrainConfig:
    return TrainConfig.model_validate({"data": "unused", "output": str(tmp_path / "run"),
                                       "trackers": {"tensorboard": False, **trackers}})


# ------------------------------------------------------------------ counters


def test_run_counters_count_tokens_and_smooth_without_start_bias() -> None:
    c = RunCounters(0.9)
    outs = [c.update(4.0, 10) for _ in range(3)]
    assert [o["tokens_seen"] for o in outs] == [10, 20, 30]
    assert all(o["loss_smooth"] == pytest.approx(4.0) for o in outs)  # a constant is its own average
    c.update(float("nan"), 5)  # a bad step counts its tokens but does not poison the curve
    out = c.update(2.0, 5)
    assert out["tokens_seen"] == 40 and 2.0 < out["loss_smooth"] < 4.0
    again = RunCounters(0.9)
    again.load_state_dict(json.loads(json.dumps(c.state_dict())))  # checkpoint round trip
    assert again.update(1.0, 1) == c.update(1.0, 1)


def test_plot_smooths_and_uses_tokens_on_the_x_axis(tmp_path: Path) -> None:
    assert ema([1.0, 1.0, 1.0], 0.9) == pytest.approx([1.0, 1.0, 1.0])
    smoothed = ema([0.0, 10.0, 0.0, 10.0], 0.5)
    assert smoothed[0] == 0.0 and 0 < smoothed[-1] < 10 and max(smoothed) < 10
    rows = [*RECORDS, {"step": 5, "eval_loss": 3.0}]
    label, xs = x_axis(rows)
    assert label == "tokens seen" and xs[5] == 500.0
    x, y, sy = series(rows, "loss", xs, 0.9)
    assert x == [100.0, 200.0, 300.0, 400.0, 500.0] and sy is not None and sy[0] == y[0] and sy[-1] > y[-1]
    assert series(rows, "eval_loss", xs, 0.9) == ([500.0], [3.0], None)  # evaluations are not smoothed
    assert x_axis([{"step": 1, "loss": 1.0}])[0] == "step"
    with pytest.raises(UserError, match="tokens_seen"):
        x_axis([{"step": 1, "loss": 1.0}], "tokens")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    res = subprocess.run([sys.executable, "-m", "shardforge.cli", "plot", str(run), "--smooth", "0.8"],
                         capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert (run / "plots.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_run(str(run), str(tmp_path / "p.png"), smooth=0.0, x="step") == str(tmp_path / "p.png")


# ------------------------------------------------------------------ trackers, offline


def test_wandb_offline_run_holds_every_step(tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, wandb=True, wandb_mode="offline", run_name="unit")
    loggers = open_loggers(cfg)
    for r in RECORDS:
        loggers.log(r)
    loggers.close()
    history, config = wandb_history(tmp_path / "run")
    assert sorted(history) == [1, 2, 3, 4, 5]
    assert history[3]["loss"] == 6.0 and history[3]["tokens_seen"] == 300 and history[5]["grad_norm"] == 0.4
    assert config["optim.lr"] == str(cfg.optim.lr)
    assert json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1


def test_mlflow_file_store_holds_params_and_every_step(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # the logger must ask for the file store itself
    uri = (tmp_path / "mlruns").as_uri()
    loggers = open_loggers(cfg_for(tmp_path, mlflow=True, mlflow_tracking_uri=uri))
    for r in RECORDS[:3]:
        loggers.log(r)
    loggers.flush()
    for r in RECORDS[3:]:
        loggers.log(r)
    loggers.close()
    client, (run,) = mlflow_runs(uri)
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    assert run.data.params["optim.lr"] == "0.0005" and run.data.params["data"] == "unused"
    loss = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")]
    assert sorted(loss) == [(s, 9.0 - s) for s in range(1, 6)]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "tokens_seen")] == [100, 200, 300, 400, 500]


def test_missing_tracker_package_is_one_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError, as when not installed
    with pytest.raises(UserError, match=r"pip install 'shardforge\[wandb\]'"):
        open_loggers(cfg_for(tmp_path, wandb=True))


def test_trackers_only_on_the_main_rank(tmp_path: Path) -> None:
    loggers = open_loggers(cfg_for(tmp_path, wandb=True, wandb_mode="offline"), enabled=False)
    assert loggers.trackers == []
    loggers.close()
    assert not (tmp_path / "run" / "wandb").exists()


@pytest.mark.slow
def test_training_cli_logs_grad_norm_tokens_and_smoothed_loss_to_every_logger(small_corpus, tmp_path: Path) -> None:
    root, _ = small_corpus
    run, uri = tmp_path / "run", (tmp_path / "mlruns").as_uri()
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline"}
    args = ["-m", "trainer.train", "--data", root, "--output", str(run), "--device", "cpu",
            "--batch_size", "4", "--set", "model.size=tiny", "--set", "log_every=1", "--set", "trackers.wandb=true",
            "--set", "trackers.mlflow=true", "--set", f"trackers.mlflow_tracking_uri={uri}"]
    res = run_python([*args, "--steps", "3"], capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    # torch's notices about its nested tensors (the unpadded path on CPU) are not the user's business
    assert "prototype stage" not in res.stderr and "is_fx_tracing" not in res.stderr, res.stderr
    # Resume to step 5: tokens seen and the smoothed loss continue from the checkpoint.
    res = run_python([*args, "--steps", "5", "--set", "checkpoint_every=1"], capture_output=True, text=True,
                     cwd=REPO, env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    seen = [r["tokens_seen"] for r in rows]
    assert all(b > a for a, b in zip(seen, seen[1:], strict=False)), seen
    assert all(r["grad_norm"] > 0 and math.isfinite(r["loss_smooth"]) for r in rows)
    assert rows[0]["loss_smooth"] == pytest.approx(rows[0]["loss"])
    # Two processes, two tracker runs (the second holds steps 4-5): every step reached both trackers.
    history, _ = wandb_history(run)
    assert sorted(history) == [1, 2, 3, 4, 5]
    assert [history[r["step"]]["tokens_seen"] for r in rows] == seen
    client, runs = mlflow_runs(uri)
    assert len(runs) == 2
    steps = sorted(m.step for r in runs for m in client.get_metric_history(r.info.run_id, "grad_norm"))
    assert steps == [1, 2, 3, 4, 5]
