"""Streaming shard loader: manifest -> partitions -> block shuffle -> batches.

The long form is docs/loader.md; the shape in brief:

* **Partitions.** The split's shards are dealt once (keyed by ``seed`` only)
  into ``partitions`` virtual streams, balanced by sample count. Each epoch a
  partition reads its shards in an order keyed by (seed, epoch, p) and
  shuffles them in fixed blocks of ``shuffle_buffer`` positions, so the batch
  sequence of a partition is a pure function of (seed, epoch, p): it does not
  depend on the world size or the number of workers.
* **Units.** Rank r owns the partitions with ``p % world_size == r``; worker w
  of a rank owns every ``num_workers``-th of those. A unit (rank, worker)
  interleaves its partitions one batch at a time (round robin).
* **Equal steps.** Every unit yields the same number of batches per epoch (the
  largest unit's count, computed from manifest counts); a unit that runs dry
  replays its own epoch, flagged ``is_pad``. So DDP ranks never hang on uneven
  shards and every real sample is still seen exactly once per epoch.
* **Exact resume.** Batches carry the cursor of the partition they came from,
  so the main process knows exactly what was delivered (batches prefetched by
  workers do not count). State = epoch + per-partition cursors.
* **Corrupt shards.** A shard is read once into a local spool and its bytes
  and sha256 checked against the manifest before its first sample is
  released (whatever ``shuffle_buffer`` is); its samples must decode, hold
  1..max_seq_len ids below the vocabulary size and add up to the manifest's
  sample and token counts before its last sample is released. A failure
  either raises a UserError (policy ``fail``) or turns the shard's
  not-yet-released positions into holes (policy ``skip``), recorded in the
  state so a resumed run skips the same shard.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import storage
from schemas import PAD_ID
from schemas.config import PAIR_RULES
from schemas.errors import UserError
from schemas.manifest import corpus_root, latest_manifest_url, load_manifest
from schemas.manifest import manifest_url as manifest_url_of
from schemas.sample import decode_sample, iter_tar_samples

log = logging.getLogger(__name__)

STATE_VERSION = 1
CORRUPT_POLICIES = ("fail", "skip")
IGNORE_LABEL = -100  # sentence_labels of samples without a label.cls member
_MASK64 = (1 << 64) - 1
SPOOL_MEMORY = 8 << 20  # bytes of one shard held in RAM while it is verified; the rest spools to local disk
# RNG streams, so that no two random choices share a key.
_KEY_DEAL, _KEY_SHARD_ORDER, _KEY_WINDOW_SHIFT, _KEY_WINDOW_PERM, _KEY_GROUP_ORDER = range(1, 6)

Cursor = list[int]  # [batches_done, pos, tokens_before_pos, batches_done_in_group]


def _rng(*key: int) -> np.random.Generator:
    """A generator keyed by integers: the same key gives the same stream on every machine."""
    return np.random.default_rng([k & _MASK64 for k in key])


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class _Sample:
    """One decoded sample; gid is its global index in the corpus."""

    __slots__ = ("gid", "shard", "ids", "tt", "label")

    def __init__(self, gid: int, shard: int, ids: np.ndarray, tt: np.ndarray | None, label: int | None):
        self.gid, self.shard, self.ids, self.tt, self.label = gid, shard, ids, tt, label


class _ShardCorrupt(Exception):
    """A shard that cannot be used: missing, unreadable after retries, or not what the manifest says."""

    def __init__(self, shard: str, reason: str):
        super().__init__(f"shard {shard}: {reason}")
        self.shard = shard
        self.reason = reason


# ---------------------------------------------------------------- reading one shard

class _HashingReader:
    """A front-to-back reader of one object that hashes bytes as they stream.

    A transient error mid-stream reopens the object at the same offset (fsspec
    files seek) instead of restarting the shard, so a flaky connection costs a
    retry, not a re-download.
    """

    def __init__(self, url: str):
        self.url = url
        self.pos = 0
        self.sha = hashlib.sha256()
        self._f = storage.open_read(url)

    def read(self, n: int = -1) -> bytes:
        attempts = storage.RETRY_ATTEMPTS
        for i in range(attempts):
            try:
                data = self._f.read(n)
                break
            except Exception as e:  # noqa: BLE001 - classified by is_transient
                if i == attempts - 1 or not storage.is_transient(e):
                    raise
                log.warning("transient error reading %s at byte %d (%s); reopening", self.url, self.pos, e)
                time.sleep(storage.RETRY_BASE_DELAY * 2**i)
                self._reopen()
        self.pos += len(data)
        self.sha.update(data)
        return data

    def _reopen(self) -> None:
        try:
            self._f.close()
        except Exception:  # noqa: BLE001 - the old handle is being discarded anyway
            pass
        self._f = storage.open_read(self.url)
        self._f.seek(self.pos)

    def close(self) -> None:
        self._f.close()


def _fetch_verified(url: str, name: str, n_bytes: int, sha: str) -> IO[bytes]:
    """The shard's bytes, read once into a spool and checked against the manifest's size and sha256.

    Nothing of a shard is parsed before its checksum holds, so no sample of a
    changed shard can reach the model, whatever the shuffle buffer. Shards are
    small; past SPOOL_MEMORY bytes the spool moves to a local temporary file.
    """
    try:
        reader = _HashingReader(url)
    except FileNotFoundError:
        raise _ShardCorrupt(name, f"missing ({url} not found)") from None
    except Exception as e:  # noqa: BLE001 - any open failure after retries makes the shard unusable
        raise _ShardCorrupt(name, f"cannot open {url}: {type(e).__name__}: {e}") from e
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)
    try:
        try:
            while chunk := reader.read(1 << 20):
                if reader.pos > n_bytes:  # stop early: a replaced object may be huge
                    raise _ShardCorrupt(name, f"is larger than the {n_bytes} bytes the manifest says")
                spool.write(chunk)
        finally:
            reader.close()
        if reader.pos != n_bytes:
            raise _ShardCorrupt(name, f"is {reader.pos} bytes, the manifest says {n_bytes}")
        if reader.sha.hexdigest() != sha:
            raise _ShardCorrupt(name, "sha256 does not match the manifest")
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool


def _check_ids(name: str, key: str, ids: np.ndarray, vocab_size: int, max_len: int) -> None:
    """A sample the model can take: 1..max_len ids, each in [0, vocab_size); else the shard is corrupt."""
    if not 0 < ids.shape[0] <= max_len:
        raise _ShardCorrupt(name, f"sample {key}: {ids.shape[0]} tokens, not in 1..max_seq_len {max_len}")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        raise _ShardCorrupt(name, f"sample {key}: token id {hi if hi >= vocab_size else lo} outside the "
                                  f"vocabulary of {vocab_size}")


def _iter_shard(plan: _Plan, s: int, start: int) -> Iterator[_Sample]:
    """Samples of shard ``s`` of the plan from offset ``start`` on; raises _ShardCorrupt on any failure.

    The shard's bytes and sha256 are verified before its first sample is
    released (_fetch_verified); its sample and token counts before its last.
    Either way the failure point of a shard is a fixed position, which keeps
    the epoch exact on resume.
    """
    name, gid_base = plan.names[s], plan.gid_base[s]
    n_samples, n_tokens, n_bytes, sha = plan.infos[s]
    f: IO[bytes] | None = None
    try:
        f = _fetch_verified(plan.urls[s], name, n_bytes, sha)
        it = iter_tar_samples(f, source=name)
        count = tokens = 0
        while count < n_samples:
            try:
                key, members = next(it)
            except StopIteration:
                raise _ShardCorrupt(name, f"has {count} samples, the manifest says {n_samples}") from None
            d = decode_sample(key, members)
            ids = d["input_ids"]
            _check_ids(name, key, ids, plan.vocab_size, plan.max_seq_len)
            tokens += int(ids.shape[0])
            if tokens > n_tokens:
                raise _ShardCorrupt(name, f"has more tokens than the manifest says ({n_tokens})")
            count += 1
            if count == n_samples:
                if next(it, None) is not None:
                    raise _ShardCorrupt(name, f"has more samples than the manifest says ({n_samples})")
                if tokens != n_tokens:
                    raise _ShardCorrupt(name, f"has {tokens} tokens, the manifest says {n_tokens}")
            if count - 1 >= start:
                label = d.get("label")
                yield _Sample(gid_base + count - 1, s, ids, d.get("token_type_ids"), label)
    except _ShardCorrupt:
        raise
    except Exception as e:  # noqa: BLE001 - decode / tar / download errors all make the shard unusable
        raise _ShardCorrupt(name, f"{type(e).__name__}: {e}") from e
    finally:
        if f is not None:
            f.close()


# ---------------------------------------------------------------- the static plan

class _Plan:
    """Everything derived from the manifest and the loader's arguments (picklable, no I/O)."""

    def __init__(self, manifest_url: str, split: str, seed: int, partitions: int, shuffle_buffer: int,
                 batch_size: int | None, tokens_per_batch: int | None):
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
        self.fingerprint = hashlib.sha256(json.dumps(
            [split, [(s.name, s.samples, s.tokens, s.sha256) for s in shards]]).encode()).hexdigest()[:16]
        self.part_shards = self._deal([s.samples for s in shards])
        self.part_samples = [sum(self.infos[i][0] for i in ps) for ps in self.part_shards]
        self.part_tokens = [sum(self.infos[i][1] for i in ps) for ps in self.part_shards]
        if self.T is not None:
            self.part_batches = [_ceil_div(x, self.T) for x in self.part_tokens]
        else:
            assert self.B is not None
            self.part_batches = [_ceil_div(n, self.B) for n in self.part_samples]

    def _deal(self, samples: list[int]) -> list[list[int]]:
        """Shards -> partitions, balanced by sample count (largest first to the lightest partition).

        Keyed by seed only, not by epoch: partition sizes, and so steps_per_epoch,
        stay the same every epoch. Ties are broken by a seeded shuffle.
        """
        order = list(range(len(samples)))
        _rng(self.seed, _KEY_DEAL).shuffle(order)
        order.sort(key=lambda i: -samples[i])  # stable: equal sizes keep the seeded order
        heap = [(0, p) for p in range(self.P)]
        parts: list[list[int]] = [[] for _ in range(self.P)]
        for i in order:
            load, p = heapq.heappop(heap)
            parts[p].append(i)
            heapq.heappush(heap, (load + samples[i], p))
        return [sorted(ps) for ps in parts]

    def shard_order(self, epoch: int, p: int) -> list[int]:
        order = list(self.part_shards[p])
        _rng(self.seed, _KEY_SHARD_ORDER, epoch, p).shuffle(order)
        return order

    def window_shift(self, epoch: int, p: int) -> int:
        """Size of window 0 (1..K): block boundaries move every epoch so blocks mix differently."""
        return int(_rng(self.seed, _KEY_WINDOW_SHIFT, epoch, p).integers(1, self.K + 1))

    def unit_parts(self, world_size: int, num_units: int, rank: int, unit: int) -> list[int]:
        return [p for p in range(self.P) if p % world_size == rank][unit::num_units]

    def segment_batches(self, world_size: int, num_units: int, remaining: Callable[[int], int]) -> int:
        """Batches every unit yields in an epoch segment: the largest unit's count."""
        return max(sum(remaining(p) for p in self.unit_parts(world_size, num_units, r, u))
                   for r in range(world_size) for u in range(num_units))


