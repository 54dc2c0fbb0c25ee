"""Object-storage helpers over fsspec, shared by the data job and the trainer.

One place for: URL joining, retrying transient object-store errors with
backoff, atomic (all-or-nothing) writes, and reads with a readahead cache
(gcsfs's default cache issues many small range GETs per shard).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import posixpath
import random
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import IO, Any, Literal, TypeVar

import fsspec
from fsspec.core import url_to_fs

from schemas.errors import UserError

log = logging.getLogger(__name__)
T = TypeVar("T")

READ_BLOCK_SIZE = 8 * 1024 * 1024
RETRY_ATTEMPTS = int(os.environ.get("SHARDFORGE_RETRY_ATTEMPTS", "6"))
RETRY_BASE_DELAY = float(os.environ.get("SHARDFORGE_RETRY_BASE_DELAY", "0.2"))
RETRY_MAX_DELAY = float(os.environ.get("SHARDFORGE_RETRY_MAX_DELAY", "30"))
TMP_PREFIX = "."
TMP_SUFFIX = ".tmp"
# A temporary is stale (safe to delete) when no writer can still be using it: on local
# disk, no process holds its lock and it is older than this (the lock is taken right
# after the file is created); on object stores (where a temporary is visible only between
# its upload and its copy to the final name) when it is older than the object grace.
STALE_TMP_LOCAL_S = float(os.environ.get("SHARDFORGE_STALE_TMP_LOCAL_S", "10"))
STALE_TMP_OBJECT_S = float(os.environ.get("SHARDFORGE_STALE_TMP_OBJECT_S", "3600"))


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

# Exception class names (anywhere in the MRO) that mean "the connection or the
# server hiccupped": aiohttp (gcsfs), requests (gcsfs auth / 502 ProxyError),
# botocore (s3fs), http.client and urllib3. Matched by name so that this module
# needs none of those libraries installed.
_TRANSIENT_NAMES = frozenset({
    # aiohttp
    "ClientConnectionError", "ClientConnectorError", "ServerDisconnectedError", "ClientOSError",
    "ClientPayloadError", "ServerTimeoutError", "ConnectionTimeoutError", "SocketTimeoutError",
    # requests / urllib3 / http.client
    "ProxyError", "ChunkedEncodingError", "ConnectTimeout", "ReadTimeout", "Timeout",
    "ProtocolError", "RemoteDisconnected", "IncompleteRead", "ReadTimeoutError", "NewConnectionError",
    # botocore
    "EndpointConnectionError", "ConnectionClosedError", "ConnectTimeoutError", "HTTPClientError",
    "ResponseStreamingError",
    # fsspec
    "FSTimeoutError",
    # aiohttp body framing
    "TransferEncodingError", "ContentLengthError",
})
# S3 / GCS error codes (botocore ClientError.response["Error"]["Code"]) worth retrying.
_TRANSIENT_CODES = frozenset({"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout",
                              "RequestTimeTooSkewed", "Throttling", "ThrottlingException", "503", "500"})
# errno values of connection-level failures, and the ones s3fs maps 5xx / SlowDown to.
_TRANSIENT_ERRNOS = frozenset(getattr(errno, n) for n in (
    "ETIMEDOUT", "ECONNRESET", "ECONNABORTED", "ECONNREFUSED", "EPIPE", "EAGAIN", "EBUSY", "EREMOTEIO",
    "ENETUNREACH", "EHOSTUNREACH") if hasattr(errno, n))
# Only used for errors that carry nothing structured (e.g. a bare RuntimeError
# with the server's reply as text). Word boundaries keep "train-000503.tar" out.
_TRANSIENT_TEXT = re.compile(r"\b(500|502|503|504)\b|Internal Server Error|Service Unavailable|SlowDown|"
                             r"reset by peer|timed out|Connection aborted")


class IncompleteWriteError(OSError):
    """An object that landed with the wrong size: retried like any transient error."""


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an object-store error carries (gcsfs .code, aiohttp .status, botocore .response)."""
    for attr in ("code", "status", "status_code"):
        v = getattr(exc, attr, None)
        if isinstance(v, int) and 100 <= v < 600:
            return v
    resp = getattr(exc, "response", None)
    if isinstance(resp, dict):
        v = resp.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(v, int):
            return v
    return None


