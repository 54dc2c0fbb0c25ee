"""Reads with a readahead cache, listings, globs and content hashes."""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

import fsspec

from shardforge.storage.retry import OPERATION_ATTR, READ_BLOCK_SIZE, invalidate, not_connected, retry
from shardforge.storage.urls import full_url, get_fs, protocol_of

# ---------------------------------------------------------------- reads

def read_bytes(url: str) -> bytes:
    fs, path = get_fs(url)

    def _read() -> bytes:
        with fs.open(path, "rb", block_size=READ_BLOCK_SIZE, cache_type="readahead") as f:
            return f.read()

    return retry(_read, f"read {url}")


def read_text(url: str) -> str:
    return read_bytes(url).decode("utf-8")


def exists(url: str) -> bool:
    fs, path = get_fs(url)
    invalidate(fs, path)
    return bool(retry(lambda: fs.exists(path), f"exists {url}"))


def open_read(url: str) -> IO[bytes]:
    """A streaming binary reader with one large readahead buffer."""
    fs, path = get_fs(url)
    return retry(lambda: fs.open(path, "rb", block_size=READ_BLOCK_SIZE, cache_type="readahead"),
                 f"open {url}")


def list_names(url: str) -> list[str]:
    """Names (basenames) directly under a folder URL, freshly listed; [] if it does not exist."""
    fs, path = get_fs(url)
    invalidate(fs)
    try:
        found = retry(lambda: fs.ls(path, detail=False), f"list {url}")
    except FileNotFoundError:
        return []
    return sorted(posixpath.basename(p.rstrip("/")) for p in found)


def expand_glob(pattern: str) -> list[str]:
    """Sorted URLs matching a glob (or the URL itself if it has no wildcard)."""
    fs, path = get_fs(pattern)
    invalidate(fs)
    if any(c in path for c in "*?["):
        found = retry(lambda: fs.glob(path), f"glob {pattern}")
    else:
        found = [path] if retry(lambda: fs.exists(path), f"exists {pattern}") else []
        if not found:
            raise_if_unreachable(fs, path, pattern)
        if found and retry(lambda: fs.isdir(path), f"isdir {pattern}"):
            found = [p for p in retry(lambda: fs.find(path), f"find {pattern}")]
    return sorted(full_url(fs, p) for p in found)



def raise_if_unreachable(fs: fsspec.AbstractFileSystem, path: str, url: str) -> None:
    """After ``exists`` said no: raise when an HTTP(S) server could not be connected to at all.

    fsspec's HTTP ``exists`` answers False for any failure and its ``info`` raises
    FileNotFoundError for any, so "no such file" also meant "no network" (the failure is that
    error's cause). Other filesystems raise their connection errors themselves: nothing to do."""
    if protocol_of(fs) not in ("http", "https"):
        return
    try:
        fs.info(path)
    except FileNotFoundError as e:
        if not_connected(e):
            err = ConnectionError(f"cannot connect to the server of {url}")
            setattr(err, OPERATION_ATTR, f"exists {url}")
            raise err from e


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_url(url: str) -> tuple[str, int]:
    """(sha256 hex, size) of an object, streamed."""
    def _hash() -> tuple[str, int]:
        h = hashlib.sha256()
        n = 0
        with open_read(url) as f:
            while chunk := f.read(READ_BLOCK_SIZE):
                h.update(chunk)
                n += len(chunk)
        return h.hexdigest(), n

    return retry(_hash, f"hash {url}")


@contextmanager
def local_copy(url: str) -> Iterator[str]:
    """A local file path holding the object's bytes (for libraries that need a path)."""
    import tempfile

    fs, path = get_fs(url)
    if protocol_of(fs) in ("file", "local"):
        yield path
        return
    with tempfile.TemporaryDirectory() as d:
        local = os.path.join(d, posixpath.basename(path))
        with open(local, "wb") as f:
            f.write(read_bytes(url))
        yield local
