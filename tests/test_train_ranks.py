"""The trainer on a one-shard corpus, under torchrun (gloo, CPU) and alone: what every rank sees and counts.

- Evaluation averages over the predicted tokens of all ranks: ``eval_loss`` logged
  by 2 ranks equals one process's evaluation of the same checkpoint (before, a
  rank without valid data added padding batches of loss 0 and halved it).
- ``tokens_seen`` counts real tokens of every rank: one epoch of 2 ranks x 2
  workers is the train split's tokens (before, rank 0's tokens times the world).
- Resume is exact with DataLoader workers and dropout (the DataLoader drew its
  workers' base seed from the RNG a resumed run restores), over a matrix of
  workers, dropout, masking scheme and ranks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest
import torch

from schemas.config import BuildConfig, TrainConfig
from shardforge.storage.contract import load_manifest
from trainer.checkpoint import list_checkpoints, load_checkpoint
from trainer.distributed import OWN_LOGGERS, Dist, quiet_replica_logs
from trainer.evaluate import evaluate
from trainer.loader import ShardLoader
from trainer.loggers import read_metrics
from trainer.model import Encoder
from trainer.train import build_loaders, build_maskers, train, vocab_tables

pytestmark = pytest.mark.slow
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = 8


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory) -> str:
    """A real build of a small synthetic corpus into one train shard and one valid shard."""
    from pipelines.jobs.build import run_build
    from shardforge.commands.synth import write_demo_corpus
    from tests.test_build import small_config

    raw = write_demo_corpus(str(tmp_path_factory.mktemp("raw")), docs_per_source=10, seed=7)
    cfg = small_config(raw).model_dump()
    cfg["shards"] = {"target_samples": 100_000, "target_bytes": 1 << 30}
    out = str(tmp_path_factory.mktemp("one-shard") / "corpus")
    m = run_build(BuildConfig.model_validate(cfg), out)
    assert [len(m.shards_of(s)) for s in ("train", "valid")] == [1, 1]
    return out


def cli_args(corpus: str, out: str, steps: int, *extra: str) -> list[str]:
    args = ["-m", "trainer.train", "--data", corpus, "--output", out, "--steps", str(steps), "--batch_size",
            str(BATCH), "--device", "cpu"]
    for s in ("model.size=tiny", "model.dropout=0.1", "num_workers=2", "log_every=1", f"eval_every={steps}",
              "eval_batches=1000", "shuffle_buffer=64", *extra):
        args += ["--set", s]
    return args


def torchrun(args: list[str]) -> str:
    """The run's output (stdout, then stderr) once it exited 0."""
    exe = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([exe, "--standalone", "--nproc_per_node", "2", *args], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout + r.stderr


def evaluate_alone(run: str) -> dict[str, float]:
    """One process's evaluation of the run's last checkpoint, as the trainer sets it up."""
    state = load_checkpoint(list_checkpoints(run)[-1][1])
    cfg = TrainConfig.model_validate(state["config"])
    manifest, root = load_manifest(cfg.data)
    vocab, starts = vocab_tables(manifest, root)
    special = manifest.tokenizer.special_ids
    model = Encoder(cfg.model, vocab, pad_id=state["pad_id"])
    model.load_state_dict(state["model"])
    _, masker = build_maskers(cfg, torch.device("cpu"), vocab, special, starts, special["<pad>"], special["<mask>"])
    _, valid = build_loaders(cfg, Dist(), manifest)
    assert valid is not None
    return evaluate(model, valid, masker, cfg, torch.device("cpu"), contextlib.nullcontext)


def test_two_ranks_on_one_shard_count_every_token_once_and_resume_exactly(one_shard, tmp_path):
    """torchrun, 2 ranks x 2 workers, dropout 0.1, one train and one valid shard, one epoch: every
    record of a run stopped mid-epoch and resumed equals the uninterrupted run's; tokens_seen at the
    epoch's end is the split's tokens; eval_loss equals one process's on the same checkpoint."""
    epoch = ShardLoader(one_shard, rank=0, world_size=2, num_workers=2, batch_size=BATCH).steps_per_epoch
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    said = torchrun(cli_args(one_shard, full, epoch))
    assert said.count(" attention on ") == 1 and said.count("trained to step") == 1, said  # rank 0 tells
    torchrun(cli_args(one_shard, part, epoch, f"stop_at={epoch // 2}"))
    torchrun(cli_args(one_shard, part, epoch))
    a, b = read_metrics(full), read_metrics(part)
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, epoch + 1))
    for ra, rb in zip(a, b, strict=True):
        for k in ("loss", "tokens_seen", "eval_loss"):
            assert abs(ra.get(k, 0) - rb.get(k, 0)) <= 1e-6, (ra["step"], k, ra.get(k), rb.get(k))

    manifest, _ = load_manifest(one_shard)
    assert a[-1]["epoch"] == 0 and a[-1]["tokens_seen"] == sum(s.tokens for s in manifest.shards_of("train"))
    alone = evaluate_alone(full)
    assert a[-1]["eval_mlm_tokens"] == alone["eval_mlm_tokens"]
    assert abs(a[-1]["eval_loss"] - alone["eval_loss"]) < 1e-4, (a[-1]["eval_loss"], alone["eval_loss"])


