"""The packing rules of the papers, as pure functions (see docs/packing.md).

FULL-SENTENCES and DOC-SENTENCES (RoBERTa), SEGMENT-PAIR+NSP and
SENTENCE-PAIR+NSP (BERT / RoBERTa's ablations) and SOP (ALBERT) turn the
tokenized documents of one packing group into training sequences.

Everything here is deterministic and independent of execution: documents are
sorted by ``doc_id`` first, and every random choice (short targets, NSP
coins and negatives, split points, truncation sides, SOP swaps) is a hash of
``(seed, doc_id, stage, index)`` via ``stable_hash`` / ``unit_hash``. The
same documents therefore give the same sequences on every runner, whatever
the bundle order. The Beam wrapper only has to route each document to
``(split_of(...), group_of(...))`` and call ``pack_group`` per key.

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
from dataclasses import dataclass, fields
from typing import Literal

from pipelines.records import TokenIds, TokenizedDocument, stable_hash, token_ids, unit_hash
from schemas import BOS_ID, EOS_ID
from schemas.config import PackingConfig

Split = Literal["train", "valid"]
# A sentence (or a piece of a long one): the document's own TokenIds, or an array slice of it.
Segment = Sequence[int]
# One document after long sentences were split: (doc_id, non-empty segments).
_Doc = tuple[str, list[Segment]]

# Hash stage names; prefixed so they never collide with other pipeline stages.
_S_SPLIT = "pack.split"
_S_GROUP = "pack.group"
_S_SHORT = "pack.short"
_S_SHORT_LEN = "pack.short_len"
_S_A_END = "pack.a_end"
_S_NSP = "pack.nsp"
_S_NSP_DOC = "pack.nsp_doc"
_S_NSP_START = "pack.nsp_start"
_S_SOP = "pack.sop"
_S_TRUNC = "pack.trunc"


@dataclass(frozen=True)
class PackedSequence:
    """One training sequence.

    input_ids: specials included, no padding, ``len <= max_seq_len``.
    doc_ids: documents that contributed tokens, in order of appearance (for a
    random-next pair the second one is the borrowed B document).
    token_type_ids: pair rules only, 0 for ``<s> A </s>`` and 1 for ``B </s>``.
    label: NSP 1 = random next, 0 = real next; SOP 1 = swapped, 0 = in order.
    """

    input_ids: TokenIds
    doc_ids: tuple[str, ...]
    token_type_ids: TokenIds | None = None
    label: int | None = None


@dataclass
class PackStats:
    """Counters of one packing run; add them to merge across groups.

    Invariant: ``input_tokens == home_tokens + truncated_tokens + dropped_tokens``.
    """

    documents: int = 0  # documents seen (including empty ones)
    empty_documents: int = 0  # documents without a single token
    sentences: int = 0  # non-empty input sentences
    input_tokens: int = 0  # tokens of those sentences (specials excluded)
    sequences: int = 0
    tokens: int = 0  # ids written, specials and borrowed B tokens included
    home_tokens: int = 0  # input tokens placed in their one home sequence
    borrowed_tokens: int = 0  # random-next B tokens copied from another document
    split_long_sentences: int = 0  # sentences longer than the piece cap, split into pieces
    split_for_pair: int = 0  # single-segment pairs made by cutting one segment in two
    dropped_tokens: int = 0  # home tokens that could not form any sequence (1-token pair leftovers)
    short_targets: int = 0  # sequences whose target length was shortened (short_seq_prob)
    pairs: int = 0  # pair sequences (SEGMENT-PAIR, SENTENCE-PAIR, SOP)
    truncated_pairs: int = 0  # pairs cut down to max_seq_len (cut rate = truncated_pairs / pairs)
    cut_segments: int = 0  # A/B segments starting or ending mid-sentence (truncation, split_for_pair)
    truncated_tokens: int = 0  # home tokens removed by truncation
    truncated_borrowed_tokens: int = 0  # borrowed (random-next) tokens removed by truncation
    real_next: int = 0  # NSP label 0 (fallback_real_next included)
    random_next: int = 0  # NSP label 1 (forced_random_next included)
    forced_random_next: int = 0  # A had no continuation (single segment / last sentence)
    fallback_real_next: int = 0  # coin said random but the group has no other document
    in_order: int = 0  # SOP label 0
    swapped: int = 0  # SOP label 1

    def __add__(self, other: PackStats) -> PackStats:
        return PackStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def __iadd__(self, other: PackStats) -> PackStats:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def as_dict(self) -> dict[str, int]:
        """Counters by name (for Beam metrics and the build report)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def unaccounted_tokens(self) -> int:
        """Input tokens neither placed, truncated nor dropped: 0 unless there is a bug."""
        return self.input_tokens - self.home_tokens - self.truncated_tokens - self.dropped_tokens


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
        out = _pack_sentence_pairs(pool, cfg, seed, stats, ends)
    else:
        out = _pack_segment_pairs(pool, cfg, seed, stats, ends, sop=cfg.rule == "sop")
    return out, stats


