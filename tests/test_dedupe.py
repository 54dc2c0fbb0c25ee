"""Dedupe: exact and near-duplicate removal through Beam's FnApiRunner, plus its pure parts."""

from __future__ import annotations

import random
import sys
from collections import defaultdict
from itertools import combinations
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines import dedupe
from pipelines.dedupe import (
    ConnectedComponents,
    Deduplicate,
    large_star,
    resolve_exact_group,
    small_star,
    star_roles,
)
from pipelines.minhash import normalized_text_hash
from pipelines.records import Document, Duplicate
from schemas.config import DedupeConfig
from schemas.errors import UserError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.dedupe_corpus import evaluate, make_corpus, run_dedupe, true_jaccard  # noqa: E402

VOCAB = [f"tok{i}" for i in range(5000)]


def _words(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(VOCAB) for _ in range(n)]


def _check_partition(docs: list[Document], kept: list[Document], dups: list[Duplicate],
                     old_ids: frozenset[str] = frozenset()) -> None:
    """Every input ends in exactly one output; every dup_of is a kept (or old) document."""
    ids = [d.doc_id for d in kept] + [d.doc_id for d in dups]
    assert sorted(ids) == sorted(d.doc_id for d in docs)
    kept_ids = {d.doc_id for d in kept} | old_ids
    assert all(d.dup_of in kept_ids for d in dups)


# ------------------------------------------------------------------ exact

def test_resolve_exact_group_keeps_smallest_id() -> None:
    docs = [Document("b", "s1", "x"), Document("a", "s2", "X!"), Document("c", "s1", "x")]
    out = list(resolve_exact_group(docs))
    assert out[0] == docs[1]
    assert out[1:] == [Duplicate("b", "s1", "a", "exact"), Duplicate("c", "s1", "a", "exact")]
    # Against an old corpus: every new document is a duplicate of the smallest old id.
    out = list(resolve_exact_group(docs, ["old2", "old1"]))
    assert all(isinstance(d, Duplicate) and d.dup_of == "old1" for d in out) and len(out) == 3


def test_exact_only_pipeline() -> None:
    docs = [
        Document("ccnews-2", "ccnews", "Breaking: the Mayor resigned today."),
        Document("owt-1", "openwebtext", "breaking the mayor   resigned TODAY"),
        Document("ccnews-1", "ccnews", "An unrelated story about gardens."),
        Document("owt-9", "openwebtext", "breaking: the mayor resigned today!!"),
        Document("owt-3", "openwebtext", "Breaking: the Mayor resigned yesterday."),
    ]
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = p | beam.Create(docs) | Deduplicate(DedupeConfig(near=False))
        assert_that(out["kept"] | beam.Map(lambda d: d.doc_id), equal_to(["ccnews-2", "ccnews-1", "owt-3"]),
                     label="kept")
        assert_that(out["duplicates"], equal_to([
            Duplicate("owt-1", "openwebtext", "ccnews-2", "exact"),
            Duplicate("owt-9", "openwebtext", "ccnews-2", "exact"),
        ]), label="dups")


# ------------------------------------------------------------------ components

def _union_find_labels(edges: list[tuple[str, str]]) -> dict[str, str]:
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {x: find(x) for x in parent}


def _simulate(edges: list[tuple[str, str]], rounds: int) -> list[tuple[str, str | None, bool, bool]]:
    """The Beam transform's steps in plain Python (same functions)."""
    e = {(min(a, b), max(a, b)) for a, b in edges if a != b}
    for _ in range(rounds):
        adj: dict[str, set[str]] = defaultdict(set)
        for a, b in e:
            adj[a].add(b)
            adj[b].add(a)
        e = {x for u, n in adj.items() for x in large_star(u, n)}
        smaller: dict[str, set[str]] = defaultdict(set)
        for a, b in e:
            smaller[b].add(a)
        e = {x for u, n in smaller.items() for x in small_star(u, n)}
    marks: dict[str, list] = defaultdict(list)
    for a, b in e:
        marks[b].append(("parent", a))
        marks[a].append(("child", None))
    return [star_roles(k, v) for k, v in marks.items()]


def _random_graph(rng: random.Random, prefix: str, n: int, m: int) -> list[tuple[str, str]]:
    nodes = [f"{prefix}{i:04d}" for i in range(n)]
    return [tuple(rng.sample(nodes, 2)) for _ in range(m)]  # type: ignore[misc]


