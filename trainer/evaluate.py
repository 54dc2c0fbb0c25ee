"""Evaluation on the valid split: MLM loss, perplexity and accuracy (and the sentence head's accuracy)."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from schemas.config import TrainConfig
from trainer.batch import masked_forward
from trainer.distributed import all_reduce_sum
from trainer.loader import ShardLoader
from trainer.masking import Masker
from trainer.metrics import StepStats


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: ShardLoader, masker: Masker, cfg: TrainConfig,
             device: torch.device, autocast: Callable[[], AbstractContextManager[Any]]) -> dict[str, float]:
    """MLM loss / accuracy / perplexity (and sentence-head accuracy) on the valid split.

    Every rank evaluates its own share of the split; the sums are combined
    over ranks. The first ``cfg.eval_batches`` batches are used, the same ones
    at every evaluation; the model is handed back in train mode.
    """
    model.eval()
    s = StepStats()
    n = 0
    # The loader continues from its state: rewind it afterwards so that every evaluation
    # sees the same first eval_batches batches (not the next ones, and never an exhausted split).
    start = loader.state_dict()
    it = iter(loader)
    try:
        for host in it:
            # Masks keyed by seed + 1: never the positions the training steps mask.
            out, tokens = masked_forward(model, masker, host, device, autocast, epoch=0, seed=cfg.seed + 1,
                                         unpad=cfg.unpad)
            s.add(out, tokens, 1.0)
            n += 1
            if n >= cfg.eval_batches:
                break
    finally:
        it.close()  # shut the loader's readers (and workers) down now
        loader.load_state_dict(start)
        model.train()
    v = s.values()
    keys = sorted(v)
    *sums, n_all = all_reduce_sum([v[k] for k in keys] + [float(n)], device)
    v, n = dict(zip(keys, sums, strict=True)), int(n_all)
    if n == 0:
        return {}
    loss = v["loss"] / n
    res = {"eval_loss": loss, "eval_ppl": math.exp(min(loss, 50.0)),
           "eval_mlm_acc": v["mlm_correct"] / max(v["mlm_count"], 1.0),
           # How many tokens the loss averages over: shows the evaluation's mask rate (eval_masking).
           "eval_mlm_tokens": v["mlm_count"]}
    if v["sentence_count"]:
        res["eval_sentence_acc"] = v["sentence_correct"] / v["sentence_count"]
    return res
