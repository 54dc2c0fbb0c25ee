"""Which documents of a near-duplicate cluster are kept, and which go as copies of which kept one.

A cluster is a connected component of screened edges (``pipelines.dedupe.near``): a family of copies,
and whatever loose edges joined to it (a page sharing its lead, a text quoting part of it). Every
removal is verified on true shingle sets against the document kept for it (``NearRule``), never
against a neighbour: that is what stops transitive closure from chaining unrelated documents.

Which document is kept matters as much as the rule. Per round:

1. the kept document is the one the most others of the cluster may go for (the family's original
   rather than a negative that a loose edge joined, or a copy of it), among clusters of up to
   ``CENTER_MAX`` documents (the smallest node id of equals); where the cluster's root is an indexed
   document (never removed: it is kept), the root;
2. if that document lies in a longer one that does not lie in it (a passage published alone, a
   truncated copy, a text quoted whole in a longer one), the longest such is kept instead and the
   first goes for it, with every copy that may go for the first;
3. the documents no kept document verified get another round (a cluster holding two families, or a
   family and a negative), up to ``MAX_KEEPERS`` rounds.

A cluster of more than ``CENTER_MAX`` documents (loose edges joined several families, or pages sharing a
template) is split greedily instead (``_resolve_large``): its documents longest first (an indexed root
before all), each goes for the first kept document it may go for, else is kept itself; at most
``LARGE_JUDGEMENTS`` judgements, after which the rest stay (recall lost, never precision). Every
family in it is found, not only those of the first few smallest ids.

Pure functions of the cluster's documents and node ids (no Beam): any order in, the same verdicts out.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipelines.dedupe.minhash import NearRule
from pipelines.dedupe.sketch import NEW, node_doc_id, u32
from pipelines.records import Duplicate

# Rounds of kept documents in one cluster: bounds the work in a cluster that loose edges joined
# (each round is a pass over its documents).
MAX_KEEPERS = 4
# Clusters up to this size choose their kept document by how many others may go for it (every pair
# judged once: 32 documents, 992 judgements, ~30 ms); larger ones keep their root (one pass a round).
CENTER_MAX = 32
# The most judgements one large cluster may cost (~50 us each on news-length documents: ~1 s).
LARGE_JUDGEMENTS = 20_000
Doc = tuple[str, str, np.ndarray, np.ndarray]  # node, source, shingles, shingles lost to the line rules


def cluster_docs(root: str, entries: Iterable[tuple[Any, ...]]) -> Iterator[Doc]:
    """The documents of a cluster's group, its root included: ``("root", converged, shingles, lost, source)``
    and ``("member", node, source, shingles, lost)`` entries as ``Doc``s."""
    for e in entries:
        if e[0] == "root":
            yield root, e[4], u32(e[2]), u32(e[3])
        else:
            yield e[1], e[2], u32(e[3]), u32(e[4])


@dataclass(frozen=True)
class _Desc:
    """Heap item ordered by descending node id, so heapq keeps the smallest ids."""

    node: str
    source: str
    similarity: float = 0.0  # the verified Jaccard with the kept document (recorded on the Duplicate)

    def __lt__(self, other: _Desc) -> bool:
        return self.node > other.node


class _Judge:
    """``NearRule`` verdicts between a cluster's documents, each pair judged once."""

    def __init__(self, rule: NearRule) -> None:
        self.rule = rule
        self.seen: dict[tuple[str, str], tuple[bool, float]] = {}

    def __call__(self, keep: Doc, go: Doc) -> tuple[bool, float]:
        """(may ``go`` be removed as a near duplicate of ``keep``?, their Jaccard)."""
        key = (keep[0], go[0])
        if key not in self.seen:
            self.seen[key] = self.rule.judge(keep[2], go[2], keep[3], go[3])
        return self.seen[key]

    def holder(self, first: Doc, docs: Iterable[Doc]) -> Doc:
        """The longest new document that ``first`` lies in and that does not lie in ``first`` (the
        smallest node id of equals), else ``first``."""
        best: Doc | None = None
        for d in docs:
            if d[0] == first[0] or not d[0].startswith(NEW) or d[2].size <= first[2].size:
                continue
            if best is not None and (d[2].size, best[0]) <= (best[2].size, d[0]):
                continue  # not longer than the best so far, or as long with a larger node id
            if self(d, first)[0] and not self(first, d)[0]:
                best = d
        return first if best is None else best

    def removable(self, d: Doc, keeper: Doc, first: Doc) -> tuple[bool, float]:
        """(may ``d`` go for ``keeper``?, their Jaccard): the rule, or, where ``keeper`` holds the round's
        first choice ``first``, ``d`` may go for ``first``: the copies of a passage go with it to the
        text it lies in. What ``d`` loses there is what it would lose to ``first`` plus at most the
        share of ``first`` outside ``keeper`` (``1 - containment``: it lies in ``keeper``)."""
        ok, sim = self(keeper, d)
        if ok or first is keeper:
            return ok, sim
        return self(first, d)[0], sim


