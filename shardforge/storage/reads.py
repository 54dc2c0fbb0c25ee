"""Reads with a readahead cache, listings, globs and content hashes."""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

import fsspec

from schemas.errors import UserError
from shardforge.storage.retry import (
    DENIED,
    OPERATION_ATTR,
    READ_BLOCK_SIZE,
    access_denied,
    invalidate,
    not_connected,
    retry,
)
from shardforge.storage.urls import full_url, get_fs, is_glob, is_local_fs, protocol_of

# ---------------------------------------------------------------- reads

def read_bytes(url: str) -> bytes:
    fs, path = get_fs(url)

    def _read() -> bytes:
        with fs.open(path, "rb", block_size=READ_BLOCK_SIZE, cache_type="readahead") as f:
            return f.read()

    with _denied_is_not_missing(url):
        return retry(_read, f"read {url}")


@contextmanager
def _denied_is_not_missing(url: str) -> Iterator[None]:
    """fsspec's HTTP filesystem raises FileNotFoundError for a 401 / 403 too: AccessDenied instead, so
    that "wrong password" is not taken for "no such file" (a missing manifest, config, checkpoint)."""
    try:
        yield
    except FileNotFoundError as e:
        denied = access_denied(e)
        if denied is None:
            raise
        raise AccessDenied(denied_message(denied[0], url)) from None


def read_text(url: str) -> str:
    return read_bytes(url).decode("utf-8")


def exists(url: str) -> bool:
    """Whether url names an object; raises when an HTTP(S) server cannot be reached or refuses the
    credentials (fsspec's HTTP ``exists`` answers False for those too, see raise_if_unreachable)."""
    fs, path = get_fs(url)
    invalidate(fs, path)
    found = bool(retry(lambda: fs.exists(path), f"exists {url}"))
    if not found:
        raise_if_unreachable(fs, path, url)
    return found


def open_read(url: str) -> IO[bytes]:
    """A streaming binary reader with one large readahead buffer.

    Over HTTP(S) it reads to the end from a server that ignores range requests too (``RangeFallback``).
    """
    fs, path = get_fs(url)
    with _denied_is_not_missing(url):
        f = retry(lambda: fs.open(path, "rb", block_size=READ_BLOCK_SIZE, cache_type="readahead"), f"open {url}")
    if protocol_of(fs) in ("http", "https"):
        return RangeFallback(f, lambda: retry(lambda: fs.open(path, "rb", block_size=0), f"open {url}"))  # type: ignore[return-value]
    return f


class RangeFallback:
    """An HTTP file that goes on as one streamed GET once the server turns out to ignore range requests.

    fsspec's HTTP file reads by ranges and, from a server that answers a range with the whole body,
    can read only its first block (``ValueError: ... doesn't appear to support range requests``). Then
    the file is opened again as a stream, read up to where the reader was, and read on from there:
    front-to-back readers (the trainer's shard reads, ``inspect``) work from any plain HTTP server.
    """

    def __init__(self, f: IO[bytes], reopen_streaming):
        self._f = f
        self._reopen = reopen_streaming
        self._streaming = False

    def read(self, n: int = -1) -> bytes:
        try:
            return self._f.read(n)
        except ValueError as e:
            if self._streaming or "range requests" not in str(e):
                raise
        pos = self._f.tell()
        self._f.close()
        self._f, self._streaming = self._reopen(), True
        while pos > 0:  # skip what was already read (a stream cannot seek)
            skipped = len(self._f.read(min(pos, READ_BLOCK_SIZE)))
            if not skipped:
                break
            pos -= skipped
        return self._f.read(n)

    def seek(self, pos: int, whence: int = 0) -> int:
        if self._streaming and whence == 0 and pos >= self._f.tell():
            while self._f.tell() < pos and self._f.read(min(pos - self._f.tell(), READ_BLOCK_SIZE)):
                pass
            return self._f.tell()
        return self._f.seek(pos, whence)

    def __getattr__(self, name: str):
        return getattr(self._f, name)

    def __enter__(self) -> RangeFallback:
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()

    def __iter__(self):
        return iter(self._f)


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
    if is_glob(path):
        found = retry(lambda: fs.glob(path), f"glob {pattern}")
    else:
        found = [path] if retry(lambda: fs.exists(path), f"exists {pattern}") else []
        if not found:
            raise_if_unreachable(fs, path, pattern)
        if found and retry(lambda: fs.isdir(path), f"isdir {pattern}"):
            found = [p for p in retry(lambda: fs.find(path), f"find {pattern}")]
    return sorted(full_url(fs, p) for p in found)



def raise_if_unreachable(fs: fsspec.AbstractFileSystem, path: str, url: str) -> None:
    """After ``exists`` said no: raise when an HTTP(S) server could not be connected to at all, or
    refused the credentials (401 / 403: AccessDenied).

    fsspec's HTTP ``exists`` answers False for any failure and its ``info`` raises
    FileNotFoundError for any, so "no such file" also meant "no network" or "wrong password"
    (the failure is that error's cause). Other filesystems raise those errors themselves."""
    if protocol_of(fs) not in ("http", "https"):
        return
    try:
        fs.info(path)
    except FileNotFoundError as e:
        if not_connected(e):
            err = ConnectionError(f"cannot connect to the server of {url}")
            setattr(err, OPERATION_ATTR, f"exists {url}")
            raise err from e
        denied = access_denied(e)
        if denied is not None:
            raise AccessDenied(denied_message(denied[0], url)) from None


class AccessDenied(UserError):
    """A store or web server refused the credentials given for a URL (HTTP 401 / 403)."""


def denied_message(status: int, url: str) -> str:
    """The one line for a 401 / 403 on ``url`` (printed redacted, as every message is)."""
    return (f"{url or 'the server'} answered {status} {DENIED[status]}: "
            + ("no credentials, or wrong ones" if status == 401 else "these credentials may not read it")
            + "; an http(s) server's go in the URL (user:password@ before the host), those of gs:// and "
              "s3:// in the environment (GOOGLE_APPLICATION_CREDENTIALS; AWS_ACCESS_KEY_ID / "
              "AWS_SECRET_ACCESS_KEY or AWS_PROFILE)")


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
    if is_local_fs(fs):
        yield path
        return
    with tempfile.TemporaryDirectory() as d:
        local = os.path.join(d, posixpath.basename(path))
        with open(local, "wb") as f:
            f.write(read_bytes(url))
        yield local
