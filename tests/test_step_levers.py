"""The step's speed levers, checked on CPU: each changes how a step runs, never what it computes.

- (gradient accumulation over micro-batches = one batch of the global size: tests/test_step_weighting.py);
- no host sync inside a step (masking, forward, backward, clipping, the optimizer), counted by
  trainer.hostsync on every attention path and both maskers, masked in place or ahead (``masking_overlap``);
- the optimizer step's kernels (``optim.impl``: fused, multi-tensor, per-tensor, compiled) give the
  per-tensor loop's parameters;
- ``compile_mode`` (CUDA graphs with ``reduce-overhead``) reaches torch.compile; ``masking_impl`` picks
  the masker.
"""

from __future__ import annotations

import pytest
import torch

import trainer.batch as batch_mod
from schemas import BOS_ID, EOS_ID, MASK_ID, PAD_ID, SPECIAL_TOKENS
from schemas.config import MaskingConfig, ModelConfig, OptimConfig, TrainConfig
from trainer.fused_masking import FusedMasker
from trainer.hostsync import HostSyncs, is_sync
from trainer.masking import IGNORE_INDEX, Masker
from trainer.model import Encoder
from trainer.optim import CompiledAdamW, build_optimizer, lr_schedule
from trainer.precision import Precision, maybe_compile

V = 200
CPU = torch.device("cpu")
SPECIALS = sorted(SPECIAL_TOKENS.values())


