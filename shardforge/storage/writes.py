"""Atomic (all-or-nothing) writes, conditional creates and stale-temporary cleanup."""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import posixpath
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import IO, Any, Literal

import fsspec

from schemas.errors import UserError
from shardforge.storage.reads import read_bytes
from shardforge.storage.retry import (
    READ_BLOCK_SIZE,
    IncompleteWriteError,
    invalidate,
    is_transient_or_lost,
    retry,
)
from shardforge.storage.urls import full_url, get_fs, is_local_fs, protocol_of, redact_url

log = logging.getLogger(__name__)

TMP_PREFIX = "."
TMP_SUFFIX = ".tmp"
# A temporary is stale (safe to delete) when no writer can still be using it: on local
# disk, no process holds its lock and it is older than this (the lock is taken right
# after the file is created); on object stores (where a temporary is visible only between
# its upload and its copy to the final name) when it is older than the object grace.
STALE_TMP_LOCAL_S = float(os.environ.get("SHARDFORGE_STALE_TMP_LOCAL_S", "10"))
STALE_TMP_OBJECT_S = float(os.environ.get("SHARDFORGE_STALE_TMP_OBJECT_S", "3600"))

# ---------------------------------------------------------------- writes

class TemporaryRemoved(FileNotFoundError):
    """A writer's own temporary vanished before it was published.

    Only another process removes it: a writer that committed this corpus sweeps the
    temporaries of attempts that can no longer commit (pipelines.corpus.commit). The
    writer that gets this has lost; it says so instead of failing with a trace.
    """


def unless_swept(write: Callable[[], object], what: str) -> bool:
    """Run one in-pipeline write of an attempt; False (and one warning) if its temporary was swept.

    A temporary only vanishes under its writer when another writer committed this
    version and its cleanup swept this attempt (pipelines.corpus.commit, step 4): this
    attempt can no longer commit, since its own conditional create loses. So the
    step does not raise: a runner would log the error with a traceback and retry the
    bundle. The driver says why in one line (``pipelines.corpus.commit.raise_if_lost``).
    """
    try:
        write()
    except TemporaryRemoved as e:
        logging.getLogger("shardforge.commit").warning("%s lost: %s", what, e)
        return False
    return True


def tmp_name(path: str) -> str:
    """A unique hidden sibling of path: '.name.<uuid>.tmp' (never listed by a manifest)."""
    parent, base = posixpath.split(path)
    return posixpath.join(parent, f"{TMP_PREFIX}{base}.{uuid.uuid4().hex}{TMP_SUFFIX}")


def is_tmp_name(path: str) -> bool:
    base = posixpath.basename(path)
    return base.startswith(TMP_PREFIX) and base.endswith(TMP_SUFFIX)


_OBJECT_STORES = ("gs", "gcs", "s3", "s3a")


def _remove_quietly(fs: fsspec.AbstractFileSystem, path: str, attempts: int | None = None) -> None:
    """Best-effort removal of a temporary object (a leftover is hidden and harmless).

    ``attempts=1`` where the write is failing anyway: the client's own retries only, not ours
    inside every try of the write (a stale temporary is swept later: ``remove_stale_tmps``)."""
    def _rm() -> None:
        try:
            fs.rm_file(path)
        except FileNotFoundError:
            pass  # never written, or a retried DELETE whose first attempt landed

    try:
        retry(_rm, f"remove {path}", attempts=attempts)
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


def holds_bytes(fs: fsspec.AbstractFileSystem, path: str, size: int, md5: bytes | None) -> bool:
    """Does the store hold exactly our bytes at path? Size, plus the store's MD5 where it reports one."""
    invalidate(fs, posixpath.dirname(path))
    try:
        info = retry(lambda: fs.info(path), f"info {path}")
    except FileNotFoundError:
        return False
    if info.get("size") != size:
        return False
    stored = _store_md5(info) if md5 is not None else None
    # S3 ETags under SSE-KMS / SSE-C encryption (and multipart ETags) are no MD5: the size is all we have.
    return stored is None or stored == md5


