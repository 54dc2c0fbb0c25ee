"""Which pairs of documents the near step screens: LSH buckets, their candidates, and the screen (no Beam).

Every new member of a bucket is paired with the bucket's root (its smallest old
node, else its longest new document): a star, so a bucket costs its size. Two
kinds of bucket key lead there (``pipelines.dedupe.minhash``):

* **band keys**, shared by documents of similar shingle sets: every member;
* **anchor keys** (pairs of consecutive shingles chosen by value), shared by a
  passage and every text holding it. In a *small* bucket (at most
  ``SMALL_BUCKET`` documents, counted by shingle count) every member: an anchor
  few documents share (where a passage's text meets a paragraph boundary of its
  source, say) is the evidence that finds a passage's source. In a larger one (a
  paragraph or a template many pages reuse) only a document's
  ``anchor_queries`` smallest anchors make it a member, and at the member a root
  met that way is screened only if it met it in at least half of them
  (``anchor_quorum``): a text holding the passage holds all its anchors; a page
  sharing one paragraph with it meets it in the queries of that paragraph only.

A root that passes goes to ``EdgeScreen``, on signatures and consistent samples.

What crosses the near step's shuffles is plain tuples of str, int and bytes,
which Beam's FastPrimitivesCoder writes natively (no pickle): node ids as str
(their order decides the kept document), shingle counts as int, signatures as
the raw bytes of their uint32 arrays.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from pipelines.dedupe.minhash import MinHasher, NearRule, estimate_margin, estimated_jaccard
from pipelines.dedupe.sketch import NEW, Sketch, u32

# Bucket-shuffle shards: a shard batch holds one batch's entries of one shard (see ``lsh_shard_batches``).
# A reducer holds 1/LSH_SHARDS of the corpus's bucket entries (~40 B each: key, count, node id), so on
# Dataflow 64 workers can share the step and no key holds the whole corpus; an element is a few KB (a
# 512-document batch has ~110 entries per shard). Changing it changes no verdict, only the grouping.
LSH_SHARDS = 64
# An anchor bucket of at most this many documents (distinct shingle counts, old ones included) makes
# every entry a member; a larger one only the query anchors.
SMALL_BUCKET = 3
# An entry's role in its bucket: ALWAYS a member (a band key; every key with ``anchor_queries`` 0),
# ANCHOR (an anchor: a member in a small bucket), or a query anchor, stored as the number of query
# anchors its document has (1..anchor_queries: what the member's quorum is counted against).
ALWAYS, ANCHOR = 0xFFFF, 0

# A bucket entry: (node, shingle count, role) for a new document, or (node, shingle count, signature,
# old shingle counts) for an old bucket root (never a member; the counts are those of the old
# documents holding the key, up to SMALL_BUCKET + 1 of them: what the bucket's size needs).
BucketEntry = tuple[str, int, int] | tuple[str, int, bytes, tuple[int, ...]]
# A candidate, keyed by its member: (root, member count, root count, root signature: old roots only,
# else b"", the member's query anchors where a quorum applies, else 0: always screened).
Candidate = tuple[str, int, int, bytes, int]


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
    shingles, which cannot tell a share of 0.3 from 0.8 between two pages of one size. Screening
    containment on its own estimate (not on a lowered Jaccard bar) keeps components tight: loose
    edges chain a family into one cluster whose kept document is far from most members.
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


def bucket_size(members: Iterable[BucketEntry]) -> int:
    """Documents in a bucket, counted by distinct shingle count (an exact duplicate has its twin's: a
    bucket is as large with it as without it), old ones by the counts their root carries."""
    counts: set[int] = set()
    for m in members:
        counts.update(m[3] if not m[0].startswith(NEW) else (m[1],))  # type: ignore[misc]
    return len(counts)


def old_root(entries: Iterable[tuple[str, int, bytes]]) -> tuple[str, int, bytes, tuple[int, ...]]:
    """The old entries of one key as one: the smallest node (the bucket's root) with the smallest
    ``SMALL_BUCKET + 1`` distinct shingle counts among them (enough to tell a small bucket). Order-free
    and idempotent on its own output, so a combiner may apply it to any part of the entries."""
    entries = list(entries)
    first = min(entries, key=lambda e: e[0])
    counts = sorted({c for e in entries for c in (e[3] if len(e) > 3 else (e[1],))})  # type: ignore[misc]
    return first[0], first[1], first[2], tuple(counts[:SMALL_BUCKET + 1])


def bucket_candidates(members: Iterable[BucketEntry]) -> Iterator[tuple[str, Candidate]]:
    """LSH candidates of one bucket: ``(member, (root, member count, root count, root signature, queries))``.

    Every new entry but the root is paired with ``bucket_root`` (a star, not a
    clique: linear in the bucket size; components connect the rest) if it is
    a member here: an ALWAYS entry (a band key), an anchor in a bucket of at most
    ``SMALL_BUCKET`` documents (``queries`` 0: always screened), a query anchor
    in a larger one (``queries``: its document's number of query anchors, for
    the quorum). The root's signature comes along only for an old root (from the
    index; new signatures are joined later, once per document rather than once
    per bucket), else it is ``b""``. Buckets of old documents only produce
    nothing (old documents are never removed).
    """
    members = list(members)
    root = bucket_root(members)
    if root is None:
        return
    root_sig = b"" if root[0].startswith(NEW) else root[2]
    small: bool | None = None
    for m in members:
        if m[0] == root[0] or not m[0].startswith(NEW):
            continue
        queries = 0
        if m[2] != ALWAYS:
            if small is None:
                small = bucket_size(members) <= SMALL_BUCKET
            if not small:
                if m[2] == ANCHOR:
                    continue
                queries = m[2]
        yield m[0], (root[0], m[1], root[1], root_sig, queries)  # type: ignore[misc]


def anchor_quorum(queries: int) -> int:
    """Of a member's ``queries`` query anchors, in how many a root met through anchors alone must have met it."""
    return max(1, (queries + 1) // 2)


def screen_at_member(member: str, member_sig: bytes, candidates: Iterable[Candidate], screen: EdgeScreen,
                     ) -> Iterator[tuple[str, str] | tuple[str, tuple[str, bytes, int, int]]]:
    """One new node's distinct candidate roots that are screened: ``("edge", (root, member))`` for old
    roots that pass ``screen`` (their signature came with the bucket), ``(root, (member, signature,
    counts))`` for new roots, whose signature is joined next. A root is screened if a band key or a
    small anchor bucket paired them, or if it met the member in ``anchor_quorum`` of its query
    anchors; each pair once."""
    always: dict[str, Candidate] = {}
    queried: dict[str, Candidate] = {}
    met: Counter[str] = Counter()
    for c in candidates:
        if c[4] == 0:
            always.setdefault(c[0], c)
        else:
            queried.setdefault(c[0], c)
            met[c[0]] += 1
    chosen = list(always.values()) + [c for r, c in queried.items()
                                      if r not in always and met[r] >= anchor_quorum(c[4])]
    for root, n_m, n_r, root_sig, _ in chosen:
        if root_sig:
            if screen.passes(u32(member_sig), n_m, u32(root_sig), n_r):
                yield "edge", (root, member)
        else:
            yield root, (member, member_sig, n_m, n_r)


def bucket_edges(members: Iterable[tuple[str, np.ndarray, int]], screen: EdgeScreen | float,
                 ) -> Iterator[tuple[str, str]]:
    """Screened edges of one band bucket whose members carry signatures: (bucket's root, member).

    The reference for what the three-step pipeline (``bucket_candidates``,
    ``screen_at_member``, the root's join) computes for band keys, in one place:
    members are ``(node, signature, shingle count)``; each is compared with the
    bucket's root only and kept if it passes ``screen`` (an ``EdgeScreen``, or
    a float: the minimum estimated Jaccard).
    """
    if not isinstance(screen, EdgeScreen):
        screen = EdgeScreen(screen)
    members = list(members)
    sig = {m[0]: m[1] for m in members}
    for member, (root, n_m, n_r, _, _) in bucket_candidates([(m[0], m[2], ALWAYS) for m in members]):
        if screen.passes(u32(sig[member]), n_m, u32(sig[root]), n_r):
            yield (root, member)


def key_roles(sketches: Sequence[Sketch], hasher: MinHasher) -> list[np.ndarray]:
    """Per sketch, the role (uint16) of each of its bucket keys: ALWAYS for the band keys, then for
    its anchors (sorted) the document's number of query anchors for its ``anchor_queries`` smallest,
    ANCHOR for the rest; with ``anchor_queries`` 0, ALWAYS for every key (a star from every anchor)."""
    out = []
    for s in sketches:
        if not hasher.anchor_queries:
            out.append(np.full(s.band_keys.size, ALWAYS, dtype=np.uint16))
            continue
        queries = min(s.band_keys.size - hasher.bands, hasher.anchor_queries)
        roles = np.full(s.band_keys.size, ANCHOR, dtype=np.uint16)
        roles[:hasher.bands] = ALWAYS
        roles[hasher.bands:hasher.bands + queries] = queries
        out.append(roles)
    return out


def bucket_entries(s: Sketch, hasher: MinHasher) -> Iterator[tuple[int, tuple[str, int, int]]]:
    """One document's LSH bucket entries ``(key, (node, shingle count, role))`` (the per-bucket reference)."""
    if s.shingles.size == 0:  # empty documents are left to exact dedupe
        return
    n = int(s.shingles.size)
    for key, role in zip(s.band_keys.tolist(), key_roles([s], hasher)[0].tolist(), strict=True):
        yield key, (s.node, n, role)


# What crosses the bucket shuffle, keyed by LSH shard: a batch's entries of that shard as four
# parallel columns (keys as int64 bytes, shingle counts as uint32 bytes, node ids, roles as uint16
# bytes), or one old bucket root from the index (key, node, count, signature, old counts: ``old_root``).
ShardBatch = tuple[bytes, bytes, tuple[str, ...], bytes]
OldShardEntry = tuple[int, str, int, bytes, tuple[int, ...]]


def lsh_shard(key: int, shards: int = LSH_SHARDS) -> int:
    """The LSH shard of a band key (Python's ``%``: never negative, as numpy's for int64 keys)."""
    return key % shards


def lsh_shard_batches(sketches: Sequence[Sketch], hasher: MinHasher,
                      shards: int = LSH_SHARDS) -> Iterator[tuple[int, ShardBatch]]:
    """The bucket entries of a batch of sketches, one ``(shard, ShardBatch)`` per shard holding any.

    The same entries as ``bucket_entries`` of each sketch (documents without
    shingles have none), as columns: one element per shard and batch instead of
    one per key and document.
    """
    docs = [s for s in sketches if s.shingles.size]
    if not docs:
        return
    per_doc = np.fromiter((s.band_keys.size for s in docs), dtype=np.int64, count=len(docs))
    keys = np.concatenate([s.band_keys for s in docs]).astype(np.int64, copy=False)
    roles = np.concatenate(key_roles(docs, hasher))
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
        yield int(sorted_shards[start]), (keys[idx].tobytes(), counts[idx].tobytes(), nodes, roles[idx].tobytes())


def old_shard_entry(entry: tuple[int, tuple[str, int, bytes, tuple[int, ...]]]) -> tuple[int, OldShardEntry]:
    """An old bucket root (``old_root``'s output) keyed by the shard of its key."""
    key, (node, n, sig, counts) = entry
    return lsh_shard(key), (key, node, n, sig, counts)


def shard_candidates(values: Iterable[ShardBatch | OldShardEntry]) -> Iterator[tuple[str, Candidate]]:
    """LSH candidates of one shard's entries: ``bucket_candidates`` of every key held twice or more.

    ``values``: the shard's batches of new entries and its old bucket roots. The
    keys are concatenated and sorted in numpy; only the buckets with two or more
    entries that can give a candidate (a band key or a query anchor among them,
    an old root, or few enough documents that every anchor is a member: a few, in
    a corpus without many duplicates) are built as Python lists, so a bucket that
    can give none costs no Python work. The candidates are those of
    ``bucket_candidates`` over the same entries grouped by key, bucket for bucket.
    """
    key_parts: list[np.ndarray] = []
    count_parts: list[np.ndarray] = []
    role_parts: list[np.ndarray] = []
    node_parts: list[tuple[str, ...]] = []
    old: list[OldShardEntry] = []
    for v in values:
        if isinstance(v[0], bytes):
            key_parts.append(np.frombuffer(v[0], dtype=np.int64))
            count_parts.append(np.frombuffer(v[1], dtype=np.uint32))
            node_parts.append(v[2])  # type: ignore[arg-type]
            role_parts.append(np.frombuffer(v[3], dtype=np.uint16))  # type: ignore[misc]
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
    counts = np.concatenate(count_parts) if count_parts else np.zeros(0, np.uint32)
    n_new = counts.size
    roles = np.concatenate(role_parts + [np.full(len(old), ANCHOR, dtype=np.uint16)])
    is_old = order >= n_new
    always = np.add.reduceat(((roles[order] != ANCHOR) | is_old).astype(np.int64), starts) > 0
    # Documents per bucket by distinct shingle count (bucket_size) among the new entries.
    bucket_of = np.repeat(np.arange(starts.size, dtype=np.int64), sizes)[~is_old]
    pairs = np.unique((bucket_of << 32) | counts[order[~is_old]].astype(np.int64))
    distinct = np.bincount(pairs >> 32, minlength=starts.size)
    useful = (sizes >= 2) & (always | (distinct <= SMALL_BUCKET))
    offsets = np.cumsum([0] + [len(p) for p in node_parts]).tolist()

    def entry(i: int) -> BucketEntry:
        if i >= n_new:
            o = old[i - n_new]
            return (o[1], o[2], o[3], o[4])
        part = bisect_right(offsets, i) - 1
        return (node_parts[part][i - offsets[part]], int(counts[i]), int(roles[i]))

    for start, size in zip(starts[useful].tolist(), sizes[useful].tolist(), strict=True):
        yield from bucket_candidates([entry(i) for i in order[start:start + size].tolist()])
