"""Near duplicates: LSH buckets of MinHash band keys, screened edges, components, root verification."""

from __future__ import annotations

import dataclasses
import math
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipelines.dedupe.clusters import resolve_cluster
from pipelines.dedupe.components import ConnectedComponents
from pipelines.dedupe.index import (
    IndexLookup,
    SmallestNode,
    index_bucket_entries,
    sketches_by_id,
    unique_keys,
)
from pipelines.dedupe.minhash import (
    SAMPLE_EVERY,
    MinHasher,
    NearRule,
    estimate_margin,
    estimated_jaccard,
    sampled,
    sketch_arrays,
)
from pipelines.dedupe.sketch import COUNTERS, NEW, OLD, Sketch, before_line_rules, near_rule, sketches_of, u32
from pipelines.localrunner.batching import PooledBatches
from pipelines.records import Document, Duplicate
from schemas.config import DedupeConfig

# LSH buckets are grouped by shard (band key mod LSH_SHARDS), one element per (shard,
# batch of documents): a reducer holds 1/LSH_SHARDS of the corpus's bucket entries
# (~40 B each: key, count, node id), so on Dataflow 64 workers can share the step and
# no key holds the whole corpus; an element is a few KB (a 512-document batch
# has ~110 entries per shard). Changing it changes no verdict, only the grouping.
LSH_SHARDS = 64
DOC_TAG = "docs"  # SketchBatch's documents with their index entries, keyed for the verdict join
LSH_TAG = "lsh"  # the Sketch step's tagged output of shard batches


class SketchBatch(PooledBatches):
    """Sketches of documents, in batches of ``batch`` (numpy work is per batch; ``pipelines.localrunner.batching``;
    in a document process with ``--doc_processes``), and (tagged ``LSH_TAG``) each batch's bucket
    entries by LSH shard.

    ``doc_rows``: a function of a sketch (``index_row``) or None; given, each document also goes out
    tagged ``DOC_TAG`` as ``(doc_id, (document, doc_rows(sketch)))``: the document and its index entry
    cross the verdict join as one element (``Deduplicate``), not two.
    """

    # One document process sketches: it loads the numba MinHash kernel (~1 CPU-s, ~130 MB) once it has
    # hashed KERNEL_AFTER products, as the runner's process would; sketches spread over two took the
    # numpy path (~3x the CPU) for twice as many documents, and each loaded the kernel.
    lanes = 1

    def __init__(self, hasher: MinHasher, doc_rows: Any, batch: int) -> None:
        super().__init__(batch)
        self.hasher = hasher
        self.doc_rows = doc_rows

    def batch_task(self, batch: list[Document]):
        before = before_line_rules(batch)
        return sketch_arrays, ([d.text for d in batch], self.hasher) + ((before,) if before else ())

    def batch_outputs(self, batch: list[Document], arrays) -> Iterator[Any]:
        sketches = sketches_of(batch, arrays)
        yield from sketches
        for shard in lsh_shard_batches(sketches):
            yield beam.pvalue.TaggedOutput(LSH_TAG, shard)
        if self.doc_rows is not None:
            rows = self.doc_rows
            for d, s in zip(batch, sketches, strict=True):
                yield beam.pvalue.TaggedOutput(DOC_TAG, (d.doc_id, (without_line_rules_text(d), rows(s))))


def without_line_rules_text(d: Document) -> Document:
    """The document without its text before the line rules (read by the Sketch step only)."""
    return d if d.before_line_rules is None else dataclasses.replace(d, before_line_rules=None)


