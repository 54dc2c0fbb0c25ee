"""Mask ahead (``masking_overlap``, trainer/batch.py ``MaskAhead``, trainer/train.py ``Feed``): the next batch
is copied and masked on a side stream while the current step computes, and nothing a run computes changes.

On the CPU the side stream is torch.cpu's (the same calls, doing nothing), so these tests run the overlapped
loop's order and bookkeeping: the same masks, batches, losses, evaluations and checkpoints with it on as off,
across micro-batch accumulation, epoch boundaries, a mix of corpora, a stop, a SIGTERM at a step boundary and
a resume from a checkpoint taken while a batch was held ahead. A recording stand-in for torch.cuda's stream
calls checks their order; the CUDA tests (skipped without a GPU) check the same on the device.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from test_mixing import two_corpora  # noqa: F401 - a fixture
from test_step_levers import SPECIALS, V, encoder, host_batch

import trainer.batch as batch_mod
from schemas import MASK_ID, PAD_ID
from schemas.config import MaskingConfig, TrainConfig
from trainer.batch import MaskAhead, device_tensors, forward, masked_forward, overlap_on
from trainer.checkpoint import list_checkpoints, load_checkpoint
from trainer.fused_masking import FusedMasker
from trainer.loggers import read_metrics
from trainer.masking import Masker
from trainer.precision import Precision
from trainer.train import train

CPU = torch.device("cpu")
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs CUDA (run by benchmarks/gpu.sh)")
# What a step's record holds that is a clock reading, not a result.
# What differs between two runs of the same batches: timings, and the keys of a process's first record.
TIMING = ("tokens_per_s", "step_time", "data_wait_share", "flops_per_s", "mfu", "data_startup_s", "total_steps")


def masker(scheme: str = "whole_word", fused: bool = False, device: torch.device = CPU,
           compile: bool = False) -> Masker | FusedMasker:
    """The reference masker, or the fused one (eager unless ``compile``), on ``device``."""
    ws = torch.rand(V, generator=torch.Generator().manual_seed(1)) < 0.6
    m = Masker(MaskingConfig(scheme=scheme), V, SPECIALS, MASK_ID, PAD_ID, ws).to(device)
    m.check_ids = False
    return FusedMasker(m, compile=compile).to(device) if fused else m


# ------------------------------------------------------------------ one batch


@pytest.mark.parametrize("lengths", [[32] * 4, [32, 20, 9, 31]], ids=["full rows", "ragged"])
@pytest.mark.parametrize("scheme,fused", [("token", False), ("span", False), ("whole_word", True)])
def test_a_batch_prepared_ahead_is_the_batch_masked_in_place(lengths: list[int], scheme: str, fused: bool) -> None:
    """Prepared on the side stream and handed over: the same masks, loss and gradients, bit for bit."""
    host = host_batch(lengths, 32, seed=5)
    m = masker(scheme, fused)
    prec = Precision("fp32", CPU)
    results = []
    for overlap in (False, True):
        model = encoder(span_boundary=scheme == "span")
        pipe = MaskAhead(CPU, overlap)
        batch = pipe.hand_over(pipe.prepare(model, m, host, epoch=2, seed=7))
        out = forward(model, batch, CPU, prec.autocast)
        out["loss"].backward()
        results.append((batch.kw["input_ids"], batch.kw["labels"], out["loss"].detach(),
                        [p.grad for p in model.parameters()]))
    model = encoder(span_boundary=scheme == "span")
    out, tokens = masked_forward(model, m, host, CPU, prec.autocast, epoch=2, seed=7)
    assert tokens == sum(lengths)
    (ids0, labels0, loss0, grads0), (ids1, labels1, loss1, grads1) = results
    assert torch.equal(ids0, ids1) and torch.equal(labels0, labels1)
    assert torch.equal(loss0, loss1) and torch.equal(loss0, out["loss"].detach())
    assert all(torch.equal(a, b) for a, b in zip(grads0, grads1, strict=True))


class RecordedStream:
    """One stream of a Recorder: its waits and events are recorded, in order."""

    def __init__(self, name: str, rec: Recorder) -> None:
        self.name, self.rec, self.events = name, rec, 0

    def wait_stream(self, other: RecordedStream) -> None:
        self.rec.calls.append((self.name, "wait_stream", other.name))

    def wait_event(self, event: str) -> None:
        self.rec.calls.append((self.name, "wait_event", event))

    def record_event(self) -> str:
        self.events += 1
        event = f"{self.name} event {self.events}"
        self.rec.calls.append((self.name, "record_event", event))
        return event


class Recorder:
    """A stand-in for torch.cuda's stream calls (MaskAhead's ``streams``): the main stream, one side
    stream, the current one, and every call in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.main = RecordedStream("main", self)
        self.now = self.main

    def Stream(self, *device: torch.device) -> RecordedStream:  # noqa: N802 - torch's name
        return RecordedStream("side", self)

    def current_stream(self, device: torch.device) -> RecordedStream:
        return self.now

    @contextmanager
    def stream(self, s: RecordedStream):  # noqa: ANN201
        before, self.now = self.now, s
        self.calls.append((s.name, "enter"))
        try:
            yield
        finally:
            self.now = before
            self.calls.append((s.name, "leave"))


