"""The requests a create-only publish makes on an object store, counted at an HTTP proxy.

A shard's publish (``write_stream_atomic(create=True)``) asks the store about an object only where
it must: the writer knows the size of the temporary it uploaded, and a name found taken is checked
once (size and MD5), not checked and then checked again. Local disk: a rerun's publish reads the
name's info once.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import unquote

import pytest
from faultproxy import FaultProxy

import shardforge.storage.writes as writes
from shardforge import storage


class RecordingProxy(FaultProxy):
    """A proxy that injects no faults and records every request as (method, unquoted path with query)."""

    def __init__(self, upstream: str):
        super().__init__(upstream, rate=0.0)
        self.seen: list[tuple[str, str]] = []

    def _draw(self, method: str, path: str) -> str | None:
        with self._lock:
            self.seen.append((method, unquote(path)))
        return super()._draw(method, path)


@contextmanager
def s3_recorded(endpoint: str) -> Iterator[RecordingProxy]:
    """Route every s3:// URL opened through fsspec to moto through a RecordingProxy."""
    import fsspec
    import s3fs

    conf = fsspec.config.conf.setdefault("s3", {})
    saved = dict(conf)
    with RecordingProxy(endpoint) as proxy:
        conf["endpoint_url"] = proxy.url
        s3fs.S3FileSystem.clear_instance_cache()
        try:
            yield proxy
        finally:
            conf.clear()
            conf.update(saved)
            s3fs.S3FileSystem.clear_instance_cache()


def heads_of_temporaries(seen: list[tuple[str, str]]) -> list[str]:
    """The HEAD requests (S3's object metadata) for a writer's temporary."""
    return [path for method, path in seen
            if method == "HEAD" and storage.is_tmp_name(posixpath.basename(path.partition("?")[0]))]


def test_an_s3_publish_asks_the_size_of_its_temporary_once(s3_emulator, s3_bucket):
    """The size the conditional copy is planned by is the byte count the writer wrote; the one
    HEAD of the temporary left is s3fs's own, made inside its copy."""
    data = os.urandom(4096)
    with s3_recorded(s3_emulator) as proxy:
        got = storage.write_stream_atomic(f"{s3_bucket}/p/part-0.bin", lambda f: f.write(data), create=True)
    assert got[1] == len(data)
    assert len(heads_of_temporaries(proxy.seen)) == 1, proxy.seen
    assert storage.read_bytes(f"{s3_bucket}/p/part-0.bin") == data


def counted_info(monkeypatch: pytest.MonkeyPatch, store: str) -> list[str]:
    """The object names the store's filesystem asks for info of (every ``info`` and ``exists``, and
    s3fs's own lookups inside a copy), from now on: filesystems made after this call count."""
    import gcsfs
    import s3fs

    cls = gcsfs.GCSFileSystem if store == "gs" else s3fs.S3FileSystem
    asked: list[str] = []
    real = cls._info

    async def counting(self, path, *args, **kwargs):
        asked.append(posixpath.basename(path.rstrip("/")))
        return await real(self, path, *args, **kwargs)

    monkeypatch.setattr(cls, "_info", counting)
    cls.clear_instance_cache()  # fsspec binds an instance's sync info to _info when it makes it
    return asked


@pytest.mark.parametrize("store", ["gs", "s3"])
def test_a_name_taken_meanwhile_is_checked_once(store, request, monkeypatch):
    """Another writer creates the name with these bytes between the exists-check and the copy:
    the copy's FileExistsError is followed by one info of the name (size and MD5), not two."""
    bucket = request.getfixturevalue({"gs": "gcs_bucket", "s3": "s3_bucket"}[store])
    url = f"{bucket}/p/part-1.bin"
    data = os.urandom(4096)
    real = writes._copy_if_absent

    def other_writer_first(fs, tmp, path, *args):
        fs.pipe_file(path, data)  # the other writer's identical publish lands first
        real(fs, tmp, path, *args)

    monkeypatch.setattr(writes, "_copy_if_absent", other_writer_first)
    asked = counted_info(monkeypatch, store)
    storage.write_stream_atomic(url, lambda f: f.write(data), create=True)
    # one lookup before the copy (the exists-check), one after it (the taken name's size and MD5)
    assert asked.count("part-1.bin") == 2, asked
    assert storage.read_bytes(url) == data
    fs, folder = storage.get_fs(f"{bucket}/p")
    assert [posixpath.basename(n) for n in fs.ls(folder, refresh=True)] == ["part-1.bin"]


@pytest.mark.parametrize("store", ["gs", "s3"])
def test_a_name_taken_meanwhile_by_other_bytes_is_a_conflict(store, request, monkeypatch):
    bucket = request.getfixturevalue({"gs": "gcs_bucket", "s3": "s3_bucket"}[store])
    url = f"{bucket}/p/part-2.bin"
    real = writes._copy_if_absent

    def other_writer_first(fs, tmp, path, *args):
        fs.pipe_file(path, b"other bytes")
        real(fs, tmp, path, *args)

    monkeypatch.setattr(writes, "_copy_if_absent", other_writer_first)
    with pytest.raises(writes.ObjectConflict):
        storage.write_stream_atomic(url, lambda f: f.write(b"these bytes"), create=True)
    assert storage.read_bytes(url) == b"other bytes"


def test_a_local_rerun_reads_the_names_info_once(tmp_path, monkeypatch):
    """On local disk, a create that finds its name holding these bytes (``link`` fails) asks for the
    name's info once, then hashes it (a local write keeps no MD5)."""
    from fsspec.implementations.local import LocalFileSystem

    url = str(tmp_path / "part-3.bin")
    storage.write_bytes_atomic(url, b"same bytes", create=True)
    asked: list[str] = []
    real = LocalFileSystem.info

    def counting_info(self, path, **kwargs):
        asked.append(path)
        return real(self, path, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "info", counting_info)
    storage.write_bytes_atomic(url, b"same bytes", create=True)
    assert [p for p in asked if p.endswith("part-3.bin")] == [url], asked
    with pytest.raises(writes.ObjectConflict):
        storage.write_bytes_atomic(url, b"other bytes", create=True)