def _commit(fs: fsspec.AbstractFileSystem, tmp: str, path: str, w: _HashingWriter, create: bool = False) -> None:
    """Move a complete temporary object to its final name, then check it landed whole.

    Object stores have no rename: GCS rewrite / S3 CopyObject create the target
    in one server-side step (readers see nothing or everything), then the
    temporary is deleted. We call cp_file rather than gcsfs's mv because mv
    first tries the moveTo API, which emulators (and some buckets) answer with
    501, which gcsfs retries for ~30 s before falling back to the same copy.
    With ``create`` the copy is conditional (``_copy_if_absent``): an existing
    object is never replaced, and one holding other bytes is an ObjectConflict.
    """
    size, md5 = w.bytes, w.md5
    if create and retry(lambda: fs.exists(path), f"stat {path}"):  # also where a store ignores the condition
        _must_hold(fs, path, w)
        _remove_quietly(fs, tmp)
        return
    if protocol_of(fs) in _OBJECT_STORES:
        try:
            retry(lambda: _copy_if_absent(fs, tmp, path, size) if create else fs.cp_file(tmp, path),
                  f"copy {tmp} -> {path}")
        except FileExistsError:  # another writer created it meanwhile, or our retried copy had landed
            _must_hold(fs, path, w)  # checked: the name holds exactly these bytes
            _remove_quietly(fs, tmp)
            return
        _remove_quietly(fs, tmp)
    else:
        fs.mv(tmp, path)  # (create on other filesystems: the exists-check above, not atomic)
    if not holds_bytes(fs, path, size, md5):
        raise IncompleteWriteError(f"{full_url(fs, path)}: the stored object is not the {size} bytes written")


# S3 copies up to 5 GB in one CopyObject, which takes If-None-Match; s3fs copies larger objects
# in parts, whose completion it calls without it: those rest on the exists-check alone.
_S3_ONE_STEP_COPY = 5 * 2**30


def _copy_if_absent(fs: fsspec.AbstractFileSystem, tmp: str, path: str, size: int) -> None:
    """A server-side copy that creates ``path`` only if no object has that name (FileExistsError
    otherwise): GCS rewrite with ``ifGenerationMatch=0``, S3 CopyObject with ``If-None-Match: *``.
    ``size``: the bytes written to ``tmp`` (the writer counted them: no request asks the store)."""
    if protocol_of(fs) in ("gs", "gcs"):
        b1, k1, _ = fs.split_path(tmp)
        b2, k2, _ = fs.split_path(path)
        args = ("POST", "b/{}/o/{}/rewriteTo/b/{}/o/{}", b1, k1, b2, k2)
        out = fs.call(*args, headers={"Content-Type": "application/json"}, json_out=True, ifGenerationMatch=0)
        while out.get("done") is not True:
            out = fs.call(*args, headers={"Content-Type": "application/json"}, json_out=True, ifGenerationMatch=0,
                          rewriteToken=out["rewriteToken"])
        invalidate(fs, posixpath.dirname(path))
    elif size <= _S3_ONE_STEP_COPY:
        fs.cp_file(tmp, path, IfNoneMatch="*")
    else:
        fs.cp_file(tmp, path)


class ObjectConflict(UserError):
    """A create found its name holding other bytes: a written object is never replaced."""


def _must_hold(fs: fsspec.AbstractFileSystem, path: str, w: _HashingWriter) -> None:
    """Return if ``path`` holds exactly the bytes ``w`` wrote (an identical rerun), else ObjectConflict.

    Size, then the store's MD5 where it reports one, else the sha256 of the stored bytes."""
    invalidate(fs, posixpath.dirname(path))
    info = retry(lambda: fs.info(path), f"info {path}")
    same = info.get("size") == w.bytes
    if same:
        md5 = _store_md5(info) if w.has_md5 else None
        if md5 is not None:
            same = md5 == w.md5
        else:
            same = _sha256_of(fs, path) == w.sha256
    if not same:
        raise ObjectConflict(
            f"{redact_url(full_url(fs, path))} already holds other bytes ({info.get('size')} bytes) than this "
            f"write made for it ({w.bytes} bytes): a written object is never replaced. The inputs it was made "
            "from changed since, or another build's objects carry these names; write into a new folder "
            "(or remove this one)")