@dataclass(frozen=True)
class EdgeScreen:
    """Which LSH candidates become edges, judged on signatures and samples (below what ``NearRule`` accepts).

    A candidate passes if its estimated Jaccard reaches ``jaccard`` (2 sigma below the rule's
    threshold), or (the containment path) the smaller document holds >= ``min_shingles`` shingles,
    the estimated Jaccard reaches ``containment_jaccard`` and the share of the smaller one that lies
    in the larger reaches ``containment`` less two standard errors. That share is estimated on the
    consistent samples (``pipelines.dedupe.minhash.sampled``) that follow the ``num_perm`` values of
    a new document's signature (a passage's sample lies whole in the sample of a text holding it:
    exact at any Jaccard), or, for an indexed root (its signature comes without one), from the
    Jaccard estimate and the two set sizes, ``J (|A| + |B|) / ((1 + J) min(|A|, |B|))``, which is
    only as good as that estimate. Either way the Jaccard estimate must also reach (less two standard
    errors) the Jaccard that share implies at the two sizes: a short document's sample holds a few
    shingles, which cannot tell a share of 0.3 from 0.8 between two pages of one size. Screening containment on its own estimate (not on a lowered
    Jaccard bar) keeps components tight: loose edges chain a family into one cluster whose kept
    document is far from most members.
    """

    jaccard: float
    containment: float | None = None
    containment_jaccard: float = 0.0
    min_shingles: int = 1
    num_perm: int = 0  # signature values; what follows them is the sample (0: the whole array is the signature)

    @classmethod
    def of(cls, rule: NearRule, num_perm: int) -> EdgeScreen:
        """The screen of a verification rule for signatures of ``num_perm`` values."""
        def lo(t: float) -> float:
            return max(0.0, t - estimate_margin(t, num_perm))

        shares = ([rule.containment] if rule.containment is not None else []) + ([rule.kept_share] if rule.cleaning
                                                                                  else [])
        if not shares:
            return cls(lo(rule.threshold), num_perm=num_perm)
        return cls(lo(rule.threshold), min(shares), lo(rule.min_jaccard), rule.min_shingles, num_perm)

    def passes(self, sig_a: np.ndarray, n_a: int | None, sig_b: np.ndarray, n_b: int | None) -> bool:
        """True if the pair (signatures with their samples, shingle counts; None: unknown) may be a near duplicate."""
        a, b = u32(sig_a), u32(sig_b)
        k = self.num_perm or a.size
        j = estimated_jaccard(a[:k], b[:k])
        if j >= self.jaccard:
            return True
        if self.containment is None or n_a is None or n_b is None or j < self.containment_jaccard:
            return False
        small = min(n_a, n_b)
        if small < self.min_shingles:
            return False
        p = self.containment
        # The Jaccard that a share p of the smaller set lying in the larger implies at these sizes: a
        # sample of a few shingles (a short document's) cannot tell 0.3 from 0.8, the signature can.
        implied = p * small / (n_a + n_b - p * small)
        if j < implied - estimate_margin(implied, k):
            return False
        sample_a, sample_b = a[k:], b[k:]
        if sample_a.size and sample_b.size:
            n = min(sample_a.size, sample_b.size)
            share = np.intersect1d(sample_a, sample_b, assume_unique=True).size / n
            return share >= p - 2.0 * math.sqrt(p * (1.0 - p) / n)
        return j * (n_a + n_b) / ((1.0 + j) * small) >= p - estimate_margin(p, k)


# What crosses the near step's shuffles is plain tuples of str, int and bytes, which
# Beam's FastPrimitivesCoder writes natively (no pickle): node ids as str (their
# order decides the kept document), shingle counts as int, signatures and shingle
# sets as the raw bytes of their uint32 arrays. Signatures travel only through the
# two screening joins, once per document each; shingles only to verification.
BucketEntry = tuple[str, int] | tuple[str, int, bytes]  # (node, shingle count[, signature: old roots only])


def bucket_root(members: Iterable[BucketEntry]) -> BucketEntry | None:
    """A bucket's root: its smallest old node (an indexed document: never removed, so new ones are
    compared with it), else its longest new document (the smallest node of equals; None: no member).

    The longest, not the smallest id: a bucket shared by a passage, the text it was taken from and
    a page holding only part of it (a shared lead, a shared half) then pairs the passage with the
    text that holds it whatever their ids, where a star on the smallest id could pair it with the
    page that holds only part of it and never with the whole."""
    old: BucketEntry | None = None
    longest: BucketEntry | None = None
    for m in members:
        if not m[0].startswith(NEW):
            if old is None or m[0] < old[0]:
                old = m
        elif longest is None or (m[1], longest[0]) > (longest[1], m[0]):
            longest = m
    return old if old is not None else longest


