"""Exact and near-duplicate removal at corpus scale (design: docs/dedupe.md).

``Deduplicate`` turns a PCollection of Documents into ``{"kept", "duplicates"}``;
every input document ends in exactly one of them.

1. Exact: documents grouped by the hash of their normalized text; the smallest
   doc_id of a group is kept, the others are ``Duplicate(kind="exact")``.
2. Near: MinHash signatures over word n-gram shingles (``pipelines.minhash``,
   numpy over batches), LSH buckets per band, candidate pairs verified by their
   signature-estimated Jaccard, connected components of the verified edges by
   alternating large-star / small-star rounds (a distributed computation: no
   worker ever sees more than one node's edges), then every member is verified
   against its cluster's kept document by the *true* Jaccard of their shingle
   sets. Members that fail stay in the corpus, which is what stops transitive
   closure from chaining unrelated documents together.
3. Incremental: an index of an existing corpus (Parquet: doc_id, exact hash,
   signature, band keys, shingles) takes part in both steps; its documents win
   every tie (they are never removed) and new documents that match them are
   duplicates of the old doc_ids.

4. Repeated spans (optional, ``cfg.repeated_spans``; C4, Raffel et al. 2020):
   after exact and near dedupe, every window of ``cfg.span_sentences``
   consecutive sentences of the kept documents is hashed; of the occurrences
   of a span hash, the one with the smallest (doc_id, position) stays and the
   sentences of all others are cut from their documents. A document left
   with no sentence becomes ``Duplicate(kind="span")``. Within this batch
   only: spans are not in the index.

Node ids in the near step are ``"0" + doc_id`` for indexed (old) documents and
``"1" + doc_id`` for new ones, so "the smallest node id" picks an old document
first and otherwise the smallest doc_id.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import io
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipelines.minhash import (
    MinHasher,
    NearRule,
    estimate_margin,
    estimated_jaccard,
    hash_normalized,
    normalize_text,
    normalized_text_hash,
    shingle_sets,
)
from pipelines.records import Document, Duplicate
from pipelines.sentences import split_sentences
from schemas.config import DedupeConfig
from schemas.errors import UserError
from storage import (
    exists,
    expand_glob,
    is_within,
    join,
    open_read,
    read_text,
    relative_url,
    resolve_url,
    write_text_atomic,
)

__all__ = [
    "ConnectedComponents",
    "Deduplicate",
    "EdgeScreen",
    "ExactDedupe",
    "NearDedupe",
    "Sketch",
    "SpanDedupe",
    "apply_span_losses",
    "large_star",
    "near_rule",
    "normalized_text_hash",
    "remove_sentences",
    "resolve_exact_group",
    "resolve_span_group",
    "small_star",
    "span_key",
    "span_occurrences",
]

_NS = "dedupe"
OLD, NEW = "0", "1"  # node-id prefixes: indexed documents sort (and win) first
INDEX_META = "index.json"
INDEX_VERSION = 1
# Index part files hold about this many entries (each about the size of its text).
INDEX_ENTRIES_PER_PART = 50_000
INDEX_ROW_GROUP = 2_000  # entries per Parquet row group of an index part (the unit a lookup reads)
SIGNATURE_BATCH = (16, 512)  # BatchElements min/max: numpy work is per batch
# Pointer-jumping rounds that resolve chains of span duplicates (chains up to 2**rounds long).
SPAN_POINTER_ROUNDS = 5


# ------------------------------------------------------------------ records

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


def _hasher(cfg: DedupeConfig) -> MinHasher:
    return MinHasher(ngram=cfg.ngram, bands=cfg.bands, rows=cfg.rows, seed=cfg.seed)


def sketch_documents(docs: list[Document], hasher: MinHasher) -> list[Sketch]:
    """Sketches of a batch of new documents (vectorized; identical whatever the batch)."""
    norms = [normalize_text(d.text) for d in docs]
    shingles = shingle_sets(norms, hasher.ngram, normalized=True)
    sigs = hasher.signatures(shingles)
    bands = hasher.band_keys(sigs)
    return [
        Sketch(NEW + d.doc_id, d.source, hash_normalized(norms[i]), sigs[i], bands[i], shingles[i])
        for i, d in enumerate(docs)
    ]


# ------------------------------------------------------------------ exact

def resolve_exact_group(docs: Iterable[Document], old_ids: Iterable[str] = ()) -> Iterator[Document | Duplicate]:
    """One exact-hash group -> the kept document (smallest doc_id) and Duplicates of it.

    If the group matches documents of an existing corpus (``old_ids``), every
    new document is a duplicate of the smallest old doc_id, even one with that
    very doc_id (the same record read again: it is in the old corpus already).
    Iterates ``docs`` twice (Beam's grouped iterables allow it) so only one
    document is held.
    """
    target = min(old_ids, default=None)
    old = target is not None
    if target is None:
        keep: Document | None = None
        for d in docs:
            if keep is None or d.doc_id < keep.doc_id:
                keep = d
        if keep is None:
            return
        yield keep
        target = keep.doc_id
    for d in docs:
        if old or d.doc_id != target:
            yield Duplicate(doc_id=d.doc_id, source=d.source, dup_of=target, kind="exact")


class _ResolveExact(beam.DoFn):
    def __init__(self) -> None:
        self.dups = Metrics.counter(_NS, "exact_duplicates")

    def process(self, element: tuple[str, dict[str, Any]]) -> Iterator[Any]:
        _, groups = element
        for out in resolve_exact_group(groups["new"], groups.get("old", ())):
            if isinstance(out, Duplicate):
                self.dups.inc()
                yield beam.pvalue.TaggedOutput("duplicates", out)
            else:
                yield out


class ExactDedupe(beam.PTransform):
    """Exact duplicates by normalized-text hash, optionally against an old corpus's hashes.

    ``old_hashes``: PCollection[(exact_hash, doc_id)] of an old corpus, or
    ``old_parts``: a PCollection of signature-index part URLs, from which only
    the entries whose hash occurs among this run's documents are read (so the
    old corpus never passes through the shuffle, whatever its size).
    """

    def __init__(self, old_hashes: beam.PCollection | None = None, old_parts: beam.PCollection | None = None) -> None:
        super().__init__()
        if old_hashes is not None and old_parts is not None:
            raise ValueError("ExactDedupe: give old_hashes or old_parts, not both")
        self.old_hashes = old_hashes
        self.old_parts = old_parts

    def expand(self, docs: beam.PCollection) -> dict[str, beam.PCollection]:
        keyed = docs | "KeyByHash" >> beam.Map(lambda d: (normalized_text_hash(d.text), d))
        groups: dict[str, beam.PCollection] = {"new": keyed}
        old = self.old_hashes
        if self.old_parts is not None:
            new_hashes = keyed | "NewHashes" >> beam.Keys()
            old = self.old_parts | "OldHashes" >> beam.ParDo(
                _IndexLookup("index_exact_entries_read", set, index_exact_matches), beam.pvalue.AsList(new_hashes))
        if old is not None:
            groups["old"] = old
        res = (
            groups
            | "Group" >> beam.CoGroupByKey()
            # Hashes seen only in the old corpus have no new documents: nothing is emitted.
            | "Resolve" >> beam.ParDo(_ResolveExact()).with_outputs("duplicates", main="kept")
        )
        return {"kept": res.kept, "duplicates": res.duplicates}


# ------------------------------------------------------------------ components

def large_star(node: str, neighbors: Iterable[str]) -> Iterator[tuple[str, str]]:
    """Large-star step at one node: link every larger neighbor to the smallest of node + neighbors.

    Edges are (smaller, larger) tuples. (Kiveris et al., "Connected Components
    in MapReduce and Beyond", 2014.)
    """
    nbrs = set(neighbors)
    m = min(min(nbrs, default=node), node)
    for v in sorted(nbrs):
        if v > node:
            yield (m, v)


def small_star(node: str, smaller: Iterable[str]) -> Iterator[tuple[str, str]]:
    """Small-star step at one node: link node and its smaller neighbors to the smallest of them."""
    group = set(smaller)
    group.add(node)
    m = min(group)
    for v in sorted(group):
        if v != m:
            yield (m, v)


def star_roles(node: str, marks: Iterable[tuple[str, str | None]]) -> tuple[str, str | None, bool, bool]:
    """(node, label, is_root, converged) from a node's final edges.

    ``marks`` holds ("parent", p) for every edge (p, node) and ("child", None)
    for every edge (node, c). The label is the smallest parent (None for a
    node without one); is_root: the node has children. Converged means the
    node's edges form a star: at most one parent, and never both a parent and
    children.
    """
    parents: set[str] = set()
    has_child = False
    for kind, p in marks:
        if kind == "parent":
            parents.add(p)  # type: ignore[arg-type]
        else:
            has_child = True
    label = min(parents) if parents else None
    converged = len(parents) <= 1 and not (parents and has_child)
    return node, label, has_child, converged


class ConnectedComponents(beam.PTransform):
    """PCollection[(a, b)] undirected edges -> PCollection[(node, label, is_root, converged)].

    Alternating large-star / small-star rounds, unrolled ``rounds`` times (a
    Beam graph is static); each step is one GroupByKey over the edges, so no
    worker holds more than one node's neighborhood. After the last round every
    node of an edge gets a label: the smallest parent (its component's smallest
    node once converged) or None for a root; ``converged`` is False where the
    final edges are not yet stars (then more rounds would merge more).
    """

    def __init__(self, rounds: int) -> None:
        super().__init__()
        self.rounds = rounds

    def expand(self, edges: beam.PCollection) -> beam.PCollection:
        e = edges | "Canonical" >> beam.FlatMap(lambda ab: [(min(ab), max(ab))] if ab[0] != ab[1] else [])
        for r in range(self.rounds):
            e = (
                e
                | f"LargeOut{r}" >> beam.FlatMap(lambda ab: [(ab[0], ab[1]), (ab[1], ab[0])])
                | f"LargeGroup{r}" >> beam.GroupByKey()
                | f"LargeStar{r}" >> beam.FlatMapTuple(large_star)
                | f"SmallOut{r}" >> beam.Map(lambda ab: (ab[1], ab[0]))
                | f"SmallGroup{r}" >> beam.GroupByKey()
                | f"SmallStar{r}" >> beam.FlatMapTuple(small_star)
            )
        return (
            e
            | "Marks" >> beam.FlatMap(lambda ab: [(ab[1], ("parent", ab[0])), (ab[0], ("child", None))])
            | "GroupMarks" >> beam.GroupByKey()
            | "Roles" >> beam.MapTuple(star_roles)
        )


# ------------------------------------------------------------------ near

class _SketchBatch(beam.DoFn):
    def __init__(self, hasher: MinHasher) -> None:
        self.hasher = hasher

    def process(self, batch: list[Document]) -> Iterator[Sketch]:
        yield from sketch_documents(batch, self.hasher)


@dataclass(frozen=True)
class EdgeScreen:
    """Which LSH candidates become edges, judged on signatures (2 sigma below what ``NearRule`` accepts).

    A candidate passes if its estimated Jaccard reaches ``jaccard``, or (the
    containment path) its estimated Jaccard reaches ``containment_jaccard`` and
    the overlap coefficient derived from it and the two set sizes,
    ``J (|A| + |B|) / ((1 + J) min(|A|, |B|))``, reaches ``containment``. Screening
    containment on its own estimate (not on a lowered Jaccard bar) keeps
    components tight: loose edges chain a family into one cluster whose kept
    document is far from most members, which then fail verification.
    """

    jaccard: float
    containment: float | None = None
    containment_jaccard: float = 0.0
    min_shingles: int = 1

    @classmethod
    def of(cls, rule: NearRule, num_perm: int) -> EdgeScreen:
        """The screen of a verification rule for signatures of ``num_perm`` values."""
        def lo(t: float) -> float:
            return max(0.0, t - estimate_margin(t, num_perm))

        if rule.containment is None:
            return cls(lo(rule.threshold))
        return cls(lo(rule.threshold), lo(rule.containment), lo(rule.min_jaccard), rule.min_shingles)

    def passes(self, sig_a: np.ndarray, n_a: int | None, sig_b: np.ndarray, n_b: int | None) -> bool:
        """True if the pair (signatures, shingle counts; None: unknown) may be a near duplicate."""
        j = estimated_jaccard(sig_a, sig_b)
        if j >= self.jaccard:
            return True
        if self.containment is None or n_a is None or n_b is None or j < self.containment_jaccard:
            return False
        small = min(n_a, n_b)
        return small >= self.min_shingles and j * (n_a + n_b) / ((1.0 + j) * small) >= self.containment


def bucket_edges(members: Iterable[tuple[Any, ...]], screen: EdgeScreen | float) -> Iterator[tuple[str, str]]:
    """Verified candidate edges of one LSH bucket: (bucket's smallest node, member).

    Members are ``(node, signature, shingle count)`` (or ``(node, signature)``:
    count unknown, Jaccard path only). Each member is compared with the
    bucket's smallest node only (a star, not a clique: linear in the bucket
    size, and components connect the rest) and kept if it passes ``screen``
    (an ``EdgeScreen``, or a float: the minimum estimated Jaccard). Buckets of
    old documents only produce nothing (old documents are never removed).
    """
    if not isinstance(screen, EdgeScreen):
        screen = EdgeScreen(screen)
    root: tuple[Any, ...] | None = None
    any_new = False
    for m in members:
        any_new = any_new or m[0].startswith(NEW)
        if root is None or m[0] < root[0]:
            root = m
    if root is None or not any_new:
        return
    root_n = root[2] if len(root) > 2 else None
    for m in members:
        if m[0] != root[0] and m[0].startswith(NEW) and screen.passes(
                m[1], m[2] if len(m) > 2 else None, root[1], root_n):
            yield (root[0], m[0])


class _Buckets(beam.DoFn):
    def __init__(self, screen: EdgeScreen) -> None:
        self.screen = screen
        self.candidates = Metrics.counter(_NS, "near_candidate_pairs")
        self.edges = Metrics.counter(_NS, "near_verified_edges")

    def process(self, element: tuple[int, Iterable[tuple[str, np.ndarray]]]) -> Iterator[tuple[str, str]]:
        _, members = element
        n = 0
        for edge in bucket_edges(members, self.screen):
            n += 1
            yield edge
        if n:
            self.edges.inc(n)


def _bucket_entries(s: Sketch) -> Iterator[tuple[int, tuple[str, np.ndarray, int]]]:
    if s.shingles.size == 0:  # empty documents are left to exact dedupe
        return
    for key in s.band_keys.tolist():
        yield key, (s.node, s.signature, int(s.shingles.size))


def _route_to_root(element: tuple[str, dict[str, Any]]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Send a clustered node's shingles to its cluster root (members) or its own group (roots)."""
    node, groups = element
    sketches, roles = list(groups["sketch"]), list(groups["role"])
    if not sketches or not roles:
        return
    s: Sketch = sketches[0]
    label, is_root, _converged = roles[0]
    if label is not None:
        yield label, ("member", node, s.source, s.shingles)
    if is_root:
        # A root that also has a parent (rounds ran out before convergence)
        # removes nothing: it may be removed itself, and a duplicate must point
        # at a kept document. Its members stay (recall lost, never precision).
        yield node, ("root", label is None, s.shingles)


def resolve_cluster(
    root: str, entries: Iterable[tuple[Any, ...]], rule: NearRule | float, max_members: int
) -> tuple[list[Duplicate], int, int]:
    """(duplicates, failed verification, over the cap) for one cluster.

    Every new member whose true shingle sets with the root pass ``rule``
    (``NearRule``: Jaccard, or containment with its guards; a float is a plain
    Jaccard threshold) is a near duplicate of the root, up to ``max_members``
    of them (the smallest doc_ids; the rest are kept). Old members never are.
    Verification is against the root, never a neighbor: that is what stops
    transitive closure from chaining unrelated documents.
    """
    if not isinstance(rule, NearRule):
        rule = NearRule(rule)
    root_shingles: np.ndarray | None = None
    for e in entries:
        if e[0] == "root":
            if not e[1]:
                return [], 0, 0
            root_shingles = e[2]
    if root_shingles is None:
        return [], 0, 0
    failed = 0
    verified: list[tuple[str, str]] = []  # max-heap of the smallest max_members (node, source), by negation
    over = 0
    for e in entries:
        if e[0] != "member" or not e[1].startswith(NEW):
            continue
        _, node, source, shingles = e
        ok, sim = rule.judge(root_shingles, shingles)
        if not ok:
            failed += 1
            continue
        if len(verified) < max_members:
            heapq.heappush(verified, _Desc(node, source, sim))  # type: ignore[arg-type]
        else:
            over += 1
            heapq.heappushpop(verified, _Desc(node, source, sim))  # type: ignore[arg-type]
    dups = sorted(
        (Duplicate(doc_id=d.node[1:], source=d.source, dup_of=root[1:], kind="near",  # type: ignore[attr-defined]
                   similarity=round(float(d.similarity), 6)) for d in verified),  # type: ignore[attr-defined]
        key=lambda d: d.doc_id,
    )
    return dups, failed, over


@dataclass(frozen=True)
class _Desc:
    """Heap item ordered by descending node id, so heapq keeps the smallest ids."""

    node: str
    source: str
    similarity: float = 0.0  # the verified Jaccard with the root (recorded on the Duplicate)

    def __lt__(self, other: _Desc) -> bool:
        return self.node > other.node


class _ResolveClusters(beam.DoFn):
    def __init__(self, rule: NearRule, max_members: int) -> None:
        self.rule, self.max_members = rule, max_members
        self.dups = Metrics.counter(_NS, "near_duplicates")
        self.failed = Metrics.counter(_NS, "near_failed_root_verification")
        self.over = Metrics.counter(_NS, "near_over_cluster_cap")
        self.clusters = Metrics.counter(_NS, "near_clusters")

    def process(self, element: tuple[str, Iterable[tuple[Any, ...]]]) -> Iterator[Duplicate]:
        root, entries = element
        dups, failed, over = resolve_cluster(root, entries, self.rule, self.max_members)
        self.failed.inc(failed)
        self.over.inc(over)
        if dups:
            self.clusters.inc()
            self.dups.inc(len(dups))
        yield from dups


class NearDedupe(beam.PTransform):
    """Near duplicates among Sketches (plus an old corpus's index): PCollection[Duplicate] of new documents.

    ``old_parts``: a PCollection of signature-index part URLs. Of the old
    documents only what can change a verdict enters the shuffles, so a batch
    costs its own size whatever the index's: per LSH bucket holding a new
    document, the old entry with the smallest node id (the bucket's root: in
    ``bucket_edges`` other members are only ever compared with the root, so
    the other old entries of a bucket never make an edge), as (node,
    signature); after the components, the full sketches (shingles) of the old
    nodes that are cluster roots. The verdicts are those of a run with the
    whole index.
    """

    def __init__(self, cfg: DedupeConfig, old_parts: beam.PCollection | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.old_parts = old_parts

    def expand(self, sketches: beam.PCollection) -> beam.PCollection:
        cfg = self.cfg
        num_perm = cfg.bands * cfg.rows
        # Edges pass on signature estimates with a 2-sigma margin below what the
        # rule accepts (pairs truly there estimate below it half the time); the
        # true similarity against the kept document decides.
        rule = near_rule(cfg)
        screen = EdgeScreen.of(rule, num_perm)
        entries = sketches | "BucketEntries" >> beam.FlatMap(_bucket_entries)
        if self.old_parts is not None:
            new_keys = sketches | "NewBandKeys" >> beam.FlatMap(lambda s: [s.band_keys] if s.shingles.size else [])
            old_entries = (
                self.old_parts
                | "OldBucketEntries" >> beam.ParDo(
                    _IndexLookup("index_bucket_entries_read", _unique_keys, index_bucket_entries),
                    beam.pvalue.AsList(new_keys))
                | "OldBucketRoot" >> beam.CombinePerKey(_SmallestNode())
            )
            entries = (entries, old_entries) | "WithOld" >> beam.Flatten()
        edges = (
            entries
            | "GroupBuckets" >> beam.GroupByKey()
            | "VerifiedEdges" >> beam.ParDo(_Buckets(screen))
        )
        roles = (
            edges
            | "Components" >> ConnectedComponents(cfg.components_rounds)
            | "CountUnconverged" >> beam.Map(_count_unconverged)
            | "KeyRoles" >> beam.Map(lambda x: (x[0], x[1:]))
        )
        clustered = sketches
        if self.old_parts is not None:
            # Old nodes matter only as cluster roots (resolve_cluster never removes an old member).
            old_nodes = roles | "OldRoots" >> beam.FlatMap(
                lambda r: [r[0][1:]] if r[0].startswith(OLD) and r[1][1] else [])
            old_full = self.old_parts | "ReadOldClustered" >> beam.ParDo(
                _IndexLookup("index_clustered_entries_read", set, _sketches_by_id), beam.pvalue.AsList(old_nodes))
            clustered = (sketches, old_full) | "WithOldClustered" >> beam.Flatten()
        keyed = clustered | "KeyByNode" >> beam.Map(lambda s: (s.node, s))
        return (
            {"sketch": keyed, "role": roles}
            | "JoinRoles" >> beam.CoGroupByKey()
            | "RouteToRoot" >> beam.FlatMap(_route_to_root)
            | "GroupClusters" >> beam.GroupByKey()
            | "ResolveClusters" >> beam.ParDo(_ResolveClusters(rule, cfg.max_cluster_size))
        )


_unconverged = Metrics.counter(_NS, "components_unconverged_nodes")


def _count_unconverged(x: tuple[str, str | None, bool, bool]) -> tuple[str, str | None, bool, bool]:
    if not x[3]:
        _unconverged.inc()
    return x


# ------------------------------------------------------------------ repeated spans

def span_key(normalized: Sequence[str]) -> bytes | None:
    """blake2b-128 of one window of normalized sentences; None if the window holds no word.

    Sentences are joined with a newline, which ``normalize_text`` never leaves
    inside a sentence, so ("a b", "c") and ("a", "b c") hash differently.
    """
    if not any(normalized):
        return None  # punctuation-only windows ("* * *") carry no text to deduplicate
    data = "\n".join(normalized).encode("utf-8")
    return hashlib.blake2b(data, digest_size=16, person=b"sf-span").digest()


def span_occurrences(doc: Document, n: int) -> Iterator[tuple[bytes, tuple[str, int]]]:
    """(span hash, (doc_id, position)) for every window of n consecutive sentences of doc."""
    norms = [normalize_text(s) for s in split_sentences(doc.text)]
    for i in range(len(norms) - n + 1):
        key = span_key(norms[i:i + n])
        if key is not None:
            yield key, (doc.doc_id, i)


def resolve_span_group(occurrences: Iterable[tuple[str, int]]) -> Iterator[tuple[str, tuple[int, str]]]:
    """One span hash's occurrences -> (doc_id, (position, first doc_id)) for every repeat.

    The first occurrence is the smallest (doc_id, position): a function of the
    data, not of bundle order. Iterates ``occurrences`` twice (Beam's grouped
    iterables allow it) so a boilerplate span seen in millions of documents is
    streamed, never held.
    """
    first: tuple[str, int] | None = None
    for occ in occurrences:
        if first is None or occ < first:
            first = occ
    if first is None:
        return
    for doc_id, pos in occurrences:
        if (doc_id, pos) != first:
            yield doc_id, (pos, first[0])


def remove_sentences(text: str, removed: set[int]) -> str:
    """text without the sentences (indices into ``split_sentences(text)``) in ``removed``.

    Paragraphs (lines) without removals are kept verbatim; a paragraph that
    loses some sentences is rebuilt from the rest, joined by single spaces; one
    that loses all is dropped. ``split_sentences`` of the result gives exactly
    the sentences kept: a kept sentence that has another kept sentence after it
    in its paragraph ended at a sentence boundary, and the one after started a
    sentence, so the new junction splits the same way.
    """
    out: list[str] = []
    idx = 0
    for line in text.split("\n"):
        sents = split_sentences(line)  # the splitter works paragraph by paragraph: same sentences
        k = len(sents)
        if not any(idx + j in removed for j in range(k)):
            # Keep blank separators, but never two in a row where a paragraph was dropped.
            if sents or not out or out[-1].strip():
                out.append(line)
        else:
            kept = [s for j, s in enumerate(sents) if idx + j not in removed]
            if kept:
                out.append(" ".join(kept))
        idx += k
    return "\n".join(out).strip("\n")


@dataclass(frozen=True)
class SpanResult:
    """What ``apply_span_losses`` made of one document."""

    doc: Document | None  # the (possibly trimmed) document, or None if nothing is left
    removed_sentences: int
    removed_spans: int
    target: str | None  # emptied documents: doc_id of the first occurrence of their first removed span


def apply_span_losses(doc: Document, losses: Iterable[tuple[int, str]], n: int) -> SpanResult:
    """Cut every repeated span (position, first doc_id) of ``losses`` out of doc.

    A document that loses every sentence is returned as None with a target.
    Its sentence 0 is covered only by the window at position 0, so that window
    lost to a first occurrence in a strictly smaller doc_id: following targets
    always ends (at a document that keeps some text).
    """
    losses = sorted(set(losses))
    if not losses:
        return SpanResult(doc, 0, 0, None)
    num = len(split_sentences(doc.text))
    removed = {i for pos, _ in losses for i in range(pos, min(pos + n, num))}
    if len(removed) >= num:
        return SpanResult(None, num, len(losses), losses[0][1])
    return SpanResult(replace_text(doc, remove_sentences(doc.text, removed)), len(removed), len(losses), None)


def replace_text(doc: Document, text: str) -> Document:
    """doc with another text (same id, source and metadata)."""
    return dataclasses.replace(doc, text=text)


class _ResolveSpans(beam.DoFn):
    def __init__(self) -> None:
        self.repeated = Metrics.counter(_NS, "span_repeated")
        self.repeats = Metrics.counter(_NS, "span_removed_occurrences")

    def process(self, element: tuple[bytes, Iterable[tuple[str, int]]]) -> Iterator[tuple[str, tuple[int, str]]]:
        _, occurrences = element
        n = 0
        for loss in resolve_span_group(occurrences):
            n += 1
            yield loss
        if n:
            self.repeated.inc()
            self.repeats.inc(n)


@dataclass(frozen=True)
class _Pointer:
    """An emptied document on its way to a kept target (final: ``ptr`` is kept)."""

    doc_id: str
    source: str
    ptr: str
    final: bool


class _ApplySpans(beam.DoFn):
    def __init__(self, n: int) -> None:
        self.n = n
        self.sentences = Metrics.counter(_NS, "span_removed_sentences")
        self.trimmed = Metrics.counter(_NS, "span_trimmed_documents")

    def process(self, element: tuple[str, dict[str, Any]]) -> Iterator[Any]:
        doc_id, g = element
        docs = list(g["doc"])
        if not docs:
            return
        res = apply_span_losses(docs[0], g["loss"], self.n)
        self.sentences.inc(res.removed_sentences)
        if res.doc is not None:
            if res.removed_spans:
                self.trimmed.inc()
            yield res.doc
            return
        assert res.target is not None
        yield beam.pvalue.TaggedOutput("emptied", _Pointer(doc_id, docs[0].source, res.target, False))
        yield beam.pvalue.TaggedOutput("emptied_docs", (doc_id, docs[0]))


def _jump(element: tuple[str, dict[str, Any]]) -> Iterator[_Pointer]:
    """One pointer-jumping step at document k: everyone pointing at k moves to k's pointer.

    If k is not an emptied document it is kept, so pointers to it are final.
    Each non-final pointer asks at exactly one key, so each document is emitted once.
    """
    k, g = element
    own = list(g["self"])
    if own and own[0].final:
        yield own[0]
    for doc_id, source in g["ask"]:
        if own:
            yield _Pointer(doc_id, source, own[0].ptr, own[0].final)
        else:
            yield _Pointer(doc_id, source, k, True)


def _restore_unresolved(element: tuple[str, dict[str, Any]]) -> Iterator[Document]:
    _, g = element
    if list(g["unresolved"]):
        _unresolved.inc()
        yield from list(g["doc"])[:1]


_unresolved = Metrics.counter(_NS, "span_unresolved_kept_whole")
_span_dups = Metrics.counter(_NS, "span_duplicates")


def _span_duplicate(ptr: _Pointer) -> Duplicate:
    _span_dups.inc()
    return Duplicate(doc_id=ptr.doc_id, source=ptr.source, dup_of=ptr.ptr, kind="span")


class SpanDedupe(beam.PTransform):
    """C4's repeated-span removal: ``{"kept": PCollection[Document], "duplicates": PCollection[Duplicate]}``.

    Every window of ``n`` consecutive sentences is keyed by its hash; each
    hash's occurrences are grouped and all but the smallest (doc_id, position)
    become losses; losses are joined with their documents, whose text loses
    those sentences. A document that loses all its text becomes
    ``Duplicate(kind="span")`` of the first occurrence of its first removed
    span; if that document was emptied too, pointer jumping follows the chain
    (``SPAN_POINTER_ROUNDS`` rounds; a chain longer than that keeps its
    document whole, counted in ``dedupe/span_unresolved_kept_whole``), so
    ``dup_of`` always names a kept document.
    """

    def __init__(self, n: int, rounds: int | None = None) -> None:
        super().__init__()
        self.n = n
        self.rounds = SPAN_POINTER_ROUNDS if rounds is None else rounds

    def expand(self, docs: beam.PCollection) -> dict[str, beam.PCollection]:
        n = self.n
        losses = (
            docs
            | "Occurrences" >> beam.FlatMap(span_occurrences, n)
            | "GroupSpans" >> beam.GroupByKey()
            | "Resolve" >> beam.ParDo(_ResolveSpans())
        )
        applied = (
            {"doc": docs | "DocByID" >> beam.Map(lambda d: (d.doc_id, d)), "loss": losses}
            | "JoinLosses" >> beam.CoGroupByKey()
            | "Apply" >> beam.ParDo(_ApplySpans(n)).with_outputs("emptied", "emptied_docs", main="kept")
        )
        ptrs = applied.emptied
        for r in range(self.rounds):
            ptrs = (
                {"self": ptrs | f"Self{r}" >> beam.Map(lambda p: (p.doc_id, p)),
                 "ask": ptrs | f"Ask{r}" >> beam.FlatMap(lambda p: [] if p.final else [(p.ptr, (p.doc_id, p.source))])}
                | f"JoinPointers{r}" >> beam.CoGroupByKey()
                | f"Jump{r}" >> beam.FlatMap(_jump)
            )
        resolved = ptrs | "Final" >> beam.Partition(lambda p, _: 0 if p.final else 1, 2)
        restored = (
            {"unresolved": resolved[1] | "UnresolvedByID" >> beam.Map(lambda p: (p.doc_id, None)),
             "doc": applied.emptied_docs}
            | "JoinUnresolved" >> beam.CoGroupByKey()
            | "Restore" >> beam.FlatMap(_restore_unresolved)
        )
        kept = (applied.kept, restored) | "Kept" >> beam.Flatten()
        return {"kept": kept, "duplicates": resolved[0] | "SpanDuplicates" >> beam.Map(_span_duplicate)}


def _repoint_to_kept(element: tuple[str, dict[str, Any]]) -> Iterator[Duplicate]:
    """Duplicates of one document, re-pointed at its span target if it was emptied by spans."""
    _, g = element
    span = list(g["span"])
    for d in g["dup"]:
        yield d if not span else Duplicate(d.doc_id, d.source, span[0].dup_of, d.kind)


def _drop_removed(element: tuple[str, dict[str, Any]]) -> Iterator[Sketch]:
    _, g = element
    if not list(g["removed"]):
        yield from g["entry"]


# ------------------------------------------------------------------ index

def index_schema():
    """Arrow schema of the signature index's Parquet parts."""
    import pyarrow as pa

    return pa.schema([
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("exact_hash", pa.string(), nullable=False),
        pa.field("signature", pa.list_(pa.uint32()), nullable=False),
        pa.field("band_keys", pa.list_(pa.int64()), nullable=False),
        pa.field("shingles", pa.large_list(pa.uint32()), nullable=False),
        # Shingle-set size, so the LSH step can screen containment without reading shingles.
        # Absent from parts written before it; readers fall back to the shingles column.
        pa.field("num_shingles", pa.int32(), nullable=False),
    ], metadata={"shardforge.schema": f"dedupe-index/{INDEX_VERSION}"})


def index_params(cfg: DedupeConfig) -> dict[str, Any]:
    """What must match for an index to be comparable with this config."""
    return {"version": INDEX_VERSION, "ngram": cfg.ngram, "bands": cfg.bands, "rows": cfg.rows,
            "seed": cfg.seed, "near": cfg.near}


def _sketches_to_parquet(rows: list[Sketch]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = index_schema()
    cols = {
        "doc_id": pa.array([s.doc_id for s in rows], pa.string()),
        "source": pa.array([s.source for s in rows], pa.string()),
        "exact_hash": pa.array([s.exact_hash for s in rows], pa.string()),
        "signature": pa.array([s.signature for s in rows], pa.list_(pa.uint32())),
        "band_keys": pa.array([s.band_keys for s in rows], pa.list_(pa.int64())),
        "shingles": pa.array([s.shingles for s in rows], pa.large_list(pa.uint32())),
        "num_shingles": pa.array([s.shingles.size for s in rows], pa.int32()),
    }
    buf = io.BytesIO()
    # Small row groups: a lookup reads the probe columns of every group but the
    # full rows (shingles) only of the groups holding a match.
    pq.write_table(pa.table(cols, schema=schema), buf, compression="zstd", row_group_size=INDEX_ROW_GROUP)
    return buf.getvalue()


def read_index_part(url: str) -> Iterator[Sketch]:
    """Sketches (as old documents) of one index part file."""
    import pyarrow.parquet as pq

    with open_read(url) as f:
        table = pq.read_table(f)
    yield from _table_sketches(table)


def _table_sketches(table) -> Iterator[Sketch]:
    cols = {name: table.column(name) for name in table.column_names}
    for i in range(table.num_rows):
        yield Sketch(
            OLD + cols["doc_id"][i].as_py(),
            cols["source"][i].as_py(),
            cols["exact_hash"][i].as_py(),
            cols["signature"][i].values.to_numpy(zero_copy_only=False).astype(np.uint32),
            cols["band_keys"][i].values.to_numpy(zero_copy_only=False).astype(np.int64),
            cols["shingles"][i].values.to_numpy(zero_copy_only=False).astype(np.uint32),
        )


def _row_hits(lists, keys: np.ndarray) -> np.ndarray:
    """bool[rows]: which rows of a list<int64> column hold at least one of the sorted unique `keys`."""
    lengths = lists.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = lists.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    if values.size == 0 or keys.size == 0:
        return np.zeros(len(lengths), dtype=bool)
    pos = np.minimum(np.searchsorted(keys, values), keys.size - 1)
    hit = np.concatenate([[0], np.cumsum(keys[pos] == values)])
    ends = np.cumsum(lengths)
    return (hit[ends] - hit[ends - lengths]) > 0


def _string_hits(column, wanted: set[str]) -> np.ndarray:
    return np.fromiter((v in wanted for v in column.to_pylist()), bool, len(column))


def read_index_matches(url: str, *, hashes: set[str] | None = None, band_keys: np.ndarray | None = None,
                       doc_ids: set[str] | None = None) -> Iterator[Sketch]:
    """The entries of one index part that can matter to a batch of new documents, as old Sketches.

    An entry is read if its exact hash is in ``hashes``, it shares a band key
    with ``band_keys`` (sorted unique int64) or its doc_id is in ``doc_ids``.
    Only the probe columns of every row group are read, and the full rows of
    the groups holding a match. Memory: one row group at a time.
    """
    import pyarrow.parquet as pq

    probe = ((["exact_hash"] if hashes is not None else []) + (["band_keys"] if band_keys is not None else [])
             + (["doc_id"] if doc_ids is not None else []))
    with open_read(url) as f:
        pf = pq.ParquetFile(f)
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g, columns=probe)
            mask = np.zeros(t.num_rows, dtype=bool)
            if hashes is not None:
                mask |= _string_hits(t.column("exact_hash"), hashes)
            if band_keys is not None:
                mask |= _row_hits(t.column("band_keys").combine_chunks(), band_keys)
            if doc_ids is not None:
                mask |= _string_hits(t.column("doc_id"), doc_ids)
            rows = np.flatnonzero(mask)
            if rows.size:
                yield from _table_sketches(pf.read_row_group(g).take(rows))


def index_bucket_entries(url: str, band_keys: np.ndarray) -> Iterator[tuple[int, tuple[str, np.ndarray]]]:
    """``(band key, (old node, signature))`` for every band key of ``band_keys`` an entry of one part holds.

    What the LSH step needs of the old documents sharing a bucket with a new
    one: no shingles, no text (those are fetched later, only for the old
    documents that end up in a cluster).
    """
    import pyarrow.parquet as pq

    with open_read(url) as f:
        pf = pq.ParquetFile(f)
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g, columns=["band_keys"])
            rows = np.flatnonzero(_row_hits(t.column("band_keys").combine_chunks(), band_keys))
            if not rows.size:
                continue
            size_col = "num_shingles" if "num_shingles" in pf.schema_arrow.names else "shingles"
            hit = pf.read_row_group(g, columns=["doc_id", "signature", size_col]).take(rows)
            nodes = [OLD + d for d in hit.column("doc_id").to_pylist()]
            sizes = (hit.column(size_col).to_pylist() if size_col == "num_shingles" else
                     hit.column(size_col).combine_chunks().value_lengths().to_pylist())
            sig_col = hit.column("signature").combine_chunks()
            sigs = sig_col.flatten().to_numpy(zero_copy_only=False).astype(np.uint32)
            sig_len = sig_col.value_lengths().to_numpy(zero_copy_only=False).astype(np.int64)
            sig_start = np.concatenate([[0], np.cumsum(sig_len)])
            key_col = t.column("band_keys").combine_chunks().take(rows)
            values = key_col.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
            row_of = np.repeat(np.arange(hit.num_rows), key_col.value_lengths().to_numpy(zero_copy_only=False))
            pos = np.minimum(np.searchsorted(band_keys, values), band_keys.size - 1)
            for j in np.flatnonzero(band_keys[pos] == values).tolist():
                r = int(row_of[j])
                yield int(values[j]), (nodes[r], sigs[sig_start[r]:sig_start[r + 1]].copy(), int(sizes[r]))


def index_exact_matches(url: str, hashes: set[str]) -> Iterator[tuple[str, str]]:
    """``(exact_hash, doc_id)`` of the entries of one part whose hash is in ``hashes`` (two columns read)."""
    import pyarrow.parquet as pq

    with open_read(url) as f:
        pf = pq.ParquetFile(f)
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g, columns=["exact_hash", "doc_id"])
            rows = np.flatnonzero(_string_hits(t.column("exact_hash"), hashes))
            if rows.size:
                hit = t.take(rows)
                yield from zip(hit.column("exact_hash").to_pylist(), hit.column("doc_id").to_pylist(), strict=True)