def test_the_stream_calls_come_in_the_order_that_keeps_the_overlap_safe(monkeypatch) -> None:
    """Side waits for main before it writes (first for all of main, then for main as it stood at the last
    hand-over, not for the step now running); the masking runs on the side stream; main waits for side
    before it uses the batch; every tensor of the batch is recorded as used on main."""
    rec = Recorder()
    used: list[tuple[int, str]] = []
    monkeypatch.setattr(batch_mod, "used_on", lambda ts, s: used.extend((id(t), s.name) for t in ts))
    m = masker("whole_word")
    calls = m.__call__

    class OnWhichStream:
        pad_id, prediction_bound = m.pad_id, m.prediction_bound

        def __call__(self, *a: Any, **kw: Any) -> dict:
            rec.calls.append((rec.now.name, "mask"))
            return calls(*a, **kw)

    pipe = MaskAhead(CPU, True, streams=rec)
    model = encoder()
    first = pipe.prepare(model, OnWhichStream(), host_batch([32, 20, 9, 31], 32), epoch=0, seed=0)
    pipe.hand_over(first)
    rec.calls.append(("main", "step 1 queued"))
    second = pipe.prepare(model, OnWhichStream(), host_batch([32] * 4, 32, seed=1), epoch=0, seed=0)
    pipe.hand_over(second)
    assert rec.calls == [
        ("side", "wait_stream", "main"), ("side", "enter"), ("side", "mask"), ("side", "record_event", "side event 1"),
        ("side", "leave"),
        ("main", "wait_stream", "side"), ("main", "record_event", "main event 1"),
        ("main", "step 1 queued"),
        ("side", "wait_event", "main event 1"), ("side", "enter"), ("side", "mask"),
        ("side", "record_event", "side event 2"), ("side", "leave"),
        ("main", "wait_stream", "side"), ("main", "record_event", "main event 2")]
    assert first.ready == "side event 1" and second.ready == "side event 2"
    tensors = device_tensors(first.kw)
    assert "unpadded" in first.kw and len(tensors) >= 8  # ids, labels, the mask and the unpadded layout's
    assert {i for i, _ in used} >= {id(t) for t in tensors + device_tensors(second.kw)}
    assert {s for _, s in used} == {"main"}


def test_without_overlap_nothing_touches_a_stream(monkeypatch) -> None:
    rec = Recorder()
    monkeypatch.setattr(batch_mod, "used_on", lambda ts, s: pytest.fail("no stream to record on"))
    pipe = MaskAhead(CPU, False, streams=rec)
    pipe.hand_over(pipe.prepare(encoder(), masker(), host_batch([32] * 4, 32), epoch=0, seed=0))
    assert rec.calls == [] and not pipe.overlap


def test_the_setting() -> None:
    cuda, cpu = torch.device("cuda", 0), CPU
    assert [overlap_on(s, d) for s in ("auto", "on", "off") for d in (cuda, cpu)] == [
        True, False, True, True, False, False]
    with pytest.raises(ValueError, match="masking_overlap"):
        overlap_on("yes", cpu)
    assert TrainConfig.model_validate({"data": "x"}).masking_overlap == "off"  # until measured on a GPU
    with pytest.raises(ValueError):
        TrainConfig.model_validate({"data": "x", "masking_overlap": "sometimes"})


