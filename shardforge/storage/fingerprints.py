"""Content fingerprints of input files, and a reader that checks the bytes it reads against one.

A build's attempt tag is made from each input's fingerprint (``pipelines.corpus.commit``), taken
when the build starts; the records come from the bytes read later. ``open_checked`` hashes what a
reader reads and ``CheckedReader.check`` compares it with the fingerprint the tag was made from, so
an input rewritten in between fails the build (``InputChanged``, one line) instead of giving the
tag's names other bytes.

A fingerprint is ``kind:value``:

- ``sha256:HEX``: the bytes' sha256 (a local file, or a store that reports no checksum);
- ``md5:HEX``: the bytes' MD5 (GCS ``md5Hash``);
- ``crc32c:BASE64``: GCS's CRC32C of the bytes (composite objects), big-endian, base64;
- ``etag:VALUE``: an S3 or HTTP ETag. A 32-hex ETag of an S3 single-part upload is the MD5 and is
  checked as one; any other ETag (multipart, encrypted, an HTTP server's) says nothing about the
  bytes: the ETag the store reports when the file is opened is compared instead (s3fs pins its
  reads to it with ``If-Match``);
- ``skipped:…`` / ``unreadable:…``: a listed input the reader never reads (no bytes to check).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import IO, Any

from schemas.errors import UserError
from shardforge.storage.reads import open_read
from shardforge.storage.retry import READ_BLOCK_SIZE
from shardforge.storage.urls import redact_url


class InputChanged(UserError):
    """An input's bytes are not those its fingerprint was taken from when the build started."""


def _crc32c() -> Any:
    """A hashlib-like CRC32C (``google_crc32c``, installed with gcsfs), or None without it."""
    try:
        import google_crc32c
    except ImportError:
        return None
    return google_crc32c.Checksum()


def _digest_of(kind: str, h: Any) -> str:
    if kind == "crc32c":
        return base64.b64encode(h.digest()).decode("ascii")
    return h.hexdigest()


def hasher_for(fingerprint: str) -> tuple[str, Any] | None:
    """(kind, a fresh hash object) that recomputes ``fingerprint`` from bytes, or None when no
    hash of the bytes gives it (a multipart ETag, an HTTP ETag, a skipped input)."""
    kind, _, value = fingerprint.partition(":")
    if kind == "sha256":
        return kind, hashlib.sha256()
    if kind == "md5" or (kind == "etag" and len(value) == 32 and all(c in "0123456789abcdef" for c in value)):
        return kind, hashlib.md5(usedforsecurity=False)
    if kind == "crc32c":
        h = _crc32c()
        return (kind, h) if h is not None else None
    return None


def _reported(f: Any, kind: str) -> str | None:
    """The checksum of ``kind`` the store reported when ``f`` was opened (fsspec's ``details``)."""
    details = getattr(f, "details", None)
    if not isinstance(details, dict):
        return None
    key = {"etag": ("ETag", "etag", "e_tag"), "crc32c": ("crc32c",), "md5": ("md5Hash",)}.get(kind, ())
    for k in key:
        if details.get(k):
            return str(details[k]).strip('"')
    return None


class CheckedReader:
    """A binary reader that hashes the bytes it hands out; ``check()`` compares them with a fingerprint.

    Sequential reads from the start are hashed as they go (reading again bytes already hashed, after a
    seek back, leaves none out); a reader that seeks ahead (Parquet) or stops early leaves a gap that
    ``check()`` reads and hashes from the file itself. Everything else is the wrapped file's.
    """

    def __init__(self, f: IO[bytes], url: str, fingerprint: str):
        self._f, self.url, self.fingerprint = f, url, fingerprint
        self._kind, _, self._value = fingerprint.partition(":")
        made = hasher_for(fingerprint)
        self._hash = made[1] if made is not None else None
        self._pos = 0  # where the next read starts
        self._hashed = 0  # bytes [0, _hashed) are in the hash
        self.reported = _reported(f, self._kind)

    def _take(self, data: bytes | memoryview) -> None:
        end = self._pos + len(data)
        # Bytes past the hashed prefix extend it, also when the read began inside it (a peek, then a seek
        # back to the start: the format sniffs of Parquet and Arrow files).
        if self._hash is not None and self._pos <= self._hashed < end:
            self._hash.update(memoryview(data)[self._hashed - self._pos:])
            self._hashed = end
        self._pos = end

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._take(data)
        return data

    def read1(self, n: int = -1) -> bytes:
        return self.read(n)

    def readinto(self, buffer: Any) -> int:
        data = self._f.read(len(buffer))
        buffer[:len(data)] = data
        self._take(data)
        return len(data)

    def readline(self, limit: int = -1) -> bytes:
        data = self._f.readline(limit)
        self._take(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = self._f.seek(offset, whence)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __enter__(self) -> CheckedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()

    def close(self) -> None:
        self._f.close()

    def check(self) -> None:
        """Raise InputChanged unless the file's bytes are those of the fingerprint (reads what the
        reader skipped, from the same open file)."""
        if self._kind in ("unreadable", "skipped"):  # not a file to read when listed, and now it was read
            self._changed("readable")
        if self._hash is None:
            if self.reported is not None and self.reported != self._value:
                self._changed(f"{self._kind}:{self.reported}")
            return
        self._f.seek(self._hashed)  # the rest of the file: nothing after a whole sequential read
        while chunk := self._f.read(READ_BLOCK_SIZE):
            self._hash.update(chunk)
            self._hashed += len(chunk)
        self._pos = self._hashed
        got = f"{self._kind}:{_digest_of(self._kind, self._hash)}"
        if got != self.fingerprint:
            self._changed(got)

    def _changed(self, got: str) -> None:
        raise InputChanged(
            f"input {redact_url(self.url)} changed while this build read it: its bytes are {got[:24]}…, "
            f"not the {self.fingerprint[:24]}… it was listed with when the build started (its attempt tag "
            "was made from that); nothing was committed. Run the build again once its inputs stay as they are "
            "(land a new edition of a file under a new name)")


def check_listed(source: str, urls: Sequence[str], expected: dict[str, str]) -> None:
    """InputChanged unless the files a source's reader will open (``urls``) are those its fingerprints
    were taken of (``expected``, inputs listed as skipped left out)."""
    listed = set(urls)
    appeared = sorted(listed - set(expected))
    vanished = sorted({u for u, fp in expected.items() if not fp.startswith("skipped:")} - listed)
    if appeared or vanished:
        what = "; ".join(f"{verb} {', '.join(redact_url(u) for u in us[:3])}{' …' if len(us) > 3 else ''}"
                         for verb, us in (("appeared:", appeared), ("vanished:", vanished)) if us)
        raise InputChanged(f"the inputs of source {source} changed while this build listed them ({what}); "
                           "nothing was committed. Run the build again once its inputs stay as they are")


def check_unreadable(url: str, fingerprint: str, error: BaseException) -> None:
    """InputChanged when an input that cannot be opened now had its bytes fingerprinted (it was
    readable when the build listed it); nothing for one already unreadable or skipped then."""
    if fingerprint.partition(":")[0] in ("unreadable", "skipped"):
        return
    raise InputChanged(
        f"input {redact_url(url)} changed while this build read it: it was listed with {fingerprint[:24]}… when "
        f"the build started, and now cannot be read ({type(error).__name__}); nothing was committed. Run the "
        "build again once its inputs stay as they are") from error


def open_checked(url: str, fingerprint: str) -> CheckedReader:
    """``open_read(url)``, its bytes checked against ``fingerprint`` by ``check()`` (see CheckedReader)."""
    return CheckedReader(open_read(url), url, fingerprint)
