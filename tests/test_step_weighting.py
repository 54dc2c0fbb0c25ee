"""One optimizer step weighs every target of its global batch alike (trainer/step.py).

A step's micro-batches, on one rank or several, with as many predicted tokens each as their masks
give, move the weights as one batch of all their rows does: each loss is the targets' summed
cross-entropy over the global batch's target count. A micro-batch of rows the loader only repeats to
keep ranks in step (``is_pad``) adds nothing and dilutes nothing; a step of such micro-batches on
every rank is no step at all. Checked on the trainer's own ``train_step`` with plain SGD (lr 1: the
weights move by minus the gradient), against one forward of all the rows.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import trainer.batch as batch_mod
from schemas import MASK_ID, PAD_ID, SPECIAL_TOKENS
from schemas.config import MaskingConfig, ModelConfig
from trainer.distributed import Dist
from trainer.masking import Masker
from trainer.metrics import StepStats
from trainer.mixing import MixedLoader, MixPlan
from trainer.model import Encoder
from trainer.precision import Precision
from trainer.step import train_step

V = 120
CPU = torch.device("cpu")
LENGTHS = [24, 9, 17, 24, 5, 20, 12, 24]  # rows of very different lengths: very different target counts


def host_rows(rows: list[int], pad: bool = False) -> dict[str, torch.Tensor]:
    """The loader's host batch of these rows of LENGTHS (sample ids = row numbers), flagged is_pad or not."""
    g = torch.Generator().manual_seed(11)
    ids = torch.full((len(LENGTHS), 24), PAD_ID)
    for r, n in enumerate(LENGTHS):
        ids[r, :n] = torch.randint(5, V, (n,), generator=g)
        ids[r, 0], ids[r, n - 1] = SPECIAL_TOKENS["<s>"], SPECIAL_TOKENS["</s>"]
    sel = torch.tensor(rows)
    return {"input_ids": ids[sel], "attention_mask": (ids[sel] != PAD_ID).long(), "sample_ids": sel,
            "epoch": torch.zeros(len(rows), dtype=torch.long), "is_pad": torch.full((len(rows),), pad)}


def model_and_masker() -> tuple[Encoder, Masker]:
    torch.manual_seed(0)
    model = Encoder(ModelConfig(size="tiny", dropout=0.0, max_positions=64), V, pad_id=PAD_ID)
    masker = Masker(MaskingConfig(scheme="token", rate=0.3), V, sorted(SPECIAL_TOKENS.values()), MASK_ID, PAD_ID,
                    torch.ones(V, dtype=torch.bool))
    return model, masker


def prepared(model: Encoder, masker: Masker, rows: list[int], pad: bool = False) -> batch_mod.Prepared:
    """A micro-batch as the Feed hands it over: copied and masked (masks keyed by sample and position)."""
    return batch_mod.prepare(model, masker, host_rows(rows, pad), CPU, epoch=0, seed=5)


class Corpus:
    """What the step asks of a corpus's loader: whether it only replays its epoch, and to end that epoch."""

    def __init__(self, replaying: bool) -> None:
        self.replaying, self.ended = replaying, 0

    def end_epoch(self) -> None:
        self.ended += 1


def one_step(model: torch.nn.Module, raw: Encoder, batches: list[batch_mod.Prepared],
             dd: Dist, loader: Any = None) -> tuple[StepStats | None, list[torch.Tensor], int]:
    """train_step on these micro-batches with SGD at lr 1: (stats, minus the gradient, schedule steps)."""
    before = [p.detach().clone() for p in raw.parameters()]
    opt = torch.optim.SGD(raw.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    run = SimpleNamespace(dd=dd, model=model, raw_model=raw, prec=Precision("fp32", CPU), accum=len(batches),
                          optimizer=opt, scheduler=sched, cfg=SimpleNamespace(optim=SimpleNamespace(clip_norm=None)),
                          loader=Corpus(False) if loader is None else loader)
    feed = SimpleNamespace(step_batches=lambda accum: batches)
    s = train_step(run, feed)  # type: ignore[arg-type]
    return s, [p.detach() - b for p, b in zip(raw.parameters(), before, strict=True)], sched.last_epoch


def whole_batch() -> tuple[float, list[torch.Tensor]]:
    """The loss of one forward of all the rows (the mean over all their targets) and minus its gradient."""
    model, masker = model_and_masker()
    batch = prepared(model, masker, list(range(len(LENGTHS))))
    loss = batch_mod.forward(model, batch, CPU, Precision("fp32", CPU).autocast)["loss"]
    loss.backward()
    return float(loss.detach()), [-p.grad for p in model.parameters()]  # type: ignore[operator]


SPLITS = {"ragged": [[0, 1, 2], [3], [4, 5, 6, 7]], "with repeats": [[0, 1, 2, 3], [4, 5, 6, 7], "pad"],
          "one": [[0, 1, 2, 3, 4, 5, 6, 7]]}


@pytest.mark.parametrize("split", sorted(SPLITS))
def test_micro_batches_move_the_weights_as_one_batch_of_all_their_rows(split: str) -> None:
    want_loss, want = whole_batch()
    model, masker = model_and_masker()
    batches = [prepared(model, masker, [0, 1], pad=True) if rows == "pad" else prepared(model, masker, rows)
               for rows in SPLITS[split]]
    s, delta, ticks = one_step(model, model, batches, Dist())
    assert s is not None and ticks == 1
    assert s.values()["loss"] == pytest.approx(want_loss, rel=1e-5)
    for got, ref in zip(delta, want, strict=True):
        torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-4)
    if split == "ragged":  # each micro-batch's own mean, averaged: what the rows' weights would have been
        with torch.no_grad():
            means = [float(batch_mod.forward(model, b, CPU, Precision("fp32", CPU).autocast)["loss"]) for b in batches]
        assert abs(sum(means) / len(means) - want_loss) > 0.01, "the split must make the two weightings differ"


