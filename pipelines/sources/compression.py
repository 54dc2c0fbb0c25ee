"""Compressed input as read(n) streams: gzip, xz, bz2 and zstd, every member in turn, within a budget.

What decodes is delivered before a fault is raised (``Drained``): a file cut short, corrupt part way
or followed by bytes that are not another member keeps every record before the fault, and the
fault then rejects the rest. The work one file may cause is bounded (``Budget``: decompression
bombs, ``max_expansion_ratio`` and ``max_decompressed_bytes``).
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from dataclasses import dataclass
from typing import Any, BinaryIO

CHUNK = 1 << 20  # streaming read size
COMPRESSIONS = {".gz": "gzip", ".gzip": "gzip", ".xz": "xz", ".lzma": "xz", ".zst": "zstd", ".zstd": "zstd",
                ".bz2": "bz2"}
# Decompressed bytes a file may produce before the expansion-ratio check applies: small files
# of repetitive text legitimately compress far better than 100:1.
EXPANSION_GRACE_BYTES = 16 << 20


def split_compression(name: str) -> tuple[str, str | None]:
    """('x.jsonl.gz') -> ('x.jsonl', 'gzip'); no known compression -> (name, None)."""
    lower = name.lower()
    for ext, comp in COMPRESSIONS.items():
        if lower.endswith(ext):
            return name[: -len(ext)], comp
    return name, None


class CorruptData(Exception):
    """Compressed data that does not decode."""


class Drained:
    """A read(n) stream over a decoder that delivers everything decoded before a fault, then raises.

    A compressed file cut short, corrupt part way or followed by bytes that are not another member
    still holds decodable data before the fault: ``read`` returns all of it first, and raises the
    fault (EOFError: cut short; CorruptData: does not decode) only once nothing decoded is left.
    Subclasses implement ``_produce``: add some output to ``_buf``, or set ``_done`` at the end.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._done = False
        self._error: BaseException | None = None

    def _produce(self) -> None:
        raise NotImplementedError

    def read(self, n: int = -1) -> bytes:
        while not self._done and self._error is None and (n < 0 or len(self._buf) < n):
            try:
                self._produce()
            except Exception as e:  # noqa: BLE001 - raised below, once what decoded before it is read
                self._error = e
        if not self._buf and self._error is not None:
            raise self._error
        if n < 0 or n >= len(self._buf):
            out = bytes(self._buf)
            self._buf.clear()
        else:
            out = bytes(self._buf[:n])
            del self._buf[:n]
        return out

    def close(self) -> None:
        pass


# The first bytes of a member of each format: what may follow a complete member (besides zero padding).
MAGIC = {"gzip": b"\x1f\x8b", "xz": b"\xfd7zXZ\x00", "bz2": b"BZh"}


class Decompressed(Drained):
    """gzip, xz (and .lzma) or bz2 data as a read(n) stream: every member in turn, output bounded per step.

    Zero bytes between or after members are padding; any other bytes after a complete member must
    start another one, else the rest is ``CorruptData`` (the members before it are read first).
    """

    IN_CHUNK = 64 << 10

    def __init__(self, raw: BinaryIO, kind: str):
        super().__init__()
        self._raw = raw
        self._kind = kind
        self._dec: Any = None
        self._in = b""  # input read but not yet given to a decompressor
        self._members = 0

    def _new(self) -> Any:
        if self._kind == "gzip":
            return zlib.decompressobj(31)
        return lzma.LZMADecompressor() if self._kind == "xz" else bz2.BZ2Decompressor()

    def _start_member(self) -> bool:
        """Begin the next member at the input, skipping zero padding after one; False at the end."""
        while True:
            if not self._in:
                self._in = self._raw.read(self.IN_CHUNK)
                if not self._in:
                    self._done = True
                    return False
            if self._members:
                self._in = self._in.lstrip(b"\x00")
                if not self._in:
                    continue
                magic = MAGIC[self._kind]
                if not magic.startswith(self._in[:len(magic)]):
                    raise CorruptData(f"bytes after the end of the {self._kind} data are not another member: "
                                      f"{self._in[:16]!r}")
            self._dec = self._new()
            return True

    def _produce(self) -> None:
        while True:
            if self._dec is None and not self._start_member():
                return
            dec = self._dec
            if dec.eof:
                self._in = dec.unused_data + self._in
                self._dec = None
                self._members += 1
                continue
            if not self._in and (self._kind == "gzip" or dec.needs_input):
                self._in = self._raw.read(self.IN_CHUNK)
                if not self._in:
                    raise EOFError(f"{self._kind} data ended before the end of its stream (truncated)")
            try:
                out = dec.decompress(self._in, CHUNK)
            except (zlib.error, lzma.LZMAError, OSError) as e:
                raise CorruptData(f"corrupt {self._kind} data: {e}") from e
            self._in = dec.unconsumed_tail if self._kind == "gzip" else b""
            if out:
                self._buf += out
                return