def bucket_candidates(members: Iterable[BucketEntry]) -> Iterator[tuple[str, tuple[str, int, int, bytes]]]:
    """LSH candidates of one bucket: ``(member, (root, member count, root count, root signature))``.

    The root is ``bucket_root``; every other new member is a candidate with the
    root only (a star, not a clique: linear in the bucket size; components
    connect the rest). The root's signature comes along only for an old root
    (from the index; new signatures are joined later, once per document rather
    than once per bucket), else it is ``b""``. Buckets of old documents only
    produce nothing (old documents are never removed).
    """
    members = list(members)
    root = bucket_root(members)
    if root is None:
        return
    root_sig = root[2] if len(root) > 2 else b""
    for m in members:
        if m[0] != root[0] and m[0].startswith(NEW):
            yield m[0], (root[0], m[1], root[1], root_sig)


def screen_at_member(member: str, member_sig: bytes, candidates: Iterable[tuple[str, int, int, bytes]],
                     screen: EdgeScreen) -> Iterator[tuple[str, str] | tuple[str, tuple[str, bytes, int, int]]]:
    """One new node's distinct candidate roots: ``("edge", (root, member))`` for old roots that pass
    ``screen`` (their signature came with the bucket), ``(root, (member, signature, counts))`` for new
    roots, whose signature is joined next. A pair shared by many buckets is screened once."""
    seen: set[str] = set()
    for root, n_m, n_r, root_sig in candidates:
        if root in seen:
            continue
        seen.add(root)
        if root_sig:
            if screen.passes(u32(member_sig), n_m, u32(root_sig), n_r):
                yield "edge", (root, member)
        else:
            yield root, (member, member_sig, n_m, n_r)


def bucket_edges(members: Iterable[BucketEntry | tuple[str, np.ndarray, int]], screen: EdgeScreen | float,
                 ) -> Iterator[tuple[str, str]]:
    """Screened edges of one bucket whose members carry signatures: (bucket's smallest node, member).

    The reference for what the three-step pipeline (``bucket_candidates``,
    ``screen_at_member``, the root's join) computes, in one place: members are
    ``(node, signature, shingle count)``; each is compared with the bucket's
    smallest node only and kept if it passes ``screen`` (an ``EdgeScreen``, or
    a float: the minimum estimated Jaccard).
    """
    if not isinstance(screen, EdgeScreen):
        screen = EdgeScreen(screen)
    members = list(members)
    sig = {m[0]: m[1] for m in members}
    for member, (root, n_m, n_r, _) in bucket_candidates([(m[0], m[2]) for m in members]):
        if screen.passes(u32(sig[member]), n_m, u32(sig[root]), n_r):
            yield (root, member)


class _ScreenAtMember(beam.DoFn):
    def __init__(self, screen: EdgeScreen) -> None:
        self.screen = screen
        self.candidates = Metrics.counter(COUNTERS, "near_candidate_pairs")
        self.edges = Metrics.counter(COUNTERS, "near_verified_edges")

    def process(self, element: tuple[str, dict[str, Any]]) -> Iterator[Any]:
        member, g = element
        sigs = list(g["sig"])
        if not sigs or any(True for _ in g.get("skip", ())):
            return
        for out in screen_at_member(member, sigs[0], g["cand"], self.screen):
            self.candidates.inc()
            if out[0] == "edge":
                self.edges.inc()
                yield out[1]
            else:
                yield beam.pvalue.TaggedOutput("at_root", out)


class _ScreenAtRoot(beam.DoFn):
    def __init__(self, screen: EdgeScreen) -> None:
        self.screen = screen
        self.edges = Metrics.counter(COUNTERS, "near_verified_edges")

    def process(self, element: tuple[str, dict[str, Any]]) -> Iterator[tuple[str, str]]:
        root, g = element
        sigs = list(g["sig"])
        if not sigs:
            return
        root_sig = u32(sigs[0])
        for member, member_sig, n_m, n_r in g["req"]:
            if self.screen.passes(u32(member_sig), n_m, root_sig, n_r):
                self.edges.inc()
                yield (root, member)


def bucket_entries(s: Sketch) -> Iterator[tuple[int, tuple[str, int]]]:
    """One document's LSH bucket entries ``(band key, (node, shingle count))`` (the per-bucket reference)."""
    if s.shingles.size == 0:  # empty documents are left to exact dedupe
        return
    entry = (s.node, int(s.shingles.size))
    for key in s.band_keys.tolist():
        yield key, entry


