"""A Bloom filter over 64-bit hashes (plain numpy, no Beam): the bounded side input of the lookups
that every worker holds, where the exact set would grow with the data.

Two users: decontamination's filter of evaluation n-grams (``pipelines.dedupe.evalsets``), and the
dedupe index lookups' probe of a build's new band keys and exact hashes (``pipelines.dedupe.index``).
Both join the filter's hits by key afterwards, so a false positive costs work, never a verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# What a filter crosses a runner as: (probes, the bit array's bytes), Beam's native tuple coder (no pickle).
BloomWire = tuple[int, bytes]


@dataclass
class Bloom:
    """A Bloom filter over 64-bit hashes: ``2**log2_bits`` bits, ``k`` probes by double hashing."""

    bits: np.ndarray  # uint8
    k: int

    @classmethod
    def empty(cls, log2_bits: int, k: int) -> Bloom:
        return cls(np.zeros(1 << max(0, log2_bits - 3), dtype=np.uint8), k)

    @classmethod
    def from_wire(cls, wire: BloomWire) -> Bloom:
        """The filter ``to_wire`` gave, over the bytes themselves (read-only: enough to test membership)."""
        k, bits = wire
        return cls(np.frombuffer(bits, dtype=np.uint8), k)

    def to_wire(self) -> BloomWire:
        return self.k, self.bits.tobytes()

    def _probes(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.uint64]:
        u = hashes.view(np.uint64)
        mask = np.uint64(len(self.bits) * 8 - 1)
        return u & mask, (u >> np.uint64(32)) | np.uint64(1), mask

    def add(self, hashes: np.ndarray) -> None:
        h1, h2, mask = self._probes(hashes)
        for i in range(self.k):
            pos = (h1 + np.uint64(i) * h2) & mask
            np.bitwise_or.at(self.bits, (pos >> np.uint64(3)).astype(np.intp),
                             np.left_shift(1, (pos & np.uint64(7)).astype(np.uint8)).astype(np.uint8))

    def contains(self, hashes: np.ndarray) -> np.ndarray:
        """A bool per hash: maybe in the set (True), or surely not (False).

        The first probe runs on every hash without the second hash's arrays; the later ones only on
        the survivors (most hashes of a lookup are not in the set, and half or more fail there)."""
        u = hashes.view(np.uint64)
        mask = np.uint64(len(self.bits) * 8 - 1)
        idx = np.flatnonzero(self._bit(u & mask))
        if self.k > 1 and idx.size:
            u = u[idx]
            h1, h2 = u & mask, (u >> np.uint64(32)) | np.uint64(1)
            for i in range(1, self.k):
                keep = np.flatnonzero(self._bit((h1 + np.uint64(i) * h2) & mask))
                if keep.size < idx.size:
                    idx, h1, h2 = idx[keep], h1[keep], h2[keep]
                if not idx.size:
                    break
        out = np.zeros(len(hashes), dtype=bool)
        out[idx] = True
        return out

    def _bit(self, pos: np.ndarray) -> np.ndarray:
        """uint8 per bit position: 1 where the bit is set."""
        return (self.bits[pos >> np.uint64(3)] >> (pos & np.uint64(7)).astype(np.uint8)) & np.uint8(1)

    def merge(self, other: Bloom) -> None:
        np.bitwise_or(self.bits, other.bits, out=self.bits)


def bloom_shape(expected: int, bits_per_hash: int, max_bytes: int | None = None) -> tuple[int, int]:
    """(log2 of the bits, probes) of a filter for ``expected`` hashes: at least ``bits_per_hash`` bits a
    hash (a power of two: up to twice that), at least 2**16 bits, and at most ``max_bytes`` (past
    which the false positive rate grows). Probes: the count that minimizes the rate, 1 to 16."""
    expected = max(1, expected)
    log2_bits = max(16, math.ceil(math.log2(expected * bits_per_hash)))
    if max_bytes is not None:
        log2_bits = min(log2_bits, max(16, int(math.log2(max(1, max_bytes) * 8))))
    k = round(math.log(2) * (1 << log2_bits) / expected)
    return log2_bits, max(1, min(16, k))
