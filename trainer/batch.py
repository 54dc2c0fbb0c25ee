"""A loader batch on its way into the model: to the device, masked, padding rows silenced, forward.

Training and evaluation run the same forward (``masked_forward``: ``prepare``,
the copy and the masking, then ``forward``); they differ only in the masking
seed and what they do with the outputs. ``MaskAhead`` prepares the training
loop's next batch on a side CUDA stream while the current step computes
(``masking_overlap``), so the copy and the masking leave the step's critical
path; the batches, masks and losses are the same either way. Everything about
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
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from trainer.attention import ROW_BUCKET, TOKEN_BUCKET, Choice, Unpadded, attention_inputs, plan
from trainer.masking import IGNORE_INDEX, Masker
from trainer.precision import is_compiled

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


@dataclass
class Prepared:
    """A batch on the device, masked, its attention inputs laid out: what ``forward`` runs.

    Everything read from the host batch (the token count, the prediction bound, the attention path) is
    read before the copy. ``host`` keeps the (pinned) host batch referenced as long as the prepared batch
    is, so it outlives the copy queued from it (torch's pinned allocator also holds a block until the
    copies queued from it are done).
    """

    kw: dict[str, Any]  # the model's keyword arguments, the attention kernel not yet planned
    predictions: int  # the bound on predicted positions (Masker.prediction_bound)
    tokens: int  # real tokens of the batch's real rows
    epoch: int  # the epoch the batch belongs to (read from the host batch)
    bucketed: bool  # a compiled model's shapes: mark the varying sizes dynamic
    host: dict[str, torch.Tensor]  # the host batch the copy reads
    ready: Any = None  # an event recorded on the stream that prepared it (None on the CPU)


def prepare(model: torch.nn.Module, masker: Masker, host: dict[str, torch.Tensor], device: torch.device, *,
            epoch: int, seed: int, unpad: bool = True) -> Prepared:
    """Copy one host batch to the device and mask it there (on the current stream).

    The token count, the attention path (no mask for a full-length batch, the unpadded varlen layout
    for a ragged one when ``unpad``) and the bound on predicted positions are read from the host batch:
    reading them after the copy would sync the device. A compiled model gets bucketed shapes
    (trainer/attention.py, "Bucketing").
    """
    tokens = real_tokens(host)
    bucketed = is_compiled(model)
    if bucketed and not bool(host["attention_mask"].all()):
        host = pad_columns(host, ROW_BUCKET, masker.pad_id)
    predictions = masker.prediction_bound(host["input_ids"])
    batch = to_device(host, device)
    masked = masker(batch["input_ids"], batch["sample_ids"], epoch=epoch, seed=seed)
    drop_padding_rows(batch, masked)
    kw = attention_inputs(model_inputs(batch, masked), host["attention_mask"], device, unpad,
                          bucket=TOKEN_BUCKET if bucketed else 0)
    return Prepared(kw, predictions, tokens, epoch, bucketed, host)


def forward(model: torch.nn.Module, batch: Prepared, device: torch.device,
            autocast: Callable[[], AbstractContextManager[Any]], attention: str = "auto",
            denominators: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The model's outputs on a prepared batch: the attention kernel picked (``attention`` names one to
    prefer; each new choice logged once), the forward run under autocast. ``denominators``: what each loss
    divides its summed cross-entropy by (the model's ``loss_denominators``; None: the batch's own counts)."""
    dims = encoder_of(model).dims
    with autocast():
        p = dims.attention_dropout if model.training else 0.0
        kw, choice = plan(batch.kw, dims.heads, dims.head_dim, p, device, autocast_dtype(model, device), attention,
                          compiled=batch.bucketed)
        if choice not in CHOICES:
            CHOICES.add(choice)
            log.info("%s", choice)
        kw["predictions"] = batch.predictions
        if denominators is not None:
            kw["loss_denominators"] = denominators
        if batch.bucketed:
            mark_dynamic(kw)
        return model(**kw)


