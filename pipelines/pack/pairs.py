"""The pair rules: SEGMENT-PAIR+NSP and SENTENCE-PAIR+NSP (BERT / RoBERTa's ablations) and SOP (ALBERT).

Each sequence is ``<s> A </s> B </s>`` with token types 0 for ``<s> A </s>`` and 1 for ``B </s>``.
NSP ``label=0``: B is A's real continuation, ``label=1``: B is a random segment of another
document of the group (a *borrowed* copy, not its tokens' home; the A-side sentences it displaced
are put back and start the next pair, as BERT does). SOP ``label=0``: A then B in document order,
``label=1``: swapped. A pair longer than the sequence is cut by BERT's ``truncate_seq_pair``, in
closed form (``truncate_pair``). Every choice is a keyed hash (see ``pipelines.pack.rules``).
``pack_segment_pairs`` and ``pack_sentence_pairs`` are called by ``pipelines.pack.rules.pack_group``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pipelines.pack.sequences import (
    Doc,
    PackedSequence,
    PackStats,
    Segment,
    emit,
    keyed_randint,
    target_length,
)
from pipelines.records import stable_hash, token_ids, unit_hash
from schemas.config import PackingConfig

# Hash stage names; prefixed so they never collide with other pipeline stages.
_S_A_END = "pack.a_end"
_S_NSP = "pack.nsp"
_S_NSP_DOC = "pack.nsp_doc"
_S_NSP_START = "pack.nsp_start"
_S_SOP = "pack.sop"
_S_TRUNC = "pack.trunc"


# ------------------------------------------------------------ helpers


def _concat(segs: Iterable[Segment]) -> list[int]:
    """The segments\x27 ids, one after the other."""
    out: list[int] = []
    for s in segs:
        out.extend(s)
    return out


def _binomial_half(r: int, *key: object) -> int:
    """Number of heads in r keyed fair coin flips (popcount of r hash bits)."""
    heads = 0
    for j in range(0, r, 64):
        n = min(64, r - j)
        heads += (stable_hash(*key, j) & ((1 << n) - 1)).bit_count()
    return heads


def truncate_pair(
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


def _random_doc(pool: list[Doc], own: int, *key: object) -> int | None:
    """Keyed index of another document of the pool (None when the pool has only this one)."""
    m = len(pool)
    if m < 2:
        return None
    j = stable_hash(*key) % (m - 1)
    return j + 1 if j >= own else j


# ------------------------------------------------------------ SEGMENT-PAIR+NSP and SOP


def pack_segment_pairs(
    pool: list[Doc], cfg: PackingConfig, seed: int, stats: PackStats, ends: tuple[int, int], sop: bool
) -> list[PackedSequence]:
    """BERT's create_instances_from_document (and ALBERT's SOP variant), keyed.

    Segments accumulate into a chunk up to the target length (or the document's end); a keyed
    split point divides the chunk into A and B. Three deliberate differences from BERT:

    * a chunk closes at the last sentence boundary *before* the target (BERT closes once it has
      reached it, so the last sentence overshoots and BERT's truncation cuts 70-75% of pairs
      mid-sentence). A chunk of one segment still takes the next one (two pieces always fit:
      each is at most half the budget), so a pair is cut only when its sentences cannot fit;
      truncation stays as the fallback for that (counted in ``truncated_pairs``). A document's
      last sentence joins the chunk before it when the sequence can hold it, rather than
      being cut in two for a pair of its own;
    * the short target is drawn per chunk (BERT draws it once per document, so 10% of
      documents were all short instead of 10% of sequences);
    * a chunk of one segment (a document's last, after a random next put the others back) takes
      the NSP coin like any other and, on real next, is cut in two (BERT always gives it a random B:
      53-57% of its labels were random next instead of the paper's 50%).
    """
    max_tokens = cfg.max_seq_len - 3
    p = cfg.effective_short_seq_prob
    out: list[PackedSequence] = []
    for own, (doc_id, segs) in enumerate(pool):
        n = len(segs)
        i = 0
        while i < n:
            start = i
            target = target_length(seed, doc_id, start, max_tokens, p, stats)
            chunk_len = len(segs[i])
            i += 1
            # Take whole sentences while they fit the target (the second one whatever its length).
            while i < n and (i - start < 2 or chunk_len + len(segs[i]) <= target):
                chunk_len += len(segs[i])
                i += 1
            # A document's last sentence left alone would have to be cut in two for a pair
            # (SOP, or NSP's real next): it joins this chunk when the sequence can hold it.
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
    pool: list[Doc],
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
    a_end = keyed_randint(1, len(chunk) - 1, seed, doc_id, _S_A_END, start) if len(chunk) >= 2 else 1
    # A lone one-token segment cannot be cut for a real next: it takes a random B when there is one.
    want_random = unit_hash(seed, doc_id, _S_NSP, start) < 0.5 or (len(chunk) == 1 and len(chunk[0]) < 2)
    r = _random_doc(pool, own, seed, doc_id, _S_NSP_DOC, start) if want_random else None
    if r is not None:
        a = _concat(chunk[:a_end])
        other_id, other = pool[r]
        # BERT: B starts at a random segment of the other document and grows until it
        # reaches the space A left. Ours stops before a sentence that would not fit the
        # sequence (at least one segment), so B ends at a sentence boundary.
        j = keyed_randint(0, len(other) - 1, seed, doc_id, _S_NSP_START, start)
        b: list[int] = list(other[j])
        j += 1
        while j < len(other) and len(b) < target - len(a) and len(a) + len(b) + len(other[j]) <= max_tokens:
            b.extend(other[j])
            j += 1
        label, doc_ids, put_back = 1, (doc_id, other_id), len(chunk) - a_end
        stats.random_next += 1
    else:
        if len(chunk) >= 2:
            a, b = _concat(chunk[:a_end]), _concat(chunk[a_end:])
        else:  # a lone segment (a document's last, or its only one): cut it to get a real next
            halves = _split_single(chunk[0], stats)
            if halves is None:
                return 0
            a, b = halves
        label, doc_ids, put_back = 0, (doc_id,), 0
        stats.real_next += 1
        stats.fallback_real_next += int(want_random)
    a, b, ra, rb = truncate_pair(a, b, max_tokens, (seed, doc_id, _S_TRUNC, start))
    _account_pair(stats, a, b, ra, rb, borrowed_b=label == 1)
    emit(out, _pair_sequence(a, b, doc_ids, label, ends), stats)
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
        a_end = keyed_randint(1, len(chunk) - 1, seed, doc_id, _S_A_END, start)
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
    a, b, ra, rb = truncate_pair(a, b, max_tokens, (seed, doc_id, _S_TRUNC, start))
    _account_pair(stats, a, b, ra, rb, borrowed_b=False)
    emit(out, _pair_sequence(a, b, (doc_id,), label, ends), stats)


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


def pack_sentence_pairs(
    pool: list[Doc], cfg: PackingConfig, seed: int, stats: PackStats, ends: tuple[int, int]
) -> list[PackedSequence]:
    """A is one sentence; B is the next sentence (label 0) or a random sentence of another document (1).

    A real pair consumes both sentences; after a random next the displaced
    sentence is put back and becomes the next A. A document's last sentence, alone, is cut in
    two when the coin says real next (BERT gives it a random B whatever the coin, which tilts the
    labels towards random next). short_seq_prob does not apply:
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
            want_random = unit_hash(seed, doc_id, _S_NSP, idx) < 0.5 or (not has_next and len(segs[idx]) < 2)
            r = _random_doc(pool, own, seed, doc_id, _S_NSP_DOC, idx) if want_random else None
            if r is not None:
                other_id, other = pool[r]
                a = list(segs[idx])
                b = list(other[keyed_randint(0, len(other) - 1, seed, doc_id, _S_NSP_START, idx)])
                label, doc_ids, i = 1, (doc_id, other_id), idx + 1
                stats.random_next += 1
            elif has_next:
                a, b = list(segs[idx]), list(segs[idx + 1])
                label, doc_ids, i = 0, (doc_id,), idx + 2
                stats.real_next += 1
                stats.fallback_real_next += int(want_random)
            else:  # a document's last sentence, alone: cut it to get a real next
                i = idx + 1
                halves = _split_single(segs[idx], stats)
                if halves is None:
                    continue
                a, b = halves
                label, doc_ids = 0, (doc_id,)
                stats.real_next += 1
                stats.fallback_real_next += int(want_random)
            # Cannot trigger with half-budget pieces; kept so the length bound never rests on that.
            a, b, ra, rb = truncate_pair(a, b, max_tokens, (seed, doc_id, _S_TRUNC, idx))
            _account_pair(stats, a, b, ra, rb, borrowed_b=label == 1)
            emit(out, _pair_sequence(a, b, doc_ids, label, ends), stats)
    return out