def _store_md5(info: dict[str, Any]) -> bytes | None:
    """The MD5 of an object's bytes as the store reports it (GCS md5Hash, S3 single-part ETag), or None."""
    if isinstance(info.get("md5Hash"), str):
        return base64.b64decode(info["md5Hash"])
    sse = str(info.get("ServerSideEncryption") or "").lower()
    encrypted = sse.startswith("aws:kms") or bool(info.get("SSECustomerAlgorithm"))
    etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
    if not encrypted and len(etag) == 32 and "-" not in etag:
        return bytes.fromhex(etag)
    return None


def _sha256_of(fs: fsspec.AbstractFileSystem, path: str) -> str:
    def _hash() -> str:
        h = hashlib.sha256()
        with fs.open(path, "rb", block_size=READ_BLOCK_SIZE) as f:
            while chunk := f.read(READ_BLOCK_SIZE):
                h.update(chunk)
        return h.hexdigest()

    return retry(_hash, f"hash {path}")


def write_bytes_atomic(url: str, data: bytes, *, create: bool = False) -> None:
    """Write data so that readers see either nothing or the complete object.

    The bytes go to a unique temporary name next to the target and are then
    moved into place (fsync + rename on local disks; server-side copy on object
    stores). Retried as a whole on transient errors. ``create``: see write_stream_atomic.
    """
    write_stream_atomic(url, lambda f: f.write(data), create=create)


class _HashingWriter:
    """File wrapper that hashes (sha256 for the manifest; with ``md5``, md5 too, to check what an
    object store holds: a local file needs none, and md5 costs more CPU than sha256) and counts."""

    def __init__(self, f: IO[bytes], md5: bool = True):
        self._f = f
        self.has_md5 = md5
        self._h = hashlib.sha256()
        self._md5 = hashlib.md5(usedforsecurity=False) if md5 else None
        self.bytes = 0

    def write(self, data: bytes) -> int:
        self._h.update(data)
        if self._md5 is not None:
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
        if self._md5 is None:
            raise ValueError("this writer was made without md5")
        return self._md5.digest()


def write_stream_atomic(url: str, produce: Callable[[IO[bytes]], None], *, create: bool = False) -> tuple[str, int]:
    """Stream produce(f)'s output to url atomically; returns (sha256, bytes).

    Large objects (shards) are streamed to a unique temporary name, never held
    in memory, and moved into place only when complete, so a killed job leaves
    no partial object under the final name (at most a hidden '.name.<uuid>.tmp'
    sibling, or on object stores an uncommitted upload that never becomes an
    object). Retried as a whole on transient errors (produce must be
    repeatable: it is a pure function of its input).

    ``create``: publish only if no object has the name (local disk: ``link(2)``; GCS: rewrite with
    ``ifGenerationMatch=0``; S3: CopyObject with ``If-None-Match: *``). A name that already holds
    exactly these bytes is success (an identical rerun); one holding other bytes raises
    ObjectConflict and is left as it is. Every object of a corpus version is written so.
    """
    fs, path = get_fs(url)
    parent = posixpath.dirname(path)
    local = is_local_fs(fs)

    def _write() -> tuple[str, int]:
        tmp = tmp_name(path)
        try:
            if local:
                with _named(url), _create_local_tmp(parent, tmp) as raw:
                    w = _HashingWriter(raw, md5=False)
                    produce(w)  # type: ignore[arg-type]
                    raw.flush()
                    os.fsync(raw.fileno())  # data on disk before the rename publishes it
                _publish_local(fs, tmp, path, w, create)
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
                    if not (produced and is_transient_or_lost(e) and holds_bytes(fs, tmp, w.bytes, w.md5)):
                        raise
                    log.warning("upload of %s reported %s: %s, but the object is complete; continuing",
                                full_url(fs, tmp), type(e).__name__, e)
                try:
                    _commit(fs, tmp, path, w, create)
                except FileNotFoundError as e:
                    if not retry(lambda: fs.exists(tmp), f"stat {tmp}"):
                        raise TemporaryRemoved(f"{full_url(fs, tmp)}: removed before it was published") from e
                    raise
        except BaseException:
            # A failed or interrupted attempt: drop its temporary (a partial
            # object under a hidden name; fsspec commits a half-written file
            # when its `with` block exits on an exception).
            if local:
                with contextlib.suppress(OSError):
                    os.remove(tmp)
            else:
                _remove_quietly(fs, tmp, attempts=1)
            raise
        return w.sha256, w.bytes

    result = retry(_write, f"write {url}")
    invalidate(fs, parent)
    return result