# ------------------------------------------------------------ helpers


def _segments(doc: TokenizedDocument, cap: int, stats: PackStats) -> _Doc:
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


def _randint(lo: int, hi: int, *key: object) -> int:
    """Keyed integer in [lo, hi] (like random.randint)."""
    return lo + stable_hash(*key) % (hi - lo + 1)


def _target(seed: int, doc_id: str, index: int, max_tokens: int, p: float, stats: PackStats) -> int:
    """BERT's target length: max_tokens, or with probability p a random length in [2, max_tokens]."""
    if p > 0 and unit_hash(seed, doc_id, _S_SHORT, index) < p:
        stats.short_targets += 1
        return _randint(min(2, max_tokens), max_tokens, seed, doc_id, _S_SHORT_LEN, index)
    return max_tokens


def _concat(segs: Iterable[Segment]) -> list[int]:
    out: list[int] = []
    for s in segs:
        out.extend(s)
    return out


def _join_ids(first: int, parts: Sequence[Segment | int], last: int) -> TokenIds:
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
    for part in parts:
        if type(part) is int:
            yield part
        else:
            yield from part  # type: ignore[misc]


def _binomial_half(r: int, *key: object) -> int:
    """Number of heads in r keyed fair coin flips (popcount of r hash bits)."""
    heads = 0
    for j in range(0, r, 64):
        n = min(64, r - j)
        heads += (stable_hash(*key, j) & ((1 << n) - 1)).bit_count()
    return heads


def _truncate_pair(
    a: list[int], b: list[int], max_tokens: int, key: tuple[object, ...]
) -> tuple[list[int], list[int], int, int]:
    """BERT's truncate_seq_pair in closed form: returns (a, b, removed_from_a, removed_from_b).

    BERT removes one token at a time from the longer segment (ties: B), from
    the front or the back by a coin flip. Which segment loses a token depends
    only on lengths, so the per-segment counts are computed directly and the
    front/back split of each is Binomial(r, 1/2), drawn from keyed hash bits.
    """
    la, lb = len(a), len(b)
    excess = la + lb - max_tokens
    if excess <= 0:
        return a, b, 0, 0
    ra = rb = 0
    if la > lb:
        t = min(excess, la - lb)
        ra, excess = t, excess - t
    elif lb > la:
        t = min(excess, lb - la)
        rb, excess = t, excess - t
    rb += (excess + 1) // 2  # equal lengths: B goes first, then they alternate
    ra += excess // 2
    return _trim(a, ra, (*key, "a")), _trim(b, rb, (*key, "b")), ra, rb


def _trim(seg: list[int], r: int, key: tuple[object, ...]) -> list[int]:
    if r == 0:
        return seg
    front = _binomial_half(r, *key)
    return seg[front : len(seg) - (r - front)]


def _pair_sequence(
    a: Sequence[int], b: Sequence[int], doc_ids: tuple[str, ...], label: int, ends: tuple[int, int]
) -> PackedSequence:
    """``<s> A </s> B </s>`` with token types 0 for the first part and 1 for ``B </s>``."""
    bos, eos = ends
    # TokenIds, not tuples: a group's sequences are all held at once (~36 bytes an id as ints).
    ids = token_ids((bos, *a, eos, *b, eos))
    types = token_ids((0,) * (len(a) + 2) + (1,) * (len(b) + 1))
    return PackedSequence(input_ids=ids, doc_ids=doc_ids, token_type_ids=types, label=label)


def _random_doc(pool: list[_Doc], own: int, *key: object) -> int | None:
    """Keyed index of another document of the pool (None when the pool has only this one)."""
    m = len(pool)
    if m < 2:
        return None
    j = stable_hash(*key) % (m - 1)
    return j + 1 if j >= own else j


