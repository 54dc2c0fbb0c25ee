"""Byte streams under the readers: decompression, bounded work, re-encoding, and framing.

Everything here works on ``read(n)`` streams and never parses a record: it cuts lines, JSON
array items and sniffed heads out of bytes, decompresses them within a per-file work budget
(decompression bombs), and turns UTF-16/32 text with a byte-order mark into UTF-8.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import lzma
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from pipelines.records import snippet

CHUNK = 1 << 20  # streaming read size
SNIFF = 8192  # bytes looked at to recognise binary files, byte-order marks and tar archives
COMPRESSIONS = {".gz": "gzip", ".gzip": "gzip", ".xz": "xz", ".lzma": "xz", ".zst": "zstd", ".zstd": "zstd",
                ".bz2": "bz2"}
# Decompressed bytes a file may produce before the expansion-ratio check applies: small files
# of repetitive text legitimately compress far better than 100:1.
EXPANSION_GRACE_BYTES = 16 << 20
# Byte-order marks of text we re-encode to UTF-8 (UTF-32 first: its LE mark starts like UTF-16's).
BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"), (b"\xff\xfe", "utf-16"),
        (b"\xfe\xff", "utf-16"))


# ------------------------------------------------------------------ compression

def split_compression(name: str) -> tuple[str, str | None]:
    """('x.jsonl.gz') -> ('x.jsonl', 'gzip'); no known compression -> (name, None)."""
    lower = name.lower()
    for ext, comp in COMPRESSIONS.items():
        if lower.endswith(ext):
            return name[: -len(ext)], comp
    return name, None


class CorruptData(Exception):
    """Compressed data that does not decode."""


class ZstdReader:
    """A read(n) stream over zstd data that raises EOFError on a truncated frame.

    zstandard's stream_reader returns short data silently when the input ends mid-frame; this
    reader feeds small input chunks to a decompressobj (bounding memory on highly compressible
    input) and checks the frame end itself. Multi-frame files are read across frames.
    """

    IN_CHUNK = 2048

    def __init__(self, raw: BinaryIO):
        import zstandard

        self._zstd = zstandard
        self._raw = raw
        self._dobj = zstandard.ZstdDecompressor().decompressobj()
        self._buf = bytearray()
        self._done = False
        self._mid_frame = False

    def _fill(self) -> None:
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

    def read(self, n: int = -1) -> bytes:
        while not self._done and (n < 0 or len(self._buf) < n):
            self._fill()
        if n < 0 or n >= len(self._buf):
            out = bytes(self._buf)
            self._buf.clear()
        else:
            out = bytes(self._buf[:n])
            del self._buf[:n]
        return out

    def close(self) -> None:
        pass


class Prefixed:
    """A read(n) stream that first returns already-read `head` bytes, then the rest of `stream`."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self._head = head
        self._stream = stream

    def read(self, n: int = -1) -> bytes:
        if self._head:
            if n < 0:
                out, self._head = self._head + self._stream.read(), b""
                return out
            out, self._head = self._head[:n], self._head[n:]
            return out
        return self._stream.read(n)


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


class RawCounter:
    """A read(n) pass-through counting the bytes read from the file itself."""

    def __init__(self, stream: BinaryIO, budget: Budget):
        self._stream = stream
        self._budget = budget

    def read(self, n: int = -1) -> bytes:
        b = self._stream.read(n)
        self._budget.raw += len(b)
        return b


class Inflated:
    """A read(n) pass-through over a decompressor, charging what it produces to the budget."""

    def __init__(self, stream: BinaryIO, budget: Budget):
        self._stream = stream
        self._budget = budget

    def read(self, n: int = -1) -> bytes:
        b = self._stream.read(n)
        if b:
            self._budget.add_inflated(len(b))
        return b


def decompress(stream: BinaryIO, compression: str | None, budget: Budget | None = None) -> BinaryIO:
    """A streaming decompressing reader (the stream itself when not compressed), within budget."""
    if compression is None:
        return stream
    if compression == "gzip":
        out: BinaryIO = gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[assignment]
    elif compression == "xz":
        out = lzma.LZMAFile(stream)  # type: ignore[assignment]
    elif compression == "bz2":
        out = bz2.BZ2File(stream)  # type: ignore[assignment]
    elif compression == "zstd":
        out = ZstdReader(stream)  # type: ignore[assignment]
    else:
        raise ValueError(f"unknown compression {compression!r}")
    return Inflated(out, budget) if budget is not None else out  # type: ignore[return-value]


# ------------------------------------------------------------------ text encodings

def bom_encoding(head: bytes) -> str | None:
    """'utf-16' / 'utf-32' when the bytes start with that byte-order mark, else None."""
    for bom, enc in BOMS:
        if head.startswith(bom):
            return enc
    return None


class Transcoded:
    """A read(n) stream of UTF-8 over UTF-16/32 text with a byte-order mark (undecodable units -> U+FFFD)."""

    def __init__(self, stream: BinaryIO, encoding: str):
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        self._buf = bytearray()
        self._done = False

    def read(self, n: int = -1) -> bytes:
        while not self._done and (n < 0 or len(self._buf) < n):
            data = self._stream.read(CHUNK)
            text = self._decoder.decode(data, final=not data)
            self._done = not data
            self._buf += text.encode("utf-8")
        if n < 0 or n >= len(self._buf):
            out = bytes(self._buf)
            self._buf.clear()
        else:
            out = bytes(self._buf[:n])
            del self._buf[:n]
        return out