# ---------------------------------------------------------------- one partition's batch stream

class _Ctx:
    """Per-unit corrupt-shard bookkeeping, shared by the unit's partition streams."""

    def __init__(self, plan: _Plan, policy: str, skipped: set[int]):
        self.plan = plan
        self.policy = policy
        self.skipped = skipped
        self.new: list[str] = []  # skipped since the last batch left the unit

    def corrupt(self, e: _ShardCorrupt, shard: int) -> None:
        if self.policy == "fail":
            raise UserError(f"corrupt shard {e.shard}: {e.reason} (train with corrupt_shards=skip to skip "
                            "it)") from e
        if shard not in self.skipped:
            log.warning("corrupt shard %s: %s", e.shard, e.reason)  # why; the main process says it skips it
            self.skipped.add(shard)
            self.new.append(self.plan.names[shard])


class _PositionReader:
    """Reads positions of a partition's epoch stream in order; holes (None) for skipped shards."""

    def __init__(self, plan: _Plan, order: list[int], ctx: _Ctx):
        self.plan, self.order, self.ctx = plan, order, ctx
        self.starts = [0]
        for s in order:
            self.starts.append(self.starts[-1] + plan.infos[s][0])
        self.k = 0  # index into order of the shard being read
        self.gen: Iterator[_Sample] | None = None
        self.gen_k = -1  # order index of the shard the open generator reads
        self.gen_next = -1  # position the open generator yields next

    def read(self, lo: int, hi: int) -> list[_Sample | None]:
        out: list[_Sample | None] = []
        q = lo
        while q < hi:
            while q >= self.starts[self.k + 1]:
                self.k += 1
            s = self.order[self.k]
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
                self.gen = _iter_shard(plan, s, q - self.starts[self.k])
                self.gen_k, self.gen_next = self.k, q
            try:
                sample = next(self.gen)
            except _ShardCorrupt as e:
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


