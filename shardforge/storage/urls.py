"""URLs: joining, filesystems, relative references and redaction."""

from __future__ import annotations

import os
import posixpath
import re
from typing import Any

import fsspec
from fsspec.core import url_to_fs

from schemas.errors import UserError
from shardforge.storage.resolve import check_resolves


def join(url: str, *parts: str) -> str:
    """Join URL path parts with '/', keeping the scheme (gs://b/x + y -> gs://b/x/y)."""
    out = url.rstrip("/")
    for p in parts:
        out = f"{out}/{p.strip('/')}"
    return out


def is_glob(path: str) -> bool:
    """Whether a path or URL holds a glob wildcard (``*``, ``?``, ``[``)."""
    return any(c in path for c in "*?[")


def get_fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, path) for a URL, with a clear error for unknown schemes; in a command's process, a
    store host that does not resolve is raised at once (``shardforge.storage.resolve``)."""
    check_resolves(url, redact_url)
    try:
        return url_to_fs(url)
    except (ValueError, ImportError) as e:
        raise UserError(f"cannot open {url!r}: {e}") from e


def protocol_of(fs: fsspec.AbstractFileSystem) -> str:
    p = fs.protocol
    return p[0] if isinstance(p, (tuple, list)) else p


def is_local_fs(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether fs is this machine's disk (fsspec's local filesystem)."""
    return protocol_of(fs) in ("file", "local")


def full_url(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """Inverse of get_fs: a URL that get_fs maps back to (fs, path)."""
    if is_local_fs(fs):
        return path
    return fs.unstrip_protocol(path)


def absolute(url: str) -> str:
    """A local path made absolute (what a run or manifest records outlives the working directory); URLs unchanged."""
    if "://" in url:
        return url
    if url.startswith("file:"):
        url = url[len("file:"):]
    return os.path.abspath(url)


def redact_url(url: str) -> str:
    """Drop user:password@ and credential-looking query parameters from a URL."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    if "://" not in url:
        return url
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                       if not any(b in k.lower() for b in ("token", "secret", "key", "sig", "password", "credential"))])
    if not netloc:  # "gs://" alone (a scheme named in a message): urlunsplit would write "gs:"
        return f"{parts.scheme}://{parts.path}" + (f"?{query}" if query else "") + \
            (f"#{parts.fragment}" if parts.fragment else "")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_url_lenient(url: str) -> str:
    """``redact_url``, or for a string that does not parse as a URL (a bad port, a stray bracket) the
    string without whatever could be userinfo."""
    try:
        return redact_url(url)
    except ValueError:
        return re.sub(r"://[^/@]*@", "://", url)


def redact_urls(data: Any) -> Any:
    """JSON-like data (a config, a record) with ``redact_url`` applied to every string holding a URL.

    What the project stores about where data came from (a checkpoint's config, a manifest's)
    goes through this: credentials belong in the environment or the command line, never in a file."""
    if isinstance(data, str):
        if "://" not in data:
            return data
        return redact_url_lenient(data)
    if isinstance(data, dict):
        return {k: redact_urls(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(redact_urls(v) for v in data)
    return data


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