def decode(data: bytes) -> str:
    """UTF-8 with invalid bytes kept as lone surrogates (the cleaning stage rejects or repairs them)."""
    text = data.decode("utf-8", errors="surrogateescape")
    return text[1:] if text.startswith("\ufeff") else text


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_unicode(text: str) -> str:
    """The text with lone surrogates (undecodable bytes, JSON '\\ud800' escapes) replaced by U+FFFD."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def safe_snippet(text: str | bytes) -> str:
    """A snippet that is always valid Unicode (surrogates from bad bytes become '?')."""
    s = snippet(text)
    return s.encode("utf-8", errors="replace").decode("utf-8")


def looks_binary(head: bytes) -> bool:
    """NUL bytes never occur in UTF-8 text we want; a file (or member) with them is binary."""
    return b"\x00" in head


# ------------------------------------------------------------------ framing

def read_up_to(stream: BinaryIO, n: int) -> bytes:
    """Read n bytes (fewer only at the end of the stream); decompressors may return short reads."""
    parts: list[bytes] = []
    got = 0
    while got < n:
        b = stream.read(min(CHUNK, n - got))
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


# One character class, greedy, backing off to the run's last newline: SRE's single-class repeat
# runs at ~1.5 ms per MiB (a repeated group, (?:[ \t]*\n)+, is 70x slower).
_BLANK_RUN = re.compile(rb"[ \t\r\f\v\n]*\n")
_BLANK_START = frozenset(b" \t\r\f\v\n")


def iter_lines(stream: BinaryIO, cap: int) -> Iterator[tuple[bytes, int, int]]:
    """(line, full length, blank) per line, without the newline; a line keeps at most `cap` bytes.

    Longer lines are not held in memory: the rest is counted and dropped, so the caller can
    reject the record as too large after reading at most `cap` of it.

    Runs of whitespace-only lines are cut in bulk (one regex match, not a Python step per line:
    a gigabyte of newlines costs what reading it costs): such a run comes as one item whose
    ``blank`` is the number of lines in it and whose bytes are the run without its last newline
    (so joining items with newlines restores the input); ``blank`` is 0 for every other line.
    """
    pending = bytearray()
    pending_len = 0  # true length of the partial line (pending keeps at most cap bytes)
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            break
        start = 0
        n = len(chunk)
        while True:
            if pending_len == 0 and start < n and chunk[start] in _BLANK_START:
                m = _BLANK_RUN.match(chunk, start)
                if m is not None:
                    end = m.end()
                    run = end - start - 1
                    yield chunk[start:start + min(run, cap)], run, chunk.count(b"\n", start, end)
                    start = end
                    continue
            nl = chunk.find(b"\n", start)
            end = n if nl < 0 else nl
            if pending_len == 0 and nl >= 0:
                length = nl - start
                yield (chunk[start:nl] if length <= cap else chunk[start:start + cap]), length, 0
            else:
                room = cap - len(pending)
                if room > 0:
                    pending += chunk[start:min(end, start + room)]
                pending_len += end - start
                if nl >= 0:
                    yield bytes(pending), pending_len, 0
                    pending.clear()
                    pending_len = 0
            if nl < 0:
                break
            start = nl + 1
    if pending_len:
        yield bytes(pending), pending_len, 0


_IN_STRING = re.compile(rb'["\\]')
_OUTSIDE = re.compile(rb'[\[\]{}",]')


def iter_json_array(stream: BinaryIO, cap: int) -> Iterator[tuple[bytes, int]]:
    """(item bytes, full length) per top-level item of a JSON array (its '[' already consumed).

    A small scanner tracks strings, escapes and nesting so items are split without parsing the
    whole array; an item keeps at most `cap` bytes. Malformed input gives malformed items (the
    caller's json.loads rejects them), never an exception.
    """
    item = bytearray()
    item_len = 0
    depth = 0
    in_str = esc = False
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            break
        pos = 0
        n = len(chunk)
        seg_start = 0  # start of the not-yet-copied part of this chunk belonging to the current item
        while pos < n:
            if esc:
                esc = False
                pos += 1
                continue
            m = (_IN_STRING if in_str else _OUTSIDE).search(chunk, pos)
            if m is None:
                pos = n
                break
            c = m.group()
            pos = m.end()
            if in_str:
                if c == b"\\":
                    esc = True
                else:
                    in_str = False
            elif c == b'"':
                in_str = True
            elif c in (b"[", b"{"):
                depth += 1
            elif depth > 0 and c in (b"]", b"}"):
                depth -= 1
            elif depth == 0 and c in (b",", b"]"):
                seg = chunk[seg_start:pos - 1]
                room = cap - len(item)
                if room > 0:
                    item += seg[:room]
                item_len += len(seg)
                if item_len and bytes(item).strip() or item_len > cap:
                    yield bytes(item), item_len
                item.clear()
                item_len = 0
                seg_start = pos
                if c == b"]":
                    return
        seg = chunk[seg_start:n]
        room = cap - len(item)
        if room > 0:
            item += seg[:room]
        item_len += len(seg)
    if bytes(item).strip():  # array never closed: the last item is malformed or cut
        yield bytes(item), item_len


def skip_ws(stream: BinaryIO) -> bytes:
    """Read until the first non-whitespace byte; returns the bytes read from there on ('' at EOF)."""
    while True:
        b = stream.read(SNIFF)
        if not b:
            return b""
        s = b.lstrip()
        if s.startswith(b"\xef\xbb\xbf"):
            s = s[3:].lstrip()
        if s:
            return s


class TailTracker:
    """A read(n) pass-through that counts bytes and keeps the last block read (tar end checks)."""

    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self.total = 0
        self.tail = b""

    def read(self, n: int = -1) -> bytes:
        b = self._stream.read(n)
        if b:
            self.total += len(b)
            self.tail = (self.tail + b)[-512:]
        return b
