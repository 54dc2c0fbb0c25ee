"""Near duplicates: LSH buckets of MinHash band keys, screened edges, components, root verification."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipelines.dedupe.components import ConnectedComponents
from pipelines.dedupe.index import (
    _IndexLookup,
    _sketches_by_id,
    _SmallestNode,
    _unique_keys,
    index_bucket_entries,
)
from pipelines.dedupe.sketch import _NS, NEW, OLD, Sketch, near_rule, sketch_documents
from pipelines.minhash import (
    MinHasher,
    NearRule,
    estimate_margin,
    estimated_jaccard,
)
from pipelines.records import Document, Duplicate
from schemas.config import DedupeConfig


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
