"""The static plan of a split: shards (or pieces of them) dealt into partitions, per-epoch orders and
windows, keyed RNG.

Everything here is a pure function of the manifest and the loader's
arguments (seed, partitions, shuffle buffer, batching, readers): no I/O beyond
reading the manifest once, picklable, the same on every rank and worker.

A *piece* is what is dealt: a whole shard, or, when a split has fewer
non-empty shards than the run has readers (ranks x DataLoader workers) and
batches hold a fixed number of samples, a contiguous range of one shard's
samples (``pieces_per_shard``), so that every reader gets data of its own.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections.abc import Callable

import numpy as np

from schemas import PAD_ID
from schemas.config import PAIR_RULES
from shardforge import storage
from shardforge.storage.contract import load_manifest

_MASK64 = (1 << 64) - 1
# RNG streams, so that no two random choices share a key.
KEY_DEAL, KEY_SHARD_ORDER, KEY_WINDOW_SHIFT, KEY_WINDOW_PERM, KEY_GROUP_ORDER = range(1, 6)

Cursor = list[int]  # [batches_done, pos, tokens_before_pos, batches_done_in_group]
Piece = tuple[int, int, int]  # (shard index, first sample, end sample): a range of one shard's samples


def keyed_rng(*key: int) -> np.random.Generator:
    """A generator keyed by integers: the same key gives the same stream on every machine."""
    return np.random.default_rng([k & _MASK64 for k in key])


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) in integers."""
    return -(-a // b)


def pieces_per_shard(samples: list[int], readers: int) -> list[int]:
    """How many pieces each shard is cut into so that ``readers`` readers each get one: 1 each when
    there are at least as many non-empty shards as readers, else ``readers`` pieces apportioned by
    sample count (largest remainder; at least one per shard, never more than its samples)."""
    total = sum(samples)
    if sum(1 for n in samples if n > 0) >= readers or total == 0:
        return [1] * len(samples)
    quotas = [readers * n / total for n in samples]
    k = [min(max(1, int(q)), max(1, n)) for q, n in zip(quotas, samples, strict=True)]
    by_remainder = sorted(range(len(samples)), key=lambda i: (-(quotas[i] - int(quotas[i])), i))
    for i in by_remainder:
        if sum(k) >= readers:
            break
        if k[i] < samples[i]:
            k[i] += 1
    return k


class Plan:
    """Everything derived from the manifest and the loader's arguments (picklable, no I/O).

    ``readers``: how many readers (ranks x workers) the run has; a split with
    fewer non-empty shards is cut into pieces for them (fixed-size batches
    only: token-budget batch counts come from the manifest's per-shard token
    counts). ``self.readers`` is what the pieces were cut for (1: whole shards).
    """

    def __init__(self, manifest_url: str, split: str, seed: int, partitions: int, shuffle_buffer: int,
                 batch_size: int | None, tokens_per_batch: int | None, readers: int = 1):
        manifest, root = load_manifest(manifest_url)
        gid_base: dict[str, int] = {}
        total = 0
        for s in manifest.shards:  # global ids run over all splits in manifest order
            gid_base[s.name] = total
            total += s.samples
        shards = manifest.shards_of(split)  # type: ignore[arg-type]
        self.split = split
        self.names = [s.name for s in shards]
        self.urls = [storage.join(root, s.name) for s in shards]
        self.infos = [(s.samples, s.tokens, s.bytes, s.sha256) for s in shards]
        self.gid_base = [gid_base[s.name] for s in shards]
        self.seed = seed
        self.P = partitions
        self.K = shuffle_buffer
        self.B = batch_size
        self.T = tokens_per_batch
        self.pad_id = int(manifest.tokenizer.special_ids.get("<pad>", PAD_ID))
        self.pair = manifest.packing_rule in PAIR_RULES
        self.max_seq_len = manifest.max_seq_len
        self.vocab_size = manifest.tokenizer.vocab_size
        self.total_samples = sum(s.samples for s in shards)
        self.total_tokens = sum(s.tokens for s in shards)
        self.fingerprint = hashlib.sha256(json.dumps(
            [split, [(s.name, s.samples, s.tokens, s.sha256) for s in shards]]).encode()).hexdigest()[:16]
        counts = [s.samples for s in shards]
        k = pieces_per_shard(counts, readers) if self.T is None else [1] * len(counts)
        self.readers = readers if any(x > 1 for x in k) else 1
        self.pieces: list[Piece] = [(i, n * j // ki, n * (j + 1) // ki)
                                    for i, (n, ki) in enumerate(zip(counts, k, strict=True)) for j in range(ki)]
        self.part_pieces = self._deal([hi - lo for _, lo, hi in self.pieces])
        self.part_samples = [sum(self.piece_samples(i) for i in ps) for ps in self.part_pieces]
        # Token counts are known per shard only: with a token budget every piece is a whole shard.
        self.part_tokens = [sum(self.infos[self.pieces[i][0]][1] for i in ps) for ps in self.part_pieces]
        if self.T is not None:
            self.part_batches = [ceil_div(x, self.T) for x in self.part_tokens]
        else:
            assert self.B is not None
            self.part_batches = [ceil_div(n, self.B) for n in self.part_samples]

    def batch_fill(self, size: int | None = None) -> float | None:
        """The share of a full batch an epoch's batches hold on average, from 0 to 1: rows over ``batch_size``,
        or real tokens over ``tokens_per_batch`` (``size``: another batch size or budget, default the
        plan's); None for an empty split. Under 1 by each partition's short last batch: a batch never spans
        two partitions, so where partitions hold fewer samples (tokens) than a batch, every batch of theirs
        is short."""
        if self.T is not None:
            t = size or self.T
            batches = sum(ceil_div(x, t) for x in self.part_tokens)
            return self.total_tokens / (batches * t) if batches else None
        b = size or self.B
        assert b is not None
        batches = sum(ceil_div(n, b) for n in self.part_samples)
        return self.total_samples / (batches * b) if batches else None

    def batch_tokens(self) -> float | None:
        """The real tokens an epoch's batches hold on average (the split's tokens over the batches a
        partition yields: ``part_batches``, exact with a token budget too); None for an empty split."""
        batches = sum(self.part_batches)
        return self.total_tokens / batches if batches else None

    def sequence_tokens(self) -> float:
        """The split's real tokens per sequence, at least 1."""
        return max(1.0, self.total_tokens / self.total_samples) if self.total_samples else 1.0

    def piece_samples(self, i: int) -> int:
        """The samples of piece i (the manifest's count for a whole shard)."""
        _, lo, hi = self.pieces[i]
        return hi - lo

    def _deal(self, samples: list[int]) -> list[list[int]]:
        """Pieces -> partitions, balanced by sample count (largest first to the lightest partition).

        Keyed by seed only, not by epoch: partition sizes, and so steps_per_epoch,
        stay the same every epoch. Ties are broken by a seeded shuffle.
        """
        order = list(range(len(samples)))
        keyed_rng(self.seed, KEY_DEAL).shuffle(order)
        order.sort(key=lambda i: -samples[i])  # stable: equal sizes keep the seeded order
        heap = [(0, p) for p in range(self.P)]
        parts: list[list[int]] = [[] for _ in range(self.P)]
        for i in order:
            load, p = heapq.heappop(heap)
            parts[p].append(i)
            heapq.heappush(heap, (load + samples[i], p))
        return [sorted(ps) for ps in parts]

    def piece_order(self, epoch: int, p: int) -> list[int]:
        """The order partition p reads its pieces in, in this epoch (keyed by seed, epoch, p)."""
        order = list(self.part_pieces[p])
        keyed_rng(self.seed, KEY_SHARD_ORDER, epoch, p).shuffle(order)
        return order

    def window_shift(self, epoch: int, p: int) -> int:
        """Size of window 0 (1..K): block boundaries move every epoch so blocks mix differently."""
        return int(keyed_rng(self.seed, KEY_WINDOW_SHIFT, epoch, p).integers(1, self.K + 1))

    def unit_parts(self, world_size: int, num_units: int, rank: int, unit: int) -> list[int]:
        """The partitions of unit (rank, worker): rank r owns p % world_size == r, dealt over its units."""
        return [p for p in range(self.P) if p % world_size == rank][unit::num_units]

    def segment_batches(self, world_size: int, num_units: int, remaining: Callable[[int], int]) -> int:
        """Batches every unit yields in an epoch segment: the largest unit's count."""
        return max(sum(remaining(p) for p in self.unit_parts(world_size, num_units, r, u))
                   for r in range(world_size) for u in range(num_units))

