"""What the near step knows of a document (``Sketch``), node ids, and the verification rule of a config."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipelines.dedupe.minhash import MinHasher, NearRule, sketch_arrays
from pipelines.records import Document
from schemas.config import DedupeConfig

COUNTERS = "dedupe"
OLD, NEW = "0", "1"  # node-id prefixes: indexed documents sort (and win) first


@dataclass(frozen=True)
class Sketch:
    """What the near step needs of a document: its node id, signature and shingle set."""

    node: str  # OLD/NEW prefix + doc_id
    source: str
    exact_hash: str
    signature: np.ndarray  # uint32[bands * rows]
    band_keys: np.ndarray  # int64[bands]
    shingles: np.ndarray  # sorted unique uint32

    @property
    def doc_id(self) -> str:
        return self.node[1:]

    @property
    def old(self) -> bool:
        return self.node.startswith(OLD)


def near_rule(cfg: DedupeConfig) -> NearRule:
    """The verification rule of a config (Jaccard threshold, containment and its guards)."""
    return NearRule(cfg.threshold, cfg.containment, cfg.containment_min_jaccard, cfg.containment_min_shingles)


def minhasher(cfg: DedupeConfig) -> MinHasher:
    return MinHasher(ngram=cfg.ngram, bands=cfg.bands, rows=cfg.rows, seed=cfg.seed)


def sketch_documents(docs: list[Document], hasher: MinHasher) -> list[Sketch]:
    """Sketches of a batch of new documents (vectorized; identical whatever the batch)."""
    return sketches_of(docs, sketch_arrays([d.text for d in docs], hasher))


def sketches_of(docs: list[Document], arrays: tuple[list[str], np.ndarray, np.ndarray, list[np.ndarray]]) -> list[Sketch]:
    """The Sketches of a batch of new documents from their ``sketch_arrays``."""
    hashes, sigs, bands, shingles = arrays
    return [Sketch(NEW + d.doc_id, d.source, hashes[i], sigs[i], bands[i], shingles[i]) for i, d in enumerate(docs)]