def _unique_keys(key_arrays: list[np.ndarray]) -> np.ndarray:
    return np.unique(np.concatenate(key_arrays).astype(np.int64))


def _sketches_by_id(url: str, doc_ids: set[str]) -> Iterator[Sketch]:
    return read_index_matches(url, doc_ids=doc_ids)


class _IndexLookup(beam.DoFn):
    """``lookup(part_url, derive(side input))`` for each index part, counting what it reads.

    ``derive`` turns the batch's side input (new hashes, band keys, doc_ids)
    into the probe once per side input, not once per part. An empty side
    input reads nothing.
    """

    def __init__(self, counter: str, derive: Any, lookup: Any) -> None:
        self.read = Metrics.counter(_NS, counter)
        self.derive, self.lookup = derive, lookup
        self._side: Any = None
        self._probe: Any = None

    def process(self, url: str, side: list[Any]) -> Iterator[Any]:
        if not side:
            return
        if side is not self._side:
            self._side, self._probe = side, self.derive(side)
        for item in self.lookup(url, self._probe):
            self.read.inc()
            yield item


class _SmallestNode(beam.CombineFn):
    """The bucket entry with the smallest node id (the only old entry of a bucket that can matter)."""

    def create_accumulator(self):
        return None

    def add_input(self, acc, entry):
        return entry if acc is None or entry[0] < acc[0] else acc

    def merge_accumulators(self, accs):
        best = None
        for a in accs:
            if a is not None and (best is None or a[0] < best[0]):
                best = a
        return best

    def extract_output(self, acc):
        return acc