# What a full or read-only disk answers a write; the OS names no file with it.
_DISK_ERRNOS = frozenset(getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EFBIG", "EROFS") if hasattr(errno, n))


@contextlib.contextmanager
def _named(url: str) -> Iterator[None]:
    """A full or read-only disk's error while writing ``url``, with ``url`` as its file name: the
    command says "No space left on device: URL" in one line (``shardforge.console.run.path_error``)."""
    try:
        yield
    except OSError as e:
        if e.errno in _DISK_ERRNOS and not e.filename:
            raise OSError(e.errno, e.strerror or os.strerror(e.errno), url) from e
        raise


def _publish_local(fs: fsspec.AbstractFileSystem, tmp: str, path: str, w: _HashingWriter, create: bool) -> None:
    """Move a complete, fsynced local temporary to its name: ``rename(2)``, or with ``create``
    ``link(2)`` (fails if the name exists: then it must hold these bytes) and the temporary removed."""
    try:
        if create:
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
    except FileExistsError:
        _must_hold(fs, path, w)  # the name is taken: by these bytes (a rerun), or it is an ObjectConflict
    except FileNotFoundError as e:
        if not os.path.exists(tmp):
            raise TemporaryRemoved(f"{tmp}: removed before it was published") from e
        raise
    if create:
        with contextlib.suppress(FileNotFoundError):  # published: a sweep of the temporary is harmless now
            os.remove(tmp)
    _fsync_dir(posixpath.dirname(path))


def write_text_atomic(url: str, text: str, *, create: bool = False) -> None:
    write_bytes_atomic(url, text.encode("utf-8"), create=create)


def _create_local_tmp(parent: str, tmp: str) -> IO[bytes]:
    """The folder made and the locked temporary created in it.

    Either step fails with FileNotFoundError only when the folder is removed while
    it is being made or entered: a committed writer sweeping this attempt's version
    folder. That is the swept case, TemporaryRemoved, not a crash.
    """
    try:
        os.makedirs(parent or ".", exist_ok=True)
        return _open_locked_tmp(tmp)
    except FileNotFoundError as e:
        if os.path.isdir(parent or "."):
            raise
        raise TemporaryRemoved(f"{parent}: removed while {posixpath.basename(tmp)} was created in it") from e


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
        if is_local_fs(fs):
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
    if not holds_bytes(fs, path, len(data), md5):
        raise IncompleteWriteError(
            f"{url}: the stored object is not the {len(data)} bytes written: another writer replaced them "
            "(the store did not honour the create-if-absent condition) or the upload was cut short")
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
    if is_local_fs(fs):
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


def check_writable(url: str) -> None:
    """Raise the OS's error (EACCES, EROFS, ENOSPC …, naming the folder) unless the local folder ``url``
    can be written: its nearest existing folder takes a hidden temporary file, removed at once.
    Nothing is created on the way. Other filesystems: nothing checked here."""
    fs, path = get_fs(url)
    if not is_local_fs(fs):
        return
    folder = os.path.abspath(path)
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    probe = tmp_name(os.path.join(folder, "write-check"))
    try:
        open(probe, "xb").close()  # noqa: SIM115 - created and closed, nothing written
    except OSError as e:
        raise OSError(e.errno, e.strerror or os.strerror(e.errno), folder) from None
    with contextlib.suppress(OSError):
        os.remove(probe)


def makedirs(url: str) -> None:
    fs, path = get_fs(url)
    if is_local_fs(fs):
        os.makedirs(path, exist_ok=True)


def remove_tree(url: str) -> None:
    fs, path = get_fs(url)
    invalidate(fs)
    if fs.exists(path):
        fs.rm(path, recursive=True)
