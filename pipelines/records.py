"""Records that flow between pipeline stages (plain dataclasses, cheap to pickle)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

Bucket = Literal["kept", "filtered", "duplicate", "rejected"]
SNIPPET_CHARS = 200


@dataclass(frozen=True)
class Document:
    """One document. doc_id is stable: derived from source + path + record index."""

    doc_id: str
    source: str
    text: str
    url: str | None = None
    title: str | None = None
    date: str | None = None
    # Set by the clean stage (pipelines/langid.py): detected language code and its score in [0, 1].
    language: str | None = None
    language_score: float | None = None


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


@dataclass(frozen=True)
class SentencedDocument:
    doc_id: str
    source: str
    sentences: tuple[str, ...]


@dataclass(frozen=True)
class TokenizedDocument:
    doc_id: str
    source: str
    sentences: tuple[tuple[int, ...], ...]
    num_tokens: int = field(default=0)


def make_doc_id(source: str, path: str, index: int) -> str:
    """Stable id: source, a short hash of the path, and the record index in that file."""
    # surrogateescape: a path holding undecodable bytes (a tar member name) hashes to its bytes
    h = hashlib.blake2b(path.encode("utf-8", "surrogateescape"), digest_size=6).hexdigest()
    return f"{source}-{h}-{index:08d}"


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