def masked_forward(model: torch.nn.Module, masker: Masker, host: dict[str, torch.Tensor], device: torch.device,
                   autocast: Callable[[], AbstractContextManager[Any]], *, epoch: int,
                   seed: int, unpad: bool = True, attention: str = "auto") -> tuple[dict[str, torch.Tensor], int]:
    """(model outputs, real tokens) of one host batch: ``prepare`` it on the current stream, ``forward``."""
    batch = prepare(model, masker, host, device, epoch=epoch, seed=seed, unpad=unpad)
    return forward(model, batch, device, autocast, attention), batch.tokens


# ------------------------------------------------------------------ mask ahead


def overlap_on(setting: str, device: torch.device) -> bool:
    """Whether batches are masked ahead (``masking_overlap``): auto is on CUDA only."""
    if setting not in ("auto", "on", "off"):
        raise ValueError(f"masking_overlap must be auto, on or off, got {setting!r}")
    return setting == "on" or setting == "auto" and device.type == "cuda"


def device_tensors(kw: dict[str, Any]) -> list[torch.Tensor]:
    """Every tensor of a prepared batch's keyword arguments (the unpadded layout's included)."""
    out = []
    for v in kw.values():
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, Unpadded):
            out += [t for t in v if isinstance(t, torch.Tensor)]
    return out


def used_on(tensors: list[torch.Tensor], stream: Any) -> None:
    """Tell the caching allocator that CUDA tensors made on another stream are used on ``stream``: their
    memory is not handed out again before the work ``stream`` has queued when they are freed is done."""
    for t in tensors:
        if t.is_cuda:
            t.record_stream(stream)


class MaskAhead:
    """Prepares batches (copy, mask, layout) on a side stream, so that the next batch's copy and masking
    run while the current step computes, off its critical path.

    The caller prepares batch N+1 right after it has queued step N's kernels, and hands it over before
    step N+1's forward. On CUDA:

    - the side stream first waits for the main stream as it stood when the previous batch was handed over
      (the first time: for all of it). Whatever the main stream queued before the step now running (the
      masker's tables, evaluation, earlier steps) is done before the side stream writes; it does not wait
      for the running step, which is the overlap;
    - ``hand_over`` makes the main stream wait for the side stream, and records every tensor of the batch
      as used on the main stream (``record_stream``): the caching allocator does not give their memory
      back to the side stream before the main stream's work on them is done;
    - the pinned host batch stays referenced by the prepared batch (``Prepared.host``).

    No call here syncs the host. On the CPU the streams are torch.cpu's: the same calls, doing nothing
    (work runs in program order). With ``overlap`` off there is no side stream: ``prepare`` runs on the
    current stream, as ``masked_forward`` does.
    """

    def __init__(self, device: torch.device, overlap: bool, streams: Any = None) -> None:
        self.device = device
        self.streams = streams if streams is not None else torch.get_device_module(device.type)
        self.side: Any = None
        if overlap:  # torch.cpu.Stream takes no device
            self.side = self.streams.Stream(device) if device.type == "cuda" else self.streams.Stream()
        self.released: Any = None  # the main stream's event at the last hand-over

    @property
    def overlap(self) -> bool:
        return self.side is not None

    def prepare(self, model: torch.nn.Module, masker: Masker, host: dict[str, torch.Tensor], *, epoch: int,
                seed: int, unpad: bool = True) -> Prepared:
        """``prepare`` on the side stream (overlap on), else on the current stream."""
        if self.side is None:
            return prepare(model, masker, host, self.device, epoch=epoch, seed=seed, unpad=unpad)
        if self.released is None:
            self.side.wait_stream(self.streams.current_stream(self.device))
        else:
            self.side.wait_event(self.released)
        with self.streams.stream(self.side):
            batch = prepare(model, masker, host, self.device, epoch=epoch, seed=seed, unpad=unpad)
            batch.ready = self.side.record_event()
        return batch

    def hand_over(self, batch: Prepared) -> Prepared:
        """The prepared batch, safe to use on the current (main) stream."""
        if self.side is not None:
            main = self.streams.current_stream(self.device)
            main.wait_stream(self.side)
            used_on(device_tensors(batch.kw), main)
            self.released = main.record_event()
        return batch