class _PartitionStream:
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

    def __init__(self, plan: _Plan, epoch: int, p: int, cursor: Cursor, ctx: _Ctx):
        self.plan, self.epoch, self.p, self.ctx = plan, epoch, p, ctx
        self.b, self.pos, self.tok, self.skip = cursor
        self.n = plan.part_samples[p]
        self.max_batches = plan.part_batches[p]
        self.shift = plan.window_shift(epoch, p)
        self.reader = _PositionReader(plan, plan.shard_order(epoch, p), ctx)
        self.done = self.b >= self.max_batches or self.pos >= self.n
        self._win_j = -1
        self._win: list[_Sample | None] = []
        self._group: list[list[_Sample]] | None = None
        self._group_end = 0
        self._group_tokens = 0

    def cursor(self) -> Cursor:
        return [self.b, self.pos, self.tok, self.skip]

    def _bounds(self, j: int) -> tuple[int, int]:
        lo = 0 if j == 0 else self.shift + (j - 1) * self.plan.K
        hi = self.shift + j * self.plan.K
        return lo, min(hi, self.n)

    def _window_of(self, pos: int) -> int:
        return 0 if pos < self.shift else 1 + (pos - self.shift) // self.plan.K

    def _drop_skipped(self, entries: list[_Sample | None]) -> list[_Sample | None]:
        # A shard that failed while this window was read loses all its positions
        # in it, also those read before the failure: a run resumed with the shard
        # in skipped_shards sees the same holes.
        sk = self.ctx.skipped
        return [e if e is not None and e.shard not in sk else None for e in entries]

    def next_batch(self) -> list[_Sample] | None:
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

    def _next_fixed(self) -> list[_Sample]:
        assert self.plan.B is not None
        out: list[_Sample] = []
        while len(out) < self.plan.B and self.pos < self.n:
            j = self._window_of(self.pos)
            if j != self._win_j:
                lo, hi = self._bounds(j)
                entries = self._drop_skipped(self.reader.read(lo, hi))
                perm = _rng(self.plan.seed, _KEY_WINDOW_PERM, self.epoch, self.p, j).permutation(hi - lo)
                self._win = [entries[i] for i in perm]
                self._win_j = j
            e = self._win[self.pos - self._bounds(j)[0]]
            self.pos += 1
            if e is not None:
                out.append(e)
        return out

    def _next_tokens(self) -> list[_Sample]:
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
        entries: list[_Sample | None] = []
        while True:
            lo, hi = self._bounds(j)
            entries = self._drop_skipped(entries + self.reader.read(lo, hi))
            tokens = sum(int(e.ids.shape[0]) for e in entries if e is not None)
            final = hi >= self.n
            before = self.tok // T
            # Running count of batches = floor(tokens so far / T), and exactly
            # ceil(partition tokens / T) at the end: equal-step DDP needs the
            # count from the manifest, not from the data.
            b = self.max_batches - before if final else (self.tok + tokens) // T - before
            if b > 0 or final:
                break
            j += 1  # too few tokens for a batch: carry the window into the next one
        samples = [e for e in entries if e is not None]
        if not samples:  # all holes: move on without emitting
            self.pos, self.tok, self.skip = hi, self.tok + tokens, 0
            return
        samples.sort(key=lambda e: (e.ids.shape[0], e.gid))
        batches = _split_by_tokens(samples, max(1, min(b, len(samples))))
        order = _rng(self.plan.seed, _KEY_GROUP_ORDER, self.epoch, self.p, j0).permutation(len(batches))
        self._group = [batches[i] for i in order]
        self._group_end, self._group_tokens = hi, tokens
        if self.skip >= len(self._group):  # cannot happen with a consistent state
            raise UserError(f"loader state does not match the data of partition {self.p}")

    def close(self) -> None:
        self.reader.close()


