"""Reading one shard: fetch it once, verify bytes and sha256, then decode and check its samples.

A failure of any kind raises ``ShardCorrupt`` at a fixed position of the
shard (before its first sample for bytes/sha256, before its last for counts),
which keeps an epoch exact on resume whichever policy handles it. A piece of a
shard that several readers share (``iter_piece``) is released only after the
whole shard has been checked, so its pieces fail together, at their start.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import time
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

import numpy as np

from schemas.sample import decode_sample, iter_tar_samples
from shardforge import storage

if TYPE_CHECKING:
    from trainer.loader.plan import Plan

log = logging.getLogger(__name__)
SPOOL_MEMORY = 8 << 20  # bytes of one shard held in RAM while it is verified; the rest spools to local disk


class Sample:
    """One decoded sample; gid is its global index in the corpus."""

    __slots__ = ("gid", "shard", "ids", "tt", "label")

    def __init__(self, gid: int, shard: int, ids: np.ndarray, tt: np.ndarray | None, label: int | None):
        self.gid, self.shard, self.ids, self.tt, self.label = gid, shard, ids, tt, label


class ShardCorrupt(Exception):
    """A shard that cannot be used: missing, unreadable after retries, or not what the manifest says."""

    def __init__(self, shard: str, reason: str):
        super().__init__(f"shard {shard}: {reason}")
        self.shard = shard
        self.reason = reason


class HashingReader:
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
        """Up to n bytes (all with -1), hashed; a transient error reopens at the same offset."""
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
        """Close the underlying file."""
        self._f.close()


def fetch_verified(url: str, name: str, n_bytes: int, sha: str) -> IO[bytes]:
    """The shard's bytes, read once into a spool and checked against the manifest's size and sha256.

    Nothing of a shard is parsed before its checksum holds, so no sample of a
    changed shard can reach the model, whatever the shuffle buffer. Shards are
    small; past SPOOL_MEMORY bytes the spool moves to a local temporary file.
    """
    try:
        reader = HashingReader(url)
    except FileNotFoundError:
        raise ShardCorrupt(name, f"missing ({url} not found)") from None
    except Exception as e:  # noqa: BLE001 - any open failure after retries makes the shard unusable
        raise ShardCorrupt(name, f"cannot open {url}: {type(e).__name__}: {e}") from e
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)
    try:
        try:
            while chunk := reader.read(1 << 20):
                if reader.pos > n_bytes:  # stop early: a replaced object may be huge
                    raise ShardCorrupt(name, f"is larger than the {n_bytes} bytes the manifest says")
                spool.write(chunk)
        finally:
            reader.close()
        if reader.pos != n_bytes:
            raise ShardCorrupt(name, f"is {reader.pos} bytes, the manifest says {n_bytes}")
        if reader.sha.hexdigest() != sha:
            raise ShardCorrupt(name, "sha256 does not match the manifest")
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool


def check_ids(name: str, key: str, ids: np.ndarray, vocab_size: int, max_len: int) -> None:
    """A sample the model can take: 1..max_len ids, each in [0, vocab_size); else the shard is corrupt."""
    if not 0 < ids.shape[0] <= max_len:
        raise ShardCorrupt(name, f"sample {key}: {ids.shape[0]} tokens, not in 1..max_seq_len {max_len}")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        raise ShardCorrupt(name, f"sample {key}: token id {hi if hi >= vocab_size else lo} outside the "
                                  f"vocabulary of {vocab_size}")


def iter_piece(plan: Plan, i: int, start: int) -> Iterator[Sample]:
    """Samples of piece ``i`` of the plan from its offset ``start`` on (a whole shard, or a range of one)."""
    s, lo, hi = plan.pieces[i]
    if lo == 0 and hi == plan.infos[s][0]:
        return iter_shard(plan, s, start)
    return iter_shard(plan, s, lo + start, stop=hi)


def iter_shard(plan: Plan, s: int, start: int, stop: int | None = None) -> Iterator[Sample]:
    """Samples of shard ``s`` of the plan from offset ``start`` on; raises ShardCorrupt on any failure.

    The shard's bytes and sha256 are verified before its first sample is
    released (fetch_verified); its sample and token counts before its last.
    Either way the failure point of a shard is a fixed position, which keeps
    the epoch exact on resume. With ``stop`` (a piece of a shard that several
    readers share) only samples before ``stop`` are released, and only after
    the whole shard has been read and checked: every piece of a shard fails
    before its first sample, or none does.
    """
    if stop is None:
        yield from _read_shard(plan, s, start, None)
        return
    yield from list(_read_shard(plan, s, start, stop))


def _read_shard(plan: Plan, s: int, start: int, stop: int | None) -> Iterator[Sample]:
    """The checked samples of shard ``s`` in [start, stop) (to its end without ``stop``); the whole shard
    is read and checked whatever the range."""
    name, gid_base = plan.names[s], plan.gid_base[s]
    n_samples, n_tokens, n_bytes, sha = plan.infos[s]
    f: IO[bytes] | None = None
    try:
        f = fetch_verified(plan.urls[s], name, n_bytes, sha)
        it = iter_tar_samples(f, source=name)
        count = tokens = 0
        while count < n_samples:
            try:
                key, members = next(it)
            except StopIteration:
                raise ShardCorrupt(name, f"has {count} samples, the manifest says {n_samples}") from None
            d = decode_sample(key, members)
            ids = d["input_ids"]
            check_ids(name, key, ids, plan.vocab_size, plan.max_seq_len)
            tokens += int(ids.shape[0])
            if tokens > n_tokens:
                raise ShardCorrupt(name, f"has more tokens than the manifest says ({n_tokens})")
            count += 1
            if count == n_samples:
                if next(it, None) is not None:
                    raise ShardCorrupt(name, f"has more samples than the manifest says ({n_samples})")
                if tokens != n_tokens:
                    raise ShardCorrupt(name, f"has {tokens} tokens, the manifest says {n_tokens}")
            if count - 1 >= start and (stop is None or count - 1 < stop):
                label = d.get("label")
                yield Sample(gid_base + count - 1, s, ids, d.get("token_type_ids"), label)
    except ShardCorrupt:
        raise
    except Exception as e:  # noqa: BLE001 - decode / tar / download errors all make the shard unusable
        raise ShardCorrupt(name, f"{type(e).__name__}: {e}") from e
    finally:
        if f is not None:
            f.close()
