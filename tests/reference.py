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