def _split_by_tokens(samples: list[_Sample], b: int) -> list[list[_Sample]]:
    """Cut length-sorted samples into b non-empty runs of about equal real tokens."""
    lens = [int(s.ids.shape[0]) for s in samples]
    total = sum(lens)
    out: list[list[_Sample]] = []
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


# ---------------------------------------------------------------- a unit: interleave + equal steps

def _interleave(streams: list[_PartitionStream]) -> tuple[list[_Sample], _PartitionStream] | None:
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


class _Replay:
    """Pad batches for a unit that ran dry: its own epoch again from the start (then again).

    A unit that owns no readable sample replays the whole split instead, with
    its own corrupt-shard bookkeeping (shards of other ranks are not recorded
    in this rank's state).
    """

    def __init__(self, plan: _Plan, epoch: int, parts: list[int], ctx: _Ctx, skip: int):
        self.plan, self.epoch, self.ctx = plan, epoch, ctx
        self.parts = parts
        self.streams: list[_PartitionStream] = []
        self.yielded = 0
        self._new_pass()
        for _ in range(skip):
            self.next()

    def _new_pass(self) -> None:
        for s in self.streams:
            s.close()
        self.streams = [_PartitionStream(self.plan, self.epoch, p, [0, 0, 0, 0], self.ctx) for p in self.parts]
        self.yielded = 0

    def next(self) -> list[_Sample]:
        for _ in range(3):
            got = _interleave(self.streams)
            if got is not None:
                self.yielded += 1
                return got[0]
            if self.yielded == 0:  # a whole pass gave nothing: fall back to the whole split
                if self.parts == list(range(self.plan.P)):
                    break
                self.parts = list(range(self.plan.P))
                self.ctx = _Ctx(self.plan, self.ctx.policy, set(self.ctx.skipped))
            self._new_pass()
        raise UserError(f"split {self.plan.split!r} has no readable sample to pad uneven ranks with")

    def close(self) -> None:
        for s in self.streams:
            s.close()


