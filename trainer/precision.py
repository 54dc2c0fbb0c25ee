"""The trainer's speed switches in one place: autocast precision, the fp16 loss scaler, torch.compile.

- ``precision``: ``bf16`` (autocast to bfloat16: the default on CUDA when
  the GPU has it), ``fp16`` (autocast to float16 with a dynamic loss scaler,
  for GPUs without bf16: V100, T4; ``auto`` picks it there), ``fp32`` (no
  autocast: the default on CPU).
- The scaler (fp16 only) multiplies the loss before backward, unscales the
  gradients before clipping, skips the optimizer step when any gradient is
  inf/NaN and lowers the scale; otherwise it raises the scale every
  ``growth_interval`` steps. With bf16 / fp32 it is disabled and
  ``Precision.step`` is a plain clip + step.
- ``compile``: ``auto`` compiles the model with ``torch.compile`` on CUDA
  and runs eager on CPU (where compiling a model costs a minute or more and
  gains little); ``true`` / ``false`` force it; ``compile_mode`` passes
  torch.compile's mode (``reduce-overhead``: CUDA graphs).

The trainer calls ``Precision.autocast()`` around the forward pass,
``Precision.backward(loss)`` and ``Precision.step(optimizer, params, clip)``
(see docs/models.md, "Fast paths and precision").
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable
from typing import Any, Literal

import torch
from torch import nn

log = logging.getLogger("shardforge.precision")

PrecisionName = Literal["auto", "fp32", "bf16", "fp16"]
CompileSetting = bool | Literal["auto"]


def resolve_dtype(precision: PrecisionName, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for a precision setting on a device (None: fp32, no autocast).

    ``auto``: bf16 on a CUDA GPU that supports it, fp16 on one that does not,
    fp32 on CPU.
    """
    if precision == "fp32":
        return None
    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16":
        return torch.float16
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return None


class Precision:
    """Autocast context, loss scaling and the optimizer step for one precision setting on one device."""

    def __init__(self, precision: PrecisionName, device: torch.device, init_scale: float = 2.0**16,
                 growth_interval: int = 2000):
        self.dtype = resolve_dtype(precision, device)
        self.device_type = device.type
        # Only fp16 needs a scaler: its 5-bit exponent underflows small gradients; bf16 has fp32's range.
        self.scaler = torch.amp.GradScaler(device.type, init_scale=init_scale, growth_interval=growth_interval,
                                           enabled=self.dtype == torch.float16)
        self.skipped_steps = 0
        self.grad_norm: torch.Tensor | None = None  # the last step's gradient norm (before clipping), on the device

    @property
    def name(self) -> str:
        """bf16 | fp16 | fp32: what actually runs."""
        return {torch.bfloat16: "bf16", torch.float16: "fp16", None: "fp32"}[self.dtype]

    def autocast(self) -> contextlib.AbstractContextManager:
        """The forward pass's autocast context (a no-op for fp32)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward(), on the scaled loss under fp16."""
        self.scaler.scale(loss).backward()

    def step(self, optimizer: torch.optim.Optimizer, params: Iterable[torch.Tensor],
             clip_norm: float | None) -> bool:
        """Unscale (fp16), clip, then step; False when fp16 gradients overflowed and the step was skipped.

        Under fp16 this reads the scale back (one host sync per step; the
        trainer syncs once per step anyway).
        """
        # The norm is measured every step (logged as grad_norm); with no clipping (RoBERTa) an infinite
        # max leaves the gradients as they are. It stays on the device: read with the step's one sync.
        if not self.scaler.is_enabled():
            self.grad_norm = nn.utils.clip_grad_norm_(params, clip_norm or math.inf)
            optimizer.step()
            return True
        self.scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
        self.grad_norm = nn.utils.clip_grad_norm_(params, clip_norm or math.inf)
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)  # skipped when an unscaled gradient is inf / NaN
        self.scaler.update()  # halves the scale after an overflow; grows it after growth_interval good steps
        stepped = self.scaler.get_scale() >= before
        if not stepped:  # normal while the scale settles in the first steps; often later means trouble
            self.skipped_steps += 1
            log.info("fp16: gradients overflowed at loss scale %g: step skipped, scale now %g (%d skipped so far)",
                     before, self.scaler.get_scale(), self.skipped_steps)
        return stepped

    def state_dict(self) -> dict[str, Any]:
        """The scaler's state (empty when not fp16), for checkpoints."""
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore the scale from a checkpoint (nothing to do for bf16 / fp32 or an older checkpoint)."""
        if state and self.scaler.is_enabled():
            self.scaler.load_state_dict(state)


def compile_enabled(setting: CompileSetting, device: torch.device) -> bool:
    """``auto`` compiles on CUDA only; ``True`` / ``False`` force it."""
    if setting == "auto":
        return device.type == "cuda"
    return bool(setting)


def maybe_compile(model: nn.Module, setting: CompileSetting, device: torch.device,
                  backend: str = "inductor", mode: str = "default", scope: str = "model") -> nn.Module:
    """``torch.compile(model)`` when the setting asks for it on this device, else the model itself.

    ``scope`` "layers": instead of wrapping the model, compile its repeated blocks and its LM head in place
    (``nn.Module.compile``; ``compiled_regions`` names them) and return the model itself: every layer runs
    the same block code, so one compile serves them all, and the embeddings, gathers and losses between the
    regions run eagerly.

    The compiled wrapper shares the model's parameters: save and load the
    original module's state_dict (no ``_orig_mod.`` prefix). Batch shapes vary
    (token-budget batches, the unpadded path's token count), so dynamic
    shapes are left to torch's automatic detection: a shape that changes
    once is recompiled as dynamic, not once per value.

    ``mode``: torch.compile's (``reduce-overhead`` records CUDA graphs of the compiled forward and
    backward, replayed per shape: fewer launches, more memory; on CPU it compiles as ``default``).
    Modes other than ``default`` are inductor's: another backend takes none.
    """
    if scope not in ("model", "layers"):
        raise ValueError(f"compile_scope must be model or layers, got {scope!r}")
    if not compile_enabled(setting, device):
        return model
    kw: dict[str, Any] = {"backend": backend} if mode == "default" or backend != "inductor" else \
        {"backend": backend, "mode": mode}
    if scope == "layers":
        for region in compiled_regions(model):
            region.compile(**kw)
        return model
    return torch.compile(model, **kw)  # type: ignore[return-value]


def compiled_regions(model: nn.Module) -> list[nn.Module]:
    """The modules ``compile_scope: layers`` compiles: every attention and feed-forward block (a shared one,
    ALBERT's, once) and the LM head."""
    regions = [*getattr(model, "attn", []), *getattr(model, "ffn", [])]
    head = getattr(model, "lm_head", None)
    return regions + ([head] if head is not None else [])


def is_compiled(model: nn.Module) -> bool:
    """Whether torch.compile wraps the model (``_orig_mod``) or compiled any of its modules in place."""
    inner = getattr(model, "module", model)  # DDP
    if hasattr(inner, "_orig_mod"):
        return True
    return any(getattr(m, "_compiled_call_impl", None) is not None for m in compiled_regions(inner))
