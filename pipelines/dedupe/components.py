"""Connected components by alternating large-star / small-star rounds (Kiveris et al. 2014)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import apache_beam as beam


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
