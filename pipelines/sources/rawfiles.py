"""Raw input files as listed: URL, size, mtime and the store's checksum, and their content fingerprint.

Shared by the one-shot build (its attempt tag), the batched build and the ingest / serve
drivers (their ledgers); imports no driver.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from shardforge.storage import get_fs, info_mtime, invalidate, is_glob, retry, sha256_url


@dataclass(frozen=True)
class RawFile:
    """One raw file as listed: URL, size, modification time (epoch s) and a cheap store checksum."""

    url: str
    size: int
    mtime: float | None
    checksum: str | None  # from the listing (md5 / crc32c / etag); None on local disks; skipped:<reason>

    @property
    def skip(self) -> str | None:
        """Why the listing skipped this match (it is never opened, the reader counts it), or None."""
        return self.checksum.removeprefix("skipped:") if (self.checksum or "").startswith("skipped:") else None


def _checksum_of(info: dict[str, Any]) -> str | None:
    """The store's content checksum from a listing entry, as 'kind:hex' (None if it has none)."""
    md5 = info.get("md5Hash")
    if md5:
        try:
            return "md5:" + base64.b64decode(md5).hex()
        except ValueError:
            return "md5:" + str(md5)
    if info.get("crc32c"):
        return f"crc32c:{info['crc32c']}"
    etag = info.get("ETag") or info.get("etag") or info.get("e_tag")
    if etag:
        return "etag:" + str(etag).strip('"')
    return None


def list_raw_files(pattern: str, follow_links: bool = False) -> list[RawFile]:
    """Files matching a glob (or under a folder URL), with size, mtime and checksum, in one listing.

    Hidden names (a leading '.') that the pattern did not ask for are listed as skipped
    (``hidden_file``): writers' temporary files and our own atomic-write temporaries must never be
    read half written. A local link out of the listed folder is listed as skipped (``not_a_file``)
    unless ``follow_links``.
    """
    from pipelines.sources.listing import judge_listing, listing_root  # lazy: the package imports apache_beam

    root = listing_root(pattern, follow_links)
    fs, path = get_fs(pattern)
    invalidate(fs)
    if is_glob(path):
        found = retry(lambda: fs.glob(path, detail=True), f"glob {pattern}")
    elif retry(lambda: fs.isfile(path), f"isfile {pattern}"):
        found = {path: retry(lambda: fs.info(path), f"info {pattern}")}
    else:  # a folder: everything under it
        found = retry(lambda: fs.find(path, detail=True), f"find {pattern}")
    out = []
    for p, info in sorted(found.items()):
        # Matches that are not readable files (directories, FIFOs, dangling links, undecodable or
        # hidden names) stay listed, never opened here: the reader counts each as one rejected input.
        url, size, skip = judge_listing(fs, p, info, root, pattern)
        out.append(RawFile(url, size, info_mtime(info), f"skipped:{skip}" if skip else _checksum_of(info)))
    return out


def fingerprint(f: RawFile) -> str:
    """The identity of a file's content: the store's checksum, else sha256 of the bytes."""
    if f.checksum:
        return f.checksum
    return "sha256:" + sha256_url(f.url)[0]