def _remove_for(keeper: Doc, first: Doc, docs: Iterable[Doc], done: set[str], judge: _Judge,
                max_members: int) -> tuple[list[Duplicate], int]:
    """One round's removals for ``keeper`` among the documents not ``done`` (which it extends with them):
    (duplicates, over the cap). At most ``max_members`` go (the smallest node ids); the rest are kept."""
    verified: list[_Desc] = []  # max-heap of the smallest max_members, by negation
    over = 0
    for d in docs:
        if d[0] in done or not d[0].startswith(NEW):
            continue
        ok, sim = judge.removable(d, keeper, first)
        if not ok:
            continue
        done.add(d[0])
        if len(verified) < max_members:
            heapq.heappush(verified, _Desc(d[0], d[1], sim))
        else:
            over += 1
            heapq.heappushpop(verified, _Desc(d[0], d[1], sim))
    return [Duplicate(doc_id=v.node[1:], source=v.source, dup_of=node_doc_id(keeper[0]), kind="near",
                      similarity=round(float(v.similarity), 6), dup_of_index=not keeper[0].startswith(NEW))
            for v in verified], over


def _center(live: list[Doc], judge: _Judge) -> Doc:
    """The document the most others of ``live`` (sorted by node) may go for; the first of equals.

    The first document is tried alone first: where every other may go for it (a family and nothing
    else, most clusters), it is the answer after one judgement per document, not one per pair."""
    if all(judge(live[0], d)[0] for d in live[1:]):
        return live[0]
    return max(live, key=lambda k: sum(judge(k, d)[0] for d in live if d[0] != k[0]))


def _resolve_large(root: Doc, docs: list[Doc], judge: _Judge, max_members: int
                   ) -> tuple[list[Duplicate], set[str], int]:
    """A large cluster split greedily: (duplicates, kept documents that others went for, over the cap).

    ``docs``: the cluster's documents, ``root`` among them. Longest first (the smallest node id of
    equals; an indexed root before all), each document goes for the first kept one it may go for, else
    is kept. A longer text is kept before the passages it holds, so they go to it. Order-free: the
    order is a function of the documents."""
    order = sorted(docs, key=lambda d: (d[0].startswith(NEW), -d[2].size, d[0]))
    if not root[0].startswith(NEW):
        order = [root] + [d for d in order if d[0] != root[0]]
    keepers: list[Doc] = []
    members: dict[str, list[_Desc]] = {}
    budget = LARGE_JUDGEMENTS
    for d in order:
        if not d[0].startswith(NEW):
            if d[0] == root[0]:
                keepers.append(d)
            continue
        went = False
        for k in keepers:
            if budget <= 0:
                break
            budget -= 1
            ok, sim = judge(k, d)
            if ok:
                members.setdefault(k[0], []).append(_Desc(d[0], d[1], sim))
                went = True
                break
        if not went and budget > 0:
            keepers.append(d)
    dups: list[Duplicate] = []
    over = 0
    for k, gone in members.items():
        gone.sort(key=lambda v: v.node)
        over += max(0, len(gone) - max_members)
        dups += [Duplicate(doc_id=v.node[1:], source=v.source, dup_of=node_doc_id(k), kind="near",
                           similarity=round(float(v.similarity), 6), dup_of_index=not k.startswith(NEW))
                 for v in gone[:max_members]]
    return dups, set(members), over


def resolve_cluster(
    root: str, entries: Iterable[tuple[Any, ...]], rule: NearRule | float, max_members: int
) -> tuple[list[Duplicate], int, int]:
    """(duplicates, new documents left on their own (neither removed nor kept for a removal), over the cap)
    for one cluster's group.

    ``rule``: a ``NearRule`` (a float is a plain Jaccard threshold). The rounds of the module's
    docstring (``_resolve_large`` over ``CENTER_MAX`` documents); old (indexed) documents are never
    removed. A root whose components did not converge removes nothing (it may have a parent that
    removes it; recall is lost, never precision).
    """
    if not isinstance(rule, NearRule):
        rule = NearRule(rule)
    root_entry = next((e for e in entries if e[0] == "root"), None)
    if root_entry is None or not root_entry[1]:
        return [], 0, 0
    judge = _Judge(rule)
    docs: list[Doc] = sorted(cluster_docs(root, entries))
    keeper: Doc | None = next(cluster_docs(root, [root_entry]))
    if len(docs) > CENTER_MAX:
        dups, kept_for, over = _resolve_large(keeper, docs, judge, max_members)  # type: ignore[arg-type]
    else:
        dups, kept_for, over = _resolve_small(keeper, docs, judge, max_members)  # type: ignore[arg-type]
    gone = {NEW + d.doc_id for d in dups}
    failed = sum(1 for d in docs if d[0].startswith(NEW) and d[0] not in gone and d[0] not in kept_for)
    return sorted(dups, key=lambda d: d.doc_id), failed, over


def _resolve_small(keeper: Doc, docs: list[Doc], judge: _Judge, max_members: int
                   ) -> tuple[list[Duplicate], set[str], int]:
    """The rounds of a cluster of up to ``CENTER_MAX`` documents: (duplicates, kept documents that others
    went for, over the cap)."""
    done: set[str] = set()  # kept documents, and the documents verified against one
    dups: list[Duplicate] = []
    over = 0
    kept_for: set[str] = set()
    for turn in range(MAX_KEEPERS):
        if turn or keeper[0].startswith(NEW):  # type: ignore[index]
            live = [d for d in docs if d[0] not in done and d[0].startswith(NEW)]
            keeper = _center(live, judge) if live else None  # type: ignore[assignment]
        if keeper is None:
            break
        first = keeper
        if keeper[0].startswith(NEW):
            keeper = judge.holder(keeper, (d for d in docs if d[0] not in done))
        done.add(keeper[0])
        removed, capped = _remove_for(keeper, first, docs, done, judge, max_members)
        dups += removed
        over += capped
        if removed or capped:
            kept_for.add(keeper[0])
    return dups, kept_for, over
