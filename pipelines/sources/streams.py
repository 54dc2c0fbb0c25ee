"""Byte streams under the readers: re-encoding, binary sniffing, and framing.

Everything here works on ``read(n)`` streams (decompressed by ``compression``) and never parses a
record: it cuts lines, JSON array items and sniffed heads out of bytes, reads a file whose lines
end in a lone CR as lines, and turns UTF-16/32 text with a byte-order mark into UTF-8.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from typing import BinaryIO

from pipelines.records import snippet
from pipelines.sources.compression import CHUNK, CorruptData, Drained

SNIFF = 8192  # bytes looked at to recognise binary files, byte-order marks and tar archives
BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"), (b"\xff\xfe", "utf-16"),
        (b"\xfe\xff", "utf-16"))


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


# ------------------------------------------------------------------ text encodings

def bom_encoding(head: bytes) -> str | None:
    """'utf-16' / 'utf-32' when the bytes start with that byte-order mark, else None."""
    for bom, enc in BOMS:
        if head.startswith(bom):
            return enc
    return None


class Transcoded(Drained):
    """A read(n) stream of UTF-8 over text in another encoding.

    ``errors="replace"`` (UTF-16/32 found by its byte-order mark): undecodable units become U+FFFD.
    ``errors="surrogateescape"`` (an encoding the source declares): an undecodable byte passes
    through as itself, invalid UTF-8 that the cleaning stage's ``invalid_utf8`` policy rejects or
    repairs, as it does for a UTF-8 file's bad bytes.
    """

    def __init__(self, stream: BinaryIO, encoding: str, errors: str = "replace"):
        super().__init__()
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder(encoding)(errors=errors)
        self._errors = errors

    def _produce(self) -> None:
        data = self._stream.read(CHUNK)
        text = self._decoder.decode(data, final=not data)
        self._done = not data
        self._buf += text.encode("utf-8", errors=self._errors)


def declared_encoding(encoding: str) -> str | None:
    """A source's ``encoding`` when its bytes need re-encoding to UTF-8 (None for UTF-8 itself)."""
    return None if encoding == "utf-8" else encoding


class CrLines:
    """A read(n) stream that reads a file whose lines end in a lone CR (classic Mac) as LF lines.

    Decided by the stream's first line end: CR not followed by LF turns every CR into LF (one
    byte for one, so lengths and caps are unchanged); LF or CRLF leaves the bytes as they are.
    """

    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self._cr_only: bool | None = None
        self._held = b""  # a byte read ahead to see what follows a CR at the end of a read

    def read(self, n: int = -1) -> bytes:
        if self._held:
            b, self._held = self._held, b""
            if n < 0 or n > 1:
                b += self._stream.read(n if n < 0 else n - 1)
        else:
            b = self._stream.read(n)
        if self._cr_only is None and b:
            cr, lf = b.find(b"\r"), b.find(b"\n")
            if lf >= 0 and (cr < 0 or lf < cr):
                self._cr_only = False
            elif cr >= 0:
                if cr + 1 == len(b):
                    self._held = self._stream.read(1)
                    nxt = self._held[:1]
                else:
                    nxt = b[cr + 1:cr + 2]
                self._cr_only = nxt != b"\n"
        return b.replace(b"\r", b"\n") if self._cr_only else b


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
    """NUL bytes never occur in UTF-8 text we want; a document (or record) with them is binary."""
    return b"\x00" in head


# C0 control bytes other than whitespace and ESC: text has next to none, binary data ~10 % (random
# bytes: 26 of 256), UTF-16 without a byte-order mark ~50 % (NUL high bytes).
CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0E, 0x1B), *range(0x1C, 0x20)])
BINARY_SHARE = 0.05


def mostly_binary(head: bytes) -> bool:
    """Whether a file's first bytes are binary data rather than text with a stray control byte.

    A file of records (JSON lines, delimited documents) is rejected whole as ``binary`` only when
    its head is: a NUL byte in one record rejects that record alone.
    """
    if not head:
        return False
    return (len(head) - len(head.translate(None, CONTROL_BYTES))) > BINARY_SHARE * len(head)


# ------------------------------------------------------------------ framing

def read_up_to(stream: BinaryIO, n: int, keep_before_fault: bool = False) -> bytes:
    """Read n bytes (fewer only at the end of the stream); decompressors may return short reads.

    ``keep_before_fault``: a fault (EOFError, CorruptData) after some bytes ends the read with those
    bytes; one before any byte is raised. Without it, every fault is raised."""
    parts: list[bytes] = []
    got = 0
    while got < n:
        try:
            b = stream.read(min(CHUNK, n - got))
        except (EOFError, CorruptData):
            if not (keep_before_fault and parts):
                raise
            break
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def read_head(stream: BinaryIO, n: int) -> bytes:
    """``read_up_to`` for a sniffed head: a stream that decoded fewer bytes before its fault gives
    those (``Drained`` raises the fault again at the next read, so nothing is lost and nothing skipped)."""
    return read_up_to(stream, n, keep_before_fault=True)


# One character class, greedy, backing off to the run's last newline: SRE's single-class repeat
# runs at ~1.5 ms per MiB (a repeated group, (?:[ \t]*\n)+, is 70x slower).
_BLANK_RUN = re.compile(rb"[ \t\r\f\v\n]*\n")
_BLANK_START = frozenset(b" \t\r\f\v\n")
CUT = -1  # iter_lines' ``blank`` for an unterminated line its stream broke after


def iter_lines(stream: BinaryIO, cap: int) -> Iterator[tuple[bytes, int, int]]:
    """(line, full length, blank) per line, without the newline; a line keeps at most `cap` bytes.

    Longer lines are not held in memory: the rest is counted and dropped, so the caller can
    reject the record as too large after reading at most `cap` of it.

    Runs of whitespace-only lines are cut in bulk (one regex match, not a Python step per line:
    a gigabyte of newlines costs what reading it costs): such a run comes as one item whose
    ``blank`` is the number of lines in it and whose bytes are the run without its last newline
    (so joining items with newlines restores the input); ``blank`` is 0 for every other line.

    A stream that breaks (EOFError, CorruptData) after an unterminated line gives that line with
    ``blank`` = ``CUT`` before the fault is raised: it may be a whole record that lost its newline.
    """
    pending = bytearray()
    pending_len = 0  # true length of the partial line (pending keeps at most cap bytes)
    while True:
        try:
            chunk = stream.read(CHUNK)
        except (EOFError, CorruptData):
            if pending_len:  # the stream broke after this unterminated line: the caller judges it
                yield bytes(pending), pending_len, CUT
            raise
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


def iter_json_array(stream: BinaryIO, cap: int, after: list[bytes] | None = None) -> Iterator[tuple[bytes, int]]:
    """(item bytes, full length) per top-level item of a JSON array (its '[' already consumed).

    A small scanner tracks strings, escapes and nesting so items are split without parsing the
    whole array; an item keeps at most `cap` bytes. Malformed input gives malformed items (the
    caller's json.loads rejects them), never an exception. At the array's closing ']', the bytes
    read past it are appended to ``after`` (the stream goes on from there); nothing is appended
    when the stream ends first.
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
                    if after is not None:
                        after.append(chunk[pos:])
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
