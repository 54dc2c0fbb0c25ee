"""Near duplicates as Beam transforms: sketches, LSH candidates (``pipelines.dedupe.candidates``), screened
edges, components, root verification."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.dedupe.candidates import (
    EdgeScreen,
    lsh_shard_batches,
    old_root,
    old_shard_entry,
    screen_at_member,
    shard_candidates,
)
from pipelines.dedupe.clusters import resolve_cluster
from pipelines.dedupe.components import ConnectedComponents
from pipelines.dedupe.index import (
    IndexLookup,
    KeyFilter,
    KeyProbe,
    filter_probe,
    index_bucket_entries,
    nodes_by_part,
    sketches_of_nodes,
)
from pipelines.dedupe.minhash import SAMPLE_EVERY, MinHasher, NearRule, sampled, sketch_arrays
from pipelines.dedupe.sketch import (
    COUNTERS,
    OLD,
    Sketch,
    before_line_rules,
    minhasher,
    near_rule,
    sketches_of,
    u32,
)
from pipelines.localrunner.batching import PooledBatches
from pipelines.records import Document, Duplicate
from schemas.config import DedupeConfig

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
        for shard in lsh_shard_batches(sketches, self.hasher):
            yield beam.pvalue.TaggedOutput(LSH_TAG, shard)
        if self.doc_rows is not None:
            rows = self.doc_rows
            for d, s in zip(batch, sketches, strict=True):
                yield beam.pvalue.TaggedOutput(DOC_TAG, (d.doc_id, (without_line_rules_text(d), rows(s))))


def without_line_rules_text(d: Document) -> Document:
    """The document without its text before the line rules (read by the Sketch step only)."""
    return d if d.before_line_rules is None else dataclasses.replace(d, before_line_rules=None)


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


def signature_by_node(s: Sketch) -> list[tuple[str, bytes]]:
    """What screening needs of a document: its signature, then its consistent sample (``EdgeScreen``)."""
    if not s.shingles.size:
        return []
    return [(s.node, s.signature.tobytes() + s.shingles[sampled(s.shingles, SAMPLE_EVERY)].tobytes())]


def shingles_by_node(s: Sketch) -> list[tuple[str, tuple[str, bytes, bytes]]]:
    """What verification needs of a document: its source, shingle set and the shingles its text lost to
    the line rules (documents with shingles only)."""
    return [(s.node, (s.source, s.shingles.tobytes(), s.lost.tobytes()))] if s.shingles.size else []


def _old_bucket_entries(url: str, band_keys: KeyProbe, part: int) -> Iterator[tuple[int, tuple[str, int, bytes]]]:
    for key, (node, sig, n) in index_bucket_entries(url, band_keys, part):
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


class _OldRoot(beam.CombineFn):
    """The old entries of a key as one (``old_root``: the bucket's root and the old shingle counts)."""

    def create_accumulator(self) -> tuple | None:
        return None

    def add_input(self, acc: tuple | None, entry: tuple) -> tuple:
        return old_root([entry] if acc is None else [acc, entry])

    def merge_accumulators(self, accs: Iterable[tuple | None]) -> tuple | None:
        parts = [a for a in accs if a is not None]
        return old_root(parts) if parts else None

    def extract_output(self, acc: tuple | None) -> tuple | None:
        return acc


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

    ``old_parts``: a PCollection of the signature index's parts, ``(number, url)`` (the index's list
    enumerated: an old node names its part, ``sketch.old_node``). Of the old
    documents only what can change a verdict enters the shuffles, so a batch
    costs its own size whatever the index's: per LSH bucket holding a new
    document where it may be a member, the old entries ``bucket_candidates`` can
    compare new members with (the smallest node id: the root; no other old entry
    makes an edge), with the old shingle counts that tell a bucket's size (``old_root``), as (node, count,
    signature); after the components, the shingles of the old nodes that are
    cluster roots. The verdicts are those of a run with the whole index.

    ``buckets``: the sketches' bucket entries as ``(shard, ShardBatch)``
    (``lsh_shard_batches``; ``Deduplicate`` takes them from the Sketch step's
    batches); without it they are made here, one sketch per element.

    ``components_in_memory``: the connected components' rounds in one step (``ConnectedComponents``'
    ``in_memory``: the local runner); the same verdicts.

    ``skip``: node ids (PCollection[str]) that are never a candidate member: the exact duplicates,
    when ``Deduplicate`` sketches every document. An exact duplicate shares every key and its
    shingle count with its kept twin (or the indexed document it matches), whose node id is
    smaller, so it is never a bucket's root either (``pipelines.dedupe.candidates``): skipping it
    at the member screen gives the verdicts of a run without it.

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
        hasher = minhasher(cfg)
        entries = self.buckets
        if entries is None:
            # Standalone use: shard batches of one sketch each (Deduplicate passes the
            # Sketch step's, made from its batches of documents).
            entries = sketches | "ShardBatches" >> beam.FlatMap(lambda s: lsh_shard_batches([s], hasher))
        if self.old_parts is not None:
            new_keys = (sketches
                        | "NewBandKeys" >> beam.FlatMap(lambda s: [s.band_keys.tobytes()] if s.shingles.size else [])
                        | "NewKeyFilter" >> KeyFilter(cfg.index_filter_mb))
            old_entries = (
                self.old_parts
                | "OldBucketEntries" >> beam.ParDo(
                    IndexLookup("index_bucket_entries_read", filter_probe, _old_bucket_entries),
                    beam.pvalue.AsSingleton(new_keys, default_value=None))
                | "OldBucketRoot" >> beam.CombinePerKey(_OldRoot())
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
                lambda r: [r[0]] if r[0].startswith(OLD) and r[1][1] else [])
            old_shingles = (
                self.old_parts
                | "ReadOldClustered" >> beam.ParDo(
                    IndexLookup("index_clustered_entries_read", nodes_by_part, sketches_of_nodes),
                    beam.pvalue.AsList(old_nodes))
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
