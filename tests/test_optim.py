"""trainer.optim: LAMB against the paper's rule by hand, parameter groups, AdamW, the schedule."""

from __future__ import annotations

import math

import pytest
import torch

from schemas.config import ModelConfig, OptimConfig
from trainer.model import Encoder
from trainer.optim import Lamb, build_optimizer, linear_schedule, param_groups


def _norm(xs: list[float]) -> float:
    return math.sqrt(sum(x * x for x in xs))


def _lamb_by_hand(w: list[float], grads: list[list[float]], lr: float, b1: float, b2: float, eps: float,
                  wd: float) -> list[float]:
    """You et al. 2019, Algorithm 2, in plain Python floats for one tensor."""
    m = [0.0] * len(w)
    v = [0.0] * len(w)
    for t, g in enumerate(grads, start=1):
        m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g, strict=True)]
        v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v, g, strict=True)]
        m_hat = [mi / (1 - b1**t) for mi in m]
        v_hat = [vi / (1 - b2**t) for vi in v]
        r = [mh / (math.sqrt(vh) + eps) + wd * wi for mh, vh, wi in zip(m_hat, v_hat, w, strict=True)]
        wn, rn = _norm(w), _norm(r)
        trust = wn / rn if wn > 0 and rn > 0 else 1.0
        w = [wi - lr * trust * ri for wi, ri in zip(w, r, strict=True)]
    return w


def test_lamb_two_steps_match_the_paper() -> None:
    lr, b1, b2, eps, wd = 0.1, 0.9, 0.98, 1e-6, 0.01
    w0 = [[0.5, -1.0, 2.0], [0.25, 0.0, -0.75]]
    zero0 = [0.0, 0.0]  # zero weights: trust ratio falls back to 1
    grads = [[[0.1, -0.2, 0.3], [0.05, 0.4, -0.1]], [[-0.3, 0.1, 0.2], [0.2, -0.1, 0.05]]]
    zgrads = [[0.5, -0.25], [0.1, 0.3]]
    W = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
    Z = torch.tensor(zero0, dtype=torch.float64, requires_grad=True)
    opt = Lamb([{"params": [W], "weight_decay": wd}, {"params": [Z], "weight_decay": 0.0}],
               lr=lr, betas=(b1, b2), eps=eps)
    for step in range(2):
        W.grad = torch.tensor(grads[step], dtype=torch.float64)
        Z.grad = torch.tensor([zgrads[step]], dtype=torch.float64).reshape(2)
        opt.step()
    # The whole matrix is one "layer" for the trust ratio.
    flat = _lamb_by_hand([x for row in w0 for x in row], [[x for row in g for x in row] for g in grads],
                         lr, b1, b2, eps, wd)
    assert W.detach().flatten().tolist() == pytest.approx(flat, rel=1e-12, abs=1e-12)
    assert Z.detach().tolist() == pytest.approx(_lamb_by_hand(zero0, zgrads, lr, b1, b2, eps, 0.0), abs=1e-12)
    # The trust ratio makes the first step's size lr * ||w|| (scale-invariant update).
    W2 = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
    opt2 = Lamb([W2], lr=lr, betas=(b1, b2), eps=eps, weight_decay=0.0)
    W2.grad = torch.tensor(grads[0], dtype=torch.float64)
    opt2.step()
    moved = torch.linalg.vector_norm(W2.detach() - torch.tensor(w0, dtype=torch.float64)).item()
    assert moved == pytest.approx(lr * _norm([x for row in w0 for x in row]), rel=1e-9)


def test_lamb_without_bias_correction_differs() -> None:
    # Bias correction scales Adam's direction by a per-tensor constant, which the
    # trust ratio divides out; only the mix with weight decay (and eps) sees it.
    grads = [torch.tensor([1.0, -1.0, 0.5, 0.0]), torch.tensor([-0.5, 2.0, 0.5, 1.0])]
    out = []
    for bias_correction in (False, True):
        w = torch.ones(4, requires_grad=True)
        opt = Lamb([w], lr=0.1, weight_decay=0.1, bias_correction=bias_correction)
        for g in grads:
            w.grad = g.clone()
            opt.step()
        out.append(w.detach())
    assert not torch.allclose(out[0], out[1])
    with pytest.raises(ValueError):
        Lamb([w], lr=-1.0)


def test_param_groups_skip_decay_for_biases_and_layernorm() -> None:
    m = Encoder(ModelConfig(share="all", sentence_head="sop"), 100)
    groups = param_groups(m, 0.01)
    decay = {id(p) for p in groups[0]["params"]}
    no_decay = {id(p) for p in groups[1]["params"]}
    assert groups[0]["weight_decay"] == 0.01 and groups[1]["weight_decay"] == 0.0
    assert id(m.embed.ln.weight) in no_decay and id(m.attn[0].qkv.bias) in no_decay
    assert id(m.lm_head.bias) in no_decay and id(m.ffn[0].ln.bias) in no_decay
    assert id(m.attn[0].qkv.weight) in decay and id(m.embed.word.weight) in decay
    assert not decay & no_decay
    assert sum(p.numel() for g in groups for p in g["params"]) == m.num_params()


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_build_optimizer(name: str) -> None:
    m = Encoder(ModelConfig(), 100)
    cfg = OptimConfig(name=name, lr=1e-3)
    opt = build_optimizer(m, cfg)
    assert isinstance(opt, torch.optim.AdamW if name == "adamw" else Lamb)
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-6
    # A step with zero gradients: only weight decay acts, and only on the decayed group.
    for p in m.parameters():
        p.grad = torch.zeros_like(p)
    before_w = m.attn[0].qkv.weight.detach().clone()
    with torch.no_grad():
        m.attn[0].qkv.bias.fill_(0.5)
    opt.step()
    assert torch.equal(m.attn[0].qkv.bias, torch.full_like(m.attn[0].qkv.bias, 0.5))
    assert not torch.equal(m.attn[0].qkv.weight, before_w)
    if name == "adamw":
        torch.testing.assert_close(m.attn[0].qkv.weight, before_w * (1 - 1e-3 * 0.01))


def test_linear_schedule_values() -> None:
    f = linear_schedule(4, 12)
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(4) == 1.0 and f(8) == pytest.approx(0.5) and f(12) == 0.0 and f(20) == 0.0
    assert all(f(s) > f(s + 1) for s in range(4, 12))
    g = linear_schedule(0, 10)
    assert g(0) == 1.0 and g(5) == 0.5 and g(10) == 0.0
    with pytest.raises(ValueError):
        linear_schedule(-1, 10)


def test_linear_schedule_drives_lambdalr() -> None:
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=2.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, linear_schedule(2, 6))
    seen = []
    for _ in range(6):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([1.0, 2.0, 2.0, 1.5, 1.0, 0.5])
    assert opt.param_groups[0]["lr"] == 0.0
