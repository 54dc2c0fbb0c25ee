"""Object-storage helpers over fsspec, shared by the data job and the trainer.

One place for: URL joining, retrying transient object-store errors with
backoff, atomic (all-or-nothing) writes, and reads with a readahead cache
(gcsfs's default cache issues many small range GETs per shard).
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any, TypeVar

import fsspec
from fsspec.core import url_to_fs

from schemas.errors import UserError

log = logging.getLogger(__name__)
T = TypeVar("T")

READ_BLOCK_SIZE = 8 * 1024 * 1024
RETRY_ATTEMPTS = int(os.environ.get("SHARDFORGE_RETRY_ATTEMPTS", "6"))
RETRY_BASE_DELAY = float(os.environ.get("SHARDFORGE_RETRY_BASE_DELAY", "0.2"))
TMP_PREFIX = "."
TMP_SUFFIX = ".tmp"


def join(url: str, *parts: str) -> str:
    """Join URL path parts with '/', keeping the scheme (gs://b/x + y -> gs://b/x/y)."""
    out = url.rstrip("/")
    for p in parts:
        out = f"{out}/{p.strip('/')}"
    return out


def get_fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, path) for a URL, with a clear error for unknown schemes."""
    try:
        return url_to_fs(url)
    except (ValueError, ImportError) as e:
        raise UserError(f"cannot open {url!r}: {e}") from e


def protocol_of(fs: fsspec.AbstractFileSystem) -> str:
    p = fs.protocol
    return p[0] if isinstance(p, (tuple, list)) else p


def full_url(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """Inverse of get_fs: a URL that get_fs maps back to (fs, path)."""
    proto = protocol_of(fs)
    if proto in ("file", "local"):
        return path
    return fs.unstrip_protocol(path)


# ---------------------------------------------------------------- retries

_TRANSIENT_NAMES = {
    "ClientConnectorError",
    "ServerDisconnectedError",
    "ClientOSError",
    "ClientPayloadError",
    "ServerTimeoutError",
    "ConnectionResetError",
    "RemoteDisconnected",
    "IncompleteRead",
    "ProtocolError",
    "TransferEncodingError",
    "ContentLengthError",
}


def is_transient(exc: BaseException) -> bool:
    """True for errors worth retrying: 5xx / 429, timeouts, dropped connections."""
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return False
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    code = getattr(exc, "code", None) or getattr(exc, "status", None)
    if isinstance(code, int) and (code >= 500 or code in (408, 429)):
        return True
    if type(exc).__name__ in _TRANSIENT_NAMES:
        return True
    text = str(exc)
    if any(s in text for s in ("500 ", "502", "503", "504", "Internal Server Error", "Service Unavailable",
                              "SlowDown", "InternalError", "reset by peer", "timed out")):
        return True
    cause = exc.__cause__ or exc.__context__
    return cause is not None and cause is not exc and is_transient(cause)


def retry(fn: Callable[[], T], what: str, attempts: int | None = None, on_retry: Callable[[], None] | None = None) -> T:
    """Call fn(), retrying transient errors with jittered exponential backoff."""
    attempts = attempts or RETRY_ATTEMPTS
    for i in range(attempts):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - classified below
            if i == attempts - 1 or not is_transient(e):
                raise
            delay = RETRY_BASE_DELAY * (2**i) * (0.5 + random.random())
            log.warning("transient error on %s (%s: %s); retry %d/%d in %.2fs",
                        what, type(e).__name__, e, i + 1, attempts - 1, delay)
            if on_retry is not None:
                on_retry()
            time.sleep(delay)
    raise AssertionError("unreachable")


def invalidate(fs: fsspec.AbstractFileSystem, path: str | None = None) -> None:
    try:
        fs.invalidate_cache(path)
    except Exception:  # noqa: BLE001 - best effort; some filesystems lack it
        pass


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


def expand_glob(pattern: str) -> list[str]:
    """Sorted URLs matching a glob (or the URL itself if it has no wildcard)."""
    fs, path = get_fs(pattern)
    invalidate(fs)
    if any(c in path for c in "*?["):
        found = retry(lambda: fs.glob(path), f"glob {pattern}")
    else:
        found = [path] if retry(lambda: fs.exists(path), f"exists {pattern}") else []
        if found and retry(lambda: fs.isdir(path), f"isdir {pattern}"):
            found = [p for p in retry(lambda: fs.find(path), f"find {pattern}")]
    return sorted(full_url(fs, p) for p in found)


# ---------------------------------------------------------------- writes

def tmp_name(path: str) -> str:
    """A unique hidden sibling of path: '.name.<uuid>.tmp' (never listed by a manifest)."""
    parent, base = posixpath.split(path)
    return posixpath.join(parent, f"{TMP_PREFIX}{base}.{uuid.uuid4().hex}{TMP_SUFFIX}")


def is_tmp_name(path: str) -> bool:
    base = posixpath.basename(path)
    return base.startswith(TMP_PREFIX) and base.endswith(TMP_SUFFIX)


def write_bytes_atomic(url: str, data: bytes) -> None:
    """Write data so that readers see either nothing or the complete object.

    The bytes go to a unique temporary name next to the target and are then
    moved into place (rename on local disks; server-side copy on object
    stores, where a single-request PUT is itself atomic). Retried as a whole.
    """
    fs, path = get_fs(url)
    parent = posixpath.dirname(path)
    tmp = tmp_name(path)

    def _write() -> None:
        if protocol_of(fs) in ("file", "local"):
            os.makedirs(parent or ".", exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            return
        fs.pipe_file(tmp, data)
        try:
            fs.mv(tmp, path)
        finally:
            invalidate(fs, parent)
            if fs.exists(tmp):
                fs.rm(tmp)

    retry(_write, f"write {url}")
    invalidate(fs, parent)


class _HashingWriter:
    """File wrapper that hashes and counts what is written through it."""

    def __init__(self, f: IO[bytes]):
        self._f = f
        self._h = hashlib.sha256()
        self.bytes = 0

    def write(self, data: bytes) -> int:
        self._h.update(data)
        self.bytes += len(data)
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()

    def tell(self) -> int:
        return self.bytes

    @property
    def sha256(self) -> str:
        return self._h.hexdigest()


def write_stream_atomic(url: str, produce: Callable[[IO[bytes]], None]) -> tuple[str, int]:
    """Stream produce(f)'s output to url atomically; returns (sha256, bytes).

    Large objects (shards) are streamed to a unique temporary name, never held
    in memory, and moved into place only when complete, so a killed job leaves
    no partial object under the final name. Retried as a whole on transient
    errors (produce must be repeatable: it is a pure function of its input).
    """
    fs, path = get_fs(url)
    parent = posixpath.dirname(path)
    local = protocol_of(fs) in ("file", "local")

    def _write() -> tuple[str, int]:
        tmp = tmp_name(path)
        if local:
            os.makedirs(parent or ".", exist_ok=True)
        try:
            with fs.open(tmp, "wb") as f:
                w = _HashingWriter(f)
                produce(w)  # type: ignore[arg-type]
            if local:
                os.replace(tmp, path)
            else:
                fs.mv(tmp, path)
        finally:
            invalidate(fs, parent)
            if fs.exists(tmp):
                fs.rm(tmp)
        return w.sha256, w.bytes

    result = retry(_write, f"write {url}")
    invalidate(fs, parent)
    return result


def write_text_atomic(url: str, text: str) -> None:
    write_bytes_atomic(url, text.encode("utf-8"))


def makedirs(url: str) -> None:
    fs, path = get_fs(url)
    if protocol_of(fs) in ("file", "local"):
        os.makedirs(path, exist_ok=True)


def remove_tree(url: str) -> None:
    fs, path = get_fs(url)
    invalidate(fs)
    if fs.exists(path):
        fs.rm(path, recursive=True)


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


def redact_url(url: str) -> str:
    """Drop user:password@ and credential-looking query parameters from a URL."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    if "://" not in url:
        return url
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                       if not any(b in k.lower() for b in ("token", "secret", "key", "sig", "password", "credential"))])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def storage_options_safe(opts: dict[str, Any]) -> dict[str, Any]:
    """Drop anything that looks like a credential before recording options."""
    bad = ("token", "secret", "key", "password", "credential")
    return {k: v for k, v in opts.items() if not any(b in k.lower() for b in bad)}
