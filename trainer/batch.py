"""A loader batch on its way into the model: to the device, masked, padding rows silenced, forward.

Training and evaluation run the same forward (``masked_forward``); they differ
only in the masking seed and what they do with the outputs. Everything about
the batch's shape is decided here, on the host, before the copy: the
attention path and kernel (trainer/attention.py, each new choice logged once),
the bound on predicted positions that lets the heads gather without a host
sync, and, for a compiled model, the bucketed and dynamic shapes that keep
it from recompiling per batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.nn.functional as F

from trainer.attention import ROW_BUCKET, TOKEN_BUCKET, Choice, attention_inputs, plan
from trainer.masking import IGNORE_INDEX, Masker

log = logging.getLogger("shardforge.batch")

# Every attention choice made in this process (trainer/attention.py): logged once each, read by the benchmarks.
CHOICES: set[Choice] = set()


def model_inputs(batch: dict[str, torch.Tensor], masked: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The Encoder's keyword arguments from a device batch and its masking."""
    kw = {"input_ids": masked["input_ids"], "attention_mask": batch["attention_mask"], "labels": masked["labels"]}
    if "token_type_ids" in batch:
        kw["token_type_ids"] = batch["token_type_ids"]
    if "sentence_labels" in batch:
        kw["sentence_labels"] = batch["sentence_labels"]
    if "span_left" in masked:
        kw["span_left"], kw["span_right"] = masked["span_left"], masked["span_right"]
    return kw


def real_tokens(host: dict[str, torch.Tensor]) -> int:
    """Tokens of the batch's real rows (not the rows the loader repeats to keep ranks in step)."""
    mask = host["attention_mask"]
    if "is_pad" in host:
        mask = mask[~host["is_pad"].bool()]
    return int(mask.sum())


def drop_padding_rows(batch: dict[str, torch.Tensor], masked: dict[str, torch.Tensor]) -> None:
    """Rows the loader repeats to keep ranks in step (is_pad) carry no loss: each sample counts once per epoch."""
    pad = batch.get("is_pad")
    if pad is None:
        return
    rows = pad.bool().unsqueeze(1)
    masked["labels"] = masked["labels"].masked_fill(rows, IGNORE_INDEX)
    if "sentence_labels" in batch:
        batch["sentence_labels"] = batch["sentence_labels"].masked_fill(pad.bool(), IGNORE_INDEX)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Every tensor of the batch on the device (non-blocking from pinned memory)."""
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def encoder_of(model: torch.nn.Module) -> torch.nn.Module:
    """The Encoder inside what the loop calls (DDP's ``module``, torch.compile's ``_orig_mod``)."""
    inner = getattr(model, "module", model)
    return getattr(inner, "_orig_mod", inner)


def compiled(model: torch.nn.Module) -> bool:
    """Whether the model is torch.compile'd (under DDP too)."""
    return hasattr(getattr(model, "module", model), "_orig_mod")


def pad_columns(host: dict[str, torch.Tensor], multiple: int, pad_id: int) -> dict[str, torch.Tensor]:
    """The host batch with its rows padded to a multiple of ``multiple`` columns (pad ids, no mask, no label).

    Masks are keyed by position within the sample, never by the padded length: the masking is the same.
    """
    L = host["input_ids"].shape[1]
    extra = -L % multiple
    if not extra:
        return host
    out = dict(host)
    for k, v in host.items():
        if v.dim() == 2 and v.shape[1] == L:
            out[k] = F.pad(v, (0, extra), value=pad_id if k == "input_ids" else 0)
    return out


def mark_dynamic(kw: dict[str, Any]) -> None:
    """Tell dynamo which sizes vary from batch to batch (rows, columns, packed tokens), so that a compiled
    model compiles once for all of them instead of once with static shapes and again with dynamic ones."""
    mark = torch._dynamo.maybe_mark_dynamic
    for k in ("input_ids", "attention_mask", "labels", "token_type_ids", "span_left", "span_right"):
        if kw.get(k) is not None:
            mark(kw[k], 0)
            mark(kw[k], 1)
    if kw.get("sentence_labels") is not None:
        mark(kw["sentence_labels"], 0)
    layout = kw.get("unpadded")
    if layout is not None:
        for t in (layout.indices, layout.offsets, layout.packed_index, layout.cu_seqlens, layout.doc):
            if t is not None:
                mark(t, 0)


def autocast_dtype(model: torch.nn.Module, device: torch.device) -> torch.dtype:
    """The dtype attention computes in: autocast's when it is on (call inside the context), else the weights'."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return next(model.parameters()).dtype


def masked_forward(model: torch.nn.Module, masker: Masker, host: dict[str, torch.Tensor], device: torch.device,
                   autocast: Callable[[], AbstractContextManager[Any]], *, epoch: int,
                   seed: int, unpad: bool = True, attention: str = "auto") -> tuple[dict[str, torch.Tensor], int]:
    """(model outputs, real tokens) of one host batch: copy, mask on the device, forward under autocast.

    The token count, the attention path and kernel (no mask for a full-length batch, the unpadded
    varlen layout for a ragged one when ``unpad``; ``attention`` names a kernel to prefer) and the
    bound on predicted positions are read from the host batch: reading them after the copy would
    sync the device. A compiled model gets bucketed shapes (trainer/attention.py, "Bucketing").
    """
    tokens = real_tokens(host)
    bucketed = compiled(model)
    if bucketed and not bool(host["attention_mask"].all()):
        host = pad_columns(host, ROW_BUCKET, masker.pad_id)
    predictions = masker.prediction_bound(host["input_ids"])
    batch = to_device(host, device)
    masked = masker(batch["input_ids"], batch["sample_ids"], epoch=epoch, seed=seed)
    drop_padding_rows(batch, masked)
    kw = attention_inputs(model_inputs(batch, masked), host["attention_mask"], device, unpad,
                          bucket=TOKEN_BUCKET if bucketed else 0)
    dims = encoder_of(model).dims
    with autocast():
        kw, choice = plan(kw, dims.heads, dims.head_dim, dims.dropout if model.training else 0.0, device,
                          autocast_dtype(model, device), attention)
        if choice not in CHOICES:
            CHOICES.add(choice)
            log.info("%s", choice)
        kw["predictions"] = predictions
        if bucketed:
            mark_dynamic(kw)
        out = model(**kw)
    return out, tokens
