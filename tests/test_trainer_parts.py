"""The trainer's components alone: the CheckpointManager (what, when, keep-last, load), the step record
and progress text, the batch's way into the model, and the single-process distributed setup.
tests/test_train.py runs them together through train(); here each is driven on its own, with a real
tiny model, a real optimizer and a real ShardLoader over a small corpus."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch

from schemas.config import MaskingConfig, ModelConfig, TrainConfig
from schemas.errors import UserError
from tests.test_loader import VOCAB, make_corpus
from trainer import distributed
from trainer.batch import drop_padding_rows, masked_forward, real_tokens
from trainer.checkpoint import CheckpointManager, list_checkpoints, load_checkpoint
from trainer.distributed import Dist
from trainer.loader import ShardLoader
from trainer.loggers import read_metrics
from trainer.masking import IGNORE_INDEX, Masker
from trainer.metrics import (
    StepStats,
    TrainMetrics,
    device_peak_flops,
    duration,
    progress_line,
    progress_postfix,
    step_record,
)
from trainer.model import Encoder
from trainer.optim import build_optimizer, linear_schedule


def parts(url: str, out: str, **kw) -> tuple[TrainConfig, CheckpointManager]:
    """A config and a manager over fresh model, optimizer, schedule and loader objects."""
    cfg = TrainConfig.model_validate({"data": url, "output": out, "steps": 10, "batch_size": 4, "device": "cpu",
                                      "model": {"size": "tiny", "max_positions": 64}, **kw})
    model = Encoder(cfg.model, VOCAB)
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(cfg.optim.warmup_steps, cfg.steps))
    loader = ShardLoader(url, "train", batch_size=4, seed=0, shuffle_buffer=8)
    return cfg, CheckpointManager(cfg, Dist(), model=model, optimizer=optimizer, scheduler=scheduler,
                                  loader=loader, vocab_size=VOCAB, tokenizer_sha256="0" * 64)


def one_step(m: CheckpointManager) -> None:
    """An optimizer step on one batch, so that model, optimizer, schedule and loader all move."""
    batch = next(iter(m.loader))
    out = m.model(batch["input_ids"], batch["attention_mask"], labels=batch["input_ids"])
    out["loss"].backward()
    m.optimizer.step()
    m.scheduler.step()
    m.optimizer.zero_grad()


def test_checkpoint_manager_saves_when_due_or_forced_and_keeps_the_last_k(tmp_path):
    url = str(make_corpus(tmp_path / "c", [20, 12]))
    run = str(tmp_path / "run")
    _, m = parts(url, run, checkpoint_every=3, keep_last=2)
    saved = {step: m.save(step, force=step == 7) for step in range(1, 9)}
    assert [s for s, u in saved.items() if u] == [3, 6, 7]
    assert [s for s, _ in list_checkpoints(run)] == [6, 7]  # keep_last=2: step 3 removed
    state = load_checkpoint(saved[7])
    assert set(state) == {"model", "optimizer", "scheduler", "loader", "rng", "step", "config", "vocab_size",
                          "manifest", "step_batch"}
    assert state["step_batch"] == {"world_size": 1, "accumulation": 1, "batch_size": m.cfg.batch_size,
                                   "tokens_per_batch": None}
    assert state["step"] == 7 and state["config"]["checkpoint_every"] == 3 and len(state["rng"]["cpu"]) == 1
    # checkpoint_every=0: only forced saves.
    _, never = parts(url, str(tmp_path / "run2"))
    assert never.save(5) is None and never.save(5, force=True) is not None


def test_checkpoint_manager_load_restores_every_object_and_the_rng(tmp_path):
    url = str(make_corpus(tmp_path / "c", [20, 12]))
    run = str(tmp_path / "run")
    torch.manual_seed(0)
    _, a = parts(url, run)
    one_step(a)
    a.save(1, force=True)
    want_draw = torch.rand(4)  # the stream continues from the saved RNG state
    want_batch = next(iter(a.loader))

    torch.manual_seed(123)  # another state: load must replace it
    _, b = parts(url, run)
    assert b.load() == 1
    assert torch.equal(torch.rand(4), want_draw)
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values(),
                                                 strict=True))
    assert b.scheduler.state_dict() == a.scheduler.state_dict()
    assert b.optimizer.state_dict()["state"].keys() == a.optimizer.state_dict()["state"].keys()
    got_batch = next(iter(b.loader))
    assert torch.equal(got_batch["sample_ids"], want_batch["sample_ids"])  # exact loader resume
    _, fresh = parts(url, str(tmp_path / "new"), resume=False)
    assert fresh.load() == 0
    _, again = parts(url, run, resume=False)  # not over the run's checkpoints: retention would remove its own
    with pytest.raises(UserError, match=r"--no-resume: .* holds 1 checkpoint of an earlier run \(up to step 1\)"):
        again.load()
    # Its one checkpoint damaged: the line speaks of one.
    from trainer.checkpoint import checkpoint_dir, list_checkpoints, load_latest_checkpoint

    (only,) = list_checkpoints(run)
    with open(only[1], "r+b") as f:
        f.truncate(100)
    with pytest.raises(UserError, match=rf"^the one checkpoint in {checkpoint_dir(run)} does not load; move it away"):
        load_latest_checkpoint(run)


def test_checkpoint_manager_refuses_another_model_shape_in_one_line(tmp_path):
    url = str(make_corpus(tmp_path / "c", [20]))
    run = str(tmp_path / "run")
    _, small = parts(url, run)
    small.save(2, force=True)
    _, other = parts(url, run, model={"size": "tiny", "max_positions": 64, "hidden": 32, "heads": 2})
    with pytest.raises(UserError, match=r"holds another model: ckpt-00000002.pt \(step 2\) is size=tiny"):
        other.load()


def test_step_record_and_progress_text():
    v = {"loss": 2.5, "mlm_correct": 30.0, "mlm_count": 120.0, "sentence_correct": 0.0, "sentence_count": 0.0}
    r = step_record(7, v, tokens=4000, lr=1e-3, dt=0.5, wait=0.1, epoch=1, flops_per_token=1e6, peak_flops=None)
    assert r == {"step": 7, "loss": 2.5, "lr": 1e-3, "mlm_acc": 0.25, "tokens_per_s": 8000.0, "step_time": 0.5,
                 "data_wait_share": pytest.approx(0.2), "epoch": 1, "flops_per_s": 8e9}
    assert progress_postfix(r) == {"loss": "2.500", "tok/s": "8000", "wait": "20%"}
    heads = step_record(7, {**v, "mlm_loss": 2.0}, tokens=4000, lr=1e-3, dt=0.5, wait=0.1, epoch=1,
                        flops_per_token=1e6, peak_flops=None)
    assert heads == {**r, "mlm_loss": 2.0}
    assert progress_line(r, 100, 754.0) == "step 7/100 loss 2.5000 lr 1.00e-03 tok/s 8000 wait 20% eta 12m34s"
    assert progress_line({**r, "mlm_loss": 2.0}, 100, None).startswith("step 7/100 loss 2.5000 (MLM 2.0000) lr ")
    ev = {**r, "step": 100, "eval_loss": 2.25, "eval_ppl": 9.49, "eval_mlm_acc": 0.5}
    assert progress_line(ev, 100, 0.0, 0.15).endswith(
        "wait 20% | eval loss 2.2500 (MLM nats, 15% masked) ppl 9.5 acc 0.500")  # the last step: no ETA
    assert [duration(s) for s in (5, 125, 3 * 3600 + 65, 2 * 86400 + 7200)] == ["5s", "2m05s", "3h01m", "2d02h"]
    v |= {"sentence_correct": 3.0, "sentence_count": 4.0}
    r = step_record(7, v, tokens=4000, lr=1e-3, dt=0.5, wait=0.1, epoch=1, flops_per_token=1e6, peak_flops=1.6e10)
    assert r["sentence_acc"] == 0.75 and r["mfu"] == pytest.approx(0.5)  # 8000 tok/s * 1e6 / 1.6e10
    assert progress_postfix(r)["mfu"] == "50%"


@pytest.mark.parametrize(("name", "peak"), [
    ("NVIDIA H100 80GB HBM3", 989.4e12), ("NVIDIA H100 PCIe", 756.5e12), ("NVIDIA H100 NVL", 835.5e12),
    ("NVIDIA H200", 989.4e12), ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA L40S", 362e12), ("NVIDIA L4", 121e12),
    ("NVIDIA A10", 125e12), ("NVIDIA A10G", None), ("NVIDIA GeForce RTX 4090", None), (None, None)])
def test_a_gpu_peak_is_its_own_boards_and_an_unknown_one_none(name, peak, monkeypatch):
    """Whole words of the device name: an L40S is not an L4, an A10G not an A10, a PCIe H100 not an SXM one."""
    monkeypatch.delenv("SHARDFORGE_PEAK_FLOPS", raising=False)
    assert device_peak_flops(name) == peak
    monkeypatch.setenv("SHARDFORGE_PEAK_FLOPS", "5e14")
    assert device_peak_flops(name) == 5e14


def test_train_metrics_sums_micro_batches_and_writes_records(tmp_path):
    run = str(tmp_path / "run")
    metrics = TrainMetrics(run, enabled=True, total_steps=2, start_step=0, log_every=1, world_size=2,
                           flops_per_token=1.0, peak_flops=None, show_bar=False)
    s = StepStats()
    for loss, correct in [(2.0, 1.0), (4.0, 3.0)]:  # two micro-batches of an accumulated step
        s.add({"loss": torch.tensor(loss), "mlm_correct": torch.tensor(correct), "mlm_count": torch.tensor(4.0)},
              tokens=10, scale=0.5)
    rec = metrics.record(1, s, lr=0.1, started=0.0, wait=0.0, epoch=0)
    assert rec["loss"] == 3.0 and rec["mlm_acc"] == 0.5 and math.isfinite(rec["tokens_per_s"])
    assert metrics.first_loss == metrics.last_loss == 3.0
    metrics.log(rec)
    metrics.close()
    assert [r["step"] for r in read_metrics(run)] == [1]


def test_train_metrics_combines_the_ranks_shares_into_the_global_batch(tmp_path):
    """Each rank's loss is its share of the global batch's loss: a record sums shares, counts and tokens
    over the ranks (the trainer's combine is an all-reduce)."""
    ranks = []
    for share, correct, count, tokens in [(1.5, 1.0, 2.0, 30), (2.5, 5.0, 6.0, 50)]:
        s = StepStats()
        s.add({"loss": torch.tensor(share), "mlm_correct": torch.tensor(correct), "mlm_count": torch.tensor(count)},
              tokens=tokens, scale=1.0)
        ranks.append(s)
    other = ranks[1].values() | {"tokens": float(ranks[1].tokens)}

    def combine(values: list[float]) -> list[float]:  # rank 0's view of an all-reduce with rank 1
        keys = ("loss", *StepStats.KEYS, "tokens")
        return [v + other[k] for k, v in zip(keys, values, strict=True)]

    metrics = TrainMetrics(str(tmp_path / "run"), enabled=False, total_steps=1, start_step=0, log_every=1,
                           world_size=2, flops_per_token=1.0, peak_flops=None, show_bar=False, combine=combine)
    rec = metrics.record(1, ranks[0], lr=0.1, started=0.0, wait=0.0, epoch=0)
    assert rec["loss"] == 4.0 and rec["mlm_acc"] == 0.75 and metrics.step_tokens == 80


def test_padding_rows_carry_no_loss_and_no_tokens():
    host = {"input_ids": torch.tensor([[0, 7, 8, 2], [0, 9, 2, 1]]), "attention_mask": torch.tensor([[1, 1, 1, 1],
            [1, 1, 1, 0]]), "sample_ids": torch.tensor([3, 4]), "is_pad": torch.tensor([False, True]),
            "sentence_labels": torch.tensor([1, 0])}
    assert real_tokens(host) == 4  # the repeated row is not counted
    ig = IGNORE_INDEX
    masked = {"labels": torch.tensor([[ig, 7, ig, ig], [ig, 9, ig, ig]])}
    batch = dict(host)
    drop_padding_rows(batch, masked)
    assert masked["labels"][1].eq(IGNORE_INDEX).all() and masked["labels"][0, 1] == 7
    assert batch["sentence_labels"].tolist() == [1, IGNORE_INDEX]

    model = Encoder(ModelConfig(size="tiny", dropout=0.0, max_positions=64), VOCAB)
    masker = Masker(MaskingConfig(), VOCAB, [0, 1, 2, 3, 4], mask_id=4, pad_id=1)
    host.pop("sentence_labels")
    out, tokens = masked_forward(model, masker, host, torch.device("cpu"), contextlib.nullcontext, epoch=0, seed=0)
    assert tokens == 4 and math.isfinite(out["loss"].item())


def test_single_process_setup_decides_the_device_once(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    dd = distributed.setup("cpu")
    assert (dd.rank, dd.world_size, dd.main, dd.device.type) == (0, 1, True, "cpu")
    assert dd.any(True) and not dd.any(False)  # one process: the collectives are the identity
    t = torch.arange(3)
    assert dd.all_gather(t)[0] is t
    rng = distributed.gather_rng(dd)
    want = torch.rand(3)
    distributed.restore_rng(rng, dd, fallback_seed=0)
    assert torch.equal(torch.rand(3), want)
    # A rank the checkpoint did not have (the world grew) starts a seeded stream.
    distributed.restore_rng(rng, Dist(rank=1, world_size=2), fallback_seed=5)
    torch.manual_seed(5)
    want = torch.rand(3)
    distributed.restore_rng(rng, Dist(rank=1, world_size=2), fallback_seed=5)
    assert torch.equal(torch.rand(3), want)


@pytest.mark.parametrize(("requested", "local_rank", "want"), [
    ("cuda", 0, "cuda:0"), ("cuda", 3, "cuda:3"), ("cuda:1", 3, "cuda:1"), ("cpu", 2, "cpu")])
def test_a_gpu_named_without_an_index_is_the_ranks_gpu(requested, local_rank, want):
    assert distributed.pick_device(requested, local_rank) == torch.device(want)


def test_setup_binds_an_indexed_gpu_for_device_cuda(monkeypatch):
    """`device: cuda` binds this rank's GPU: torch.cuda.set_device refuses an index-less device (found on
    an H200: the trainer with device "cuda" stopped in setup with a ValueError)."""
    bound = []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(torch.cuda, "set_device", bound.append)
    monkeypatch.setattr(distributed, "check_cuda", lambda requested, index: None)  # a GPU, as far as this test goes
    dd = distributed.setup("cuda")
    assert dd.device == torch.device("cuda", 0) and bound == [torch.device("cuda", 0)]
    assert bound[0].index is not None


@pytest.mark.parametrize(("build", "count", "requested", "says"), [
    (None, 0, "cuda", "--device cuda: this torch ({v}) is a CPU build; install a CUDA build of torch, or run "
                      "with --device cpu (or auto)"),
    ("12.8", 0, "cuda", "--device cuda: GPU 0 is not there: no GPU visible (driver, device, or CUDA_VISIBLE_DEVICES); "
                        "torch {v} (CUDA 12.8)"),
    ("12.8", 1, "cuda:1", "--device cuda:1: GPU 1 is not there: 1 visible GPU; torch {v} (CUDA 12.8)"),
])
def test_a_gpu_that_is_not_there_is_one_line(monkeypatch, build, count, requested, says):
    """torch's own errors were an AttributeError of its C module (CPU build) or the driver's "invalid device
    ordinal"; set_device is never reached."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(torch.version, "cuda", build)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: pytest.fail("set_device reached"))
    with pytest.raises(UserError) as info:
        distributed.setup(requested)
    assert str(info.value) == says.format(v=torch.__version__)


def test_a_gpu_that_is_there_passes_the_check(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)  # a ROCm build: AMD GPUs behind the "cuda" device type
    monkeypatch.setattr(torch.version, "hip", "6.4", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    distributed.check_cuda("cuda", 0)
    with pytest.raises(UserError, match=r"GPU 1 is not there: 1 visible GPU; torch .* \(ROCm 6.4\)$"):
        distributed.check_cuda("cuda:1", 1)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    distributed.check_cuda("cuda:1", 1)


def test_the_global_batch_is_what_the_steps_take_or_a_note_says_what_they_take():
    from trainer.train import micro_batches_per_step

    def accum(world: int, **kw) -> tuple[int, str | None]:
        return micro_batches_per_step(TrainConfig.model_validate({"data": "x", "batch_size": 16, **kw}), world, 512)

    assert accum(2, global_batch_sequences=64) == (2, None)
    steps, note = accum(2, global_batch_sequences=48)  # 2 ranks x 16 divide 64, not 48
    assert steps == 2 and "48 sequences asked" in note and "take 64" in note
    # A token budget: the global batch's sequences count as full-length ones (64 x 512 tokens), not batch_size's.
    assert accum(2, global_batch_sequences=64, tokens_per_batch=8192) == (2, None)
    assert accum(1, global_batch_sequences=64, tokens_per_batch=8192)[0] == 4
    assert accum(4, gradient_accumulation=3, global_batch_sequences=64) == (3, None)
    assert accum(1) == (1, None)


def test_a_resume_that_changes_the_global_batch_warns_and_another_micro_batch_is_one_line(tmp_path, caplog):
    url = str(make_corpus(tmp_path / "c", [20, 12]))
    run = str(tmp_path / "run")
    _, m = parts(url, run)
    m.save(3, force=True)
    cfg, again = parts(url, run)
    again.accum = 2  # the same ranks, twice the micro-batches: twice the global batch
    with caplog.at_level("WARNING", logger="trainer.checkpoint"):
        assert again.load() == 3
    assert any("take 8 sequences (1 ranks x 4 x 2" in r.getMessage() and "took 4 sequences" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    smaller = ShardLoader(url, "train", batch_size=2, seed=0, shuffle_buffer=8)
    with pytest.raises(UserError, match=r"batches are cut at batch_size 4, and it is resumed with batch_size 2"):
        smaller.load_state_dict(m.loader.state_dict())
