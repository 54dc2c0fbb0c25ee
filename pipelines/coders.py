"""Compact Beam coders for the records that cross the large shuffles.

``TokenizedDocument`` is the heaviest record of a build: every token of the corpus crosses the
packing shuffle (``WriteCorpus/GroupForPacking``, which encodes each document once with
``encode_tokenized`` and ships the bytes). Without a coder of its own Beam pickles it (the fallback
coder) wherever it is stored between stages. This coder writes the ids as raw little-endian
bytes, 2 an id (uint16) or 4 (int32), after the sentence widths and lengths; decoding gives
``TokenIds`` arrays again, never Python int tuples (~36 bytes an id in memory).

A packing group leaves the shuffle as ``EncodedDocuments``: the documents' bytes, decoded as the
packing step reads them. Its coder exists for Beam's element-size sampling, which sizes the first
elements of every PCollection (every group, there being few): from the bytes' lengths, where an
iterable of documents was sized by decoding each one.

Importing this module registers the coders; a PCollection gets one where its element type is
declared (``with_output_types``), as Beam picks coders by type hint.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterable, Iterator

from apache_beam import coders

from pipelines.records import Document, TokenIds, TokenizedDocument

_LITTLE = sys.byteorder == "little"
_WIDTH = {"H": 2, "i": 4}
_TYPECODE = {2: "H", 4: "i"}
# UTF-8 bytes of doc_id and of source, num_tokens, sentence count.
_HEAD = struct.Struct("<IIQI")


def encode_tokenized(d: TokenizedDocument) -> bytes:
    """Head, doc_id, source, one width byte per sentence, the sentence lengths (uint32), then every id, raw.

    Fixed-width fields throughout, so both directions are a few C calls, not a loop per field.
    """
    doc_id, source = d.doc_id.encode("utf-8"), d.source.encode("utf-8")
    sents = d.sentences
    out = bytearray(_HEAD.pack(len(doc_id), len(source), d.num_tokens, len(sents)))
    out += doc_id
    out += source
    out += bytes(_WIDTH[s.typecode] for s in sents)
    out += struct.pack(f"<{len(sents)}I", *map(len, sents))
    for s in sents:
        if _LITTLE:
            out += s  # the buffer itself: no copy into bytes first
        else:
            t = TokenIds(s.typecode, s)
            t.byteswap()
            out += t
    return bytes(out)


def encoded_tokenized_size(d: TokenizedDocument) -> int:
    """``len(encode_tokenized(d))``, without encoding."""
    sents = d.sentences
    return (_HEAD.size + len(d.doc_id.encode("utf-8")) + len(d.source.encode("utf-8")) + 5 * len(sents)
            + sum(len(s) * s.itemsize for s in sents))


def decode_tokenized(data: bytes) -> TokenizedDocument:
    """The inverse of ``encode_tokenized``: sentences as ``TokenIds`` of the width they were written in."""
    id_len, source_len, num_tokens, count = _HEAD.unpack_from(data, 0)
    pos = _HEAD.size
    doc_id = data[pos: pos + id_len].decode("utf-8")
    pos += id_len
    source = data[pos: pos + source_len].decode("utf-8")
    pos += source_len
    widths = data[pos: pos + count]
    pos += count
    lengths = struct.unpack_from(f"<{count}I", data, pos)
    pos += 4 * count
    sents = []
    if _LITTLE and count and widths.count(widths[0]) == count:
        # One width throughout (the usual case): each sentence is its bytes slice, no per-width lookups.
        width, typecode = widths[0], _TYPECODE[widths[0]]
        for n in lengths:
            end = pos + n * width
            sents.append(TokenIds(typecode, data[pos:end]))
            pos = end
        return TokenizedDocument(doc_id, source, tuple(sents), num_tokens)
    view = memoryview(data)
    for width, n in zip(widths, lengths, strict=True):
        s = TokenIds(_TYPECODE[width])
        s.frombytes(view[pos: pos + n * width])
        if not _LITTLE:
            s.byteswap()
        sents.append(s)
        pos += n * width
    return TokenizedDocument(doc_id, source, tuple(sents), num_tokens)


# A Document's seven optional-or-not strings (UTF-8 byte lengths, -1: None), whether it has a
# language score, the score, and its word count (-1: None).
_DOC_HEAD = struct.Struct("<7i?dq")
_DOC_STRINGS = ("doc_id", "source", "text", "url", "title", "date", "language")


def encode_document(d: Document) -> bytes:
    """A ``Document`` as bytes: the head, then its strings' UTF-8 bytes (lone surrogates kept).

    What crosses the local runner's grouping as bytes, which its buffer decodes and encodes again
    on the way (``pipelines.intermediates.WriteParts``): a memory copy there, where a pickled Document
    was unpickled and pickled again."""
    raw = [None if v is None else v.encode("utf-8", "surrogatepass") for v in (getattr(d, f) for f in _DOC_STRINGS)]
    score = d.language_score
    head = _DOC_HEAD.pack(*(-1 if b is None else len(b) for b in raw), score is not None,
                          0.0 if score is None else score, -1 if d.words is None else d.words)
    return b"".join([head, *(b for b in raw if b)])


def decode_document(data: bytes) -> Document:
    """The inverse of ``encode_document``."""
    *lengths, has_score, score, words = _DOC_HEAD.unpack_from(data, 0)
    pos = _DOC_HEAD.size
    values = []
    for n in lengths:
        if n < 0:
            values.append(None)
        else:
            values.append(data[pos:pos + n].decode("utf-8", "surrogatepass"))
            pos += n
    return Document(*values, language_score=score if has_score else None, words=None if words < 0 else words)


class _RecordCoder(coders.Coder):
    """What every coder here shares: deterministic, equal to any coder of its class, and typed
    (``to_type_hint``: the class ``record`` names)."""

    record: type

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self):
        return self.record

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


class TokenizedDocumentCoder(_RecordCoder):
    """``TokenizedDocument`` <-> bytes (see ``encode_tokenized``): ids stay 2 or 4 bytes each."""

    record = TokenizedDocument

    def encode(self, value: TokenizedDocument) -> bytes:
        return encode_tokenized(value)

    def decode(self, encoded: bytes) -> TokenizedDocument:
        return decode_tokenized(encoded)

    def estimate_size(self, value: TokenizedDocument) -> int:
        # Beam's element-size metrics ask for this; the default encodes the document to measure it
        # (in a build, once for every tokenized document: 3,108 of 3,108 at 10 MB).
        return encoded_tokenized_size(value)


coders.registry.register_coder(TokenizedDocument, TokenizedDocumentCoder)


class EncodedDocuments:
    """A packing group's documents, as the bytes they crossed the shuffle in (``encode_tokenized``),
    decoded as they are read; iterable as often as the grouped values are (Beam's are)."""

    __slots__ = ("_values",)

    def __init__(self, values: Iterable[bytes]):
        self._values = values

    def __iter__(self) -> Iterator[TokenizedDocument]:
        return map(decode_tokenized, self._values)


_ENCODED_LIST = coders.IterableCoder(coders.BytesCoder())


class EncodedDocumentsCoder(_RecordCoder):
    """``EncodedDocuments`` <-> bytes: the documents' bytes as an iterable of bytes.

    Its reason to exist is ``estimate_size``. Beam measures the size of the first ten elements of
    every PCollection (then ~10 in N); a packing group is one element, and as an iterable of
    ``TokenizedDocument`` its size was estimated by decoding every document of the group and
    sizing it (a second decode of every tokenized document in a build). Summing the lengths of
    the bytes gives the size without decoding.
    """

    record = EncodedDocuments

    def encode(self, value: EncodedDocuments) -> bytes:
        return _ENCODED_LIST.encode(list(value._values))

    def decode(self, encoded: bytes) -> EncodedDocuments:
        return EncodedDocuments(_ENCODED_LIST.decode(encoded))

    def estimate_size(self, value: EncodedDocuments) -> int:
        # A 4-byte count, and each value's bytes after its length (a varint: 1-3 bytes here; 2 taken).
        return 4 + sum(len(v) + 2 for v in value._values)


coders.registry.register_coder(EncodedDocuments, EncodedDocumentsCoder)
