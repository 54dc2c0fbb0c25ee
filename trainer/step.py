"""The training loop's parts: the ``Run`` that ``setup()`` builds, the ``Feed`` of micro-batches, one step.

A step weighs every target of its global batch alike, as RoBERTa's fairseq and Hugging Face's
``num_items_in_batch`` do: each loss (MLM, the sentence head's, SpanBERT's SBO) sums its targets'
cross-entropy over every micro-batch of every rank, divided by their count over all of them. The
step's micro-batches are therefore taken and masked before its first forward; their target counts
are summed over the ranks on the device (one all-reduce, no host sync) and each micro-batch's loss
is its share of that mean, times the world size (DDP averages the ranks' gradients). So a short
micro-batch weighs what its tokens weigh, and a micro-batch of rows the loader only repeats to keep
ranks in step (``is_pad``: no targets) adds nothing and dilutes nothing. A step whose micro-batches
are such repeats on every rank (an epoch's end, where the loader's readers ran out unevenly) is no
step: no forward, no update, no schedule tick, no record; the loop takes the next micro-batches.
"""

from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass
from typing import Any

import torch

from schemas.config import TrainConfig
from trainer import distributed
from trainer.batch import MaskAhead, Prepared, forward, overlap_on
from trainer.checkpoint import CheckpointManager
from trainer.loader import ShardLoader
from trainer.masking import Masker
from trainer.metrics import RunCounters, StepStats, TrainMetrics
from trainer.mixing import MixedLoader
from trainer.model import Encoder, target_counts
from trainer.precision import Precision
from trainer.preempt import Preempted, Preemption


@dataclass
class Run:
    """What the loop needs, built once by `setup()`."""

    cfg: TrainConfig  # resolved: --init has fixed the model's shape
    dd: distributed.Dist
    model: torch.nn.Module  # what the loop calls: compiled and/or DDP-wrapped
    raw_model: Encoder  # the module itself: its parameters, checkpoints, size
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    prec: Precision  # autocast + fp16 loss scaler
    masker: Masker
    eval_masker: Masker
    loader: ShardLoader | MixedLoader
    valid: ShardLoader | MixedLoader | None
    counters: RunCounters  # tokens seen, smoothed loss (checkpointed)
    checkpoints: CheckpointManager
    metrics: TrainMetrics
    accum: int  # micro-batches per optimizer step
    step: int  # the step the loop starts from (the latest checkpoint's, else 0)
    max_len: int  # the corpus's sequence length (tokens)


class LoaderPosition:
    """A ShardLoader's position frozen at one moment: all a checkpoint reads of a loader (``state_dict``)."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def state_dict(self) -> dict[str, Any]:
        return self.state


def frozen_position(loader: ShardLoader | MixedLoader) -> Any:
    """The loader's position now, kept while the loader moves on: what a checkpoint taken later saves
    and, for a mix, the token shares the step's record reports (a copy of the MixedLoader whose sources
    are frozen positions)."""
    if isinstance(loader, MixedLoader):
        view = copy.copy(loader)
        view.loaders = [LoaderPosition(ld.state_dict()) for ld in loader.loaders]
        view.schedule = copy.deepcopy(loader.schedule)
        view.tokens = list(loader.tokens)
        return view
    return LoaderPosition(loader.state_dict())


class Feed:
    """The loop's micro-batches: taken from the loader (SIGTERM's grace applies to the wait), then copied
    and masked on the device (trainer/batch.py).

    With mask ahead (``masking_overlap``) the loop calls ``ahead`` as soon as a micro-batch's work (or the
    step's) is queued: the next batch is taken and prepared on the side stream while that work computes.
    Taken at a step boundary, it is a batch of the next step that the loader has already counted; so
    ``position`` keeps the loader's position of before it for this step's checkpoint and record: a resumed
    run sees that batch again, and no batch is skipped or seen twice.
    """

    def __init__(self, run: Run, preempt: Preemption) -> None:
        self.run, self.preempt = run, preempt
        self.it = iter(run.loader)
        self.pipe = MaskAhead(run.dd.device, overlap_on(run.cfg.masking_overlap, run.dd.device))
        self.host: dict[str, torch.Tensor] | None = None  # taken, not yet prepared (no mask ahead)
        self.ready: Prepared | None = None  # taken and prepared ahead
        self.held: Any = None  # the loader's position before `ready` was taken at a step boundary
        self.wait = 0.0  # seconds waited for data since `waited()`

    def take(self, boundary: bool = False) -> None:
        """Take the next host batch; with mask ahead, prepare it on the side stream at once."""
        if boundary:
            self.held = frozen_position(self.run.loader)
        tw = time.perf_counter()
        host = self.preempt.next(self.it)
        self.wait += time.perf_counter() - tw
        if self.pipe.overlap:
            self.ready = self.prepare(host)
        else:
            self.host = host

    def prepare(self, host: dict[str, torch.Tensor]) -> Prepared:
        cfg = self.run.cfg
        # the epoch from the host batch: reading it on the device would sync
        return self.pipe.prepare(self.run.model, self.run.masker, host, epoch=int(host["epoch"][0]),
                                 seed=cfg.seed, unpad=cfg.unpad)

    def next(self) -> Prepared:
        """The next micro-batch, prepared and safe to use on the current stream."""
        if self.ready is None and self.host is None:
            self.take()
        if self.ready is not None:
            batch, self.ready, self.held = self.pipe.hand_over(self.ready), None, None
            return batch
        host, self.host = self.host, None
        assert host is not None
        return self.prepare(host)

    def ahead(self, boundary: bool) -> None:
        """With mask ahead, take and prepare the next micro-batch now. At a step boundary, a wait abandoned
        after SIGTERM (trainer/preempt.py) ends only the taking: the step already queued still ends and
        checkpoints, and the run stops there, as SIGTERM asked."""
        if not self.pipe.overlap:
            return
        if not boundary:
            self.take()
            return
        try:
            self.take(boundary=True)
        except Preempted:
            self.ready = None

    def position(self) -> Any:
        """The loader as this step's checkpoint and record see it: before any batch taken ahead."""
        return self.held if self.held is not None else self.run.loader

    def waited(self) -> float:
        """Seconds waited for data since the last call."""
        wait, self.wait = self.wait, 0.0
        return wait

    def close(self) -> None:
        self.it.close()  # shut DataLoader workers down now, not whenever the generator is collected

    def step_batches(self, accum: int) -> list[Prepared]:
        """The step's ``accum`` micro-batches, each prepared (with mask ahead, the next one is taken and
        masked on the side stream as soon as one is handed over)."""
        batches = []
        for micro in range(accum):
            batches.append(self.next())  # a data wait: SIGTERM's grace applies
            if micro < accum - 1:
                self.ahead(boundary=False)
        return batches