def test_star_steps_converge_to_components() -> None:
    rng = random.Random(0)
    for trial in range(20):
        edges = _random_graph(rng, f"g{trial}-", rng.randint(2, 60), rng.randint(1, 80))
        roles = _simulate(edges, rounds=12)
        assert all(r[3] for r in roles), "not converged"
        got = {node: (label or node) for node, label, _, _ in roles}
        assert got == _union_find_labels(edges)
    # A path with ids in path order (the slow case) needs O(log n) rounds.
    path = [(f"n{i:05d}", f"n{i + 1:05d}") for i in range(1000)]
    assert not all(r[3] for r in _simulate(path, rounds=4))
    roles = _simulate(path, rounds=12)
    assert all(r[3] for r in roles) and {r[1] for r in roles if r[1]} == {"n00000"}


def test_connected_components_transform_matches_union_find() -> None:
    rng = random.Random(1)
    edges: list[tuple[str, str]] = []
    for g in range(6):
        edges += _random_graph(rng, f"c{g}-", 30, 25)
    edges += [(f"p{i:03d}", f"p{i + 1:03d}") for i in range(100)]  # a long chain
    expected = {(node, root) for node, root in _union_find_labels(edges).items() if node != root}
    with BeamTestPipeline(runner="FnApiRunner") as p:
        roles = p | beam.Create(edges) | ConnectedComponents(rounds=9)
        assert_that(roles | beam.Filter(lambda r: not r[3]), equal_to([]), label="converged")
        assert_that(roles | beam.Filter(lambda r: r[1] is not None) | beam.Map(lambda r: (r[0], r[1])),
                     equal_to(sorted(expected)), label="labels")


# ------------------------------------------------------------------ near: quality

@pytest.fixture(scope="module")
def quality_run() -> tuple[list[Document], dict, list[Document], list[Duplicate]]:
    docs, truth = make_corpus(families=40, unrelated=60, words=250, seed=3)
    kept, dups = run_dedupe(docs, DedupeConfig())
    return docs, truth, kept, dups


def test_precision_and_recall_targets(quality_run) -> None:
    docs, truth, kept, dups = quality_run
    _check_partition(docs, kept, dups)
    q = evaluate(docs, truth, dups, ngram=5, threshold=0.8, recall_at=0.85)
    assert q["pairs_at_recall_threshold"] >= 40
    assert q["recall"] >= 0.95, q
    assert q["precision"] >= 0.99, q
    assert q["exact_recall"] == 1.0
    assert q["near_verified_frac"] == 1.0  # every near removal truly similar to its kept doc
    assert q["dup_of_kept"]
    # Unrelated documents are never removed.
    assert not any(truth[d.doc_id].kind == "unrelated" for d in dups)
    # Duplicates across sources are caught (the generator mixes sources at random).
    src = {d.doc_id: d.source for d in docs}
    assert any(src[d.doc_id] != src[d.dup_of] and d.kind == "near" for d in dups)


def test_near_removals_keep_smallest_id_and_verify(quality_run) -> None:
    docs, _, _, dups = quality_run
    text = {d.doc_id: d.text for d in docs}
    for d in dups:
        assert d.dup_of < d.doc_id
        if d.kind == "near":
            assert true_jaccard(text[d.doc_id], text[d.dup_of], 5) >= 0.8


@pytest.mark.slow
def test_deterministic_whatever_order_and_batching(quality_run, monkeypatch: pytest.MonkeyPatch) -> None:
    docs, _, kept, dups = quality_run
    shuffled = list(docs)
    random.Random(9).shuffle(shuffled)
    monkeypatch.setattr(dedupe, "SIGNATURE_BATCH", (1, 7))
    kept2, dups2 = run_dedupe(shuffled, DedupeConfig())
    assert kept2 == kept and dups2 == dups


# ------------------------------------------------------------------ near: guards

def _chain_docs() -> list[Document]:
    """a ~ b and b ~ c (Jaccard ~0.82 each) but a !~ c (~0.68)."""
    rng = random.Random(5)
    a = _words(rng, 400)
    b = list(a)
    for i in range(20, 200, 23):  # 8 spread substitutions in the first half
        b[i] = "subst" + str(i)
    c = list(b)
    for i in range(220, 400, 23):  # 8 more in the second half
        c[i] = "other" + str(i)
    return [Document("doc-a", "ccnews", " ".join(a)), Document("doc-b", "openwebtext", " ".join(b)),
            Document("doc-c", "stories", " ".join(c)),
            Document("doc-z", "stories", " ".join(_words(rng, 300)))]