def _is_transient_one(exc: BaseException) -> bool | None:
    """True / False when exc alone decides; None to look at its cause."""
    if isinstance(exc, (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
                        NotADirectoryError)):
        return False
    if isinstance(exc, (TimeoutError, ConnectionError, IncompleteWriteError)):
        return True
    status = http_status(exc)
    if status is not None:
        # 501 Not Implemented is permanent (the emulator answers it for moveTo).
        return (status >= 500 and status != 501) or status in (408, 429)
    resp = getattr(exc, "response", None)
    if isinstance(resp, dict) and resp.get("Error", {}).get("Code") in _TRANSIENT_CODES:
        return True
    if any(t.__name__ in _TRANSIENT_NAMES for t in type(exc).__mro__):
        return True
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
        return True
    if not isinstance(exc, (ValueError, TypeError, KeyError)) and _TRANSIENT_TEXT.search(str(exc)):
        return True
    return None


def is_transient(exc: BaseException) -> bool:
    """True for errors worth retrying: 5xx / 408 / 429, timeouts, dropped connections.

    Looks through the chain of causes too: s3fs re-raises botocore errors as
    plain OSError with the original as ``__cause__``.
    """
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        verdict = _is_transient_one(e)
        if verdict is not None:
            return verdict
        e = e.__cause__ or e.__context__
    return False


def is_transient_or_lost(exc: BaseException) -> bool:
    """is_transient, or a FileNotFoundError (a retried request whose first attempt already landed)."""
    return is_transient(exc) or isinstance(exc, FileNotFoundError)


def retry(fn: Callable[[], T], what: str, attempts: int | None = None, on_retry: Callable[[], None] | None = None) -> T:
    """Call fn(), retrying transient errors with jittered exponential backoff.

    gcsfs and s3fs already retry single HTTP requests; this outer loop retries
    whole operations (an upload + move, a full read) after their retries gave
    up, and covers errors they do not retry (a stream cut mid-body, a 502).
    """
    attempts = attempts or RETRY_ATTEMPTS
    for i in range(attempts):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - classified below
            if i == attempts - 1 or not is_transient(e):
                raise
            delay = min(RETRY_MAX_DELAY, RETRY_BASE_DELAY * (2**i)) * (0.5 + random.random())
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


_OBJECT_STORES = ("gs", "gcs", "s3", "s3a")


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return protocol_of(fs) in ("file", "local")