def loss_denominators(batches: list[Prepared], dd: distributed.Dist) -> torch.Tensor:
    """Each loss's targets over the step's micro-batches of every rank (at least 1), over the world size:
    what a micro-batch's summed cross-entropy is divided by (trainer.model ``loss_denominators``)."""
    counts = torch.stack([target_counts(**b.kw) for b in batches]).sum(0).to(dd.collective_device)
    return dd.sum_(counts).clamp(min=1).to(dd.device) / dd.world_size


def corpora(loader: ShardLoader | MixedLoader) -> list[ShardLoader]:
    """The corpora a loader reads, each with epochs of its own: a mix's sources, or the loader itself."""
    return list(loader.loaders) if isinstance(loader, MixedLoader) else [loader]


def step_has_data(batches: list[Prepared], loader: ShardLoader | MixedLoader, dd: distributed.Dist) -> bool:
    """Whether any rank's micro-batches of this step hold real rows. The same collective ends the epoch of
    every corpus whose every unit, on every rank, only replays (``ShardLoader.replaying``): with honest
    counts no corpus gets there before its epoch's end, but a shard skipped as corrupt that claimed samples
    it lacks would have its corpus replay for as long as the claim (in a mix, a share of every later step).
    Decided from loader positions only, after the step's last micro-batch was taken: a resumed run decides
    the same at the same step."""
    sources = corpora(loader)
    flags = dd.any_each([any(b.tokens for b in batches)] + [not c.replaying for c in sources])  # host values
    for corpus, live in zip(sources, flags[1:], strict=True):
        if not live:
            corpus.end_epoch()
    return flags[0]


def train_step(run: Run, feed: Feed) -> StepStats | None:
    """One optimizer step (forward and backward of each micro-batch, then clip, update and schedule tick):
    its stats on the device, the step's loss on this rank being its share of the global batch's loss. None
    when every rank's micro-batches are repeats only: nothing ran and nothing changed but the loader's
    position."""
    dd, model, prec = run.dd, run.model, run.prec
    batches = feed.step_batches(run.accum)
    if not step_has_data(batches, run.loader, dd):  # host counts: no sync; a collective over several ranks
        return None
    denominators = loss_denominators(batches, dd)
    s = StepStats()
    for micro, batch in enumerate(batches):
        sync = contextlib.nullcontext()
        if dd.world_size > 1 and micro < len(batches) - 1:
            sync = model.no_sync()  # type: ignore[operator]
        with sync:  # no gradient all-reduce until the last micro-batch
            out = forward(model, batch, dd.device, prec.autocast, denominators=denominators)
            prec.backward(out["loss"])  # scaled under fp16
        s.add(out, batch.tokens, 1.0 / dd.world_size)  # this rank's share of the global loss
    prec.step(run.optimizer, run.raw_model.parameters(), run.cfg.optim.clip_norm)  # clip + step (fp16: unscale)
    s.add_value("grad_norm", prec.grad_norm)
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    s.epoch = batches[-1].epoch
    return s