def test_the_run_description_says_so(small_corpus) -> None:
    from shardforge.storage.contract import load_manifest
    from trainer.describe import RunShape, describe_run

    root, _ = small_corpus
    manifest, _ = load_manifest(root)
    cfg = TrainConfig.model_validate({"data": root})
    shape = {"params": 1, "device": "cuda:0", "precision": "bf16", "compiled": True, "world_size": 1, "accum": 1,
             "vocab_size": 400, "masking": "fused"}
    assert describe_run(cfg, manifest, RunShape(**shape, masking_ahead=True))[1].endswith(
        "torch.compile on, fused masking ops (one batch ahead, on a side stream)")
    assert describe_run(cfg, manifest, RunShape(**shape))[1].endswith("torch.compile on, fused masking ops")


# ------------------------------------------------------------------ whole runs


def run_cfg(data: str | None, output: str, **kw: Any) -> TrainConfig:
    base: dict[str, Any] = {"output": output, "steps": 12, "batch_size": 40, "gradient_accumulation": 3,
                            "device": "cpu", "resume": True, "optim": {"lr": 3e-3, "warmup_steps": 3},
                            "model": {"size": "tiny", "dropout": 0.1}, "log_every": 1, "shuffle_buffer": 64,
                            "eval_every": 5, "eval_batches": 2, "checkpoint_every": 4, "keep_last": 0,
                            "masking": {"scheme": "whole_word"}, **kw}
    if data is not None:
        base["data"] = data
    return TrainConfig.model_validate(base)


def results(out: str) -> list[dict]:
    """A run's step records without the clock readings."""
    return [{k: v for k, v in r.items() if k not in TIMING} for r in read_metrics(out)]