def _emit(out: list[PackedSequence], seq: PackedSequence, stats: PackStats) -> None:
    out.append(seq)
    stats.sequences += 1
    stats.tokens += len(seq.input_ids)


# ------------------------------------------------------------ FULL- / DOC-SENTENCES


def _pack_contiguous(
    pool: list[_Doc], cfg: PackingConfig, seed: int, stats: PackStats, ends: tuple[int, int], cross_docs: bool
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
            _emit(out, PackedSequence(input_ids=_join_ids(ends[0], parts, ends[1]), doc_ids=tuple(members)), stats)
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
                target = _target(seed, doc_id, k, cap, p, stats)
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


# ------------------------------------------------------------ SEGMENT-PAIR+NSP and SOP


def _pack_segment_pairs(
    pool: list[_Doc], cfg: PackingConfig, seed: int, stats: PackStats, ends: tuple[int, int], sop: bool
) -> list[PackedSequence]:
    """BERT's create_instances_from_document (and ALBERT's SOP variant), keyed.

    Segments accumulate into a chunk up to the target length (or the document's end); a keyed
    split point divides the chunk into A and B. Two deliberate differences from BERT:

    * a chunk closes at the last sentence boundary *before* the target (BERT closes once it has
      reached it, so the last sentence overshoots and BERT's truncation cuts 70-75% of pairs
      mid-sentence). A chunk of one segment still takes the next one (two pieces always fit:
      each is at most half the budget), so a pair is cut only when its sentences cannot fit;
      truncation stays as the fallback for that (counted in ``truncated_pairs``). A document's
      last sentence joins the chunk before it when the sequence can hold it, rather than
      being cut in two (SOP) or sent off with a forced random next (NSP);
    * the short target is drawn per chunk (BERT draws it once per document, so 10% of
      documents were all short instead of 10% of sequences).
    """
    max_tokens = cfg.max_seq_len - 3
    p = cfg.effective_short_seq_prob
    out: list[PackedSequence] = []
    for own, (doc_id, segs) in enumerate(pool):
        n = len(segs)
        i = 0
        while i < n:
            start = i
            target = _target(seed, doc_id, start, max_tokens, p, stats)
            chunk_len = len(segs[i])
            i += 1
            # Take whole sentences while they fit the target (the second one whatever its length).
            while i < n and (i - start < 2 or chunk_len + len(segs[i]) <= target):
                chunk_len += len(segs[i])
                i += 1
            # A document's last sentence left alone would have to be cut in two (SOP) or get
            # a forced random next: it joins this chunk when the sequence can hold it.
            if i == n - 1 and chunk_len + len(segs[i]) <= max_tokens:
                chunk_len += len(segs[i])
                i += 1
            chunk = segs[start:i]
            if sop:
                _sop_pair(out, chunk, doc_id, start, max_tokens, seed, stats, ends)
            else:
                # Random next puts the unused B-side segments back.
                i -= _nsp_pair(out, pool, own, chunk, start, target, max_tokens, seed, stats, ends)
    return out


def _split_single(seg: Segment, stats: PackStats) -> tuple[list[int], list[int]] | None:
    """Cut a lone segment in the middle to make a pair (None, counted dropped, if 1 token)."""
    if len(seg) < 2:
        stats.dropped_tokens += len(seg)
        return None
    stats.split_for_pair += 1
    stats.cut_segments += 2  # A ends and B starts mid-sentence
    mid = len(seg) // 2
    return list(seg[:mid]), list(seg[mid:])


def _nsp_pair(
    out: list[PackedSequence],
    pool: list[_Doc],
    own: int,
    chunk: list[Segment],
    start: int,
    target: int,
    max_tokens: int,
    seed: int,
    stats: PackStats,
    ends: tuple[int, int],
) -> int:
    """Emit one NSP pair from a chunk; returns how many chunk segments were put back."""
    doc_id = pool[own][0]
    a_end = _randint(1, len(chunk) - 1, seed, doc_id, _S_A_END, start) if len(chunk) >= 2 else 1
    want_random = len(chunk) == 1 or unit_hash(seed, doc_id, _S_NSP, start) < 0.5
    r = _random_doc(pool, own, seed, doc_id, _S_NSP_DOC, start) if want_random else None
    if r is not None:
        a = _concat(chunk[:a_end])
        other_id, other = pool[r]
        # BERT: B starts at a random segment of the other document and grows until it
        # reaches the space A left. Ours stops before a sentence that would not fit the
        # sequence (at least one segment), so B ends at a sentence boundary.
        j = _randint(0, len(other) - 1, seed, doc_id, _S_NSP_START, start)
        b: list[int] = list(other[j])
        j += 1
        while j < len(other) and len(b) < target - len(a) and len(a) + len(b) + len(other[j]) <= max_tokens:
            b.extend(other[j])
            j += 1
        label, doc_ids, put_back = 1, (doc_id, other_id), len(chunk) - a_end
        stats.random_next += 1
        stats.forced_random_next += int(len(chunk) == 1)
    else:
        if len(chunk) >= 2:
            a, b = _concat(chunk[:a_end]), _concat(chunk[a_end:])
        else:  # a lone segment in a one-document group: cut it to get a real next
            halves = _split_single(chunk[0], stats)
            if halves is None:
                return 0
            a, b = halves
        label, doc_ids, put_back = 0, (doc_id,), 0
        stats.real_next += 1
        stats.fallback_real_next += int(want_random)
    a, b, ra, rb = _truncate_pair(a, b, max_tokens, (seed, doc_id, _S_TRUNC, start))
    _account_pair(stats, a, b, ra, rb, borrowed_b=label == 1)
    _emit(out, _pair_sequence(a, b, doc_ids, label, ends), stats)
    return put_back


def _sop_pair(
    out: list[PackedSequence],
    chunk: list[Segment],
    doc_id: str,
    start: int,
    max_tokens: int,
    seed: int,
    stats: PackStats,
    ends: tuple[int, int],
) -> None:
    """ALBERT SOP: A and B are consecutive parts of the chunk, swapped by a keyed coin."""
    if len(chunk) >= 2:
        a_end = _randint(1, len(chunk) - 1, seed, doc_id, _S_A_END, start)
        a, b = _concat(chunk[:a_end]), _concat(chunk[a_end:])
    else:
        halves = _split_single(chunk[0], stats)
        if halves is None:
            return
        a, b = halves
    label = 1 if unit_hash(seed, doc_id, _S_SOP, start) < 0.5 else 0
    if label:
        a, b = b, a
        stats.swapped += 1
    else:
        stats.in_order += 1
    # ALBERT swaps first, then truncates.
    a, b, ra, rb = _truncate_pair(a, b, max_tokens, (seed, doc_id, _S_TRUNC, start))
    _account_pair(stats, a, b, ra, rb, borrowed_b=False)
    _emit(out, _pair_sequence(a, b, (doc_id,), label, ends), stats)


def _account_pair(stats: PackStats, a: list[int], b: list[int], ra: int, rb: int, borrowed_b: bool) -> None:
    stats.pairs += 1
    stats.cut_segments += int(ra > 0) + int(rb > 0)
    stats.home_tokens += len(a)
    stats.truncated_tokens += ra
    if borrowed_b:
        stats.borrowed_tokens += len(b)
        stats.truncated_borrowed_tokens += rb
    else:
        stats.home_tokens += len(b)
        stats.truncated_tokens += rb
    stats.truncated_pairs += int(ra + rb > 0)


# ------------------------------------------------------------ SENTENCE-PAIR+NSP


def _pack_sentence_pairs(
    pool: list[_Doc], cfg: PackingConfig, seed: int, stats: PackStats, ends: tuple[int, int]
) -> list[PackedSequence]:
    """A is one sentence; B is the next sentence (label 0) or a random sentence of another document (1).

    A real pair consumes both sentences; after a random next the displaced
    sentence is put back and becomes the next A. short_seq_prob does not apply:
    pieces are at most half the budget, so a pair always fits whole.
    """
    max_tokens = cfg.max_seq_len - 3
    out: list[PackedSequence] = []
    for own, (doc_id, segs) in enumerate(pool):
        n = len(segs)
        i = 0
        while i < n:
            idx = i
            has_next = i + 1 < n
            want_random = not has_next or unit_hash(seed, doc_id, _S_NSP, idx) < 0.5
            r = _random_doc(pool, own, seed, doc_id, _S_NSP_DOC, idx) if want_random else None
            if r is not None:
                other_id, other = pool[r]
                a = list(segs[idx])
                b = list(other[_randint(0, len(other) - 1, seed, doc_id, _S_NSP_START, idx)])
                label, doc_ids, i = 1, (doc_id, other_id), idx + 1
                stats.random_next += 1
                stats.forced_random_next += int(not has_next)
            elif has_next:
                a, b = list(segs[idx]), list(segs[idx + 1])
                label, doc_ids, i = 0, (doc_id,), idx + 2
                stats.real_next += 1
                stats.fallback_real_next += int(want_random)
            else:  # last sentence of the only document: cut it to get a real next
                i = idx + 1
                halves = _split_single(segs[idx], stats)
                if halves is None:
                    continue
                a, b = halves
                label, doc_ids = 0, (doc_id,)
                stats.real_next += 1
                stats.fallback_real_next += 1
            # Cannot trigger with half-budget pieces; kept so the length bound never rests on that.
            a, b, ra, rb = _truncate_pair(a, b, max_tokens, (seed, doc_id, _S_TRUNC, idx))
            _account_pair(stats, a, b, ra, rb, borrowed_b=label == 1)
            _emit(out, _pair_sequence(a, b, doc_ids, label, ends), stats)
    return out


# ------------------------------------------------------------ a packed group between stages

_PACKED_MAGIC = b"SFPK1"


def encode_packed(seqs: Sequence[PackedSequence]) -> bytes:
    """A group's packed sequences as one compact blob: what the packing step hands the shard writer.

    The ids of every sequence in one buffer (uint16 when they all fit, else int32), their lengths,
    the token types (pair rules), the labels and the doc ids. ``decode_packed`` gives back equal
    sequences (a group with any id past uint16 comes back int32 throughout; the shard writer's
    width follows the vocabulary, not the array).
    """
    import json

    import numpy as np

    n = len(seqs)
    lengths = np.fromiter((len(s.input_ids) for s in seqs), dtype=np.uint32, count=n)
    wide = any(s.input_ids.typecode != "H" for s in seqs)
    ids = b"".join(s.input_ids if not wide else TokenIds("i", s.input_ids) for s in seqs)
    pairs = n > 0 and seqs[0].token_type_ids is not None
    if any((s.token_type_ids is not None) != pairs for s in seqs):
        raise ValueError("a packed group mixes sequences with and without token types")
    types = b""
    if pairs:  # token types are 0/1: uint16 buffers as packing makes them, one byte each here
        raw = b"".join(t if t.typecode == "H" else TokenIds("H", t) for t in (s.token_type_ids for s in seqs))
        types = np.frombuffer(raw, dtype=np.uint16).astype(np.uint8).tobytes()
    labels = np.fromiter((-1 if s.label is None else s.label for s in seqs), dtype=np.int8, count=n).tobytes()
    meta = json.dumps([list(s.doc_ids) for s in seqs], separators=(",", ":")).encode("utf-8")
    head = np.array([n, int(wide), int(pairs), len(ids), len(types), len(meta)], dtype=np.uint64).tobytes()
    return b"".join((_PACKED_MAGIC, head, lengths.tobytes(), ids, types, labels, meta))


def decode_packed(blob: bytes) -> list[PackedSequence]:
    """The sequences ``encode_packed`` wrote."""
    import json

    import numpy as np

    if not blob.startswith(_PACKED_MAGIC):
        raise ValueError("not a packed group")
    pos = len(_PACKED_MAGIC)
    n, wide, pairs, n_ids, n_types, n_meta = (int(v) for v in np.frombuffer(blob, dtype=np.uint64, count=6,
                                                                            offset=pos))
    pos += 48
    lengths = np.frombuffer(blob, dtype=np.uint32, count=n, offset=pos).tolist()
    pos += 4 * n
    ids = memoryview(blob)[pos:pos + n_ids]
    pos += n_ids
    types = memoryview(blob)[pos:pos + n_types]
    pos += n_types
    labels = np.frombuffer(blob, dtype=np.int8, count=n, offset=pos).tolist()
    pos += n
    doc_ids = json.loads(bytes(blob[pos:pos + n_meta]))
    width = 4 if wide else 2
    code = "i" if wide else "H"
    out: list[PackedSequence] = []
    start = 0
    for length, label, docs in zip(lengths, labels, doc_ids, strict=True):
        seq_ids = TokenIds(code)
        seq_ids.frombytes(ids[start * width:(start + length) * width])
        tt = None
        if pairs:
            tt = TokenIds("H", types[start:start + length])
        out.append(PackedSequence(seq_ids, tuple(docs), tt, None if label < 0 else label))
        start += length
    return out