def _remove_quietly(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """Best-effort removal of a temporary object (a leftover is hidden and harmless)."""
    def _rm() -> None:
        try:
            fs.rm_file(path)
        except FileNotFoundError:
            pass  # never written, or a retried DELETE whose first attempt landed

    try:
        retry(_rm, f"remove {path}")
    except Exception as e:  # noqa: BLE001 - cleanup must not mask the real outcome
        log.warning("could not remove temporary %s (%s); it is hidden and safe to delete", path, e)


def _fsync_dir(path: str) -> None:
    """Persist a rename: fsync the directory entry (POSIX; a no-op where unsupported)."""
    try:
        fd = os.open(path or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _holds(fs: fsspec.AbstractFileSystem, path: str, size: int, md5: bytes | None) -> bool:
    """Does the store hold exactly our bytes at path? Size, plus the store's MD5 where it reports one."""
    invalidate(fs, posixpath.dirname(path))
    try:
        info = retry(lambda: fs.info(path), f"info {path}")
    except FileNotFoundError:
        return False
    if info.get("size") != size:
        return False
    if md5 is not None:
        if isinstance(info.get("md5Hash"), str):  # GCS: base64 of the MD5
            return base64.b64decode(info["md5Hash"]) == md5
        # S3 single-part ETags are the hex MD5, except under SSE-KMS / SSE-C encryption
        # (and multipart ETags never are): then the size check above is all we have.
        sse = str(info.get("ServerSideEncryption") or "").lower()
        encrypted = sse.startswith("aws:kms") or bool(info.get("SSECustomerAlgorithm"))
        etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
        if not encrypted and len(etag) == 32 and "-" not in etag:
            return etag == md5.hex()
    return True


def _commit(fs: fsspec.AbstractFileSystem, tmp: str, path: str, size: int, md5: bytes | None) -> None:
    """Move a complete temporary object to its final name, then check it landed whole.

    Object stores have no rename: GCS rewrite / S3 CopyObject create the target
    in one server-side step (readers see nothing or everything), then the
    temporary is deleted. We call cp_file rather than gcsfs's mv because mv
    first tries the moveTo API, which emulators (and some buckets) answer with
    501, which gcsfs retries for ~30 s before falling back to the same copy.
    """
    if protocol_of(fs) in _OBJECT_STORES:
        retry(lambda: fs.cp_file(tmp, path), f"copy {tmp} -> {path}")
        _remove_quietly(fs, tmp)
    else:
        fs.mv(tmp, path)
    if not _holds(fs, path, size, md5):
        raise IncompleteWriteError(f"{full_url(fs, path)}: the stored object is not the {size} bytes written")


def write_bytes_atomic(url: str, data: bytes) -> None:
    """Write data so that readers see either nothing or the complete object.

    The bytes go to a unique temporary name next to the target and are then
    moved into place (fsync + rename on local disks; server-side copy on object
    stores). Retried as a whole on transient errors.
    """
    write_stream_atomic(url, lambda f: f.write(data))


class _HashingWriter:
    """File wrapper that hashes (sha256 for the manifest, md5 to check what the store holds) and counts."""

    def __init__(self, f: IO[bytes]):
        self._f = f
        self._h = hashlib.sha256()
        self._md5 = hashlib.md5(usedforsecurity=False)
        self.bytes = 0

    def write(self, data: bytes) -> int:
        self._h.update(data)
        self._md5.update(data)
        self.bytes += len(data)
        self._f.write(data)
        return len(data)

    def flush(self) -> None:
        self._f.flush()

    def tell(self) -> int:
        return self.bytes

    @property
    def sha256(self) -> str:
        return self._h.hexdigest()

    @property
    def md5(self) -> bytes:
        return self._md5.digest()


def write_stream_atomic(url: str, produce: Callable[[IO[bytes]], None]) -> tuple[str, int]:
    """Stream produce(f)'s output to url atomically; returns (sha256, bytes).

    Large objects (shards) are streamed to a unique temporary name, never held
    in memory, and moved into place only when complete, so a killed job leaves
    no partial object under the final name (at most a hidden '.name.<uuid>.tmp'
    sibling, or on object stores an uncommitted upload that never becomes an
    object). Retried as a whole on transient errors (produce must be
    repeatable: it is a pure function of its input).
    """
    fs, path = get_fs(url)
    parent = posixpath.dirname(path)
    local = _is_local(fs)

    def _write() -> tuple[str, int]:
        tmp = tmp_name(path)
        try:
            if local:
                os.makedirs(parent or ".", exist_ok=True)
                with _open_locked_tmp(tmp) as raw:
                    w = _HashingWriter(raw)
                    produce(w)  # type: ignore[arg-type]
                    raw.flush()
                    os.fsync(raw.fileno())  # data on disk before the rename publishes it
                os.replace(tmp, path)
                _fsync_dir(parent)
            else:
                produced = False
                try:
                    with fs.open(tmp, "wb") as f:
                        w = _HashingWriter(f)
                        produce(w)  # type: ignore[arg-type]
                        produced = True
                except Exception as e:
                    # The reply to an upload's last request can be lost after the
                    # store committed it (a retried final chunk then gets 404 from
                    # the finished session). If every byte is there, go on.
                    if not (produced and is_transient_or_lost(e) and _holds(fs, tmp, w.bytes, w.md5)):
                        raise
                    log.warning("upload of %s reported %s: %s, but the object is complete; continuing",
                                full_url(fs, tmp), type(e).__name__, e)
                _commit(fs, tmp, path, w.bytes, w.md5)
        except BaseException:
            # A failed or interrupted attempt: drop its temporary (a partial
            # object under a hidden name; fsspec commits a half-written file
            # when its `with` block exits on an exception).
            if local:
                with contextlib.suppress(OSError):
                    os.remove(tmp)
            else:
                _remove_quietly(fs, tmp)
            raise
        return w.sha256, w.bytes

    result = retry(_write, f"write {url}")
    invalidate(fs, parent)
    return result


def write_text_atomic(url: str, text: str) -> None:
    write_bytes_atomic(url, text.encode("utf-8"))


def _open_locked_tmp(tmp: str) -> IO[bytes]:
    """Create a local temporary exclusively and hold an flock on it while it is written.

    The lock tells a cleaner (``tmp_is_stale``) that a live process still owns the
    file; it goes away with the process, so a killed writer's leftovers are provably
    stale.
    """
    f = open(tmp, "xb")  # noqa: SIM115 - returned to the caller's with-block
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pass  # a filesystem without flock: staleness then rests on the age alone
    return f


CreateOutcome = Literal["created", "identical", "taken"]


def create_if_absent(url: str, data: bytes) -> CreateOutcome:
    """Create the object at url with data only if no object has that name: the commit primitive.

    One atomic conditional create, so that of several writers exactly one wins:
    local disk: the bytes go to a complete, fsynced temporary which is hard-linked to
    the name (``link`` fails if the name exists; readers never see a partial file);
    GCS: an upload with ``ifGenerationMatch=0``; S3: ``PutObject`` with
    ``If-None-Match: *``; other filesystems: fsspec's ``mode="create"`` (an
    exists-check, not atomic: not for concurrent writers).

    Returns "created"; "identical" when the name already holds exactly these bytes
    (an identical rerun, or a retried request whose first attempt landed); "taken"
    when it holds other bytes (another writer won).
    """
    fs, path = get_fs(url)
    parent = posixpath.dirname(path)

    def _create() -> None:
        if _is_local(fs):
            os.makedirs(parent or ".", exist_ok=True)
            tmp = tmp_name(path)
            try:
                with _open_locked_tmp(tmp) as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.link(tmp, path)  # FileExistsError if another writer got there first
                _fsync_dir(parent)
            finally:
                with contextlib.suppress(OSError):
                    os.remove(tmp)
        else:
            fs.pipe_file(path, data, mode="create")

    try:
        retry(_create, f"create {url}")
    except FileExistsError:
        invalidate(fs, parent)
        try:
            current = read_bytes(url)
        except FileNotFoundError:  # created and removed again between the two calls: treat as taken
            return "taken"
        return "identical" if current == data else "taken"
    invalidate(fs, parent)
    md5 = hashlib.md5(data, usedforsecurity=False).digest()
    if not _holds(fs, path, len(data), md5):
        raise IncompleteWriteError(f"{url}: the stored object is not the {len(data)} bytes written")
    return "created"


def info_mtime(info: dict[str, Any]) -> float | None:
    """Modification time (epoch s) from an fsspec info/listing entry, whatever the store calls it."""
    for k in ("mtime", "updated", "LastModified", "last_modified", "timeCreated", "created"):
        v = info.get(k)
        if v is None:
            continue
        if isinstance(v, (int, float)):
            return float(v)
        if isinstance(v, datetime):
            return v.timestamp()
        if isinstance(v, str):
            try:
                return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def tmp_is_stale(fs: fsspec.AbstractFileSystem, path: str, info: dict[str, Any] | None = None) -> bool:
    """Whether a temporary (``is_tmp_name``) can be deleted without hurting a live writer.

    Local disk: nobody holds its lock (the writer's process is gone) and it is older
    than ``STALE_TMP_LOCAL_S``. Object stores: older than ``STALE_TMP_OBJECT_S``.
    """
    now = time.time()
    if _is_local(fs):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return False
        try:
            if now - os.fstat(fd).st_mtime < STALE_TMP_LOCAL_S:
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a live writer holds it
            except OSError:
                pass  # no flock here: the age decides
            return True
        finally:
            os.close(fd)
    mtime = info_mtime(info) if info is not None else None
    return mtime is not None and now - mtime >= STALE_TMP_OBJECT_S


def remove_stale_tmps(url: str, recursive: bool = False,
                      also: Callable[[str], bool] | None = None) -> list[str]:
    """Delete the stale temporaries under a folder URL; returns their names (relative to url).

    ``also(target_name)`` marks temporaries as stale whatever their age (e.g. those
    of a writer that can no longer commit); it gets the final name the temporary
    was for (its basename without the hidden prefix and the '.<uuid>.tmp' suffix).
    """
    fs, path = get_fs(url)
    invalidate(fs)
    try:
        found = retry(lambda: fs.find(path, detail=True) if recursive else fs.ls(path, detail=True),
                      f"list {url}")
    except FileNotFoundError:
        return []
    entries = found.items() if isinstance(found, dict) else ((e["name"], e) for e in found)
    removed = []
    for p, info in sorted(entries):
        base = posixpath.basename(p.rstrip("/"))
        if info.get("type", "file") != "file" or not is_tmp_name(base):
            continue
        target = base[len(TMP_PREFIX):-len(TMP_SUFFIX)].rsplit(".", 1)[0]
        if (also is not None and also(target)) or tmp_is_stale(fs, p, info):
            _remove_quietly(fs, p)
            removed.append(posixpath.relpath(p, path))
    if removed:
        invalidate(fs)
    return removed


def remove_object(url: str) -> bool:
    """Delete one object (retried); False if it was not there."""
    fs, path = get_fs(url)

    def _rm() -> bool:
        try:
            fs.rm_file(path)
            return True
        except FileNotFoundError:
            return False

    return retry(_rm, f"remove {url}")


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


def scheme_path(url: str) -> tuple[str, str]:
    """("gs", "bucket/a/b") for gs://bucket/a/b; ("", "/abs/a/b") for a local path."""
    if "://" in url:
        scheme, path = url.split("://", 1)
        return scheme, path
    if url.startswith("file:"):
        return "", os.path.abspath(url[len("file:"):])
    return "", os.path.abspath(url)


def is_within(url: str, folder: str) -> bool:
    """Whether url is folder itself or under it (local paths compared as absolute paths)."""
    (us, up), (fs, fp) = scheme_path(url), scheme_path(folder)
    up, fp = up.rstrip("/"), fp.rstrip("/")
    return us == fs and (up == fp or up.startswith(fp + "/"))


def relative_url(base: str, url: str) -> str:
    """`url` as a path relative to the folder `base` when both are on the same store, else `url` itself.

    What a file records about its siblings (e.g. an index listing parts in other
    folders of the same corpus), so the corpus can be moved or copied as a whole.
    """
    bs, bp = scheme_path(base)
    us, up = scheme_path(url)
    if bs != us or (bs and bp.split("/", 1)[0] != up.split("/", 1)[0]):
        return url
    return posixpath.relpath(up, bp)


def resolve_url(base: str, ref: str) -> str:
    """Inverse of relative_url: `ref` (relative to the folder `base`, or a full URL/absolute path) as a URL."""
    if "://" in ref or ref.startswith("/"):
        return ref
    if "://" in base:
        scheme, path = base.split("://", 1)
        return f"{scheme}://{posixpath.normpath(posixpath.join(path, ref))}"
    return posixpath.normpath(posixpath.join(base, ref))
