"""One partition's batch stream in one epoch: positions read in piece order, shuffled in blocks, batched.

Fixed-size batches take B consecutive non-hole entries of the block-shuffled
sequence; token-budget batches cut groups of windows into runs of about equal
real tokens (``split_by_tokens``). A stream resumes from its cursor.

The positions of a skipped shard are holes, and a window that holds nothing
but holes is stepped over in one go (``PositionReader.first_live``): the work
of an epoch is bounded by the samples read, never by the counts a manifest
claims for a shard that turned out not to hold them.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator

from schemas.errors import UserError
from trainer.loader.plan import KEY_GROUP_ORDER, KEY_WINDOW_PERM, Cursor, Plan, keyed_rng
from trainer.loader.shard import Sample, ShardCorrupt, iter_piece

log = logging.getLogger(__name__)


class UnitCtx:
    """Per-unit corrupt-shard bookkeeping, shared by the unit's partition streams."""

    def __init__(self, plan: Plan, policy: str, skipped: set[int]):
        self.plan = plan
        self.policy = policy
        self.skipped = skipped
        self.new: list[str] = []  # skipped since the last batch left the unit

    def corrupt(self, e: ShardCorrupt, shard: int) -> None:
        """Handle a failed shard: UserError under policy fail, else record it as skipped (once)."""
        if self.policy == "fail":
            raise UserError(f"corrupt shard {e.shard}: {e.reason} (--set corrupt_shards=skip trains on without it; "
                            "shardforge validate CORPUS checks every shard)") from e
        if shard not in self.skipped:
            log.warning("corrupt shard %s: %s", e.shard, e.reason)  # why; the main process says it skips it
            self.skipped.add(shard)
            self.new.append(self.plan.names[shard])


class PositionReader:
    """Reads positions of a partition's epoch stream in order; holes (None) for skipped shards.

    ``order`` lists the partition's pieces (plan.pieces) in this epoch's order.
    """

    def __init__(self, plan: Plan, order: list[int], ctx: UnitCtx):
        self.plan, self.order, self.ctx = plan, order, ctx
        self.starts = [0]
        for i in order:
            self.starts.append(self.starts[-1] + plan.piece_samples(i))
        self.k = 0  # index into order of the piece being read
        self.gen: Iterator[Sample] | None = None
        self.gen_k = -1  # order index of the piece the open generator reads
        self.gen_next = -1  # position the open generator yields next

    def first_live(self, pos: int) -> int:
        """The first position >= pos that is not a hole as far as is known now (the end when none is)."""
        k = bisect.bisect_right(self.starts, pos) - 1
        while k < len(self.order):
            if self.starts[k + 1] > pos and self.plan.pieces[self.order[k]][0] not in self.ctx.skipped:
                return max(pos, self.starts[k])
            k += 1
        return self.starts[-1]

    def read(self, lo: int, hi: int) -> list[Sample | None]:
        """Samples at positions lo..hi-1 of the epoch stream; None where a shard is skipped."""
        out: list[Sample | None] = []
        q = lo
        while q < hi:
            while q >= self.starts[self.k + 1]:
                self.k += 1
            piece = self.order[self.k]
            s = self.plan.pieces[piece][0]
            end = self.starts[self.k + 1]
            if s in self.ctx.skipped:
                n = min(hi, end) - q
                out.extend([None] * n)
                q += n
                self._close()
                continue
            if self.gen is None or self.gen_k != self.k or self.gen_next != q:
                self._close()
                plan = self.plan
                self.gen = iter_piece(plan, piece, q - self.starts[self.k])
                self.gen_k, self.gen_next = self.k, q
            try:
                sample = next(self.gen)
            except ShardCorrupt as e:
                self._close()
                self.ctx.corrupt(e, s)
                continue  # the shard is now skipped: the rest of it reads as holes
            out.append(sample)
            q += 1
            self.gen_next = q
            if q == end:  # verified and fully read: release the file now
                self._close()
        return out

    def _close(self) -> None:
        if self.gen is not None:
            self.gen.close()
            self.gen = None

    def close(self) -> None:
        self._close()


