"""What the near step knows of a document (``Sketch``), node ids, and the verification rule of a config."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipelines.dedupe.minhash import MinHasher, NearRule, SketchArrays, sketch_arrays
from pipelines.records import Document
from schemas.config import DedupeConfig

COUNTERS = "dedupe"
OLD, NEW = "0", "1"  # node-id prefixes: indexed documents sort (and win) first
# An indexed document's node also names its index part (its place in the index's list): an index may
# hold one doc id twice (releases built from folders with the same file names), and those are two
# documents. The separator sorts below every character of a doc id, so nodes of distinct ids keep
# their ids' order.
PART = "\x1f"


def old_node(doc_id: str, part: int) -> str:
    """The node of the indexed document ``doc_id`` of index part number ``part``."""
    return f"{OLD}{doc_id}{PART}{part}"


def node_doc_id(node: str) -> str:
    """The doc id a node names (an indexed one's without its part)."""
    return node[1:].split(PART, 1)[0]


def node_part(node: str) -> tuple[str, int]:
    """(doc id, part number) of an indexed document's node."""
    doc_id, part = node[1:].split(PART, 1)
    return doc_id, int(part)


_NONE = np.empty(0, dtype=np.uint32)


def u32(raw: bytes | np.ndarray) -> np.ndarray:
    """A uint32 array from the bytes that crossed a shuffle (arrays pass through)."""
    return raw if isinstance(raw, np.ndarray) else np.frombuffer(raw, dtype=np.uint32)


@dataclass(frozen=True)
class Sketch:
    """What the near step needs of a document: its node id, signature, bucket keys and shingle set."""

    node: str  # NEW + doc_id, or OLD + doc_id + PART + part number (``old_node``)
    source: str
    exact_hash: str
    signature: np.ndarray  # uint32[bands * rows]
    band_keys: np.ndarray  # int64: the bands' keys, then the anchor keys (the index's ``band_keys`` column)
    shingles: np.ndarray  # sorted unique uint32
    # The shingles of the text before the line rules that the kept text lacks (sorted unique uint32;
    # empty when they cut nothing). Verification's cleaning path reads them; the index does not hold them.
    lost: np.ndarray = field(default_factory=lambda: _NONE, compare=False)

    @property
    def doc_id(self) -> str:
        return node_doc_id(self.node)

    @property
    def old(self) -> bool:
        return self.node.startswith(OLD)


def near_rule(cfg: DedupeConfig) -> NearRule:
    """The verification rule of a config (Jaccard threshold, containment and its guards, the cleaning path)."""
    return NearRule(cfg.threshold, cfg.containment, cfg.containment_min_jaccard, cfg.containment_min_shingles,
                    cfg.before_line_rules)


def minhasher(cfg: DedupeConfig) -> MinHasher:
    return MinHasher(ngram=cfg.ngram, bands=cfg.bands, rows=cfg.rows, seed=cfg.seed, anchors=cfg.anchor_every,
                     anchor_queries=cfg.anchor_queries)


def before_line_rules(docs: list[Document]) -> list[str | None] | None:
    """Each document's text before the line rules cut lines from it (None where they cut none), or None
    for a batch where they cut nothing: what ``sketch_arrays`` takes as ``before``."""
    before = [d.before_line_rules for d in docs]
    return before if any(b is not None for b in before) else None


def sketch_documents(docs: list[Document], hasher: MinHasher) -> list[Sketch]:
    """Sketches of a batch of new documents (vectorized; identical whatever the batch)."""
    return sketches_of(docs, sketch_arrays([d.text for d in docs], hasher, before_line_rules(docs)))


def sketches_of(docs: list[Document], arrays: SketchArrays) -> list[Sketch]:
    """The Sketches of a batch of new documents from their ``sketch_arrays``."""
    hashes, sigs, keys, shingles, lost = arrays
    return [Sketch(NEW + d.doc_id, d.source, hashes[i], sigs[i], keys[i], shingles[i], lost[i])
            for i, d in enumerate(docs)]
