"""The packing rules of the papers, as pure functions (see docs/packing.md): routing and the entry point.

FULL-SENTENCES and DOC-SENTENCES (RoBERTa, here), SEGMENT-PAIR+NSP and
SENTENCE-PAIR+NSP (BERT / RoBERTa's ablations) and SOP (ALBERT; those three in
``pipelines.pack.pairs``) turn the tokenized documents of one packing group into
training sequences (``pipelines.pack.sequences``).

Everything here is deterministic and independent of execution: documents are
sorted by ``doc_id`` first, and every random choice (short targets, NSP
coins and negatives, split points, truncation sides, SOP swaps) is a hash of
``(seed, doc_id, stage, index)`` via ``stable_hash`` / ``unit_hash``. The
same documents therefore give the same sequences on every runner, whatever
the bundle order. The Beam step (``pipelines.pack.step``) only has to route each
document to ``(split_of(...), group_of(...))`` and call ``pack_group`` per key.

Label conventions (the same as BERT/ALBERT's data code and Hugging Face):
NSP ``label=0``: B is A's real continuation, ``label=1``: B is a random
segment from another document. SOP ``label=0``: A then B in document order,
``label=1``: swapped.

Token accounting: every input token has exactly one *home* sequence, or is
counted as truncated or dropped, so ``PackStats.unaccounted_tokens == 0``.
A random-next B segment is a *borrowed* copy of another document's tokens and
is not their home; the A-side sentences it displaced are put back and start
the next pair (as BERT does).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from pipelines.pack.pairs import pack_segment_pairs, pack_sentence_pairs
from pipelines.pack.sequences import Doc, PackedSequence, PackStats, Segment, emit, target_length
from pipelines.records import TokenIds, TokenizedDocument, stable_hash, token_ids, unit_hash
from schemas import BOS_ID, EOS_ID
from schemas.config import PackingConfig

Split = Literal["train", "valid"]

# Hash stage names of the routing; prefixed so they never collide with other pipeline stages.
_S_SPLIT = "pack.split"
_S_GROUP = "pack.group"


# ------------------------------------------------------------ routing


def split_of(doc_id: str, seed: int, valid_fraction: float) -> Split:
    """Return "train" or "valid" by a hash of the document id (a document never straddles splits)."""
    return "valid" if unit_hash(seed, doc_id, _S_SPLIT) < valid_fraction else "train"


def group_of(doc_id: str, seed: int, groups: int) -> int:
    """Deterministic packing group in ``[0, groups)``; independent of the split hash."""
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    return stable_hash(seed, doc_id, _S_GROUP) % groups


# ------------------------------------------------------------ entry point


def pack_group(
    docs: Sequence[TokenizedDocument], cfg: PackingConfig, seed: int, group: int,
    ends: tuple[int, int] = (BOS_ID, EOS_ID),
) -> tuple[list[PackedSequence], PackStats]:
    """Pack all documents of one split of one group by ``cfg.rule``.

    ``docs`` may come in any order (they are sorted by doc_id, so the output is
    independent of bundle order). Every document must belong to ``group``
    (``group_of(doc_id, seed, cfg.groups)``): NSP negatives are drawn from the
    group, so a wiring mistake would silently change the corpus.

    ``ends``: the ids of ``<s>`` and ``</s>``: shardforge's fixed ones, or an
    existing model's (BERT's [CLS] and [SEP]), from the manifest's ``special_ids``.
    """
    for d in docs:
        g = group_of(d.doc_id, seed, cfg.groups)
        if g != group:
            raise ValueError(f"document {d.doc_id!r} belongs to packing group {g}, not {group}")
    stats = PackStats()
    # Ties on doc_id (should not happen after dedupe) are broken by content so
    # the order stays a function of the input set alone.
    ordered = sorted(docs, key=lambda d: (d.doc_id, d.source, d.sentences))
    pair = cfg.rule in ("segment_pair_nsp", "sentence_pair_nsp", "sop")
    # Pieces must fit one sequence (single rules) or half of a pair, so that a
    # split sentence becomes a natural A/B pair instead of being truncated.
    cap = max(1, (cfg.max_seq_len - 3) // 2) if pair else cfg.max_seq_len - 2
    pool = [d for d in (_segments(doc, cap, stats) for doc in ordered) if d[1]]
    if cfg.rule == "full_sentences":
        out = _pack_contiguous(pool, cfg, seed, stats, ends, cross_docs=True)
    elif cfg.rule == "doc_sentences":
        out = _pack_contiguous(pool, cfg, seed, stats, ends, cross_docs=False)
    elif cfg.rule == "sentence_pair_nsp":
        out = pack_sentence_pairs(pool, cfg, seed, stats, ends)
    else:
        out = pack_segment_pairs(pool, cfg, seed, stats, ends, sop=cfg.rule == "sop")
    return out, stats


# ------------------------------------------------------------ helpers


def _segments(doc: TokenizedDocument, cap: int, stats: PackStats) -> Doc:
    """The document's non-empty sentences, those longer than cap cut into near-equal pieces."""
    stats.documents += 1
    segs: list[Segment] = []
    for sent in doc.sentences:
        n = len(sent)
        if n == 0:
            continue
        stats.sentences += 1
        stats.input_tokens += n
        if n <= cap:
            segs.append(sent)  # shared, not copied: TokenIds are never changed
            continue
        stats.split_long_sentences += 1
        k = -(-n // cap)  # ceil: fewest pieces that fit
        base, extra = divmod(n, k)
        pos = 0
        for j in range(k):
            size = base + (1 if j < extra else 0)
            segs.append(sent[pos : pos + size])
            pos += size
    if not segs:
        stats.empty_documents += 1
    return doc.doc_id, segs


def join_ids(first: int, parts: Sequence[Segment | int], last: int) -> TokenIds:
    """``token_ids((first, *ids of parts, last))``; parts are segments or single ids.

    uint16 segments (every id of a sentence fits) are appended as memory, not id by id; anything
    else (an int32 segment, an id past 65535) takes ``token_ids`` over every id, which picks the
    width as before: the same ids at the same width either way.
    """
    out = TokenIds("H")
    try:
        out.append(first)
        for part in parts:
            if type(part) is int:
                out.append(part)
            elif getattr(part, "typecode", None) == "H":
                out.extend(part)  # type: ignore[arg-type]
            else:
                raise OverflowError
        out.append(last)
        return out
    except OverflowError:
        return token_ids((first, *_flatten(parts), last))


def _flatten(parts: Iterable[Segment | int]) -> Iterable[int]:
    """Every id of the parts, in order."""
    for part in parts:
        if type(part) is int:
            yield part
        else:
            yield from part  # type: ignore[misc]


# ------------------------------------------------------------ FULL- / DOC-SENTENCES


def _pack_contiguous(
    pool: list[Doc], cfg: PackingConfig, seed: int, stats: PackStats, ends: tuple[int, int], cross_docs: bool
) -> list[PackedSequence]:
    """``<s> d1 ... </s> d2 ... </s>``: whole segments, one ``</s>`` between documents.

    A block is closed when the next segment (plus its document separator) would
    not fit its target; DOC-SENTENCES also closes at every document end.
    """
    cap = cfg.max_seq_len - 2
    p = cfg.effective_short_seq_prob
    out: list[PackedSequence] = []
    parts: list[Segment | int] = []  # block content between <s> and the final </s>: segments and separators
    size = 0  # tokens in parts
    members: list[str] = []
    target = cap

    def close() -> None:
        nonlocal size
        if size:
            emit(out, PackedSequence(input_ids=join_ids(ends[0], parts, ends[1]), doc_ids=tuple(members)), stats)
            parts.clear()
            members.clear()
            size = 0

    for doc_id, segs in pool:
        for k, seg in enumerate(segs):
            sep = 1 if (size and k == 0) else 0
            if size and size + sep + len(seg) > target:
                close()
                sep = 0
            if not size:
                # Keyed by the block's first segment, so each block draws once.
                target = target_length(seed, doc_id, k, cap, p, stats)
            if sep:
                parts.append(ends[1])
            parts.append(seg)
            size += sep + len(seg)
            stats.home_tokens += len(seg)
            if not members or members[-1] != doc_id:
                members.append(doc_id)
        if not cross_docs:
            close()
    close()
    return out