# What crosses the bucket shuffle, keyed by LSH shard: a batch's entries of that shard
# as three parallel columns (band keys as int64 bytes, shingle counts as uint32 bytes,
# node ids), or one old bucket root from the index (band key, node, count, signature).
ShardBatch = tuple[bytes, bytes, tuple[str, ...]]
OldShardEntry = tuple[int, str, int, bytes]


def lsh_shard(key: int, shards: int = LSH_SHARDS) -> int:
    """The LSH shard of a band key (Python's ``%``: never negative, as numpy's for int64 keys)."""
    return key % shards


def lsh_shard_batches(sketches: Sequence[Sketch], shards: int = LSH_SHARDS) -> Iterator[tuple[int, ShardBatch]]:
    """The bucket entries of a batch of sketches, one ``(shard, ShardBatch)`` per shard holding any.

    The same entries as ``bucket_entries`` of each sketch (documents without
    shingles have none), as columns: one element per shard and batch instead of
    one per band and document.
    """
    docs = [s for s in sketches if s.shingles.size]
    if not docs:
        return
    per_doc = np.fromiter((s.band_keys.size for s in docs), dtype=np.int64, count=len(docs))
    keys = np.concatenate([s.band_keys for s in docs]).astype(np.int64, copy=False)
    doc_of = np.repeat(np.arange(len(docs)), per_doc)
    counts = np.fromiter((s.shingles.size for s in docs), dtype=np.uint32, count=len(docs))[doc_of]
    shard_of = keys % shards
    order = np.argsort(shard_of, kind="stable")
    sorted_shards = shard_of[order]
    starts = np.flatnonzero(np.r_[True, sorted_shards[1:] != sorted_shards[:-1]])
    ends = np.r_[starts[1:], order.size]
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        idx = order[start:end]
        nodes = tuple(docs[i].node for i in doc_of[idx].tolist())
        yield int(sorted_shards[start]), (keys[idx].tobytes(), counts[idx].tobytes(), nodes)


def old_shard_entry(entry: tuple[int, tuple[str, int, bytes]]) -> tuple[int, OldShardEntry]:
    """An old bucket root (``OldBucketRoot``'s output) keyed by the shard of its band key."""
    key, (node, n, sig) = entry
    return lsh_shard(key), (key, node, n, sig)


def shard_candidates(values: Iterable[ShardBatch | OldShardEntry],
                     ) -> Iterator[tuple[str, tuple[str, int, int, bytes]]]:
    """LSH candidates of one shard's entries: ``bucket_candidates`` of every band key held twice or more.

    ``values``: the shard's batches of new entries and its old bucket roots. The
    keys are concatenated and sorted in numpy; only the buckets with two or more
    entries (a few, in a corpus without many duplicates) are built as Python
    lists, so a singleton bucket, which can give no candidate, costs no Python
    work. The candidates are those of ``bucket_candidates`` over the same
    entries grouped by band key, bucket for bucket.
    """
    key_parts: list[np.ndarray] = []
    count_parts: list[np.ndarray] = []
    node_parts: list[tuple[str, ...]] = []
    old: list[OldShardEntry] = []
    for v in values:
        if isinstance(v[0], bytes):
            key_parts.append(np.frombuffer(v[0], dtype=np.int64))
            count_parts.append(np.frombuffer(v[1], dtype=np.uint32))
            node_parts.append(v[2])  # type: ignore[arg-type]
        else:
            old.append(v)  # type: ignore[arg-type]
    keys = np.concatenate(key_parts + [np.fromiter((o[0] for o in old), dtype=np.int64, count=len(old))])
    if keys.size < 2:
        return
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    same_as_next = sorted_keys[1:] == sorted_keys[:-1]
    if not same_as_next.any():
        return
    starts = np.flatnonzero(np.r_[True, ~same_as_next])
    sizes = np.diff(np.r_[starts, keys.size])
    multi = sizes >= 2
    counts = np.concatenate(count_parts) if count_parts else np.zeros(0, np.uint32)
    n_new = counts.size
    offsets = np.cumsum([0] + [len(p) for p in node_parts]).tolist()

    def entry(i: int) -> BucketEntry:
        if i >= n_new:
            o = old[i - n_new]
            return (o[1], o[2], o[3])
        part = bisect_right(offsets, i) - 1
        return (node_parts[part][i - offsets[part]], int(counts[i]))

    for start, size in zip(starts[multi].tolist(), sizes[multi].tolist(), strict=True):
        yield from bucket_candidates([entry(i) for i in order[start:start + size].tolist()])


