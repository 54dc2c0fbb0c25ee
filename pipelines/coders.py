"""Compact Beam coders for the records that cross the large shuffles.

``TokenizedDocument`` is the heaviest record of a build: every token of the corpus crosses the
packing shuffle (``WriteCorpus/GroupForPacking``) and the tokenized-intermediate shuffle in it.
Without a coder of its own Beam pickles it (the fallback coder). This coder writes the ids as raw
little-endian bytes, 2 an id (uint16) or 4 (int32), after the sentence lengths; decoding gives
``TokenIds`` arrays again, never Python int tuples (#16.5: ~36 bytes an id in memory).

Importing this module registers the coder; a PCollection gets it where its element type is
declared (``with_output_types``), as Beam picks coders by type hint.
"""

from __future__ import annotations

import struct
import sys

from apache_beam import coders

from pipelines.records import TokenIds, TokenizedDocument

_LITTLE = sys.byteorder == "little"
_WIDTH = {"H": 2, "i": 4}
_HEAD = struct.Struct("<QI")  # num_tokens, sentence count


def _varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = n = 0
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7


def _text(out: bytearray, s: str) -> None:
    b = s.encode("utf-8")
    _varint(out, len(b))
    out += b


def _read_text(data: bytes, pos: int) -> tuple[str, int]:
    n, pos = _read_varint(data, pos)
    return data[pos: pos + n].decode("utf-8"), pos + n


def encode_tokenized(d: TokenizedDocument) -> bytes:
    """doc_id, source, num_tokens, then per sentence: width code + length; then every id, raw."""
    out = bytearray()
    _text(out, d.doc_id)
    _text(out, d.source)
    out += _HEAD.pack(d.num_tokens, len(d.sentences))
    for s in d.sentences:
        out.append(_WIDTH[s.typecode])
        _varint(out, len(s))
    for s in d.sentences:
        if _LITTLE:
            out += s  # the buffer itself: no copy into bytes first
        else:
            t = TokenIds(s.typecode, s)
            t.byteswap()
            out += t
    return bytes(out)


def decode_tokenized(data: bytes) -> TokenizedDocument:
    """The inverse of ``encode_tokenized``: sentences as ``TokenIds`` of the width they were written in."""
    doc_id, pos = _read_text(data, 0)
    source, pos = _read_text(data, pos)
    num_tokens, count = _HEAD.unpack_from(data, pos)
    pos += _HEAD.size
    shapes = []
    for _ in range(count):
        width = data[pos]
        n, pos = _read_varint(data, pos + 1)
        shapes.append(("H" if width == 2 else "i", n * width))
    view = memoryview(data)
    sents = []
    for typecode, nbytes in shapes:
        s = TokenIds(typecode)
        s.frombytes(view[pos: pos + nbytes])
        if not _LITTLE:
            s.byteswap()
        sents.append(s)
        pos += nbytes
    return TokenizedDocument(doc_id, source, tuple(sents), num_tokens)


class TokenizedDocumentCoder(coders.Coder):
    """``TokenizedDocument`` <-> bytes (see ``encode_tokenized``): ids stay 2 or 4 bytes each."""

    def encode(self, value: TokenizedDocument) -> bytes:
        return encode_tokenized(value)

    def decode(self, encoded: bytes) -> TokenizedDocument:
        return decode_tokenized(encoded)

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self):
        return TokenizedDocument

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


coders.registry.register_coder(TokenizedDocument, TokenizedDocumentCoder)