def _pack(samples: list[_Sample], epoch: int, pad: bool, pair: bool) -> dict[str, Any]:
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
        out["labels"] = np.array([IGNORE_LABEL if s.label is None else s.label for s in samples], dtype=np.int64)
    return out


def _collate(packed: dict[str, Any], pad_id: int) -> dict[str, torch.Tensor]:
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


def _iter_unit(plan: _Plan, unit: int, start: dict[str, Any], policy: str,
               epochs: int | None) -> Iterator[dict[str, Any]]:
    """All batches of one unit from its start state: real batches, then pads, epoch after epoch."""
    parts: list[int] = start["parts"]
    epoch: int = start["epoch"]
    cursors: dict[int, Cursor] = start["cursors"]
    pad_done: int = start["pad"]
    done: int = start["done"]
    seg: int = start["segment"]
    ctx = _Ctx(plan, policy, set(start["skipped"]))
    while epochs is None or epoch < epochs:
        streams = [_PartitionStream(plan, epoch, p, list(cursors.get(p, [0, 0, 0, 0])), ctx) for p in parts]
        replay: _Replay | None = None
        try:
            while done < seg:
                got = _interleave(streams)
                if got is not None:
                    samples, s = got
                    part: list[int] | None = [s.p, *s.cursor()]
                    is_pad = False
                else:
                    if replay is None:
                        replay = _Replay(plan, epoch, parts, ctx, pad_done)
                    samples, part, is_pad = replay.next(), None, True
                    pad_done += 1
                done += 1
                batch = _pack(samples, epoch, is_pad, plan.pair)
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


class _UnitDataset(IterableDataset):
    """The rank's units as DataLoader workers: worker w plays unit (w + rotation) % num_workers."""

    def __init__(self, plan: _Plan, starts: list[dict[str, Any]], rotation: int, policy: str,
                 epochs: int | None):
        self.plan, self.starts, self.rotation, self.policy, self.epochs = plan, starts, rotation, policy, epochs

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        n = len(self.starts)
        w = 0 if info is None else info.id
        unit = (w + self.rotation) % n
        return _iter_unit(self.plan, unit, self.starts[unit], self.policy, self.epochs)


def _identity(x: Any) -> Any:
    return x


def _worker_init(_: int) -> None:
    # Decoding is numpy-bound and single-threaded; intra-op threads only oversubscribe the cores.
    torch.set_num_threads(1)


# ---------------------------------------------------------------- the public loader