def test_transitive_closure_is_guarded() -> None:
    docs = _chain_docs()
    t = {d.doc_id: d.text for d in docs}
    assert true_jaccard(t["doc-a"], t["doc-b"], 5) >= 0.8 and true_jaccard(t["doc-b"], t["doc-c"], 5) >= 0.8
    assert true_jaccard(t["doc-a"], t["doc-c"], 5) < 0.8
    kept, dups = run_dedupe(docs, DedupeConfig(components_rounds=3))
    _check_partition(docs, kept, dups)
    # b is a near duplicate of a; c is connected to a only through b and stays.
    assert dups == [Duplicate("doc-b", "openwebtext", "doc-a", "near")]


def test_cluster_size_cap() -> None:
    rng = random.Random(6)
    base = _words(rng, 300)
    docs = [Document("d0", "s", " ".join(base))]
    for k in range(1, 6):
        w = list(base)
        w[50 * k] = f"edit{k}"  # one substitution each: Jaccard ~0.97 to d0
        docs.append(Document(f"d{k}", "s", " ".join(w)))
    kept, dups = run_dedupe(docs, DedupeConfig(max_cluster_size=2, exact=False, components_rounds=3))
    _check_partition(docs, kept, dups)
    assert [d.doc_id for d in dups] == ["d1", "d2"] and {d.dup_of for d in dups} == {"d0"}


# ------------------------------------------------------------------ incremental

def test_incremental_index(tmp_path: Path) -> None:
    rng = random.Random(8)
    old_texts = [_words(rng, 200) for _ in range(6)]
    old = [Document(f"old-{i}", "ccnews", " ".join(w)) for i, w in enumerate(old_texts)]
    idx1 = str(tmp_path / "idx1")
    kept1, dups1 = run_dedupe(old, DedupeConfig(components_rounds=4), index_out=idx1)
    assert len(kept1) == 6 and not dups1
    assert (tmp_path / "idx1" / "index.json").exists() and list((tmp_path / "idx1").glob("part-*.parquet"))

    near = list(old_texts[2])
    near[100] = "changed"
    new = [
        Document("a-new-exact", "openwebtext", " ".join(old_texts[1]).upper()),  # exact copy of old-1
        Document("a-new-near", "openwebtext", " ".join(near)),  # near copy of old-2
        Document("b-fresh", "stories", " ".join(_words(rng, 200))),
        Document("c-fresh-copy", "stories", ""),  # placeholder, replaced below
    ]
    new[3] = Document("c-fresh-copy", "stories", new[2].text + " !")  # exact copy of a new doc
    idx2 = "memory://dedupe-test/idx2"  # any fsspec URL
    kept2, dups2 = run_dedupe(new, DedupeConfig(components_rounds=4), index_in=idx1, index_out=idx2)
    _check_partition(new, kept2, dups2, frozenset(d.doc_id for d in old))
    assert [d.doc_id for d in kept2] == ["b-fresh"]
    assert dups2 == [
        Duplicate("a-new-exact", "openwebtext", "old-1", "exact"),
        Duplicate("a-new-near", "openwebtext", "old-2", "near"),
        Duplicate("c-fresh-copy", "stories", "b-fresh", "exact"),
    ]
    # The new index holds the old entries and the newly kept document.
    from pipelines.dedupe import index_parts, read_index_part

    entries = [s for url in index_parts(idx2, DedupeConfig()) for s in read_index_part(url)]
    assert sorted(s.doc_id for s in entries) == ["b-fresh"] + [f"old-{i}" for i in range(6)]
    by_id = {s.doc_id: s for s in entries}
    assert by_id["b-fresh"].exact_hash == normalized_text_hash(new[2].text)
    assert by_id["old-0"].signature.shape == (112,) and by_id["old-0"].shingles.size > 0

    # Incompatible parameters are a clear error, not silent misses.
    with pytest.raises(UserError, match="other parameters"):
        Deduplicate(DedupeConfig(bands=10), index_in=idx1).expand(beam.Pipeline(runner="FnApiRunner")
                                                                  | beam.Create([]))
    with pytest.raises(UserError, match="must differ"):
        Deduplicate(DedupeConfig(), index_in=idx1, index_out=idx1 + "/")


def test_quality_metric_counts_pairs() -> None:
    # The evaluator itself: removing nothing gives recall 0 on a corpus with duplicates.
    docs, truth = make_corpus(families=3, unrelated=2, words=120, seed=1)
    q = evaluate(docs, truth, [], ngram=5)
    assert q["recall"] == 0.0 and q["removed"] == 0
    fam = defaultdict(list)
    for d in docs:
        fam[truth[d.doc_id].family].append(d.doc_id)
    pairs = sum(1 for m in fam.values() for a, b in combinations(m, 2)
                if true_jaccard(next(x.text for x in docs if x.doc_id == a),
                                next(x.text for x in docs if x.doc_id == b), 5) >= 0.85)
    assert q["pairs_at_recall_threshold"] == pairs > 0
