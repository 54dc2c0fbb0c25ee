"""Shard encoding as it was before the template headers: ``tarfile`` and ``np.save`` per member.

A frozen copy of ``schemas/sample.py``'s ``encode_sample``, ``write_tar`` and ``_npy_bytes`` at 569e694, kept only so
that tests/test_tar_encoding.py can prove the fast writer produces the same bytes, and so
benchmarks/bench_tar.py can time both in one process. The package never uses it. Do not
"fix" it: it is the definition the fast path is held to.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterable
from typing import IO, Any

import numpy as np

from schemas.sample import INPUT_IDS, KEY_RE, LABEL, META, TOKEN_TYPE_IDS, ids_dtype


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def encode_sample(input_ids, vocab_size: int, token_type_ids=None, label: int | None = None,
                  meta: dict[str, Any] | None = None) -> list[tuple[str, bytes]]:
    """Members (suffix, payload) of one sample, in spec order."""
    ids = np.asarray(input_ids)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError("input_ids must be a non-empty 1-D sequence")
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise ValueError(f"token id out of range for vocab_size={vocab_size}")
    members = [(INPUT_IDS, npy_bytes(ids.astype(ids_dtype(vocab_size))))]
    if token_type_ids is not None:
        tt = np.asarray(token_type_ids, dtype=np.uint8)
        if tt.shape != ids.shape:
            raise ValueError("token_type_ids must match input_ids in length")
        members.append((TOKEN_TYPE_IDS, npy_bytes(tt)))
    if label is not None:
        members.append((LABEL, str(int(label)).encode("ascii")))
    if meta:
        members.append((META, json.dumps(meta, sort_keys=True, separators=(",", ":")).encode("utf-8")))
    return members


def write_tar(fileobj: IO[bytes], samples: Iterable[tuple[str, list[tuple[str, bytes]]]]) -> None:
    """Write samples (key, members) as a deterministic USTAR archive (tarfile, one member at a time)."""
    with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for key, members in samples:
            if not KEY_RE.match(key):
                raise ValueError(f"invalid sample key {key!r}")
            for suffix, payload in members:
                info = tarfile.TarInfo(f"{key}.{suffix}")
                info.size = len(payload)
                info.mtime = 0
                info.mode = 0o444
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(payload))


def tar_bytes(samples: Iterable[tuple[str, list[tuple[str, bytes]]]]) -> bytes:
    buf = io.BytesIO()
    write_tar(buf, samples)
    return buf.getvalue()