class PartitionStream:
    """The batch sequence of partition p in one epoch, resumable from a cursor.

    Fixed-size batches: positions are shuffled within blocks (windows) of K
    positions; batches are B consecutive non-hole entries of the shuffled
    sequence (they may cross windows). Cursor pos = entries consumed.

    Token budget: each group of windows is sorted by length and cut into b
    batches of about equal real tokens (length bucketing), emitted in a seeded
    order. b follows the partition's running token count so that the partition
    yields exactly ceil(tokens / T) batches. Cursor pos = group start,
    tok = tokens before it, skip = batches of the group already emitted.
    """

    def __init__(self, plan: Plan, epoch: int, p: int, cursor: Cursor, ctx: UnitCtx):
        self.plan, self.epoch, self.p, self.ctx = plan, epoch, p, ctx
        self.b, self.pos, self.tok, self.skip = cursor
        self.n = plan.part_samples[p]
        self.max_batches = plan.part_batches[p]
        self.shift = plan.window_shift(epoch, p)
        self.reader = PositionReader(plan, plan.piece_order(epoch, p), ctx)
        self.done = self.b >= self.max_batches or self.pos >= self.n
        self._win_j = -1
        self._win: list[Sample | None] = []
        self._group: list[list[Sample]] | None = None
        self._group_end = 0
        self._group_tokens = 0

    def cursor(self) -> Cursor:
        """Where the stream stands: [batches_done, pos, tokens_before_pos, batches_done_in_group]."""
        return [self.b, self.pos, self.tok, self.skip]

    def _bounds(self, j: int) -> tuple[int, int]:
        lo = 0 if j == 0 else self.shift + (j - 1) * self.plan.K
        hi = self.shift + j * self.plan.K
        return lo, min(hi, self.n)

    def _window_of(self, pos: int) -> int:
        return 0 if pos < self.shift else 1 + (pos - self.shift) // self.plan.K

    def _drop_skipped(self, entries: list[Sample | None]) -> list[Sample | None]:
        # A shard that failed while this window was read loses all its positions
        # in it, also those read before the failure: a run resumed with the shard
        # in skipped_shards sees the same holes.
        sk = self.ctx.skipped
        return [e if e is not None and e.shard not in sk else None for e in entries]

    def next_batch(self) -> list[Sample] | None:
        """The partition's next batch in this epoch; None when it is done."""
        if self.done:
            return None
        out = self._next_fixed() if self.plan.T is None else self._next_tokens()
        if not out:
            self.done = True
            self.reader.close()
            return None
        self.b += 1
        if self.b >= self.max_batches:
            self.done = True
            self.reader.close()
        return out

    def _next_fixed(self) -> list[Sample]:
        assert self.plan.B is not None
        out: list[Sample] = []
        while len(out) < self.plan.B and self.pos < self.n:
            j = self._window_of(self.pos)
            if j != self._win_j:
                lo, hi = self._bounds(j)
                live = self.reader.first_live(lo)
                if live >= hi:  # nothing but holes: on to the window of the next live position
                    self.pos = self.n if live >= self.n else self._bounds(self._window_of(live))[0]
                    continue
                entries = self._drop_skipped(self.reader.read(lo, hi))
                perm = keyed_rng(self.plan.seed, KEY_WINDOW_PERM, self.epoch, self.p, j).permutation(hi - lo)
                self._win = [entries[i] for i in perm]
                self._win_j = j
            e = self._win[self.pos - self._bounds(j)[0]]
            self.pos += 1
            if e is not None:
                out.append(e)
        return out

    def _next_tokens(self) -> list[Sample]:
        while self._group is None:
            if self.pos >= self.n:
                return []
            self._build_group()
        batch = self._group[self.skip]
        self.skip += 1
        if self.skip >= len(self._group):
            self.pos, self.tok, self.skip = self._group_end, self.tok + self._group_tokens, 0
            self._group = None
        return batch

    def _build_group(self) -> None:
        T = self.plan.T
        assert T is not None
        j0 = j = self._window_of(self.pos)
        samples: list[Sample] = []
        tokens = 0
        while True:
            lo, hi = self._bounds(j)
            live = self.reader.first_live(lo)
            if hi <= live < self.n:  # nothing but holes: carry the group on to the next live window
                j = self._window_of(live)
                continue
            if live >= self.n:  # holes to the end: the group's last window
                hi = self.n
            else:
                sk = self.ctx.skipped
                samples = [e for e in samples + self.reader.read(lo, hi) if e is not None and e.shard not in sk]
                tokens = sum(int(e.ids.shape[0]) for e in samples)
            final = hi >= self.n
            before = self.tok // T
            # Running count of batches = floor(tokens so far / T), and exactly
            # ceil(partition tokens / T) at the end: equal-step DDP needs the
            # count from the manifest, not from the data.
            b = self.max_batches - before if final else (self.tok + tokens) // T - before
            if b > 0 or final:
                break
            j += 1  # too few tokens for a batch: carry the window into the next one
        if not samples:  # all holes: move on without emitting
            self.pos, self.tok, self.skip = hi, self.tok + tokens, 0
            return
        samples.sort(key=lambda e: (e.ids.shape[0], e.gid))
        batches = split_by_tokens(samples, max(1, min(b, len(samples))))
        order = keyed_rng(self.plan.seed, KEY_GROUP_ORDER, self.epoch, self.p, j0).permutation(len(batches))
        self._group = [batches[i] for i in order]
        self._group_end, self._group_tokens = hi, tokens
        if self.skip >= len(self._group):  # cannot happen with a consistent state
            raise UserError(f"loader state does not match the data of partition {self.p}")

    def close(self) -> None:
        self.reader.close()


def split_by_tokens(samples: list[Sample], b: int) -> list[list[Sample]]:
    """Cut length-sorted samples into b non-empty runs of about equal real tokens."""
    lens = [int(s.ids.shape[0]) for s in samples]
    total = sum(lens)
    out: list[list[Sample]] = []
    i, cum, n = 0, 0, len(samples)
    for k in range(b):
        left = b - k - 1  # batches after this one, each needs a sample
        start = i
        limit = float("inf") if left == 0 else (k + 1) * total / b
        while i < n - left and (i == start or cum + lens[i] / 2 <= limit):
            cum += lens[i]
            i += 1
        out.append(samples[start:i])
    return out