def test_replica_ranks_log_warnings_only_and_a_chosen_level_stays():
    """Rank 0 keeps information lines, any other rank passes warnings (a rank's own trouble still
    shows); a level the ``shardforge`` logger was given is left alone."""
    ours = [logging.getLogger(name) for name in OWN_LOGGERS]
    top = logging.getLogger()
    children = [logging.getLogger("shardforge.batch"), logging.getLogger("trainer.checkpoint")]
    before = [log.level for log in ours], top.level
    try:
        top.setLevel(logging.INFO)
        for rank, level, info in [(0, logging.NOTSET, True), (0, logging.INFO, True), (1, logging.NOTSET, False),
                                  (1, logging.INFO, False), (3, logging.DEBUG, True)]:
            for log in ours:
                log.setLevel(level)
            quiet_replica_logs(rank)
            for child in children:
                assert child.isEnabledFor(logging.INFO) is info, (rank, level, child.name)
                assert child.isEnabledFor(logging.WARNING), (rank, level, child.name)
    finally:
        for log, level in zip(ours, before[0], strict=True):
            log.setLevel(level)
        top.setLevel(before[1])


def run_config(data: str, output: str, **kw: Any) -> TrainConfig:
    base = {"data": data, "output": output, "steps": 8, "batch_size": BATCH, "device": "cpu", "log_every": 1,
            "optim": {"lr": 3e-3, "warmup_steps": 2}, "model": {"size": "tiny"}, "shuffle_buffer": 64}
    for k, v in kw.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return TrainConfig.model_validate(base)


# Every pair of (workers, dropout, masking scheme) values in 8 runs; torchrun's ranks in the test above.
MATRIX = [(2, 0.1, "token"), (0, 0.0, "token"), (2, 0.0, "whole_word"), (0, 0.1, "whole_word"),
          (2, 0.1, "span"), (0, 0.0, "span"), (2, 0.0, "ngram"), (0, 0.1, "ngram")]


@pytest.mark.parametrize(("workers", "dropout", "scheme"), MATRIX)
def test_resume_is_exact_for_workers_dropout_and_masking(one_shard, tmp_path, workers, dropout, scheme):
    kw: dict[str, Any] = dict(num_workers=workers, model={"dropout": dropout, "span_boundary": scheme == "span"},
                              masking={"scheme": scheme})
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    train(run_config(one_shard, full, **kw))
    train(run_config(one_shard, part, stop_at=3, **kw))
    train(run_config(one_shard, part, **kw))
    a, b = read_metrics(full), read_metrics(part)
    assert [r["step"] for r in b] == list(range(1, 9))
    for ra, rb in zip(a, b, strict=True):
        assert abs(ra["loss"] - rb["loss"]) <= 1e-6, (ra["step"], ra["loss"], rb["loss"])
    sa = load_checkpoint(list_checkpoints(full)[-1][1])["model"]
    sb = load_checkpoint(list_checkpoints(part)[-1][1])["model"]
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_hung_rank_stops_the_run_after_ddp_timeout_in_one_line(one_shard, tmp_path):
    """Rank 1 stopped (SIGSTOP: hung, not dead) mid-run: rank 0's next collective gives up after
    --ddp_timeout, not torch's 30 min on gloo, and says so in one line instead of gloo's traceback."""
    import signal
    import time

    out, err_path = tmp_path / "run", tmp_path / "stderr"
    exe = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}
    with open(err_path, "w") as err:
        proc = subprocess.Popen([exe, "--standalone", "--nproc_per_node", "2",
                                 *cli_args(one_shard, str(out), 100_000, "num_workers=0"), "--ddp_timeout", "3"],
                                env=env, stdout=subprocess.DEVNULL, stderr=err)
    ranks: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").exists() or len(read_metrics(str(out))) < 3:  # it is training
            assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()[-3000:]
            time.sleep(0.2)
        for pid in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split():
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            rank = next(int(v.split(b"=")[1]) for v in environ if v.startswith(b"RANK="))
            ranks[rank] = int(pid)
        stopped = time.monotonic()
        os.kill(ranks[1], signal.SIGSTOP)
        while _alive(ranks[0]) and time.monotonic() < stopped + 60:
            time.sleep(0.1)
        waited = time.monotonic() - stopped
    finally:
        for pid in ranks.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=120)
    text = err_path.read_text()
    assert proc.returncode != 0 and waited < 30, (waited, text[-3000:])
    assert ("error: rank 0 of 2: a collective waited 3 s (ddp_timeout) for the other ranks: one of them hung or "
            "died") in text, text[-3000:]
    assert "unbound_buffer" not in text and 'trainer/step.py"' not in text, text[-3000:]  # no gloo traceback