class ShardLoader:
    """Batches from a shardforge corpus, sharded over ranks and workers, exactly resumable.

    Iterating yields dicts of tensors: ``input_ids`` int64 [B, L] right-padded
    with the pad id, ``attention_mask`` int64 0/1 [B, L], ``sample_ids`` int64
    [B] (global index of the sample in the corpus: shards in manifest order,
    offset within the shard), ``epoch`` int64 [B], ``is_pad`` bool [B] (rows
    replayed to even out ranks; every other row is seen once per epoch), and
    for pair rules ``token_type_ids`` int64 [B, L] and ``sentence_labels``
    int64 [B]. Iteration continues from the loader's current state (see
    ``state_dict``) and runs ``epochs`` epochs in total (forever when None).
    """

    def __init__(self, manifest_url: str, split: str = "train", *, batch_size: int | None = 8,
                 tokens_per_batch: int | None = None, seed: int = 0, rank: int = 0, world_size: int = 1,
                 num_workers: int = 0, shuffle_buffer: int = 1000, corrupt_policy: str = "fail",
                 pin_memory: bool = False, epochs: int | None = None, partitions: int = 64,
                 follow: bool = False):
        if corrupt_policy not in CORRUPT_POLICIES:
            raise UserError(f"corrupt_policy must be one of {CORRUPT_POLICIES}, got {corrupt_policy!r}")
        if tokens_per_batch is None and (batch_size is None or batch_size < 1):
            raise UserError("give batch_size >= 1 or tokens_per_batch")
        if tokens_per_batch is not None and tokens_per_batch < 1:
            raise UserError("tokens_per_batch must be >= 1")
        if not 0 <= rank < world_size:
            raise UserError(f"rank {rank} is not in a world of size {world_size}")
        if partitions < 1 or shuffle_buffer < 1 or num_workers < 0:
            raise UserError("partitions and shuffle_buffer must be >= 1, num_workers >= 0")
        if epochs is not None and epochs < 0:
            raise UserError("epochs must be >= 0 or None")
        self.follow = follow
        self._plan_args = (split, seed, partitions, shuffle_buffer,
                           None if tokens_per_batch is not None else batch_size, tokens_per_batch)
        # Following a served corpus: read what `latest` names (manifest-v{N}.json); else the given manifest.
        self._root = corpus_root(manifest_url_of(manifest_url))
        self.manifest_url = latest_manifest_url(self._root) if follow else manifest_url
        self.plan = _Plan(self.manifest_url, *self._plan_args)
        if self.plan.total_samples == 0:
            raise UserError(f"{manifest_url} has no {split!r} samples")
        self.split = split
        self.rank, self.world_size = rank, world_size
        self.num_workers = num_workers
        self.units = max(1, num_workers)  # num_workers=0 reads in-process as one unit
        self.corrupt_policy = corrupt_policy
        self.epochs = epochs
        self.pin_memory = pin_memory
        if pin_memory and not torch.cuda.is_available():
            log.warning("pin_memory=True but no CUDA device is available; not pinning")
            self.pin_memory = False
        if world_size * self.units > partitions:
            log.warning("%d ranks x %d workers > %d partitions: some units own no data and only pad",
                        world_size, self.units, partitions)
        self.own_parts = [p for p in range(partitions) if p % world_size == rank]
        self._full_segment = self.plan.segment_batches(world_size, self.units, lambda p: self.plan.part_batches[p])
        self.steps_per_epoch: int = self.units * self._full_segment
        self._plan_changed = False
        self.skipped_shards: list[str] = []
        self._epoch = 0
        self._segment = self._full_segment
        self._t = 0  # batches this rank delivered in the current segment
        self._cursors: dict[int, Cursor] = {p: [0, 0, 0, 0] for p in self.own_parts}
        self._pads: dict[int, int] = {}

    # ------------------------------------------------------------ iteration

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self._epoch

    @property
    def steps_left_in_epoch(self) -> int:
        """Steps until the epoch ends (shorter than steps_per_epoch after an elastic resume)."""
        return self.units * self._segment - self._t

    def _unit_starts(self) -> list[dict[str, Any]]:
        skipped = {i for i, n in enumerate(self.plan.names) if n in set(self.skipped_shards)}
        starts = []
        for u in range(self.units):
            parts = self.plan.unit_parts(self.world_size, self.units, self.rank, u)
            starts.append({
                "parts": parts, "epoch": self._epoch,
                "cursors": {p: list(self._cursors[p]) for p in parts},
                "pad": self._pads.get(u, 0),
                "done": max(0, _ceil_div(self._t - u, self.units)),
                "segment": self._segment, "full_segment": self._full_segment,
                "skipped": skipped,
            })
        return starts

    def _next_epoch(self) -> None:
        self._epoch += 1
        if self.follow:
            self._maybe_switch_manifest()
        self._segment, self._t, self._pads = self._full_segment, 0, {}
        self._cursors = {p: [0, 0, 0, 0] for p in self.own_parts}

    def _use_manifest(self, url: str) -> None:
        """Re-plan on another version of the corpus (same loader arguments)."""
        plan = _Plan(url, *self._plan_args)
        self.plan, self.manifest_url, self._plan_changed = plan, url, True
        self._full_segment = plan.segment_batches(self.world_size, self.units, lambda p: plan.part_batches[p])
        self.steps_per_epoch = self.units * self._full_segment

    def _maybe_switch_manifest(self) -> None:
        """At an epoch boundary: adopt the corpus's latest version, the same one on every rank.

        New versions only append shards, so global sample ids (and hence the
        keyed masks) of the samples already there do not change.
        """
        latest = _agree_on(latest_manifest_url(self._root))
        if latest != self.manifest_url:
            log.info("following corpus: %s -> %s", self.manifest_url, latest)
            self._use_manifest(latest)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        while True:
            self._plan_changed = False
            yield from self._iter_plan()
            if not self._plan_changed:
                return
            # a followed corpus grew at an epoch boundary: restart the streams on the new plan

    def _iter_plan(self) -> Iterator[dict[str, torch.Tensor]]:
        while self._segment == 0 and (self.epochs is None or self._epoch < self.epochs):
            self._next_epoch()  # an elastic resume can leave an empty remainder
        if self.epochs is not None and self._epoch >= self.epochs:
            return
        starts = self._unit_starts()
        source: Iterator[dict[str, Any]]
        if self.num_workers == 0:
            source = _iter_unit(self.plan, 0, starts[0], self.corrupt_policy, self.epochs)
        else:
            ds = _UnitDataset(self.plan, starts, self._t % self.units, self.corrupt_policy, self.epochs)
            # collate_fn=_identity: keep the packed numpy batch as it is (see _pack).
            source = iter(DataLoader(ds, batch_size=None, num_workers=self.num_workers,
                                     collate_fn=_identity, worker_init_fn=_worker_init))
        try:
            for packed in source:
                pad_id = self.plan.pad_id
                self._advance(packed.pop("_meta"))
                batch = _collate(packed, pad_id)
                if self.pin_memory:
                    batch = {k: v.pin_memory() for k, v in batch.items()}
                yield batch
                if self._plan_changed:
                    return
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()
            del source  # shuts DataLoader workers down

    def _advance(self, meta: dict[str, Any]) -> None:
        if meta["epoch"] != self._epoch:
            raise RuntimeError(f"loader out of step: batch of epoch {meta['epoch']} in epoch {self._epoch}")
        part = meta["part"]
        if part is not None:
            self._cursors[part[0]] = list(part[1:])
        self._pads[meta["unit"]] = meta["pad"]
        for name in meta["skipped"]:
            if name not in self.skipped_shards:
                log.warning("skipping corrupt shard %s (%d skipped so far)", name, len(self.skipped_shards) + 1)
                self.skipped_shards.append(name)
        self._t += 1
        if self._t >= self.units * self._segment:
            self._next_epoch()

    # ------------------------------------------------------------ state

    def _config(self) -> dict[str, Any]:
        p = self.plan
        return {"fingerprint": p.fingerprint, "split": p.split, "seed": p.seed, "partitions": p.P,
                "shuffle_buffer": p.K, "batch_size": p.B, "tokens_per_batch": p.T}

    def state_dict(self) -> dict[str, Any]:
        """This rank's position: plain ints, strings and lists (safe for torch.load(weights_only=True)).

        It covers only this rank's partitions: to resume on a different world
        size, merge the states of all ranks (``merge_state_dicts`` or, under
        torch.distributed, ``gather_state_dict``).
        """
        return {
            "version": STATE_VERSION, **self._config(), "manifest": self.manifest_url.rsplit("/", 1)[-1],
            "world_size": self.world_size, "num_workers": self.units, "ranks": [self.rank],
            "epoch": self._epoch, "segment_batches": self._segment, "step_in_segment": self._t,
            "cursors": [[p, *self._cursors[p]] for p in sorted(self._cursors)],
            "pads": [[self.rank, u, n] for u, n in sorted(self._pads.items())],
            "skipped_shards": list(self.skipped_shards),
        }

    @staticmethod
    def merge_state_dicts(states: list[dict[str, Any]]) -> dict[str, Any]:
        """One state from the states of several ranks of the same step (any order)."""
        if not states:
            raise UserError("no loader states to merge")
        first = states[0]
        same = ("version", "fingerprint", "split", "seed", "partitions", "shuffle_buffer", "batch_size",
                "tokens_per_batch", "world_size", "num_workers", "epoch", "segment_batches", "step_in_segment")
        for s in states[1:]:
            diff = [k for k in same if s.get(k) != first.get(k)]
            if diff:
                raise UserError(f"loader states are not from one step of one run (differ in {diff})")
        cursors: dict[int, list[int]] = {}
        for s in states:
            for c in s["cursors"]:
                if c[0] in cursors and cursors[c[0]] != c:
                    raise UserError(f"loader states disagree on partition {c[0]}")
                cursors[c[0]] = list(c)
        skipped = sorted({n for s in states for n in s["skipped_shards"]})
        return {**{k: first[k] for k in same},
                "ranks": sorted({r for s in states for r in s["ranks"]}),
                "cursors": [cursors[p] for p in sorted(cursors)],
                "pads": sorted(list(x) for s in states for x in s["pads"]),
                "skipped_shards": skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a state: exactly the same batches when the world size and worker
        count are unchanged, else every remaining sample of the epoch exactly once."""
        if state.get("version") != STATE_VERSION:
            raise UserError(f"loader state version {state.get('version')} is not {STATE_VERSION}")
        recorded = state.get("manifest")
        if self.follow and recorded and recorded != self.manifest_url.rsplit("/", 1)[-1]:
            # resume on the corpus version the checkpoint was reading (immutable), not today's latest
            self._use_manifest(storage.join(self._root, recorded))
            self._plan_changed = False
        mine = self._config()
        diff = [k for k in mine if state.get(k) != mine[k]]
        if diff:
            raise UserError(f"loader state is from a different corpus or loader config (differs in {diff}); "
                            "resume with the same manifest, split, seed, partitions, shuffle_buffer and batching")
        cursors = {c[0]: list(c[1:]) for c in state["cursors"]}
        known = set(self.plan.names)
        self.skipped_shards = [n for n in state["skipped_shards"] if n in known]
        self._epoch = int(state["epoch"])
        same_layout = (state["world_size"] == self.world_size and state["num_workers"] == self.units
                       and self.rank in state["ranks"])
        if same_layout:
            self._cursors = {p: cursors[p] for p in self.own_parts}
            self._segment = int(state["segment_batches"])
            self._t = int(state["step_in_segment"])
            self._pads = {u: n for r, u, n in state["pads"] if r == self.rank}
            return
        missing = [p for p in range(self.plan.P) if p not in cursors]
        if missing:
            raise UserError(f"loader state covers ranks {state['ranks']} only (partitions {missing[:8]}... "
                            "missing): to resume on another world size, merge the states of all ranks "
                            "(ShardLoader.merge_state_dicts or gather_state_dict)")
        self._cursors = {p: cursors[p] for p in self.own_parts}
        # A new layout starts a remainder segment: every unit yields as many batches
        # as the fullest new unit has left, so ranks still take equal steps.
        self._segment = self.plan.segment_batches(
            self.world_size, self.units, lambda p: max(0, self.plan.part_batches[p] - cursors[p][0]))
        self._t = 0
        self._pads = {}


def _agree_on(value: str) -> str:
    """Rank 0's value on every rank (a collective when torch.distributed is initialized)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" \
        else torch.device("cpu")
    data = value.encode("utf-8")
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    dist.broadcast(size, src=0)  # UTF-8 bytes in uint8 tensors: nothing is pickled
    buf = torch.zeros(int(size.item()), dtype=torch.uint8, device=device)
    if dist.get_rank() == 0:
        buf.copy_(torch.tensor(list(data), dtype=torch.uint8))
    dist.broadcast(buf, src=0)
    return bytes(buf.cpu().tolist()).decode("utf-8")


def gather_state_dict(loader: ShardLoader, group: Any = None) -> dict[str, Any]:
    """The merged loader state of all ranks (a collective: every rank must call it).

    States travel as JSON bytes in uint8 tensors (never pickled). Without an
    initialized process group this is ``loader.state_dict()``.
    """
    import torch.distributed as dist

    local = loader.state_dict()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:
        return local
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" \
        else torch.device("cpu")
    data = torch.tensor(list(json.dumps(local).encode("utf-8")), dtype=torch.uint8, device=device)
    n = dist.get_world_size(group)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(n)]
    dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64, device=device), group=group)
    width = int(max(s.item() for s in sizes))
    padded = torch.zeros(width, dtype=torch.uint8, device=device)
    padded[: data.numel()] = data
    bufs = [torch.zeros(width, dtype=torch.uint8, device=device) for _ in range(n)]
    dist.all_gather(bufs, padded, group=group)
    states = [json.loads(bytes(b[: int(s.item())].cpu().tolist()).decode("utf-8")) for b, s in zip(bufs, sizes, strict=True)]
    return ShardLoader.merge_state_dicts(states)
