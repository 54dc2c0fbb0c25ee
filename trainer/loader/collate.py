"""Collation: a list of samples -> a compact numpy batch (``pack``, crosses the worker pipe)
-> right-padded int64 tensors with an attention mask (``collate``, in the main process)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from trainer.loader.shard import Sample
from trainer.masking import IGNORE_INDEX


def pack(samples: list[Sample], epoch: int, pad: bool, pair: bool) -> dict[str, Any]:
    """A batch as compact numpy arrays: ids concatenated in their stored dtype, plus lengths.

    This is what crosses from a DataLoader worker to the main process. It is a
    few times smaller than padded int64 tensors, and numpy arrays go through
    the worker pipe in one message. Tensors would each need a shared-memory
    segment and a file descriptor, which cost more than the decoding here.
    """
    out: dict[str, Any] = {
        "ids": np.concatenate([s.ids for s in samples]),
        "lens": np.array([s.ids.shape[0] for s in samples], dtype=np.int64),
        "gids": np.array([s.gid for s in samples], dtype=np.int64),
        "epoch": epoch, "pad": pad,
    }
    if pair:
        out["tt"] = np.concatenate([s.tt if s.tt is not None else np.zeros(s.ids.shape[0], np.uint8)
                                    for s in samples])
        out["labels"] = np.array([IGNORE_INDEX if s.label is None else s.label for s in samples], dtype=np.int64)
    return out


def collate(packed: dict[str, Any], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a packed batch to its longest sample: int64 tensors (attention_mask 0/1)."""
    lens = packed["lens"]
    n, width = len(lens), int(lens.max())
    # Row i, column c is a token when c < lens[i]; scatter the concatenated ids there.
    mask = np.arange(width)[None, :] < lens[:, None]
    ids = np.full((n, width), pad_id, dtype=np.int64)
    ids[mask] = packed["ids"]
    out = {
        "input_ids": torch.from_numpy(ids),
        "attention_mask": torch.from_numpy(mask.astype(np.int64)),
        "sample_ids": torch.from_numpy(packed["gids"]),
        "epoch": torch.full((n,), packed["epoch"], dtype=torch.int64),
        "is_pad": torch.full((n,), packed["pad"], dtype=torch.bool),
    }
    if "tt" in packed:
        tt = np.zeros((n, width), dtype=np.int64)
        tt[mask] = packed["tt"]
        out["token_type_ids"] = torch.from_numpy(tt)
        out["sentence_labels"] = torch.from_numpy(packed["labels"])
    return out