class ZstdReader(Drained):
    """A read(n) stream over zstd data that raises EOFError on a truncated frame.

    zstandard's stream_reader returns short data silently when the input ends mid-frame; this
    reader feeds small input chunks to a decompressobj (bounding memory on highly compressible
    input) and checks the frame end itself. Multi-frame files are read across frames.
    """

    IN_CHUNK = 2048

    def __init__(self, raw: BinaryIO):
        import zstandard

        super().__init__()
        self._zstd = zstandard
        self._raw = raw
        self._dobj = zstandard.ZstdDecompressor().decompressobj()
        self._mid_frame = False

    def _produce(self) -> None:
        data = self._raw.read(self.IN_CHUNK)
        if not data:
            if self._mid_frame and not self._dobj.eof:
                raise EOFError("zstd stream ended before the end of its frame")
            self._done = True
            return
        while data:
            try:
                self._buf += self._dobj.decompress(data)
            except self._zstd.ZstdError as e:
                raise CorruptData(f"corrupt zstd data: {e}") from e
            self._mid_frame = True
            if self._dobj.eof:
                data = self._dobj.unused_data
                self._dobj = self._zstd.ZstdDecompressor().decompressobj()
                self._mid_frame = False
            else:
                data = b""


# ------------------------------------------------------------------ bounded work per file

class ExpansionLimit(Exception):
    """A file decompressed to more than its budget allows (a decompression bomb, or a limit set low)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass
class Budget:
    """The decompression work one input file may cause, shared by every level of nesting.

    ``raw``: bytes read from the file itself; ``inflated``: bytes produced by every decompressor
    (outer stream and nested members together). Work is bounded by
    ``max(EXPANSION_GRACE_BYTES, max_ratio * raw)`` and by ``max_bytes``.
    """

    max_ratio: float | None = None
    max_bytes: int | None = None
    raw: int = 0
    inflated: int = 0

    def add_inflated(self, n: int) -> None:
        """Count n decompressed bytes; raise ExpansionLimit once over a limit."""
        self.inflated += n
        if self.max_bytes is not None and self.inflated > self.max_bytes:
            raise ExpansionLimit("max_decompressed_bytes",
                                 f"decompressed past {self.max_bytes} bytes (max_decompressed_bytes)")
        if (self.max_ratio is not None and self.inflated > EXPANSION_GRACE_BYTES
                and self.inflated > self.max_ratio * max(self.raw, 1)):
            raise ExpansionLimit("max_expansion_ratio",
                                 f"{self.inflated} bytes from {self.raw} compressed bytes: over "
                                 f"{self.max_ratio:g}:1 (max_expansion_ratio)")


class _Charged:
    """A read(n) pass-through that hands the length of every non-empty read to ``_charge``."""

    def __init__(self, stream: BinaryIO, budget: Budget):
        self._stream = stream
        self._budget = budget

    def _charge(self, n: int) -> None:
        raise NotImplementedError

    def read(self, n: int = -1) -> bytes:
        b = self._stream.read(n)
        if b:
            self._charge(len(b))
        return b


class RawCounter(_Charged):
    """A read(n) pass-through counting the bytes read from the file itself."""

    def _charge(self, n: int) -> None:
        self._budget.raw += n


class Inflated(_Charged):
    """A read(n) pass-through over a decompressor, charging what it produces to the budget."""

    def _charge(self, n: int) -> None:
        self._budget.add_inflated(n)


def decompress(stream: BinaryIO, compression: str | None, budget: Budget | None = None) -> BinaryIO:
    """A streaming decompressing reader (the stream itself when not compressed), within budget.

    Whatever decodes is delivered before the stream's fault is raised (``Drained``).
    """
    if compression is None:
        return stream
    if compression in ("gzip", "xz", "bz2"):
        out: BinaryIO = Decompressed(stream, compression)  # type: ignore[assignment]
    elif compression == "zstd":
        out = ZstdReader(stream)  # type: ignore[assignment]
    else:
        raise ValueError(f"unknown compression {compression!r}")
    return Inflated(out, budget) if budget is not None else out  # type: ignore[return-value]
