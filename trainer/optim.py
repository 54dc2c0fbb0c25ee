"""Optimizers and the learning-rate schedule.

- AdamW (Loshchilov & Hutter) with RoBERTa's settings (beta2 0.98, eps 1e-6,
  weight decay 0.01: the OptimConfig defaults); fused kernel on CUDA
  (``optim.impl`` picks fused, multi-tensor, per-tensor or a compiled step).
- LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning"), our
  own implementation of Algorithm 2 with per-tensor trust ratio; on CUDA the
  multi-tensor (``torch._foreach_*``) form updates every tensor of a group in
  a few kernel launches instead of ~12 per tensor (same result: tested).
- Linear warmup then linear decay to 0 (BERT / RoBERTa), or cosine decay to 0, or a
  constant rate (``optim.schedule``; ``lr_schedule``).

Biases and LayerNorm parameters (every tensor with fewer than 2 dims) get no
weight decay, as in BERT and RoBERTa.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from schemas.config import OptimConfig


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two groups: matrices (decayed) and biases / LayerNorm / other vectors (not decayed)."""
    decay, no_decay = [], []
    for p in model.parameters():  # parameters() yields shared tensors once
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build_optimizer(model: nn.Module, cfg: OptimConfig, compile_backend: str = "inductor") -> torch.optim.Optimizer:
    """AdamW or LAMB from the config, with no decay on biases / LayerNorm, its step's kernels per ``cfg.impl``:

    auto: AdamW's fused kernel on CUDA, LAMB's multi-tensor form on CUDA, per-tensor loops on CPU;
    fused: AdamW's fused kernel on any device (LAMB has none); foreach: multi-tensor ops; loop: one
    tensor at a time; compiled: the step under torch.compile (AdamW only, its learning rate a 0-d
    tensor that the schedule updates in place, so the compiled step is not recompiled per step).
    """
    groups = param_groups(model, cfg.weight_decay)
    betas = (cfg.beta1, cfg.beta2)
    on_cuda = all(p.is_cuda for g in groups for p in g["params"])
    impl = cfg.impl
    if cfg.name == "lamb":
        if impl in ("fused", "compiled"):
            raise ValueError(f"optim.impl {impl!r} is AdamW's: LAMB takes auto, foreach or loop")
        foreach = impl == "foreach" or impl == "auto" and on_cuda
        return Lamb(groups, lr=cfg.lr, betas=betas, eps=cfg.eps, weight_decay=cfg.weight_decay, foreach=foreach)
    kw: dict[str, Any] = {"lr": cfg.lr, "betas": betas, "eps": cfg.eps, "weight_decay": cfg.weight_decay}
    if impl == "compiled":
        device = next((p.device for g in groups for p in g["params"]), torch.device("cpu"))
        return CompiledAdamW(groups, compile_backend=compile_backend,
                             **{**kw, "lr": torch.tensor(cfg.lr, device=device), "foreach": on_cuda,
                                "capturable": on_cuda})
    if impl == "fused" or impl == "auto" and on_cuda:
        kw["fused"] = True
    elif impl in ("foreach", "loop"):
        kw["foreach"] = impl == "foreach"
    return torch.optim.AdamW(groups, **kw)