def same_state(a: Any, b: Any, where: str = "") -> None:
    """Two checkpoints' contents equal, tensors bit for bit."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, set(a) ^ set(b))
        for k in a:
            same_state(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same_state(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def checkpoints_of(out: str) -> dict[int, dict]:
    found = {}
    for step, url in list_checkpoints(out):
        state = load_checkpoint(url)
        state.pop("config")  # names masking_overlap
        found[step] = state
    return found


def same_runs(a: str, b: str) -> None:
    ra, rb = results(a), results(b)
    assert [r["step"] for r in ra] == [r["step"] for r in rb] and ra, (len(ra), len(rb))
    for x, y in zip(ra, rb, strict=True):
        assert x == y, (x["step"], {k: (x.get(k), y.get(k)) for k in set(x) | set(y) if x.get(k) != y.get(k)})
    ca, cb = checkpoints_of(a), checkpoints_of(b)
    assert ca.keys() == cb.keys()
    for step in ca:
        same_state(ca[step], cb[step], f"checkpoint {step}")


def crashed_copy(run: str, out: str, step: int) -> None:
    """A copy of a run as a crash right after its checkpoint ``step`` leaves it (later checkpoints and step
    records gone)."""
    shutil.copytree(run, out)
    for at, url in list_checkpoints(out):
        if at > step:
            os.remove(url)
    path = os.path.join(out, "metrics.jsonl")
    with open(path) as f:
        kept = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
    with open(path, "w") as f:
        f.writelines(kept)


@pytest.fixture(scope="module")
def runs(small_corpus, tmp_path_factory) -> dict[str, str]:
    """The same run with mask ahead off and on: 12 steps of 3 micro-batches, an evaluation every 5 steps,
    a checkpoint every 4. An epoch of this corpus is about 21 batches (of at most 40 rows; the corpus's
    document ids hash its folder's path, so the count moves a little with the temporary folder's name).
    At 21, the last batch of the first epoch is step 7's last micro-batch, taken ahead while step 7's
    second one computes, and the first batch of the second epoch is step 8's first, taken ahead at the end
    of step 7."""
    root, _ = small_corpus
    tmp = tmp_path_factory.mktemp("mask-ahead")
    out = {}
    for setting in ("off", "on"):
        out[setting] = str(tmp / setting)
        summary = train(run_cfg(root, out[setting], masking_overlap=setting))
        assert summary["steps"] == 12
    return out


@pytest.mark.slow
def test_on_and_off_give_the_same_run(runs: dict[str, str]) -> None:
    """Losses, gradient norms, evaluations, epochs and every checkpoint (weights, optimizer, loader position,
    RNG, counters) equal bit for bit; the second epoch starts inside the run (where: see ``runs``)."""
    same_runs(runs["off"], runs["on"])
    rows = results(runs["on"])
    epochs = [r["epoch"] for r in rows]
    assert epochs == sorted(epochs) and epochs[0] == 0 and epochs[-1] == 1
    assert sum("eval_loss" in r for r in rows) == 3  # steps 5, 10 and the last


@pytest.mark.slow
def test_a_resume_from_a_checkpoint_taken_with_a_batch_held_ahead_sees_the_same_batches(
        small_corpus, runs: dict[str, str], tmp_path) -> None:
    """Checkpoint 8 was written while step 9's first batch was already taken and masked: the resumed run
    (on, and off: the checkpoints are interchangeable) trains on exactly the batches the whole run did."""
    root, _ = small_corpus
    for setting in ("on", "off"):
        out = str(tmp_path / setting)
        crashed_copy(runs["on"], out, 8)
        train(run_cfg(root, out, masking_overlap=setting))
        assert results(out) == results(runs["on"])
        same_state(checkpoints_of(out)[12], checkpoints_of(runs["on"])[12], setting)


@pytest.mark.slow
def test_a_stop_and_a_sigterm_at_a_step_boundary_resume_exactly(small_corpus, runs: dict[str, str], tmp_path,
                                                                 monkeypatch) -> None:
    """stop_at takes no batch past the stop; a data wait abandoned after SIGTERM while the next step's batch
    is taken ahead still lets the step end and checkpoint (with the loader's position of before that batch)."""
    from trainer.preempt import Preempted, Preemption

    root, _ = small_corpus
    stopped = str(tmp_path / "stopped")
    train(run_cfg(root, stopped, masking_overlap="on", stop_at=8))
    # The whole run's checkpoint 8 was written with step 9's first batch held ahead; this one with none.
    same_state(checkpoints_of(stopped)[8], checkpoints_of(runs["on"])[8])
    train(run_cfg(root, stopped, masking_overlap="on"))
    assert results(stopped) == results(runs["on"])

    taken = Preemption.next
    train_batches: list = []  # the training stream's iterator, once per batch taken (evaluation's not)

    def next_or_sigterm(self: Preemption, it: Any) -> Any:
        if not train_batches or it is train_batches[0]:
            train_batches.append(it)
        if len(train_batches) == 3 * 7 + 1:  # step 8's first batch (a new epoch's), taken at the end of step 7
            self.requested = True
            raise Preempted("SIGTERM and still waiting for data")
        return taken(self, it)

    sigterm = str(tmp_path / "sigterm")
    monkeypatch.setattr(Preemption, "next", next_or_sigterm)
    summary = train(run_cfg(root, sigterm, masking_overlap="on"))
    monkeypatch.setattr(Preemption, "next", taken)
    assert summary["steps"] == 7 and not summary["preempted"]
    state = load_checkpoint(list_checkpoints(sigterm)[-1][1])
    assert state["step"] == 7
    train(run_cfg(root, sigterm, masking_overlap="on"))
    assert results(sigterm) == results(runs["on"])
    same_state(checkpoints_of(sigterm)[12], checkpoints_of(runs["on"])[12])


@pytest.mark.slow
def test_a_mix_of_corpora_with_ragged_batches_is_the_same_on_and_off(two_corpora, tmp_path) -> None:  # noqa: F811
    """Two corpora by weight, token-budget batches (the unpadded path): the same records (the realized
    shares included: the batch held ahead is not counted in them) and checkpoints; a resume from a
    checkpoint taken with a batch held ahead ends where the whole run does."""
    a, b = two_corpora
    mix = {"mix": [{"data": a, "weight": 0.7}, {"data": b, "weight": 0.3}], "batch_size": 8,
           "tokens_per_batch": 700, "gradient_accumulation": 1, "steps": 9, "checkpoint_every": 3,
           "eval_every": 0, "masking": {"scheme": "span"}}
    outs = {}
    for setting in ("off", "on"):
        outs[setting] = str(tmp_path / setting)
        train(run_cfg(None, outs[setting], masking_overlap=setting, **mix))
    same_runs(outs["off"], outs["on"])
    assert any(k.startswith("share/") for k in results(outs["on"])[0])
    part = str(tmp_path / "part")
    crashed_copy(outs["on"], part, 3)
    train(run_cfg(None, part, masking_overlap="on", **mix))
    assert results(part) == results(outs["on"])
    same_state(checkpoints_of(part)[9], checkpoints_of(outs["on"])[9])


# ------------------------------------------------------------------ on a GPU


@needs_cuda
def test_cuda_side_stream_masks_while_the_main_stream_is_busy() -> None:
    """On a GPU: the next batch is masked while the main stream still runs the step before it (the side
    stream does not wait for that step), and after the hand-over the batch equals one masked in place."""
    dev = torch.device("cuda", torch.cuda.current_device())
    m = masker("token", fused=True, device=dev, compile=True)  # Triton kernels, as the trainer runs them
    model = encoder().to(dev)
    prec = Precision("fp32", dev)
    pipe = MaskAhead(dev, True)
    host = {k: v.pin_memory() for k, v in host_batch([32, 20, 9, 31], 32, seed=3).items()}
    pipe.hand_over(pipe.prepare(model, m, host, epoch=0, seed=0))  # compiles, and sets the hand-over point
    torch.cuda.synchronize()
    torch.cuda._sleep(4_000_000_000)  # a long step on the main stream (about two seconds)
    busy = torch.cuda.current_stream(dev).record_event()
    batch = pipe.prepare(model, m, host, epoch=1, seed=0)
    deadline = time.monotonic() + 30
    while not batch.ready.query() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert batch.ready.query() and not busy.query(), "the side stream waited for the main stream's step"
    out = forward(model, pipe.hand_over(batch), dev, prec.autocast)
    want, _ = masked_forward(model, m, host, dev, prec.autocast, epoch=1, seed=0)
    assert torch.equal(out["loss"], want["loss"])


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
def test_on_and_off_feed_the_model_the_same_batches(device: str, small_corpus, tmp_path, monkeypatch) -> None:
    """The whole loop (eager, fp32; on the GPU with fused masking): every micro-batch that reaches the model
    holds the same ids, labels and layout on and off (on a GPU: copied on the main stream when the model
    takes it, so a missing wait would show here), the loader positions in the checkpoints are the same, and
    so are the losses (the first bit for bit; later ones to what a GPU's atomics in the backward allow).
    The CPU case runs the same capture of what the step hands the model, so it cannot go stale unseen."""
    import trainer.step as step_mod

    root, _ = small_corpus
    seen: dict[str, list[dict[str, torch.Tensor]]] = {"off": [], "on": []}
    real = step_mod.forward
    outs = {}
    steps = 10 if device == "cuda" else 4
    for setting in ("off", "on"):
        def taking(model: Any, batch: Any, *a: Any, setting: str = setting, **kw: Any) -> Any:
            seen[setting].append({k: t.clone() for k, t in batch.kw.items() if isinstance(t, torch.Tensor)})
            return real(model, batch, *a, **kw)

        monkeypatch.setattr(step_mod, "forward", taking)
        outs[setting] = str(tmp_path / setting)
        train(run_cfg(root, outs[setting], device=device, compile=False, precision="fp32", steps=steps,
                      masking_impl="fused" if device == "cuda" else "reference", masking_overlap=setting,
                      tokens_per_batch=700, masking={"scheme": "token"}))
    assert len(seen["on"]) == len(seen["off"]) == steps * 3  # steps x gradient_accumulation
    for a, b in zip(seen["off"], seen["on"], strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)
    ra, rb = results(outs["off"]), results(outs["on"])
    assert ra[0]["loss"] == rb[0]["loss"]
    assert [r["loss"] for r in rb] == pytest.approx([r["loss"] for r in ra], rel=1e-4)
    ca, cb = checkpoints_of(outs["off"]), checkpoints_of(outs["on"])
    assert ca.keys() == cb.keys() and all(ca[s]["loader"] == cb[s]["loader"] for s in ca)
