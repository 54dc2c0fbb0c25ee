"""The name a file's doc ids hash: its path under the folder the source's ``input`` names.

A doc id is the source's name, a short hash of a file's name and the record's index in it
(``pipelines.records``). The name hashed is the file's path relative to the input's *root*: the
fixed part of a glob up to the folder of its first wildcard, the folder a folder URL names, or the
folder of a file the URL names. So ``gs://bucket/cc/2019/a.jsonl`` listed by ``gs://bucket/cc/*/*.jsonl``
and ``/mnt/copy/cc/2019/a.jsonl`` listed by ``/mnt/copy/cc/*/*.jsonl`` are both ``2019/a.jsonl``: the
same files give the same doc ids, and so the same dedupe choices, train/valid split and shards,
wherever they are stored. Within one source the names stay unique (every match lies under the root).
A path that does not lie under the root (an ingest batch naming another file) hashes whole.

Everything here is string work: no object-store client is made. A local pattern must be absolute
before workers use it (``pinned``): a relative one would resolve against each worker's directory.
"""

from __future__ import annotations

import functools
import posixpath

import fsspec

from pipelines.records import path_key
from schemas.config import SourceConfig

WILDCARDS = "*?["


def fixed_folder(path: str) -> str:
    """A glob's fixed part up to the folder of its first wildcard; a path without one, unchanged."""
    wild = [i for i in (path.find(c) for c in WILDCARDS) if i >= 0]
    if not wild:
        return path
    return path[:min(wild)].rsplit("/", 1)[0] or "/"


def _protocol(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else "file"


def _strip(url: str) -> tuple[type, str] | None:
    """(filesystem class, path as it spells it: no scheme) of a URL; None for one fsspec does not know."""
    if "::" in url:  # a chained URL (simplecache::gs://...): hashed whole
        return None
    try:
        cls = fsspec.get_filesystem_class(_protocol(url))
        return cls, cls._strip_protocol(url).rstrip("/") or "/"
    except (ValueError, ImportError, TypeError):
        return None


@functools.lru_cache(maxsize=256)
def id_root(pattern: str) -> tuple[type, str] | None:
    """(filesystem class, folder without scheme) that a source's ``input`` names; None when unknown."""
    stripped = _strip(pattern)
    return None if stripped is None else (stripped[0], fixed_folder(stripped[1]))


def id_name(pattern: str, path: str) -> str:
    """The name a file's doc ids hash: ``path`` relative to ``pattern``'s root, or ``path`` whole when it
    is not under it. A pattern naming one file gives that file its base name; a nested member
    (``archive!member``) keeps its member part."""
    found, stripped = id_root(pattern), _strip(path)
    if found is None or stripped is None or found[0] is not stripped[0]:
        return path
    root, stripped = found[1], stripped[1]
    if stripped == root or stripped.startswith(root + "!"):
        return posixpath.basename(root) + stripped[len(root):]
    prefix = root if root.endswith("/") else root + "/"
    return stripped[len(prefix):] if stripped.startswith(prefix) else path


def file_key(source: SourceConfig, path: str) -> str:
    """``path_key`` of a file of ``source``: its source's name and a hash of its ``id_name``."""
    return path_key(source.name, id_name(source.input, path))


def pinned(pattern: str) -> str:
    """A local pattern made absolute (as this process resolves it), so every worker finds the same root;
    other URLs unchanged."""
    if _protocol(pattern) not in ("file", "local"):
        return pattern
    stripped = _strip(pattern)
    return pattern if stripped is None else stripped[1]