class CompiledAdamW(torch.optim.AdamW):
    """AdamW whose ``step`` runs under torch.compile (compiled at the first step; inductor fuses the
    per-tensor updates into a few kernels). Same arithmetic as AdamW: tested against it on CPU."""

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], compile_backend: str = "inductor",
                 **kw: Any):
        super().__init__(params, **kw)
        self.compile_backend = compile_backend
        self.compiled_step: Callable[[], Any] | None = None

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One AdamW update, compiled (a closure, which re-runs the model, is refused)."""
        if closure is not None:
            raise ValueError("the compiled AdamW step takes no closure")
        if self.compiled_step is None:
            self.compiled_step = torch.compile(super().step, backend=self.compile_backend)
        return self.compiled_step()


class Lamb(torch.optim.Optimizer):
    """LAMB: Adam's direction, rescaled per tensor by the trust ratio ||w|| / ||update||.

    For every parameter tensor w with gradient g at step t (paper, Algorithm 2):

        m = b1 m + (1 - b1) g              v = b2 v + (1 - b2) g^2
        m_hat = m / (1 - b1^t)             v_hat = v / (1 - b2^t)     (bias_correction)
        r = m_hat / (sqrt(v_hat) + eps) + weight_decay * w
        w = w - lr * (||w|| / ||r||) * r

    with the trust ratio taken as 1 when ||w|| or ||r|| is 0 (fresh zero-init
    biases would otherwise never move). phi is the identity. Bias correction
    scales Adam's direction by a per-tensor constant that the trust ratio
    divides out, so it matters only through eps and the weight-decay mix.

    ``foreach=True`` runs the same arithmetic on all tensors of a group at
    once with torch's multi-tensor ops (one launch per op per group on CUDA);
    ``False`` loops over tensors (the reference form).
    """

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0,
                 bias_correction: bool = True, foreach: bool = False):
        if lr <= 0 or eps < 0 or weight_decay < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"invalid LAMB hyperparameters lr={lr} betas={betas} eps={eps} wd={weight_decay}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "bias_correction": bias_correction, "foreach": foreach}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One LAMB update of every parameter with a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group.get("foreach"):
                self._foreach_step(group)
                continue
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if g.is_sparse:
                    raise RuntimeError("LAMB does not support sparse gradients")
                state = self._advance(p)
                t = state["step"]
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                if group["bias_correction"]:
                    m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
                else:
                    m_hat, v_hat = m, v
                r = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"]:
                    r.add_(p, alpha=group["weight_decay"])
                # Trust ratio as a tensor (no .item(): no host sync on GPU).
                w_norm, r_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(r)
                trust = torch.where((w_norm > 0) & (r_norm > 0), w_norm / r_norm, torch.ones_like(w_norm))
                p.add_(r.mul_(trust), alpha=-group["lr"])
        return loss

    def _advance(self, p: torch.Tensor) -> dict[str, Any]:
        """The parameter's state, created on its first step (zero moments), with its step counted."""
        state = self.state[p]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        state["step"] += 1
        return state

    def _foreach_step(self, group: dict[str, Any]) -> None:
        """The loop of ``step`` for one group, as multi-tensor ops (same formulas, same order)."""
        b1, b2 = group["betas"]
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        grads = [p.grad for p in params]
        if any(g.is_sparse for g in grads):
            raise RuntimeError("LAMB does not support sparse gradients")
        for p in params:
            self._advance(p)
        # Parameters of a group may have different step counts (one added later): bucket by step.
        by_step: dict[int, list[int]] = {}
        for i, p in enumerate(params):
            by_step.setdefault(self.state[p]["step"], []).append(i)
        for t, idx in by_step.items():
            ps = [params[i] for i in idx]
            gs = [grads[i] for i in idx]
            ms = [self.state[p]["exp_avg"] for p in ps]
            vs = [self.state[p]["exp_avg_sq"] for p in ps]
            torch._foreach_mul_(ms, b1)
            torch._foreach_add_(ms, gs, alpha=1 - b1)
            torch._foreach_mul_(vs, b2)
            torch._foreach_addcmul_(vs, gs, gs, value=1 - b2)
            if group["bias_correction"]:
                m_hat = torch._foreach_div(ms, 1 - b1**t)
                v_hat = torch._foreach_div(vs, 1 - b2**t)
            else:
                m_hat, v_hat = ms, vs
            denom = torch._foreach_sqrt(v_hat)
            torch._foreach_add_(denom, group["eps"])
            r = torch._foreach_div(m_hat, denom)
            if group["weight_decay"]:
                torch._foreach_add_(r, ps, alpha=group["weight_decay"])
            w_norm = torch.stack(torch._foreach_norm(ps))
            r_norm = torch.stack(torch._foreach_norm(r))
            trust = torch.where((w_norm > 0) & (r_norm > 0), w_norm / r_norm, torch.ones_like(w_norm))
            torch._foreach_mul_(r, list(trust.unbind()))
            torch._foreach_add_(ps, r, alpha=-group["lr"])


def linear_schedule(warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """LambdaLR multiplier for optimizer step s (0-based): linear warmup, then linear decay to 0.

    s < warmup: (s + 1) / warmup (the first step already moves; no wasted lr=0 step);
    s >= warmup: (total - s) / (total - warmup), reaching 0 at s = total.
    """
    if warmup_steps < 0 or total_steps < 1:
        raise ValueError(f"need warmup_steps >= 0 and total_steps >= 1, got {warmup_steps}, {total_steps}")

    def multiplier(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return multiplier


def lr_schedule(name: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """LambdaLR multiplier of a named schedule: the same linear warmup, then ``linear`` decay to 0,
    ``cosine`` decay to 0 (half a cosine over the steps after the warmup) or ``constant`` 1."""
    linear = linear_schedule(warmup_steps, total_steps)
    if name == "linear":
        return linear
    if name not in ("cosine", "constant"):
        raise ValueError(f"unknown schedule {name!r}: linear, cosine or constant")

    def multiplier(step: int) -> float:
        if step < warmup_steps:
            return linear(step)
        if name == "constant":
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return multiplier
