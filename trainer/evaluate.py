"""Evaluation on the valid split: MLM loss, perplexity and accuracy (and the sentence head's accuracy)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch

from schemas.config import TrainConfig
from trainer.batch import masked_forward
from trainer.distributed import all_reduce_sum
from trainer.loader import ShardLoader
from trainer.masking import Masker

# What evaluation sums over its batches and then over ranks: the MLM cross-entropy of every
# predicted token (nats), the predicted tokens, the right ones, and the sentence head's right / counted.
SUMS = ("mlm_nll", "mlm_count", "mlm_correct", "sentence_correct", "sentence_count")


def batch_sums(out: dict[str, torch.Tensor], device: torch.device) -> torch.Tensor:
    """One batch's SUMS (float64, on the device): the loss weighed by the tokens it averages over."""
    zero = torch.zeros((), dtype=torch.float64, device=device)
    count = out["mlm_count"].double()
    return torch.stack([out["mlm_loss"].double() * count, count, out["mlm_correct"].double(),
                        out.get("sentence_correct", zero).double(), out.get("sentence_count", zero).double()])


Batch = dict[str, torch.Tensor]


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: ShardLoader, masker: Masker, cfg: TrainConfig,
             device: torch.device, autocast: Callable[[], AbstractContextManager[Any]],
             wait: Callable[[Iterator[Batch]], Batch] = next) -> dict[str, float]:
    """MLM loss / accuracy / perplexity (and sentence-head accuracy) on the valid split.

    Every rank evaluates its own share of the split (the loader cuts even a
    one-shard split between ranks); ``eval_loss`` is the MLM cross-entropy
    (nats) averaged over every predicted token of every rank, so it does not
    depend on how the split falls over ranks or batches, and the rows a rank
    only repeats to keep in step (``is_pad``) count for nothing. The first
    ``cfg.eval_batches`` batches are used, the same ones at every evaluation;
    the model is handed back in train mode. ``wait`` takes the next batch
    (the trainer's gives up a stalled wait after SIGTERM: trainer/preempt.py).
    """
    model.eval()
    sums = torch.zeros(len(SUMS), dtype=torch.float64, device=device)
    n = 0
    # The loader continues from its state: rewind it afterwards so that every evaluation
    # sees the same first eval_batches batches (not the next ones, and never an exhausted split).
    start = loader.state_dict()
    it = iter(loader)
    try:
        while n < cfg.eval_batches:
            try:
                host = wait(it)
            except StopIteration:
                break
            # Masks keyed by seed + 1: never the positions the training steps mask.
            out, _ = masked_forward(model, masker, host, device, autocast, epoch=0, seed=cfg.seed + 1,
                                    unpad=cfg.unpad)
            sums += batch_sums(out, device)
            n += 1
    finally:
        it.close()  # shut the loader's readers (and workers) down now
        loader.load_state_dict(start)
        model.train()
    *total, batches = all_reduce_sum([*sums.cpu().tolist(), float(n)], device)  # one sync, one collective
    v = dict(zip(SUMS, total, strict=True))
    if not batches or not v["mlm_count"]:
        return {}
    loss = v["mlm_nll"] / v["mlm_count"]
    res = {"eval_loss": loss, "eval_ppl": math.exp(min(loss, 50.0)),
           "eval_mlm_acc": v["mlm_correct"] / v["mlm_count"],
           # How many tokens the loss averages over: shows the evaluation's mask rate (eval_masking).
           "eval_mlm_tokens": v["mlm_count"]}
    if v["sentence_count"]:
        res["eval_sentence_acc"] = v["sentence_correct"] / v["sentence_count"]
        res["eval_sentence_pairs"] = v["sentence_count"]  # the pairs that accuracy is over
    return res