def index_parts(index_url: str, cfg: DedupeConfig) -> list[str]:
    """Part files of an existing index, after checking it was built with compatible parameters."""
    meta_url = join(index_url, INDEX_META)
    if not exists(meta_url):
        raise UserError(f"no dedupe index at {index_url} ({INDEX_META} missing)")
    meta = json.loads(read_text(meta_url))
    want = index_params(cfg)
    diff = {k: (meta.get(k), v) for k, v in want.items() if k != "near" and meta.get(k) != v}
    if diff:
        raise UserError(f"dedupe index {index_url} was built with other parameters (index, config): {diff}")
    if cfg.near and not meta.get("near"):
        raise UserError(f"dedupe index {index_url} has no signatures (built with near=false)")
    if "parts" in meta:  # append-only index: parts of earlier indexes are listed, not copied
        return [resolve_url(index_url, ref) for ref in meta["parts"]]
    return expand_glob(join(index_url, "part-*.parquet"))


class _WriteIndex(beam.PTransform):
    """Write this run's entries as new parts; index.json lists the old parts (by reference) and the new.

    The index is append-only: a run costs its own entries, not the size of the
    corpus before it. Old parts inside ``root`` (the corpus both indexes belong
    to) are referenced relative to this index's folder, so the corpus can be
    moved as a whole; parts elsewhere (another corpus's index) by full URL.
    """

    def __init__(self, url: str, cfg: DedupeConfig, old_parts: Sequence[str] = (), root: str | None = None) -> None:
        super().__init__()
        self.url, self.cfg = url, cfg
        self.old_refs = [relative_url(url, p) if root is not None and is_within(p, root) else p for p in old_parts]

    def expand(self, sketches: beam.PCollection) -> beam.PCollection:
        from pipelines.files import WriteParts

        parts = (
            sketches
            | "Count" >> beam.combiners.Count.Globally()
            | "Parts" >> beam.Map(lambda n: max(1, math.ceil(n / INDEX_ENTRIES_PER_PART)))
        )
        written = sketches | "WriteParts" >> WriteParts(self.url, "parquet", _sketches_to_parquet, parts)
        params, old_refs, url = index_params(self.cfg), self.old_refs, self.url

        def write_meta(names: list[str]) -> None:
            meta = {**params, "parts": old_refs + sorted(names)}
            write_text_atomic(join(url, INDEX_META), json.dumps(meta, sort_keys=True) + "\n")

        # index.json is written last: an index without it is incomplete.
        return written | "AllParts" >> beam.combiners.ToList() | "WriteMeta" >> beam.Map(write_meta)


