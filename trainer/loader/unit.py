"""A unit (rank, worker): its partitions interleaved round robin, padded to equal steps, epoch after epoch.

``iter_unit`` is what a DataLoader worker (or the main process, with
``num_workers=0``) runs: it yields packed batches with a ``_meta`` record of
the cursor they advance, so the main process knows exactly what was delivered.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from schemas.errors import UserError
from trainer.loader.collate import pack
from trainer.loader.plan import Cursor, Plan
from trainer.loader.shard import Sample
from trainer.loader.stream import PartitionStream, UnitCtx


def interleave(streams: list[PartitionStream]) -> tuple[list[Sample], PartitionStream] | None:
    """Next batch in round-robin order: the live partition with fewest batches, lowest p first.

    Round robin is a function of the cursors alone, so a resumed unit continues it exactly.
    """
    while True:
        live = [s for s in streams if not s.done]
        if not live:
            return None
        s = min(live, key=lambda s: (s.b, s.p))
        batch = s.next_batch()
        if batch is not None:
            return batch, s


class Replay:
    """Pad batches for a unit that ran dry: its own epoch again from the start (then again).

    A unit that owns no readable sample replays the whole split instead, with
    its own corrupt-shard bookkeeping (shards of other ranks are not recorded
    in this rank's state).
    """

    def __init__(self, plan: Plan, epoch: int, parts: list[int], ctx: UnitCtx, skip: int):
        self.plan, self.epoch, self.ctx = plan, epoch, ctx
        self.parts = parts
        self.streams: list[PartitionStream] = []
        self.yielded = 0
        self._new_pass()
        for _ in range(skip):
            self.next()

    def _new_pass(self) -> None:
        for s in self.streams:
            s.close()
        self.streams = [PartitionStream(self.plan, self.epoch, p, [0, 0, 0, 0], self.ctx) for p in self.parts]
        self.yielded = 0

    def next(self) -> list[Sample]:
        """The next pad batch."""
        for _ in range(3):
            got = interleave(self.streams)
            if got is not None:
                self.yielded += 1
                return got[0]
            if self.yielded == 0:  # a whole pass gave nothing: fall back to the whole split
                if self.parts == list(range(self.plan.P)):
                    break
                self.parts = list(range(self.plan.P))
                self.ctx = UnitCtx(self.plan, self.ctx.policy, set(self.ctx.skipped))
            self._new_pass()
        raise UserError(f"split {self.plan.split!r} has no readable sample: every shard of it was skipped as "
                        "corrupt (corrupt_shards: skip; the warnings above name them)")

    def close(self) -> None:
        for s in self.streams:
            s.close()


def iter_unit(plan: Plan, unit: int, start: dict[str, Any], policy: str,
               epochs: int | None) -> Iterator[dict[str, Any]]:
    """All batches of one unit from its start state: real batches, then pads, epoch after epoch."""
    parts: list[int] = start["parts"]
    epoch: int = start["epoch"]
    cursors: dict[int, Cursor] = start["cursors"]
    pad_done: int = start["pad"]
    done: int = start["done"]
    seg: int = start["segment"]
    ctx = UnitCtx(plan, policy, set(start["skipped"]))
    while epochs is None or epoch < epochs:
        streams = [PartitionStream(plan, epoch, p, list(cursors.get(p, [0, 0, 0, 0])), ctx) for p in parts]
        replay: Replay | None = None
        try:
            while done < seg:
                got = interleave(streams)
                if got is not None:
                    samples, s = got
                    part: list[int] | None = [s.p, *s.cursor()]
                    is_pad = False
                else:
                    if replay is None:
                        replay = Replay(plan, epoch, parts, ctx, pad_done)
                    samples, part, is_pad = replay.next(), None, True
                    pad_done += 1
                done += 1
                batch = pack(samples, epoch, is_pad, plan.pair)
                batch["_meta"] = {"unit": unit, "epoch": epoch, "part": part, "pad": pad_done,
                                  "skipped": list(ctx.new)}
                ctx.new.clear()
                yield batch
        finally:
            for s in streams:
                s.close()
            if replay is not None:
                replay.close()
        epoch, cursors, pad_done, done, seg = epoch + 1, {}, 0, 0, start["full_segment"]


class UnitDataset(IterableDataset):
    """The rank's units as DataLoader workers: worker w plays unit (w + rotation) % num_workers."""

    def __init__(self, plan: Plan, starts: list[dict[str, Any]], rotation: int, policy: str,
                 epochs: int | None):
        self.plan, self.starts, self.rotation, self.policy, self.epochs = plan, starts, rotation, policy, epochs

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        n = len(self.starts)
        w = 0 if info is None else info.id
        unit = (w + self.rotation) % n
        return iter_unit(self.plan, unit, self.starts[unit], self.policy, self.epochs)


def identity_collate(x: Any) -> Any:
    """The DataLoader's collate_fn: keep the packed numpy batch as it is (see collate.pack)."""
    return x


def worker_init(_: int) -> None:
    """Per DataLoader worker: one intra-op thread."""
    # Decoding is numpy-bound and single-threaded; intra-op threads only oversubscribe the cores.
    torch.set_num_threads(1)