def test_a_step_of_repeats_only_is_no_step() -> None:
    model, masker = model_and_masker()
    s, delta, ticks = one_step(model, model, [prepared(model, masker, [2, 3], pad=True)], Dist())
    assert s is None and ticks == 0 and all(not d.any() for d in delta)


def test_a_corpus_that_only_replays_ends_its_epoch_at_the_step() -> None:
    """Of a mix's sources, the one whose units all only replay (a corrupt shard's claim) ends its epoch at
    the step, with data in it or not; the others' epochs go on."""
    model, masker = model_and_masker()
    for pad in (False, True):
        mix = mixed(Corpus(True), Corpus(False))
        s, _, ticks = one_step(model, model, [prepared(model, masker, [2, 3], pad=pad)], Dist(), mix)
        assert (s is None) == pad and ticks == int(not pad)
        assert [c.ended for c in mix.loaders] == [1, 0]
    alone = Corpus(True)
    assert one_step(model, model, [prepared(model, masker, [1], pad=True)], Dist(), alone)[0] is None
    assert alone.ended == 1


def mixed(*sources: Corpus) -> MixedLoader:
    n = len(sources)
    return MixedLoader(list(sources), MixPlan(names=tuple(f"s{i}" for i in range(n)), urls=("",) * n,
                                              token_shares=(1 / n,) * n, batch_weights=(1 / n,) * n))


def rank_step(rank: int, init: str, out: str) -> None:
    """Rank ``rank`` of 2 (gloo): rank 0 takes rows 0-2 then 3, rank 1 rows 4-7 then a micro-batch of repeats.
    Of the loader's three sources, the first only replays on both ranks, the second on rank 0 only."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2)
    try:
        raw, masker = model_and_masker()
        model = DistributedDataParallel(raw)
        parts = [[0, 1, 2], [3]] if rank == 0 else [[4, 5, 6, 7], "pad"]
        batches = [prepared(raw, masker, [4, 5], pad=True) if rows == "pad" else prepared(raw, masker, rows)
                   for rows in parts]
        mix = mixed(Corpus(True), Corpus(rank == 0), Corpus(False))
        s, delta, ticks = one_step(model, raw, batches, Dist(rank=rank, world_size=2), mix)
        assert s is not None
        torch.save({"loss_share": s.values()["loss"], "delta": delta, "ticks": ticks,
                    "ended": [c.ended for c in mix.loaders]}, os.path.join(out, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_move_the_weights_as_one_batch_of_all_their_rows(tmp_path) -> None:
    """Before, DDP averaged the ranks' micro-batch means: rank 1's micro-batch of repeats halved its rows'
    weight, and rank 0's short micro-batch of one row weighed as much as four rows."""
    import torch.multiprocessing as mp

    mp.spawn(rank_step, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    want_loss, want = whole_batch()
    got = [torch.load(tmp_path / f"{r}.pt", weights_only=True) for r in (0, 1)]
    assert got[0]["ticks"] == got[1]["ticks"] == 1
    assert got[0]["ended"] == got[1]["ended"] == [1, 0, 0]  # only where every rank only replays
    assert got[0]["loss_share"] + got[1]["loss_share"] == pytest.approx(want_loss, rel=1e-5)  # what a record sums
    for rank in (0, 1):
        for d, ref in zip(got[rank]["delta"], want, strict=True):
            torch.testing.assert_close(d, ref, atol=1e-6, rtol=1e-4)