def signature_by_node(s: Sketch) -> list[tuple[str, bytes]]:
    """What screening needs of a document: its signature, then its consistent sample (``EdgeScreen``)."""
    if not s.shingles.size:
        return []
    return [(s.node, s.signature.tobytes() + s.shingles[sampled(s.shingles, SAMPLE_EVERY)].tobytes())]


def shingles_by_node(s: Sketch) -> list[tuple[str, tuple[str, bytes, bytes]]]:
    """What verification needs of a document: its source, shingle set and the shingles its text lost to
    the line rules (documents with shingles only)."""
    return [(s.node, (s.source, s.shingles.tobytes(), s.lost.tobytes()))] if s.shingles.size else []


def _old_bucket_entries(url: str, band_keys: np.ndarray) -> Iterator[tuple[int, tuple[str, int, bytes]]]:
    for key, (node, sig, n) in index_bucket_entries(url, band_keys):
        yield key, (node, n, sig.tobytes())


def _route_to_root(element: tuple[str, dict[str, Any]]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Send a clustered node's shingles to its cluster root (members) or its own group (roots)."""
    node, groups = element
    sketches, roles = list(groups["sketch"]), list(groups["role"])
    if not sketches or not roles:
        return
    source, shingles, lost = sketches[0]
    label, is_root, _converged = roles[0]
    if label is not None:
        yield label, ("member", node, source, shingles, lost)
    if is_root:
        # A root that also has a parent (rounds ran out before convergence)
        # removes nothing: it may be removed itself, and a duplicate must point
        # at a kept document. Its members stay (recall lost, never precision).
        yield node, ("root", label is None, shingles, lost, source)


class _ResolveClusters(beam.DoFn):
    def __init__(self, rule: NearRule, max_members: int) -> None:
        self.rule, self.max_members = rule, max_members
        self.dups = Metrics.counter(COUNTERS, "near_duplicates")
        self.failed = Metrics.counter(COUNTERS, "near_failed_root_verification")
        self.over = Metrics.counter(COUNTERS, "near_over_cluster_cap")
        self.clusters = Metrics.counter(COUNTERS, "near_clusters")

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
    ``bucket_candidates`` other members are only ever compared with the root,
    so the other old entries of a bucket never make an edge), as (node, count,
    signature); after the components, the shingles of the old nodes that are
    cluster roots. The verdicts are those of a run with the whole index.

    ``buckets``: the sketches' bucket entries as ``(shard, ShardBatch)``
    (``lsh_shard_batches``; ``Deduplicate`` takes them from the Sketch step's
    batches); without it they are made here, one sketch per element.

    ``components_in_memory``: the connected components' rounds in one step (``ConnectedComponents``'
    ``in_memory``: the local runner); the same verdicts.

    ``skip``: node ids (PCollection[str]) that are never a candidate member: the exact duplicates,
    when ``Deduplicate`` sketches every document. An exact duplicate shares every band key with
    its kept twin (or the indexed document it matches), whose node id is smaller, so it is never a
    bucket's root either: skipping it at the member screen gives the verdicts of a run without it.

    Shuffles: LSH buckets of (node, count) only, grouped by LSH shard (band key
    mod ``LSH_SHARDS``) in columns, one element per shard and batch of
    documents; the old bucket roots join the same shards, and
    ``shard_candidates`` finds the buckets of two or more entries in numpy and
    runs ``bucket_candidates`` on those only; two joins that bring the
    signatures of each distinct candidate pair together (at the member, then at
    the root); the connected components; the join of roles with shingle sets
    and the cluster groups. Everything crossing them is tuples of str, int and
    bytes (Beam's native coder, no pickle).
    """

    def __init__(self, cfg: DedupeConfig, old_parts: beam.PCollection | None = None,
                 buckets: beam.PCollection | None = None, skip: beam.PCollection | None = None,
                 components_in_memory: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.components_in_memory = components_in_memory
        self.old_parts = old_parts
        self.buckets = buckets
        self.skip = skip

    def expand(self, sketches: beam.PCollection) -> beam.PCollection:
        cfg = self.cfg
        num_perm = cfg.bands * cfg.rows
        # Edges pass on signature estimates with a 2-sigma margin below what the
        # rule accepts (pairs truly there estimate below it half the time); the
        # true similarity against the kept document decides.
        rule = near_rule(cfg)
        screen = EdgeScreen.of(rule, num_perm)
        entries = self.buckets
        if entries is None:
            # Standalone use: shard batches of one sketch each (Deduplicate passes the
            # Sketch step's, made from its batches of documents).
            entries = sketches | "ShardBatches" >> beam.FlatMap(lambda s: lsh_shard_batches([s]))
        if self.old_parts is not None:
            new_keys = sketches | "NewBandKeys" >> beam.FlatMap(
                lambda s: [s.band_keys.tobytes()] if s.shingles.size else [])
            old_entries = (
                self.old_parts
                | "OldBucketEntries" >> beam.ParDo(
                    IndexLookup("index_bucket_entries_read", unique_keys, _old_bucket_entries),
                    beam.pvalue.AsList(new_keys))
                | "OldBucketRoot" >> beam.CombinePerKey(SmallestNode())
                | "OldRootShard" >> beam.Map(old_shard_entry)
            )
            entries = (entries, old_entries) | "WithOld" >> beam.Flatten()
        # Screening needs both signatures of a candidate pair: joined at the member,
        # then at the root (signatures cross each join once per document, not once per bucket).
        signatures = sketches | "SignatureByNode" >> beam.FlatMap(signature_by_node)
        at_member_groups = {
            "cand": entries | "GroupShards" >> beam.GroupByKey() | "Candidates" >> beam.FlatMapTuple(
                lambda _, values: shard_candidates(values)),
            "sig": signatures,
        }
        if self.skip is not None:
            at_member_groups["skip"] = self.skip | "SkipByNode" >> beam.Map(lambda node: (node, None))
        at_member = (
            at_member_groups
            | "JoinMemberSignature" >> beam.CoGroupByKey()
            | "ScreenAtMember" >> beam.ParDo(_ScreenAtMember(screen)).with_outputs("at_root", main="edges")
        )
        at_root = (
            {"req": at_member.at_root, "sig": signatures}
            | "JoinRootSignature" >> beam.CoGroupByKey()
            | "ScreenAtRoot" >> beam.ParDo(_ScreenAtRoot(screen))
        )
        edges = (at_member.edges, at_root) | "Edges" >> beam.Flatten()
        roles = (
            edges
            | "Components" >> ConnectedComponents(cfg.components_rounds, in_memory=self.components_in_memory)
            | "CountUnconverged" >> beam.Map(_count_unconverged)
            | "KeyRoles" >> beam.Map(lambda x: (x[0], x[1:]))
        )
        shingles = sketches | "ShinglesByNode" >> beam.FlatMap(shingles_by_node)
        if self.old_parts is not None:
            # Old nodes matter only as cluster roots (resolve_cluster never removes an old member).
            old_nodes = roles | "OldRoots" >> beam.FlatMap(
                lambda r: [r[0][1:]] if r[0].startswith(OLD) and r[1][1] else [])
            old_shingles = (
                self.old_parts
                | "ReadOldClustered" >> beam.ParDo(
                    IndexLookup("index_clustered_entries_read", set, sketches_by_id), beam.pvalue.AsList(old_nodes))
                | "OldShinglesByNode" >> beam.Map(lambda s: (s.node, (s.source, s.shingles.tobytes(), b"")))
            )
            shingles = (shingles, old_shingles) | "WithOldClustered" >> beam.Flatten()
        return (
            {"sketch": shingles, "role": roles}
            | "JoinRoles" >> beam.CoGroupByKey()
            | "RouteToRoot" >> beam.FlatMap(_route_to_root)
            | "GroupClusters" >> beam.GroupByKey()
            | "ResolveClusters" >> beam.ParDo(_ResolveClusters(rule, cfg.max_cluster_size))
        )


_unconverged = Metrics.counter(COUNTERS, "components_unconverged_nodes")


def _count_unconverged(x: tuple[str, str | None, bool, bool]) -> tuple[str, str | None, bool, bool]:
    if not x[3]:
        _unconverged.inc()
    return x