def host_batch(lengths: list[int], L: int, seed: int = 0, labelled: int = 0) -> dict[str, torch.Tensor]:
    """Rows `<s> ... </s>` right-padded to L, as the loader hands them; with ``labelled``, that many labels
    per row (so every micro-batch's mean loss weighs its tokens as the global batch's does)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), L), PAD_ID)
    for r, n in enumerate(lengths):
        ids[r, :n] = torch.randint(5, V, (n,), generator=g)
        ids[r, 0], ids[r, n - 1] = BOS_ID, EOS_ID
    out = {"input_ids": ids, "attention_mask": (ids != PAD_ID).long(), "sample_ids": torch.arange(len(lengths)),
           "epoch": torch.zeros(len(lengths), dtype=torch.long)}
    if labelled:
        labels = torch.full_like(ids, IGNORE_INDEX)
        for r, n in enumerate(lengths):
            pos = 1 + torch.randperm(n - 2, generator=g)[:labelled]
            labels[r, pos] = ids[r, pos]
        out["labels"] = labels
    return out


def encoder(seed: int = 0, **kw: object) -> Encoder:
    torch.manual_seed(seed)
    return Encoder(ModelConfig(dropout=0.0, **kw), V)


# ------------------------------------------------------------------ host syncs


def test_host_sync_counter_sees_what_would_stall_a_gpu() -> None:
    x = torch.arange(6.0)
    with HostSyncs() as counter:
        y = x * 2 + 1  # no sync
        x.sum().item()
        torch.nonzero(x > 2)
        x[x > 2]
        torch.repeat_interleave(torch.tensor([1, 2]))
        torch.repeat_interleave(torch.tensor([1, 2]), output_size=3)  # sized by the caller: no sync
        bool(y[0])
    assert counter.syncs == 5, counter.by_op
    assert counter.by_op["nonzero"] == 1 and counter.by_op["index"] == 1 and counter.ops > counter.syncs
    assert not is_sync(torch.ops.aten.add.Tensor, (x, x), {})


def one_step_syncs(masker: Masker | FusedMasker, host: dict[str, torch.Tensor], unpad: bool, overlap: bool = False,
                   **model_kw: object) -> HostSyncs:
    """Host syncs of one training step after the batch is on the device: masking, forward, backward,
    clip, optimizer step. The host-side planning (attention path, layout) is not counted: it reads the
    host batch, as the trainer does before the copy. ``overlap``: the batch masked ahead on the side
    stream (batch_mod.MaskAhead, torch.cpu's no-op streams here) and handed over, as the trainer's loop
    does with ``masking_overlap``."""
    m = encoder(**model_kw)
    opt = build_optimizer(m, OptimConfig(impl="fused"))  # the CUDA default (auto: fused on CUDA)
    prec = Precision("fp32", CPU)
    counter = HostSyncs()
    counter.counting = False
    to_device, inputs, plan = batch_mod.to_device, batch_mod.attention_inputs, batch_mod.plan

    def copied(*args: object, **kw: object) -> dict[str, torch.Tensor]:
        out = to_device(*args, **kw)
        counter.counting = True
        return out

    batch_mod.to_device, batch_mod.attention_inputs, batch_mod.plan = copied, counter.paused(inputs), counter.paused(plan)
    try:
        with counter:
            if overlap:
                pipe = batch_mod.MaskAhead(CPU, True)
                batch = pipe.hand_over(pipe.prepare(m, masker, host, epoch=0, seed=0, unpad=unpad))
                out = batch_mod.forward(m, batch, CPU, prec.autocast)
            else:
                out, _ = batch_mod.masked_forward(m, masker, host, CPU, prec.autocast, epoch=0, seed=0, unpad=unpad)
            prec.backward(out["loss"])
            prec.step(opt, list(m.parameters()), 1.0)
            opt.zero_grad(set_to_none=True)
    finally:
        batch_mod.to_device, batch_mod.attention_inputs, batch_mod.plan = to_device, inputs, plan
    return counter


@pytest.mark.parametrize("overlap", [False, True], ids=["in place", "masked ahead"])
@pytest.mark.parametrize("path", ["no mask", "unpadded", "masked"])
@pytest.mark.parametrize("scheme,fused", [("token", False), ("span", False), ("whole_word", True), ("ngram", True)])
def test_no_host_sync_inside_a_training_step(path: str, scheme: str, fused: bool, overlap: bool) -> None:
    lengths = [32] * 4 if path == "no mask" else [32, 20, 9, 31]
    ws = torch.rand(V, generator=torch.Generator().manual_seed(1)) < 0.6
    masker = Masker(MaskingConfig(scheme=scheme), V, SPECIALS, MASK_ID, PAD_ID, ws)
    masker.check_ids = False  # the CPU-only id range check (off on CUDA)
    m = FusedMasker(masker, compile=False) if fused else masker
    for head in (True, False):
        counter = one_step_syncs(m, host_batch(lengths, 32), unpad=path != "masked", overlap=overlap,
                                 masked_only_head=head, span_boundary=scheme == "span")
        assert counter.ops > 300, "the step ran under the counter"
        assert counter.syncs == 0, (path, scheme, head, dict(counter.by_op))


# ------------------------------------------------------------------ the optimizer step's kernels


def trained(impl: str, name: str = "adamw", steps: int = 4) -> list[torch.Tensor]:
    """Parameters after a few steps under the linear schedule (the lr changes every step)."""
    m = encoder(hidden=32, layers=1, heads=2, intermediate=64)
    opt = build_optimizer(m, OptimConfig(name=name, impl=impl, lr=1e-2, warmup_steps=2), compile_backend="eager")
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_schedule("linear", 2, steps + 2))
    host = host_batch([16, 12, 16], 16, seed=5, labelled=2)
    kw = {k: host[k] for k in ("input_ids", "attention_mask", "labels")}
    for _ in range(steps):
        m(**kw)["loss"].backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in m.parameters()]


@pytest.mark.parametrize("impl", ["auto", "fused", "foreach", "compiled"])
def test_optimizer_kernels_match_the_per_tensor_loop(impl: str) -> None:
    if impl == "compiled":
        torch._dynamo.reset()
    ref = trained("loop")
    for a, b in zip(ref, trained(impl), strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)


def test_compiled_adamw_keeps_its_lr_a_tensor_and_refuses_lamb() -> None:
    opt = build_optimizer(encoder(), OptimConfig(impl="compiled"))
    assert isinstance(opt, CompiledAdamW) and all(isinstance(g["lr"], torch.Tensor) for g in opt.param_groups)
    with pytest.raises(ValueError, match="closure"):
        opt.step(lambda: 0.0)
    for impl in ("fused", "compiled"):
        with pytest.raises(ValueError, match="LAMB"):
            build_optimizer(encoder(), OptimConfig(name="lamb", impl=impl))
    assert trained("foreach", name="lamb", steps=2)[0].shape == trained("loop", name="lamb", steps=2)[0].shape


# ------------------------------------------------------------------ settings


def test_compile_mode_reaches_torch_compile(monkeypatch) -> None:
    seen: list[dict] = []
    monkeypatch.setattr(torch, "compile", lambda model, **kw: seen.append(kw) or model)
    m = encoder()
    maybe_compile(m, True, CPU, mode="reduce-overhead")
    maybe_compile(m, True, CPU)
    maybe_compile(m, True, CPU, backend="aot_eager", mode="reduce-overhead")  # modes are inductor's
    assert seen == [{"backend": "inductor", "mode": "reduce-overhead"}, {"backend": "inductor"},
                    {"backend": "aot_eager"}]


def test_train_config_levers_and_defaults() -> None:
    cfg = TrainConfig.model_validate({"data": "x"})
    assert (cfg.masking_impl, cfg.compile_mode, cfg.optim.impl) == ("auto", "default", "auto")
    cfg = TrainConfig.model_validate({"data": "x", "masking_impl": "fused", "compile_mode": "reduce-overhead",
                                      "optim": {"impl": "compiled"}})
    assert (cfg.masking_impl, cfg.compile_mode, cfg.optim.impl) == ("fused", "reduce-overhead", "compiled")
    with pytest.raises(ValueError):
        TrainConfig.model_validate({"data": "x", "masking_impl": "triton"})


def test_the_trainer_builds_the_masker_the_setting_asks_for() -> None:
    from trainer.train import build_maskers

    ws = torch.rand(V, generator=torch.Generator().manual_seed(4)) < 0.6
    special = {"<s>": BOS_ID, "</s>": EOS_ID, "<pad>": PAD_ID, "<mask>": MASK_ID}
    for impl, kind in (("auto", Masker), ("reference", Masker), ("fused", FusedMasker)):
        cfg = TrainConfig.model_validate({"data": "x", "masking_impl": impl, "masking": {"scheme": "whole_word"},
                                          "eval_masking": {"scheme": "token"}})
        train_masker, eval_masker = build_maskers(cfg, CPU, V, special, ws, PAD_ID, MASK_ID)
        assert type(train_masker) is kind and type(eval_masker) is kind
        assert train_masker.cfg.scheme == "whole_word" and eval_masker.cfg.scheme == "token"
