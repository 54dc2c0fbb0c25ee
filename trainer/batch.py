"""A loader batch on its way into the model: to the device, masked, padding rows silenced, forward.

Training and evaluation run the same forward (``masked_forward``); they differ
only in the masking seed and what they do with the outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from trainer.masking import IGNORE_INDEX, Masker
from trainer.model import attention_inputs


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


def masked_forward(model: torch.nn.Module, masker: Masker, host: dict[str, torch.Tensor], device: torch.device,
                   autocast: Callable[[], AbstractContextManager[Any]], *, epoch: int,
                   seed: int, unpad: bool = True) -> tuple[dict[str, torch.Tensor], int]:
    """(model outputs, real tokens) of one host batch: copy, mask on the device, forward under autocast.

    The token count and the attention path (no mask for a full-length batch,
    the unpadded varlen layout for a ragged one when ``unpad``) are read from
    the host batch: reading them after the copy would sync the device.
    """
    tokens = real_tokens(host)
    batch = to_device(host, device)
    masked = masker(batch["input_ids"], batch["sample_ids"], epoch=epoch, seed=seed)
    drop_padding_rows(batch, masked)
    with autocast():
        out = model(**attention_inputs(model_inputs(batch, masked), host["attention_mask"], device, unpad))
    return out, tokens
