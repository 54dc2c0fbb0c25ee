"""The fused MinHash kernel: numba compiles one loop for what numpy does in three passes.

``min_affine`` computes, for each document's shingles ``x[bounds[d]:bounds[d+1]]``
and each permutation ``p``, ``min((a[p] * x + b[p]) mod 2**64)`` into ``out[d, p]``.
It is the same wrap-around uint64 arithmetic as ``pipelines.dedupe.minhash``'s numpy
path, so the two give bit-identical signatures; the kernel reads each shingle
once and keeps the running minima in registers and L1 instead of writing and
re-reading a (shingles x permutations) block.

Importing this module imports numba (about half a second) and the first call
loads or compiles the kernel (about a second more, once per process; the
compiled code is cached beside this file when that is writable). Callers
decide when that pays (``pipelines.dedupe.minhash``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


def _min_affine(x, bounds, a, b, out):  # pragma: no cover - runs compiled
    # Four shingles per pass over the permutations: the row of minima is read and
    # written once per four shingles, and the unconditional min() (not an if) lets
    # LLVM keep the loop in SIMD registers; 3-4x faster than one shingle per pass.
    n_perm = a.size
    for d in range(bounds.size - 1):
        row = out[d]
        i, end = bounds[d], bounds[d + 1]
        while i + 4 <= end:
            v0, v1 = np.uint64(x[i]), np.uint64(x[i + 1])
            v2, v3 = np.uint64(x[i + 2]), np.uint64(x[i + 3])
            for p in range(n_perm):
                ap, bp = a[p], b[p]  # products wrap mod 2**64, like numpy's uint64
                row[p] = min(min(row[p], ap * v0 + bp), min(min(ap * v1 + bp, ap * v2 + bp), ap * v3 + bp))
            i += 4
        while i < end:
            v = np.uint64(x[i])
            for p in range(n_perm):
                row[p] = min(row[p], a[p] * v + b[p])
            i += 1


try:
    min_affine = njit(cache=True, nogil=True, boundscheck=False)(_min_affine)
except RuntimeError:  # no writable place for numba's cache (a read-only install): compile per process
    min_affine = njit(nogil=True, boundscheck=False)(_min_affine)