# ------------------------------------------------------------------ all together

def _split_final(element: tuple[str, dict[str, Any]]) -> Iterator[Any]:
    """Join a document with its near-duplicate verdict (and its sketch, for the index)."""
    _, g = element
    docs, dups, sk = list(g["doc"]), list(g["dup"]), list(g.get("sketch", ()))
    if not docs:
        return
    if dups:
        yield beam.pvalue.TaggedOutput("duplicates", dups[0])
        return
    yield docs[0]
    if sk:
        yield beam.pvalue.TaggedOutput("index", sk[0])


def _repoint_exact(element: tuple[str, dict[str, Any]]) -> Iterator[Duplicate]:
    """Exact duplicates of one document, re-pointed at its near-duplicate target if it has one."""
    _, g = element
    near = list(g["near"])
    for d in g["exact"]:
        yield d if not near else Duplicate(d.doc_id, d.source, near[0].dup_of, d.kind)


def _exact_only_sketch(d: Document) -> Sketch:
    empty = np.empty(0, dtype=np.uint32)
    return Sketch(NEW + d.doc_id, d.source, normalized_text_hash(d.text), empty, np.empty(0, np.int64), empty)


class Deduplicate(beam.PTransform):
    """Exact + near-duplicate removal: ``{"kept": PCollection[Document], "duplicates": PCollection[Duplicate]}``.

    ``index_in``: URL of the signature index of an existing corpus (default
    ``cfg.index``); new documents matching it are duplicates of the old
    doc_ids, and old documents are never removed. ``index_out``: where to
    write the index of the result (this run's kept documents plus the old
    index), for the next incremental run.

    With ``cfg.repeated_spans``, ``SpanDedupe`` then runs on the kept
    documents: repeats of ``cfg.span_sentences``-sentence spans are cut, and
    documents left empty become ``Duplicate(kind="span")`` (within this batch;
    the index holds no spans).
    """

    def __init__(self, cfg: DedupeConfig, index_in: str | None = None, index_out: str | None = None,
                 index_root: str | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.index_in = index_in if index_in is not None else cfg.index
        self.index_out = index_out
        self.index_root = index_root
        if self.index_in and self.index_out and (is_within(self.index_out, self.index_in)
                                                 or is_within(self.index_in, self.index_out)):
            raise UserError("dedupe index_in and index_out must be separate folders (the new index lists the "
                            "old one's parts, which must stay as they are)")

    def expand(self, docs: beam.PCollection) -> dict[str, beam.PCollection]:
        cfg = self.cfg
        p = docs.pipeline
        old_parts: list[str] = []
        part_urls = None
        if self.index_in:
            old_parts = index_parts(self.index_in, cfg)
            part_urls = p | "IndexParts" >> beam.Create(old_parts)

        dup_parts: list[beam.PCollection] = []
        kept = docs
        if cfg.exact:
            ex = kept | "Exact" >> ExactDedupe(old_parts=part_urls)
            kept = ex["kept"]
            dup_parts.append(ex["duplicates"])

        sketches = None
        if cfg.near:
            sketches = (
                kept
                | "Batch" >> beam.BatchElements(min_batch_size=SIGNATURE_BATCH[0], max_batch_size=SIGNATURE_BATCH[1])
                | "Sketch" >> beam.ParDo(_SketchBatch(_hasher(cfg)))
            )
            near = sketches | "Near" >> NearDedupe(cfg, part_urls)
            groups = {
                "doc": kept | "DocByID" >> beam.Map(lambda d: (d.doc_id, d)),
                "dup": near | "DupByID" >> beam.Map(lambda d: (d.doc_id, d)),
            }
            if self.index_out:
                groups["sketch"] = sketches | "SketchByID" >> beam.Map(lambda s: (s.doc_id, s))
            split = (
                groups
                | "JoinVerdicts" >> beam.CoGroupByKey()
                | "Split" >> beam.FlatMap(_split_final).with_outputs("duplicates", "index", main="kept")
            )
            kept = split.kept
            if dup_parts:
                # An exact duplicate's kept twin may be removed now as a near
                # duplicate: point it at the document that stays.
                dup_parts = [
                    {"exact": dup_parts[0] | "ExactByTarget" >> beam.Map(lambda d: (d.dup_of, d)),
                     "near": split.duplicates | "NearByID" >> beam.Map(lambda d: (d.doc_id, d))}
                    | "JoinChains" >> beam.CoGroupByKey()
                    | "Repoint" >> beam.FlatMap(_repoint_exact)
                ]
            dup_parts.append(split.duplicates)
            new_index = split.index
        else:
            new_index = kept | "ExactOnlyIndex" >> beam.Map(_exact_only_sketch)

        if cfg.repeated_spans:
            spans = kept | "Spans" >> SpanDedupe(cfg.span_sentences)
            kept, span_dups = spans["kept"], spans["duplicates"]
            if dup_parts:
                # A kept document that spans then emptied can be the target of exact
                # or near duplicates: point them at the kept document it points at.
                earlier = dup_parts | "EarlierDuplicates" >> beam.Flatten()
                dup_parts = [
                    {"dup": earlier | "DupByTarget" >> beam.Map(lambda d: (d.dup_of, d)),
                     "span": span_dups | "SpanByID" >> beam.Map(lambda d: (d.doc_id, d))}
                    | "JoinSpanTargets" >> beam.CoGroupByKey()
                    | "RepointSpan" >> beam.FlatMap(_repoint_to_kept)
                ]
            dup_parts.append(span_dups)
            if self.index_out:
                # Emptied documents leave the corpus, so they leave the index; trimmed
                # ones stay with their untrimmed sketch (spans are within-batch only).
                new_index = (
                    {"entry": new_index | "EntryByID" >> beam.Map(lambda s: (s.doc_id, s)),
                     "removed": span_dups | "RemovedByID" >> beam.Map(lambda d: (d.doc_id, None))}
                    | "JoinRemoved" >> beam.CoGroupByKey()
                    | "DropRemoved" >> beam.FlatMap(_drop_removed)
                )

        if self.index_out:
            _ = new_index | "WriteIndex" >> _WriteIndex(self.index_out, cfg, old_parts, self.index_root)

        if dup_parts:
            duplicates = dup_parts | "AllDuplicates" >> beam.Flatten()
        else:
            duplicates = p | "NoDuplicates" >> beam.Create([])
        return {"kept": kept, "duplicates": duplicates}
