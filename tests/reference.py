"""Naive reference implementations: the definitions, written plainly, that fast paths are checked against.

Tests compare the optimized code with these; benchmarks time the optimized
code against them (``from tests.reference import ...``, run from the
repository root). Keep them obviously correct, not fast.
"""

from __future__ import annotations

import collections


def naive_dup_ngram_frac(words: list[str], n: int) -> float:
    """Gopher's duplicated n-gram character share, by its definition.

    The share of the words' characters covered by an n-gram that occurs more
    than once (Rae et al. 2021, Table A1); 0 for no words.
    """
    total = sum(len(w) for w in words)
    if not total:
        return 0.0
    counts = collections.Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    covered = [False] * len(words)
    for i in range(len(words) - n + 1):
        if counts[tuple(words[i:i + n])] > 1:
            for j in range(i, i + n):
                covered[j] = True
    return sum(len(w) for w, c in zip(words, covered, strict=True) if c) / total


def shingle_set(text: str, n: int) -> set[tuple[str, ...]]:
    """The word n-grams of the normalized text, as Python tuples (a text shorter than n is one n-gram)."""
    from pipelines.dedupe.minhash import normalize_text

    w = normalize_text(text).split()
    if len(w) < n:
        return {tuple(w)} if w else set()
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def true_jaccard(a: str, b: str, n: int) -> float:
    """Exact word n-gram Jaccard (Python sets of word tuples, independent of our hashing)."""
    sa, sb = shingle_set(a, n), shingle_set(b, n)
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


def true_near(a: str, b: str, cfg) -> bool:
    """Whether text ``a`` may be removed as a near duplicate of text ``b`` under a DedupeConfig's rule,
    recomputed on Python sets of word tuples (the cleaning path, which needs the texts before the line
    rules, aside).

    Jaccard >= threshold, or ``a`` lies in ``b``: |A & B| / |A| >= containment, with Jaccard >=
    containment_min_jaccard and A holding >= containment_min_shingles.
    """
    sa, sb = shingle_set(a, cfg.ngram), shingle_set(b, cfg.ngram)
    if not sa and not sb:
        return True
    inter = len(sa & sb)
    j = inter / len(sa | sb)
    if j >= cfg.threshold:
        return True
    return (cfg.containment is not None and bool(sa) and len(sa) >= cfg.containment_min_shingles
            and j >= cfg.containment_min_jaccard and inter / len(sa) >= cfg.containment)
