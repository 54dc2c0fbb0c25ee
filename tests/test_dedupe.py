"""Dedupe: exact, near-duplicate and repeated-span removal through Beam's FnApiRunner, plus its pure parts."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import sys
import tempfile
from collections import defaultdict
from itertools import combinations
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines import dedupe
from pipelines.clean.sentences import split_sentences
from pipelines.dedupe.components import ConnectedComponents, star_components
from pipelines.dedupe.deduplicate import Deduplicate
from pipelines.dedupe.exact import resolve_exact_group
from pipelines.dedupe.minhash import normalize_text, normalized_text_hash
from pipelines.dedupe.sketch import minhasher
from pipelines.dedupe.spans import (
    SpanDedupe,
    apply_span_losses,
    remove_sentences,
    resolve_span_group,
    span_occurrences,
)
from pipelines.records import Document, Duplicate
from schemas.config import DedupeConfig
from schemas.errors import UserError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.dedupe_corpus import evaluate, make_corpus, run_dedupe  # noqa: E402
from tests.reference import true_jaccard, true_near  # noqa: E402

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
    """The transform's rounds in plain Python (``star_components``: the local runner's form, checked
    against the distributed one below)."""
    return list(star_components(edges, rounds))


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


def test_components_in_memory_give_the_distributed_rounds_output_converged_or_not() -> None:
    """The local runner's one-step components (``in_memory``) against the unrolled GroupByKeys, in one
    pipeline: random graphs, a long chain and a star, with too few rounds (unconverged nodes, whose
    labels are not yet their component's) and with enough."""
    rng = random.Random(5)
    edges: list[tuple[str, str]] = []
    for g in range(8):
        edges += _random_graph(rng, f"r{g}-", rng.randint(2, 40), rng.randint(1, 60))
    edges += [(f"q{i + 1:03d}", f"q{i:03d}") for i in range(60)]  # a chain, written larger first
    edges += [("s000", f"s{i:03d}") for i in range(1, 30)] + [("x", "x"), ("r0-0001", "r0-0001")]  # loops
    edges += edges[:10]  # repeated edges
    expected = {}
    with BeamTestPipeline(runner="FnApiRunner") as p:
        pc = p | beam.Create(edges)
        for rounds in (1, 2, 3, 9):
            dist = pc | f"Dist{rounds}" >> ConnectedComponents(rounds)
            mem = pc | f"Mem{rounds}" >> ConnectedComponents(rounds, in_memory=True)
            expected[rounds] = sorted(star_components(edges, rounds))
            assert_that(dist, equal_to(expected[rounds]), label=f"dist{rounds}")
            assert_that(mem, equal_to(expected[rounds]), label=f"mem{rounds}")
    assert not all(r[3] for r in expected[1]) and all(r[3] for r in expected[9])  # both cases covered
    with BeamTestPipeline(runner="FnApiRunner") as p:  # no edges: no roles either way
        none = p | beam.Create([]) | ConnectedComponents(3, in_memory=True)
        assert_that(none, equal_to([]))


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
    q = evaluate(docs, truth, dups, ngram=5, recall_at=0.85, cfg=DedupeConfig())
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


def test_near_removals_verify_against_the_document_kept_for_them(quality_run) -> None:
    """Every near duplicate passes the rule against the document kept for it (the one the most others of
    its cluster may go for, not always the smallest id); exact duplicates go for the smallest id of their text."""
    docs, _, kept, dups = quality_run
    text = {d.doc_id: d.text for d in docs}
    kept_ids = {d.doc_id for d in kept}
    near_of = {d.doc_id: d.dup_of for d in dups if d.kind == "near"}
    for d in dups:
        assert d.dup_of in kept_ids
        if d.kind == "near":
            assert true_near(text[d.doc_id], text[d.dup_of], DedupeConfig())
        else:  # its smallest twin, or where that twin went as a near duplicate
            assert d.dup_of < d.doc_id or any(t < d.doc_id and near_of[t] == d.dup_of for t in near_of)


@pytest.mark.slow
def test_deterministic_whatever_order_and_batching(quality_run, monkeypatch: pytest.MonkeyPatch) -> None:
    docs, _, kept, dups = quality_run
    shuffled = list(docs)
    random.Random(9).shuffle(shuffled)
    monkeypatch.setattr(dedupe.deduplicate, "SIGNATURE_BATCH", 7)
    kept2, dups2 = run_dedupe(shuffled, DedupeConfig())
    assert kept2 == kept and dups2 == dups


# ------------------------------------------------------------------ near: guards

def _chain_docs() -> list[Document]:
    """a ~ b and b ~ c (3-gram Jaccard ~0.8 each) but a !~ c (~0.63, containment ~0.78)."""
    rng = random.Random(5)
    a = _words(rng, 400)
    b = list(a)
    for i in range(20, 200, 12):  # 15 spread substitutions in the first half
        b[i] = "subst" + str(i)
    c = list(b)
    for i in range(220, 400, 12):  # 15 more in the second half
        c[i] = "other" + str(i)
    return [Document("doc-a", "ccnews", " ".join(a)), Document("doc-b", "openwebtext", " ".join(b)),
            Document("doc-c", "stories", " ".join(c)),
            Document("doc-z", "stories", " ".join(_words(rng, 300)))]


def test_transitive_closure_is_guarded() -> None:
    docs = _chain_docs()
    t = {d.doc_id: d.text for d in docs}
    cfg = DedupeConfig()
    assert true_near(t["doc-a"], t["doc-b"], cfg) and true_near(t["doc-b"], t["doc-c"], cfg)
    assert not true_near(t["doc-a"], t["doc-c"], cfg)
    kept, dups = run_dedupe(docs, DedupeConfig(components_rounds=3))
    _check_partition(docs, kept, dups)
    # a and c are each a near duplicate of b, not of each other: b is kept for both (the document
    # the most others may go for), and neither is ever removed for the other.
    assert dups == [Duplicate("doc-a", "ccnews", "doc-b", "near"), Duplicate("doc-c", "stories", "doc-b", "near")]
    # Without b, the rule refuses a and c as a pair: both stay.
    _, dups_ac = run_dedupe([d for d in docs if d.doc_id != "doc-b"], DedupeConfig(components_rounds=3))
    assert dups_ac == []


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

def test_incremental_index(tmp_path: Path, caplog) -> None:
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
        Duplicate("a-new-exact", "openwebtext", "old-1", "exact", dup_of_index=True),
        Duplicate("a-new-near", "openwebtext", "old-2", "near", dup_of_index=True),
        Duplicate("c-fresh-copy", "stories", "b-fresh", "exact"),
    ]
    # The new index holds the old entries and the newly kept document.
    from pipelines.dedupe.index import index_parts, read_index_part

    entries = [s for url in index_parts(idx2, DedupeConfig()) for s in read_index_part(url)]
    assert sorted(s.doc_id for s in entries) == ["b-fresh"] + [f"old-{i}" for i in range(6)]
    by_id = {s.doc_id: s for s in entries}
    assert by_id["b-fresh"].exact_hash == normalized_text_hash(new[2].text)
    assert by_id["old-0"].signature.shape == (112,) and by_id["old-0"].shingles.size > 0

    # Incompatible parameters are a clear error, not silent misses.
    with pytest.raises(UserError, match="other parameters"):
        Deduplicate(DedupeConfig(bands=10), index_in=idx1).expand(beam.Pipeline(runner="FnApiRunner")
                                                                  | beam.Create([]))
    # An index of another anchor rate is still read, with a warning that says what it costs.
    with caplog.at_level(logging.WARNING, logger="shardforge.dedupe"):
        assert index_parts(idx1, DedupeConfig(anchor_every=32)) == index_parts(idx1, DedupeConfig())
    warned = [r.getMessage() for r in caplog.records if "anchor_every" in r.getMessage()]
    assert len(warned) == 1 and "anchor_every 16 and this build uses 32" in warned[0], warned
    assert json.loads((tmp_path / "idx1" / "index.json").read_text())["anchor_every"] == 16
    with pytest.raises(UserError, match="separate folders"):
        Deduplicate(DedupeConfig(), index_in=idx1, index_out=idx1 + "/")
    with pytest.raises(UserError, match="separate folders"):  # the same folder spelled another way
        Deduplicate(DedupeConfig(), index_in=os.path.relpath(idx1), index_out=idx1 + "/sub")


@pytest.mark.parametrize("local", [False, True], ids=["joined", "side-inputs"])
def test_an_index_whose_ids_the_new_documents_reuse_removes_only_copies(tmp_path: Path, local: bool) -> None:
    """Doc ids name a file under its input's folder: a release built from another folder with the same
    file names reuses the old release's ids for other documents. Old and new stay apart: a new document
    that is no copy is kept whatever its id; copies name the old document they copy."""
    rng = random.Random(9)
    ids = [f"ccnews-0123456789ab-{i:08d}" for i in range(4)]
    old_texts = [" ".join(_words(rng, 200)) for _ in ids]
    idx = str(tmp_path / "idx")
    run_dedupe([Document(i, "ccnews", t) for i, t in zip(ids, old_texts, strict=True)],
               DedupeConfig(components_rounds=4), index_out=idx)
    near = old_texts[3].split()
    near[50] = "changed"
    new_texts = [" ".join(_words(rng, 200)), old_texts[2], " ".join(near), old_texts[0] + " " + old_texts[1]]
    new = [Document(i, "ccnews", t) for i, t in zip(ids, new_texts, strict=True)]
    kept, dups = run_dedupe(new, DedupeConfig(components_rounds=4), index_in=idx, local=local)
    assert [d.doc_id for d in kept] == [ids[0], ids[3]]  # new text, and two old texts joined: not a copy
    assert [d.text for d in kept] == [new_texts[0], new_texts[3]]
    # ids[1] copies the indexed ids[2], whose id this build's near copy ids[2] reuses: it still names it
    assert dups == [Duplicate(ids[1], "ccnews", ids[2], "exact", dup_of_index=True),
                    Duplicate(ids[2], "ccnews", ids[3], "near", dup_of_index=True)]



@pytest.mark.parametrize("local", [False, True], ids=["joined", "side-inputs"])
def test_an_index_holding_one_id_twice_keeps_its_documents_apart(tmp_path: Path, local: bool) -> None:
    """Two releases built from folders holding the same file names: the index lists both under one doc id.
    A near copy of either is verified against the document it copies, on both wirings, and said to be a
    duplicate of that id."""
    rng = random.Random(11)
    same = "ccnews-0123456789ab-00000000"
    a, b = (" ".join(_words(rng, 200)) for _ in range(2))
    cfg = DedupeConfig(components_rounds=4)
    v1, v2 = str(tmp_path / "v1"), str(tmp_path / "v2")
    run_dedupe([Document(same, "ccnews", a)], cfg, index_out=v1)
    kept, _ = run_dedupe([Document(same, "ccnews", b)], cfg, index_in=v1, index_out=v2)
    assert [d.text for d in kept] == [b]
    near_a, near_b = a.split(), b.split()
    near_a[40], near_b[120] = "changed", "altered"
    new = [Document("ccnews-fedcba987654-00000000", "ccnews", " ".join(near_a)),
           Document("ccnews-fedcba987654-00000001", "ccnews", " ".join(near_b))]
    kept, dups = run_dedupe(new, cfg, index_in=v2, local=local)
    assert not kept
    assert dups == [Duplicate(new[0].doc_id, "ccnews", same, "near", dup_of_index=True),
                    Duplicate(new[1].doc_id, "ccnews", same, "near", dup_of_index=True)]
    assert all(d.similarity > 0.9 for d in dups), dups

def _index_entries(url: str) -> list[tuple]:
    from pipelines.dedupe.index import index_parts, read_index_part

    return sorted((e.doc_id, e.source, e.exact_hash, e.signature.tobytes(), e.shingles.tobytes())
                  for part in index_parts(url, DedupeConfig()) for e in read_index_part(part))


def test_verdicts_through_side_inputs_equal_the_join(quality_run, tmp_path: Path) -> None:
    """The local runner's way to meet documents with their verdicts (side inputs, ``_ApplyVerdicts``;
    with its connected components in one step) gives what the join gives (a distributed runner's,
    components in rounds): the kept documents, every duplicate record
    (exact, near with its similarity, chains re-pointed) and the index written, on near-duplicate
    families with exact copies, and against an old corpus's index."""
    docs, _, kept, dups = quality_run
    assert any(d.kind == "exact" for d in dups) and any(d.kind == "near" for d in dups)
    idx_join, idx_side = str(tmp_path / "join"), str(tmp_path / "side")
    via_join = run_dedupe(docs, DedupeConfig(), index_out=idx_join)
    via_side = run_dedupe(docs, DedupeConfig(), index_out=idx_side, local=True)
    assert via_side == via_join == (kept, dups)
    assert [d.similarity for d in via_side[1]] == [d.similarity for d in dups]
    assert _index_entries(idx_side) == _index_entries(idx_join) and len(_index_entries(idx_side)) == len(kept)
    # Against the index just written: the same documents again, and one of them changed a little.
    rng = random.Random(4)
    again = [Document("z-" + d.doc_id, d.source, d.text) for d in docs[:30]]
    words = docs[30].text.split()
    words[rng.randrange(len(words))] = "changed"
    again.append(Document("z-near", docs[30].source, " ".join(words)))
    joined = run_dedupe(again, DedupeConfig(), index_in=idx_join)
    side = run_dedupe(again, DedupeConfig(), index_in=idx_join, local=True)
    assert side == joined and len(side[1]) >= 30


def test_the_build_graph_joins_verdicts_by_runner(tmp_path: Path) -> None:
    """The build meets documents with their verdicts by a side-input lookup on the local runner and by a
    join on a distributed one; its connected components likewise run in one step or in rounds."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.graph import build_pipeline
    from pipelines.options import BuildOptions, RunnerPlan, finalize_options, runs_on_one_machine
    from schemas.config import BuildConfig

    (tmp_path / "web.jsonl").write_text(json.dumps({"text": "A document."}) + "\n")
    cfg = BuildConfig.model_validate({"sources": [{"name": "web", "input": str(tmp_path / "*.jsonl")}]})

    def labels(opts) -> set[str]:
        p = beam.Pipeline(runner="FnApiRunner", options=opts)  # constructed only: no Dataflow project needed
        build_pipeline(p, cfg, str(tmp_path / "graph"), plan=RunnerPlan.of(opts))
        found: set[str] = set()

        class Visit(beam.pipeline.PipelineVisitor):
            def enter_composite_transform(self, node) -> None:
                found.add(node.full_label)

            def visit_transform(self, node) -> None:
                found.add(node.full_label)

        p.visit(Visit())
        return found

    local = finalize_options(BuildOptions([]))
    dataflow = PipelineOptions(["--runner", "DataflowRunner"])
    assert runs_on_one_machine(local) and not runs_on_one_machine(dataflow)
    assert "Dedupe/JoinVerdicts" not in labels(local) and "Dedupe/Split" in labels(local)
    assert "Dedupe/JoinVerdicts" in labels(dataflow)
    # The near step keeps its joins on every runner: their side inputs would hold the candidate pairs,
    # which follow the corpus's duplicates (a near-duplicate-heavy 20 MB build peaked 608 -> 832 MB).
    near_joins = {"Dedupe/Near/JoinMemberSignature", "Dedupe/Near/JoinRootSignature", "Dedupe/Near/JoinRoles"}
    assert near_joins <= labels(local) and near_joins <= labels(dataflow)
    # The connected components run in one step locally, as unrolled rounds of GroupByKeys elsewhere.
    local_labels, dataflow_labels = labels(local), labels(dataflow)
    assert "Dedupe/Near/Components/Stars" in local_labels
    assert not any(x.startswith("Dedupe/Near/Components/LargeGroup") for x in local_labels)
    assert "Dedupe/Near/Components/LargeGroup0" in dataflow_labels
    assert "Dedupe/Near/Components/Stars" not in dataflow_labels


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


# ------------------------------------------------------------------ repeated spans

BOILER = ["Subscribe to our newsletter for daily updates.", "All rights are reserved by the publisher.",
          "Share this story with your friends today.", "Click here to read more stories like this."]


def _sentence(rng: random.Random) -> str:
    w = _words(rng, rng.randint(5, 10))
    return " ".join([w[0].capitalize()] + w[1:]) + rng.choice([".", "!", "?"])


def _run_spans(docs: list[Document], cfg: DedupeConfig, rounds: int | None = None, index_out: str | None = None,
               ) -> tuple[list[Document], list[Duplicate], dict[str, int]]:
    """Deduplicate (or SpanDedupe alone, if rounds is given) on FnApiRunner: (kept, dups, dedupe counters).

    Outputs go through files: FnApiRunner pickles DoFns, so a driver-side list would not fill.
    """
    def dump(items: list, path: str) -> None:
        Path(path).write_text("\n".join(json.dumps(dataclasses.asdict(x), sort_keys=True) for x in items))

    with tempfile.TemporaryDirectory() as tmp:
        kept_path, dups_path = f"{tmp}/kept.jsonl", f"{tmp}/dups.jsonl"
        p = beam.Pipeline(runner="FnApiRunner")
        src = p | beam.Create(docs, reshuffle=False)
        if rounds is None:
            out = src | Deduplicate(cfg, index_out=index_out)
        else:
            out = src | SpanDedupe(cfg.span_sentences, rounds=rounds)
        _ = out["kept"] | "ListKept" >> beam.combiners.ToList() | "DumpKept" >> beam.Map(dump, kept_path)
        _ = out["duplicates"] | "ListDups" >> beam.combiners.ToList() | "DumpDups" >> beam.Map(dump, dups_path)
        result = p.run()
        result.wait_until_finish()
        counters = {c.key.metric.name: c.committed
                    for c in result.metrics().query(MetricsFilter().with_namespace("dedupe"))["counters"]}

        def load(path: str, cls: type) -> list:
            return sorted((cls(**json.loads(line)) for line in Path(path).read_text().splitlines() if line),
                          key=lambda x: x.doc_id)

        return load(kept_path, Document), load(dups_path, Duplicate), counters


def _reference_spans(docs: list[Document], n: int) -> tuple[dict[str, list[str]], dict[str, str]]:
    """A sequential C4 scan (docs by id, windows in order, a set of seen spans) after exact dedupe.

    Returns (kept doc_id -> kept sentences, duplicate doc_id -> final dup_of).
    """
    by_hash: dict[str, str] = {}
    for d in sorted(docs, key=lambda d: d.doc_id):
        by_hash.setdefault(normalized_text_hash(d.text), d.doc_id)
    target = {d.doc_id: by_hash[normalized_text_hash(d.text)] for d in docs
              if by_hash[normalized_text_hash(d.text)] != d.doc_id}
    first_seen: dict[str, str] = {}
    kept: dict[str, list[str]] = {}
    for d in sorted(docs, key=lambda d: d.doc_id):
        if d.doc_id in target:
            continue
        sents = split_sentences(d.text)
        norms = [normalize_text(s) for s in sents]
        cut: set[int] = set()
        first_loss = None
        for i in range(len(sents) - n + 1):
            key = "\n".join(norms[i:i + n])
            if not key.strip():
                continue
            if key in first_seen:
                cut.update(range(i, i + n))
                first_loss = first_loss or first_seen[key]
            else:
                first_seen[key] = d.doc_id
        if sents and len(cut) == len(sents):
            target[d.doc_id] = first_loss  # type: ignore[assignment]
        else:
            kept[d.doc_id] = [s for i, s in enumerate(sents) if i not in cut]

    def final(t: str) -> str:
        while t not in kept:
            t = target[t]
        return t

    return kept, {d: final(t) for d, t in target.items()}


def test_span_windows_and_first_occurrence() -> None:
    doc = Document("d", "s", "One two three. Four five!\n\nSix seven?\n...\nEight.")
    occ = list(span_occurrences(doc, 3))
    assert [pos for _, (_, pos) in occ] == [0, 1, 2]  # 5 sentences, 3 windows
    # Normalized like exact dedupe: case, punctuation and spacing do not matter.
    same = Document("e", "s", "one  TWO three! Four five. Six, seven?")
    assert next(span_occurrences(same, 3))[0] == occ[0][0]
    assert next(span_occurrences(Document("f", "s", "One two. Three four five. Six seven."), 3))[0] != occ[0][0]
    assert list(span_occurrences(Document("g", "s", "* * *\n---\n***"), 3)) == []  # no words, no span
    # The smallest (doc_id, position) stays, whatever the order.
    occs = [("b", 4), ("a", 7), ("b", 1), ("a", 2)]
    for perm in (occs, occs[::-1], sorted(occs)):
        assert sorted(resolve_span_group(perm)) == [("a", (7, "a")), ("b", (1, "a")), ("b", (4, "a"))]
    assert list(resolve_span_group([("x", 0)])) == []


_PIECES = ["Mr. Smith went home.", "It costs 3.5 dollars today.", '"Quoted words," he said.', "What now?",
           "(Aside) a remark follows!", "lower case start here.", "Dr. Who met e.g. U.S. agents.",
           "A. B. Cole wrote it.", "Numbers 12 and 13 appear.", "Trailing words without a stop",
           "Wow!!", "She left... Then came back."]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PIECES), max_size=5), min_size=1, max_size=6),
       st.sampled_from(["\n", "\n\n", "\n \n"]), st.data())
def test_remove_sentences_keeps_exactly_the_rest(paras: list[list[str]], sep: str, data: st.DataObject) -> None:
    text = sep.join(" ".join(p) for p in paras)
    sents = split_sentences(text)
    removed = set(data.draw(st.lists(st.integers(0, max(0, len(sents) - 1)), max_size=len(sents))))
    out = remove_sentences(text, removed)
    assert split_sentences(out) == [s for i, s in enumerate(sents) if i not in removed]
    assert "\n\n\n" not in out


def test_apply_span_losses() -> None:
    doc = Document("d", "s", "A one. B two. C three.\n\nD four. E five.", url="u", title="t")
    res = apply_span_losses(doc, [(1, "c"), (1, "c")], 2)  # repeated entries count once
    assert res.doc is not None and res.doc.text == "A one.\n\nD four. E five." and res.doc.url == "u"
    assert (res.removed_sentences, res.removed_spans, res.target) == (2, 1, None)
    res = apply_span_losses(doc, [(3, "b"), (0, "a"), (2, "b")], 2)
    assert res.doc is None and res.target == "a" and res.removed_sentences == 5
    assert apply_span_losses(doc, [], 2).doc is doc
    counted = dataclasses.replace(doc, words=len(doc.text.split()))  # as the clean stage leaves it
    trimmed = apply_span_losses(counted, [(1, "c")], 2).doc
    assert trimmed is not None and trimmed.words is None  # a count of the old text would be wrong


@pytest.fixture(scope="module")
def boiler_corpus() -> list[Document]:
    """Documents with a 4-sentence boilerplate paragraph (as a paragraph or inline), others without."""
    rng = random.Random(11)
    docs = []
    for i in range(24):
        own = [_sentence(rng) for _ in range(rng.randint(3, 6))]
        if i % 3 == 0:  # untouched
            text = " ".join(own)
        elif i % 3 == 1:  # its own paragraph, somewhere
            k = rng.randint(0, len(own))
            text = "\n\n".join(x for x in (" ".join(own[:k]), " ".join(BOILER), " ".join(own[k:])) if x)
        else:  # inline, upper-cased: normalization must still match
            k = rng.randint(0, len(own))
            text = " ".join(own[:k] + [b.upper() for b in BOILER] + own[k:])
        docs.append(Document(f"doc-{i:03d}", rng.choice(["ccnews", "openwebtext"]), text))
    docs.append(Document("doc-900-only-boiler", "stories", " ".join(BOILER)))
    docs.append(Document("doc-901-boiler-head", "stories", "\n".join(BOILER[:3])))
    return docs


def test_boilerplate_removed_from_all_but_the_first(boiler_corpus: list[Document]) -> None:
    docs = boiler_corpus
    kept, dups, counters = _run_spans(docs, DedupeConfig(near=False, repeated_spans=True))
    _check_partition(docs, kept, dups)
    first = "doc-001"  # the smallest doc_id holding the boilerplate
    orig = {d.doc_id: d for d in docs}
    assert dups == [Duplicate("doc-900-only-boiler", "stories", first, "span"),
                    Duplicate("doc-901-boiler-head", "stories", first, "span")]
    boiler_norm = {normalize_text(b) for b in BOILER}
    for d in kept:
        i = int(d.doc_id.split("-")[1])
        sents = split_sentences(d.text)
        if d.doc_id == first or i % 3 == 0:
            assert d == orig[d.doc_id]  # the first occurrence and documents without it: unchanged
        else:
            want = [s for s in split_sentences(orig[d.doc_id].text) if normalize_text(s) not in boiler_norm]
            assert sents == want and d.url == orig[d.doc_id].url
    trimmed = len(kept) - 1 - sum(int(d.doc_id.split("-")[1]) % 3 == 0 for d in kept)
    # Each trimmed document repeats both 3-sentence windows of the boilerplate; the two
    # span duplicates repeat two and one; the 4 sentences go from each trimmed document.
    assert counters["span_trimmed_documents"] == trimmed == 15
    assert counters["span_repeated"] == 2
    assert counters["span_removed_occurrences"] == 2 * trimmed + 3
    assert counters["span_removed_sentences"] == 4 * trimmed + 7
    assert counters["span_duplicates"] == 2


def test_spans_off_by_default(boiler_corpus: list[Document]) -> None:
    assert DedupeConfig().repeated_spans is False and DedupeConfig().span_sentences == 3
    kept, dups, counters = _run_spans(boiler_corpus, DedupeConfig(near=False))
    assert kept == sorted(boiler_corpus, key=lambda d: d.doc_id) and dups == []
    assert not any(k.startswith("span_") for k in counters)


def _overlap_corpus(seed: int, n_docs: int = 60) -> list[Document]:
    """Documents drawn from a small pool of sentences: many repeated, overlapping spans,
    exact copies, emptied documents and chains of them."""
    rng = random.Random(seed)
    pool = [_sentence(rng) for _ in range(12)]
    docs = []
    for i in range(n_docs):
        sents = []
        for _ in range(rng.randint(1, 3)):  # runs copied from one master sequence, plus own sentences
            start = rng.randrange(len(pool))
            sents += pool[start:start + rng.randint(2, 5)] if rng.random() < 0.8 else [_sentence(rng)]
        paras, k = [], 0
        while k < len(sents):
            step = rng.randint(1, 4)
            paras.append(" ".join(sents[k:k + step]))
            k += step
        docs.append(Document(f"d{rng.randint(0, 10**6):07d}-{i}", "s", "\n".join(paras)))
    docs += [Document(f"copy-{d.doc_id}", "t", d.text.upper()) for d in docs[:5]]
    return docs


@pytest.mark.parametrize("n", [2, 3])
def test_spans_match_sequential_scan(n: int) -> None:
    docs = _overlap_corpus(seed=n)
    kept, dups, counters = _run_spans(docs, DedupeConfig(near=False, repeated_spans=True, span_sentences=n))
    _check_partition(docs, kept, dups)
    want_kept, want_dup = _reference_spans(docs, n)
    assert {d.doc_id: split_sentences(d.text) for d in kept} == want_kept
    assert {d.doc_id: d.dup_of for d in dups} == want_dup
    assert any(d.kind == "span" for d in dups) and any(d.kind == "exact" for d in dups)
    assert counters.get("span_unresolved_kept_whole", 0) == 0


def test_span_chains_resolve_to_kept_documents(tmp_path: Path) -> None:
    s = [f"Sentence number {w} is here." for w in ("one", "two", "three", "four", "five", "six", "seven")]
    docs = [
        Document("a", "x", " ".join(s[0:3] + ["Unique to a."])),  # first s0 s1 s2
        Document("a2", "x", " ".join(s[3:6] + ["Unique to a2."])),  # first s3 s4 s5
        Document("b", "x", " ".join(s[0:6])),  # loses s0-s2 to a, s3-s5 to a2: emptied, -> a
        Document("c", "x", " ".join(s[2:5])),  # s2 s3 s4 first seen in b: emptied, -> b -> a
        Document("c2", "y", " ".join(s[2:5]).lower()),  # exact duplicate of c: -> a
    ]
    idx = str(tmp_path / "idx")
    kept, dups, counters = _run_spans(docs, DedupeConfig(near=False, repeated_spans=True), index_out=idx)
    _check_partition(docs, kept, dups)
    assert [d.doc_id for d in kept] == ["a", "a2"] and kept == docs[:2]
    assert dups == [Duplicate("b", "x", "a", "span"), Duplicate("c", "x", "a", "span"),
                    Duplicate("c2", "y", "a", "exact")]
    # Emptied documents are not in the index written for the next run.
    from pipelines.dedupe.index import index_parts, read_index_part

    entries = [e for url in index_parts(idx, DedupeConfig(near=False)) for e in read_index_part(url)]
    assert sorted(e.doc_id for e in entries) == ["a", "a2"]
    # Too few pointer-jumping rounds for the chain c -> b -> a: c is kept whole rather than
    # pointing at a removed document.
    kept, dups, counters = _run_spans(docs[:4], DedupeConfig(repeated_spans=True), rounds=1)
    assert [d.doc_id for d in kept] == ["a", "a2", "c"] and kept[2] == docs[3]
    assert dups == [Duplicate("b", "x", "a", "span")]
    assert counters["span_unresolved_kept_whole"] == 1


def test_a_copy_of_an_indexed_document_is_not_repointed_by_spans_of_a_new_document_of_its_id(tmp_path: Path) -> None:
    """z copies the indexed m; this build's own m (another file under the same name) is emptied by
    repeated spans, for b. z still names the indexed m: a span target is always this build's document."""
    s = [f"Sentence number {w} is here." for w in ("one", "two", "three")]
    cfg = DedupeConfig(near=False, repeated_spans=True)
    old_text = "An older text of its own. It has three sentences. Here is the third one."
    idx = str(tmp_path / "idx")
    run_dedupe([Document("m", "x", old_text)], cfg, index_out=idx)
    new = [Document("b", "x", " ".join(s + ["Unique to b."])), Document("m", "x", " ".join(s)),
           Document("z", "x", old_text)]
    kept, dups = run_dedupe(new, cfg, index_in=idx)
    assert [d.doc_id for d in kept] == ["b"]
    assert dups == [Duplicate("m", "x", "b", "span"), Duplicate("z", "x", "m", "exact", dup_of_index=True)]


@pytest.mark.slow
def test_spans_deterministic_under_shuffled_input(boiler_corpus: list[Document]) -> None:
    docs = _overlap_corpus(seed=5, n_docs=40) + boiler_corpus
    cfg = DedupeConfig(repeated_spans=True, components_rounds=4)  # near dedupe on too
    kept, dups, _ = _run_spans(docs, cfg)
    _check_partition(docs, kept, dups)
    shuffled = list(docs)
    random.Random(3).shuffle(shuffled)
    kept2, dups2, _ = _run_spans(shuffled, cfg)
    assert kept2 == kept and dups2 == dups
    assert any(d.kind == "span" for d in dups)


# ------------------------------------------------------------------ index lookups (batched builds)

def test_index_lookup_reads_exactly_the_entries_that_can_match(tmp_path: Path, monkeypatch) -> None:
    import numpy as np

    from pipelines.dedupe.index import read_index_matches, read_index_part, sketches_to_parquet
    from pipelines.dedupe.sketch import sketch_documents

    monkeypatch.setattr(dedupe.index, "INDEX_ROW_GROUP", 4)  # several row groups in one part
    rng = random.Random(3)
    docs = [Document(f"d{i:02d}", "web", " ".join(_words(rng, 60))) for i in range(23)]
    sketches = sketch_documents(docs, minhasher(DedupeConfig()))
    part = tmp_path / "part-00000.parquet"
    part.write_bytes(sketches_to_parquet(sketches))
    import pyarrow.parquet as pq

    assert pq.ParquetFile(part).num_row_groups == 6
    everything = list(read_index_part(str(part)))
    # Probe with the hashes of 3 entries and the band keys of 2 others (one key each).
    hashes = {everything[i].exact_hash for i in (0, 9, 22)}
    keys = np.unique(np.array([everything[5].band_keys[3], everything[17].band_keys[0]], dtype=np.int64))
    got = list(read_index_matches(str(part), hashes=hashes, band_keys=keys))
    want = [s for s in everything if s.exact_hash in hashes or set(s.band_keys.tolist()) & set(keys.tolist())]
    assert [s.doc_id for s in got] == [s.doc_id for s in want] == ["d00", "d05", "d09", "d17", "d22"]
    for g, w in zip(got, want, strict=True):
        assert g.node == w.node and g.exact_hash == w.exact_hash
        assert np.array_equal(g.signature, w.signature) and np.array_equal(g.shingles, w.shingles)
    assert list(read_index_matches(str(part), hashes=set(), band_keys=np.empty(0, np.int64))) == []
    assert [s.doc_id for s in read_index_matches(str(part), hashes={"no-such-hash"})] == []
    assert [s.doc_id for s in read_index_matches(str(part), doc_ids={"d21", "d03", "nope"})] == ["d03", "d21"]
    # The LSH step's view: (band key, (old node, signature, shingle count)) for the hit keys only, no shingles.
    from pipelines.dedupe.index import index_bucket_entries

    got_entries = list(index_bucket_entries(str(part), keys))
    want_entries = [(k, s.node) for s in everything for k in s.band_keys.tolist() if k in set(keys.tolist())]
    assert [(k, node) for k, (node, _, _) in got_entries] == want_entries
    assert len(want_entries) >= 2 and all(node.startswith("0") for _, (node, _, _) in got_entries)
    by_node = {s.node: s for s in everything}
    assert all(np.array_equal(sig, by_node[node].signature) and n == by_node[node].shingles.size
               for _, (node, sig, n) in got_entries)
    # A part written before the num_shingles column: the count comes from the shingles column.
    old_part = tmp_path / "old" / "part-00000.parquet"
    old_part.parent.mkdir()
    pq.write_table(pq.read_table(part).drop_columns(["num_shingles"]), old_part, row_group_size=4)
    old_entries = list(index_bucket_entries(str(old_part), keys))
    assert [(k, node, n) for k, (node, _, n) in old_entries] == [(k, node, n) for k, (node, _, n) in got_entries]


def test_lookups_probe_with_a_filter_of_the_keys(tmp_path: Path) -> None:
    """``key_filter``: no key missed, the size set by bits a key, a false positive rate within the
    design's bound on random keys, native coding; a lookup through it reads what the keys read."""
    import numpy as np

    from pipelines.dedupe.bloom import Bloom
    from pipelines.dedupe.index import (
        PROBE_BITS_PER_KEY,
        index_bucket_entries,
        index_exact_matches,
        key_filter,
        read_index_part,
        sketches_to_parquet,
    )
    from pipelines.dedupe.sketch import sketch_documents

    gen = np.random.default_rng(5)
    keys = gen.integers(-(2**63), 2**63 - 1, size=300_000, dtype=np.int64)
    arrays = [keys[i:i + 53].tobytes() for i in range(0, keys.size, 53)]
    wire = key_filter(arrays)
    coder = beam.coders.FastPrimitivesCoder(fallback_coder=_NoPickle())
    assert coder.decode(coder.encode(wire)) == wire
    bloom = Bloom.from_wire(wire)
    assert bloom.contains(keys).all()
    bits = len(wire[1]) * 8
    assert PROBE_BITS_PER_KEY * keys.size <= bits < 2 * PROBE_BITS_PER_KEY * keys.size
    others = gen.integers(-(2**63), 2**63 - 1, size=1_000_000, dtype=np.int64)
    assert bloom.contains(others).mean() < 1e-4  # 0.6185 ** 20 = 6.7e-5 at the least bits a key
    # Capped (dedupe.index_filter_mb): no bigger than the cap, still no key missed, more let through.
    capped = Bloom.from_wire(key_filter(arrays, max_bytes=1 << 18))
    assert len(capped.bits) == 1 << 18 and capped.contains(keys).all()
    assert 1e-3 < capped.contains(others).mean() < 0.5
    # Membership is every probe's bit set (the survivors-only loop gives what testing all k bits of
    # every hash gives).
    mixed = np.concatenate([others[:200_000], keys[:50_000]])
    for b in (bloom, capped):
        u = mixed.view(np.uint64)
        mask = np.uint64(len(b.bits) * 8 - 1)
        h1, h2 = u & mask, (u >> np.uint64(32)) | np.uint64(1)
        every = np.ones(u.size, dtype=bool)
        for i in range(b.k):
            pos = (h1 + np.uint64(i) * h2) & mask
            every &= ((b.bits[(pos >> np.uint64(3)).astype(np.intp)] >> (pos & np.uint64(7)).astype(np.uint8)) & 1) > 0
        assert np.array_equal(b.contains(mixed), every)
    # Through an index part: the same entries as the exact keys (and hashes) read.
    rng = random.Random(6)
    docs = [Document(f"d{i:02d}", "web", " ".join(_words(rng, 80))) for i in range(12)]
    sketches = sketch_documents(docs, minhasher(DedupeConfig()))
    part = tmp_path / "part-00000.parquet"
    part.write_bytes(sketches_to_parquet(sketches))
    everything = list(read_index_part(str(part)))
    probe = np.unique(np.concatenate([everything[2].band_keys[:3], everything[7].band_keys[-2:]]))
    via_filter = Bloom.from_wire(key_filter([probe.tobytes()]))
    exact = list(index_bucket_entries(str(part), probe))
    assert [(k, n) for k, (n, _, _) in index_bucket_entries(str(part), via_filter)] == \
        [(k, n) for k, (n, _, _) in exact] and {n for _, (n, _, _) in exact} == {everything[2].node, everything[7].node}
    hashes = {everything[4].exact_hash, "f" * 32}
    hash_filter = Bloom.from_wire(key_filter(sorted(hashes), hashes=True))
    assert list(index_exact_matches(str(part), hash_filter)) == list(index_exact_matches(str(part), hashes)) == \
        [(everything[4].exact_hash, "d04")]


def test_exact_keys_of_a_column_equal_those_of_its_values() -> None:
    """The vectorized keys of an index's exact-hash column (32 hex digits) are ``exact_keys`` of its
    values, sliced and chunked columns included; other strings take the value-by-value path; digests
    that share a half get different keys."""
    import hashlib

    import numpy as np
    import pyarrow as pa

    from pipelines.dedupe.index import column_exact_keys, exact_keys

    digests = [hashlib.blake2b(str(i).encode(), digest_size=16).hexdigest() for i in range(50)]
    cases = [
        pa.array(digests),
        pa.array(digests).slice(7, 30),
        pa.chunked_array([digests[:20], digests[20:]]),
        pa.array([d.upper() for d in digests[:5]]),
        pa.array(["not-hex-at-all", digests[0], "ab"]),
        pa.array([f"{i:032x}" for i in range(5)]),
    ]
    for col in cases:
        values = col.to_pylist()
        assert np.array_equal(column_exact_keys(col), exact_keys(values)), values[:2]
    assert np.array_equal(exact_keys([d.upper() for d in digests[:5]]), exact_keys(digests[:5]))
    sequential = exact_keys([f"{i:032x}" for i in range(1000)] + [f"{i:016x}{0:016x}" for i in range(1, 1000)])
    assert np.unique(sequential).size == 1999


def test_key_filter_step_gives_one_filter_or_none(tmp_path: Path) -> None:
    """``KeyFilter`` on a runner: one filter of every key of its arrays (empty ones skipped), and
    nothing for no keys (a lookup's side input is then None: nothing is read)."""
    import numpy as np

    from pipelines.dedupe.bloom import Bloom
    from pipelines.dedupe.index import KeyFilter

    keys = np.random.default_rng(2).integers(-(2**63), 2**63 - 1, size=2000, dtype=np.int64)
    out = tmp_path / "filters.json"

    def dump(filters: list) -> None:
        out.write_text(json.dumps([[k, bits.hex()] for k, bits in filters]))

    for arrays in ([keys[:700].tobytes(), b"", keys[700:].tobytes()], [b"", b""]):
        with beam.Pipeline(runner="FnApiRunner") as p:
            _ = (p | beam.Create(arrays) | KeyFilter() | beam.combiners.ToList() | beam.Map(dump))
        filters = [(k, bytes.fromhex(b)) for k, b in json.loads(out.read_text())]
        if any(arrays):
            assert len(filters) == 1 and Bloom.from_wire(filters[0]).contains(keys).all()
        else:
            assert filters == []


def test_index_is_append_only_and_moves_with_its_corpus(tmp_path: Path) -> None:
    import shutil

    from pipelines.dedupe.index import index_parts

    rng = random.Random(5)
    texts = [" ".join(_words(rng, 150)) for _ in range(4)]
    root = tmp_path / "corpus"
    idx = [str(root / f"v{n}" / "index") for n in (1, 2, 3)]
    run_dedupe([Document("a1", "web", texts[0])], DedupeConfig(), index_out=idx[0], index_root=str(root))
    run_dedupe([Document("b1", "web", texts[1])], DedupeConfig(), index_in=idx[0], index_out=idx[1],
               index_root=str(root))
    part_v1 = (root / "v1" / "index" / "part-00000.parquet").read_bytes()
    kept, dups = run_dedupe([Document("c1", "web", texts[2]), Document("c2", "web", texts[0])], DedupeConfig(),
                            index_in=idx[1], index_out=idx[2], index_root=str(root))
    assert [d.doc_id for d in kept] == ["c1"] and dups == [Duplicate("c2", "web", "a1", "exact", dup_of_index=True)]
    # Earlier parts are referenced, never rewritten; references are relative to the index.
    meta = json.loads((root / "v3" / "index" / "index.json").read_text())
    assert meta["parts"] == ["../../v1/index/part-00000.parquet", "../../v2/index/part-00000.parquet",
                             "part-00000.parquet"]
    assert (root / "v1" / "index" / "part-00000.parquet").read_bytes() == part_v1
    # The whole corpus moved elsewhere still finds every part, and still deduplicates against v1.
    moved = tmp_path / "elsewhere"
    shutil.copytree(root, moved)
    shutil.rmtree(root)
    parts = index_parts(str(moved / "v3" / "index"), DedupeConfig())
    assert parts == [str(moved / p) for p in ("v1/index/part-00000.parquet", "v2/index/part-00000.parquet",
                                               "v3/index/part-00000.parquet")]
    _, dups = run_dedupe([Document("d1", "web", texts[1] + " extra")], DedupeConfig(),
                         index_in=str(moved / "v3" / "index"))
    assert dups == [Duplicate("d1", "web", "b1", "near", dup_of_index=True)]
    # Another corpus's index is referenced by its full URL: moving this corpus cannot break it.
    other = str(tmp_path / "mine" / "index")
    run_dedupe([Document("e1", "web", texts[3])], DedupeConfig(), index_in=str(moved / "v3" / "index"),
               index_out=other, index_root=str(tmp_path / "mine"))
    refs = json.loads(Path(other, "index.json").read_text())["parts"]
    assert refs[:3] == parts and refs[3] == "part-00000.parquet"
    # A document read again (same doc_id as an indexed one) is a duplicate of the indexed document.
    kept, dups = run_dedupe([Document("a1", "web", texts[0]), Document("zz", "web", texts[2])], DedupeConfig(),
                            index_in=other)
    assert [d.doc_id for d in kept] == [] and dups == [Duplicate("a1", "web", "a1", "exact", dup_of_index=True),
                                                       Duplicate("zz", "web", "c1", "exact", dup_of_index=True)]


# ------------------------------------------------------------------ near: real text

def test_real_text_edit_families_with_default_rule() -> None:
    """Real news (gensim's Lee corpus), ~450 words: the defaults catch paragraph and block insert/delete and
    3% substitution copies, and merge no shared-lead or half-shared negative; without containment the
    dropped-block copies are missed (Jaccard ~0.6), so the containment path is what catches them."""
    from realtext import news_documents

    from tests.near_dedupe_corpus import build_corpus, score

    keep = {"orig", "para_insert", "para_delete", "block_insert", "block_delete", "sub3", "syndication",
            "neg_lead", "neg_half"}
    items = [it for it in build_corpus(news_documents(), 450, max_bases=4, seed=1) if it.edit in keep]
    docs = [Document(it.doc_id, "news", it.text) for it in items]
    edit = {it.doc_id: it.edit for it in items}
    _, dups = run_dedupe(docs, DedupeConfig())
    q = score(items, {d.doc_id: d.dup_of for d in dups})
    for e in ("para_insert", "para_delete", "block_insert", "block_delete", "sub3", "syndication"):
        assert q["recall"][e] == 1.0, (e, q)
    # A dropped block (>= 35% of the paragraphs) leaves Jaccard < 0.7 (0.44 for one of these four, which
    # dropped 55% of its words) and lies whole in its original: the containment path takes it whatever
    # its Jaccard.
    cfg = DedupeConfig()
    orig = {it.family: it.text for it in items if it.edit == "orig"}
    blocks = [it for it in items if it.edit == "block_delete"]
    assert all(true_jaccard(orig[it.family], it.text, 3) < 0.7 for it in blocks)
    assert all(true_near(it.text, orig[it.family], cfg) and not true_near(orig[it.family], it.text, cfg)
               for it in blocks)
    assert q["precision"] == 1.0 and q["negatives_merged"] == 0, q
    assert all(edit[d.doc_id] not in ("neg_lead", "neg_half") for d in dups)
    # Jaccard alone misses every dropped block.
    _, dups_j = run_dedupe(docs, DedupeConfig(containment=None, before_line_rules=False, anchor_every=0))
    q_j = score(items, {d.doc_id: d.dup_of for d in dups_j})
    assert q_j["recall"]["block_delete"] == 0.0 and q_j["recall"]["para_delete"] == 1.0, q_j


# ------------------------------------------------------------------ what crosses the shuffles

class _NoPickle(beam.coders.Coder):
    """A fallback coder that refuses: FastPrimitivesCoder reaches it only for types it cannot write natively."""

    def encode(self, value):
        raise AssertionError(f"would be pickled: {type(value).__name__}")

    def decode(self, encoded):
        raise AssertionError("never")


def test_near_step_elements_need_no_pickle() -> None:
    """LSH shard batches, old bucket roots, candidate requests, signatures, shingle sets and index rows
    are plain tuples."""
    import numpy as np

    from pipelines.dedupe.candidates import (
        EdgeScreen,
        lsh_shard_batches,
        old_shard_entry,
        screen_at_member,
        shard_candidates,
    )
    from pipelines.dedupe.index import index_row
    from pipelines.dedupe.near import shingles_by_node, signature_by_node
    from pipelines.dedupe.sketch import sketch_documents

    rng = random.Random(8)
    base = _words(rng, 200)
    docs = [Document(f"d{i}", "web", " ".join(base if i < 3 else _words(rng, 200))) for i in range(5)]
    sketches = sketch_documents(docs, minhasher(DedupeConfig()))
    coder = beam.coders.FastPrimitivesCoder(fallback_coder=_NoPickle())
    elements: list = []
    for s in sketches:
        elements += signature_by_node(s) + shingles_by_node(s)
        elements.append((s.doc_id, index_row(s)))
    batches = list(lsh_shard_batches(sketches, minhasher(DedupeConfig())))
    old_root = old_shard_entry((int(sketches[0].band_keys[0]), ("0old", 9, sketches[0].signature.tobytes(), (9, 12))))
    elements += batches + [old_root]
    by_shard = defaultdict(list)
    for shard, value in batches + [old_root]:
        by_shard[shard].append(value)
    cands = [c for values in by_shard.values() for c in shard_candidates(values)]
    assert cands  # three identical documents share every bucket
    assert any(c[1][0] == "0old" for c in cands)
    elements += cands
    sig = {s.node: s.signature.tobytes() for s in sketches}
    by_member = defaultdict(list)
    for member, c in cands:
        by_member[member].append(c)
    requests = [r for m, cs in by_member.items() for r in screen_at_member(m, sig[m], cs, EdgeScreen(0.5))]
    # One request or edge per distinct pair, not per bucket (the old root passes: its signature is a copy's).
    assert requests and len(requests) == len({(m, c[0]) for m, c in cands})
    elements += requests
    for e in elements:
        assert coder.decode(coder.encode(e)) == e
    # The bytes are the arrays: nothing lost on the way.
    s = sketches[0]
    assert np.array_equal(np.frombuffer(index_row(s)[5], np.uint32), s.shingles)


def test_index_part_bytes_equal_those_of_per_row_arrays(monkeypatch) -> None:
    """The one-buffer column build writes the same Parquet bytes as pyarrow's list-of-arrays conversion."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.dedupe.index import index_schema, sketches_to_parquet
    from pipelines.dedupe.sketch import sketch_documents

    monkeypatch.setattr(dedupe.index, "INDEX_ROW_GROUP", 5)
    rng = random.Random(4)
    docs = [Document(f"d{i:02d}", "web", " ".join(_words(rng, rng.choice([0, 1, 2, 40, 300])))) for i in range(13)]
    rows = sketch_documents(docs, minhasher(DedupeConfig()))
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
    pq.write_table(pa.table(cols, schema=index_schema()), buf, row_group_size=5, **dedupe.index.INDEX_WRITE_OPTIONS)
    assert any(s.shingles.size == 0 for s in rows)
    assert sketches_to_parquet(rows) == buf.getvalue()
    assert sketches_to_parquet([]) == sketches_to_parquet([])


def _by_key_candidates(new: list[tuple[int, tuple[str, int, int]]], old: list[tuple[int, tuple[str, int, bytes]]]) -> list:
    """The reference: bucket entries grouped by band key in a dict, ``bucket_candidates`` per bucket."""
    from pipelines.dedupe.candidates import bucket_candidates

    buckets = defaultdict(list)
    for key, entry in [*new, *old]:
        buckets[key].append(entry)
    return sorted(c for members in buckets.values() for c in bucket_candidates(members))


def _sharded_candidates(batches: list[tuple[int, tuple]], old: list[tuple[int, tuple[str, int, bytes]]],
                        rng: random.Random) -> list:
    """What the pipeline computes: shard batches and old roots grouped by shard (in any order),
    ``shard_candidates`` per shard."""
    from pipelines.dedupe.candidates import old_shard_entry, shard_candidates

    shards = defaultdict(list)
    for shard, value in [*batches, *map(old_shard_entry, old)]:
        shards[shard].append(value)
    out = []
    for values in shards.values():
        rng.shuffle(values)
        out += shard_candidates(values)
    return sorted(out)


@pytest.mark.parametrize("seed", range(6))
def test_shard_candidates_equal_bucket_candidates_on_random_entries(seed: int) -> None:
    """Per-shard grouping in numpy yields the candidates (with multiplicity) of per-bucket grouping:
    multi-member buckets, a node repeated in a bucket, entries whose key may not make them members,
    old roots with new members, old-only buckets, keys of either sign, batches of any size, and empty input."""
    import numpy as np

    from pipelines.dedupe.candidates import ALWAYS, ANCHOR, LSH_SHARDS, lsh_shard

    rng = random.Random(seed)
    # Few distinct keys (so buckets collide), of either sign and near the int64 limits.
    pool = [rng.randrange(-2**63, 2**63) for _ in range(40)] + [-1, 0, 1, LSH_SHARDS, -LSH_SHARDS, 2**63 - 1, -2**63]
    nodes = [f"1n{i:02d}" for i in range(30)]
    counts = {n: rng.randint(1, 500) for n in nodes}
    roles = [ALWAYS, ANCHOR, 1, 2, 4]  # a band key, an anchor, query anchors of documents with 1, 2, 4
    new = [(rng.choice(pool), (n, counts[n], rng.choice(roles))) for n in rng.choices(nodes, k=rng.randint(0, 300))]
    new += [new[0]] * 2 if new else []  # the same node twice in one bucket
    old_keys = rng.sample(pool, 12) + [rng.randrange(2**40) for _ in range(5)]  # some in no new bucket
    old = [(k, (f"0o{rng.randrange(8)}", (n := rng.randint(1, 500)), np.full(4, i, np.uint32).tobytes(), (n, 3, 9)))
           for i, k in enumerate(old_keys)]
    old += [(old_keys[0], ("0o9", 7, b"\x01" * 16, (7,)))]  # two old entries in one bucket

    # New entries in shard batches, as lsh_shard_batches lays them out, cut into batches of random size.
    batches = []
    i = 0
    while i < len(new):
        size = rng.randint(1, 50)
        chunk, i = new[i:i + size], i + size
        by_shard = defaultdict(list)
        for key, (node, n, role) in chunk:
            by_shard[lsh_shard(key)].append((key, node, n, role))
        for shard, rows in by_shard.items():
            batches.append((shard, (np.array([r[0] for r in rows], np.int64).tobytes(),
                                    np.array([r[2] for r in rows], np.uint32).tobytes(), tuple(r[1] for r in rows),
                                    np.array([r[3] for r in rows], np.uint16).tobytes())))
    want = _by_key_candidates(new, old)
    assert _sharded_candidates(batches, old, rng) == want
    if seed == 0:
        assert any(c[1][0].startswith("0") for c in want) and any(c[1][3] == b"" for c in want)
        assert len(want) != len(_by_key_candidates([(k, (n, c, ALWAYS)) for k, (n, c, _) in new], old))
        assert {c[1][4] for c in want} == {0, 1, 2, 4}
    assert _sharded_candidates([], [], rng) == [] == _by_key_candidates([], [])
    assert _sharded_candidates([], old, rng) == []  # old documents only: nothing


def test_near_dedupe_alone_makes_its_shard_batches_per_sketch() -> None:
    """``NearDedupe`` without the Sketch step's shard batches (one sketch per element) finds the near
    duplicates that ``Deduplicate`` finds with them."""
    from pipelines.dedupe.near import NearDedupe
    from pipelines.dedupe.sketch import sketch_documents

    rng = random.Random(21)
    base = _words(rng, 150)
    docs = [Document("a0", "web", " ".join(base)), Document("c9", "web", "")]
    for i in range(1, 5):  # near copies: two words changed
        copy = list(base)
        copy[rng.randrange(150)], copy[rng.randrange(150)] = "zebra", "quartz"
        docs.append(Document(f"a{i}", "web", " ".join(copy)))
    docs += [Document(f"b{i}", "web", " ".join(_words(rng, 150))) for i in range(6)]
    cfg = DedupeConfig(exact=False)
    want = [(f"a{i}", "a0") for i in range(1, 5)]
    with BeamTestPipeline(runner="FnApiRunner") as p:
        alone = (p | "Sketches" >> beam.Create(sketch_documents(docs, minhasher(cfg)))
                 | "Alone" >> NearDedupe(cfg))
        wired = p | "Docs" >> beam.Create(docs) | "Wired" >> Deduplicate(cfg)
        assert_that(alone | "A" >> beam.Map(lambda d: (d.doc_id, d.dup_of)), equal_to(want), label="alone")
        assert_that(wired["duplicates"] | "W" >> beam.Map(lambda d: (d.doc_id, d.dup_of)), equal_to(want),
                    label="wired")


def test_lsh_shard_batches_hold_the_bucket_entries_of_the_batch() -> None:
    """A batch's shard batches are its documents' bucket entries (none for an empty document), each in
    the shard of its key, with the member flag of its place among the document's keys, and their
    candidates are those of per-bucket grouping."""
    import numpy as np

    from pipelines.dedupe.candidates import ALWAYS, ANCHOR, bucket_entries, lsh_shard, lsh_shard_batches
    from pipelines.dedupe.sketch import sketch_documents

    rng = random.Random(3)
    base = _words(rng, 120)
    texts = [" ".join(base), " ".join(base), "", " ".join(base[:100] + _words(rng, 20))]
    texts += [" ".join(_words(rng, rng.choice([1, 30, 200]))) for _ in range(20)]
    docs = [Document(f"d{i:02d}", "web", t) for i, t in enumerate(texts)]
    sketches = sketch_documents(docs, minhasher(DedupeConfig()))
    assert any(s.shingles.size == 0 for s in sketches)
    for queries in (0, 2):
        hasher = minhasher(DedupeConfig(anchor_queries=queries))
        bands = hasher.bands
        entries = sorted(e for s in sketches for e in bucket_entries(s, hasher))
        batches = [b for cut in (sketches[:7], sketches[7:]) for b in lsh_shard_batches(cut, hasher)]
        got = []
        for shard, (keys, counts, nodes, roles) in batches:
            keys, counts, roles = (np.frombuffer(keys, np.int64), np.frombuffer(counts, np.uint32),
                                   np.frombuffer(roles, np.uint16))
            assert len(keys) == len(counts) == len(nodes) == len(roles) > 0
            assert all(lsh_shard(int(k)) == shard for k in keys)
            got += [(int(k), (node, int(n), int(r))) for k, n, node, r in zip(keys, counts, nodes, roles, strict=True)]
        assert sorted(got) == entries
        for s in sketches:  # bands, then the smallest anchors query (every key always, with anchor_queries 0)
            if not s.shingles.size:
                continue
            mine = [e[1][2] for e in bucket_entries(s, hasher)]
            anchors = s.band_keys.size - bands
            q = min(queries, anchors)
            assert mine == ([ALWAYS] * s.band_keys.size if queries == 0 else
                            [ALWAYS] * bands + [q] * q + [ANCHOR] * (anchors - q))
        assert list(lsh_shard_batches([s for s in sketches if s.shingles.size == 0], hasher)) == []
        want = _by_key_candidates(entries, [])
        assert want  # the copies share buckets
        assert _sharded_candidates(batches, [], rng) == want


def test_bucket_candidates_pair_new_members_with_their_root_once() -> None:
    """A band bucket pairs each new member with its root: its smallest old node, else its longest new document
    (the smallest id of equals); an old root's signature rides along; a pair met in many buckets is
    screened once; buckets of old documents only give nothing."""
    import numpy as np

    from pipelines.dedupe.candidates import (
        ALWAYS,
        EdgeScreen,
        bucket_candidates,
        bucket_edges,
        screen_at_member,
    )

    same = np.arange(112, dtype=np.uint32)
    other = same + 1000
    old_sig = same.tobytes()
    bucket = [("1b", 60, ALWAYS), ("0a", 60, old_sig, (60,)), ("1c", 60, ALWAYS), ("1d", 60, ALWAYS)]
    cands = list(bucket_candidates(bucket))
    assert cands == [("1b", ("0a", 60, 60, old_sig, 0)), ("1c", ("0a", 60, 60, old_sig, 0)),
                     ("1d", ("0a", 60, 60, old_sig, 0))]
    assert list(bucket_candidates([("0a", 5, old_sig, (5,)), ("0b", 5, old_sig, (5,))])) == []
    assert list(bucket_candidates([("1x", 5, ALWAYS)])) == []
    # At the member: the old root is screened here (its signature came along), each pair once.
    screen = EdgeScreen(0.9)
    out = list(screen_at_member("1c", same.tobytes(), [c for m, c in cands + cands if m == "1c"], screen))
    assert out == [("edge", ("0a", "1c"))]
    assert list(screen_at_member("1d", other.tobytes(), [cands[2][1]], screen)) == []
    # A new root: a request to join the root's signature, carrying the member's.
    new_cands = list(bucket_candidates([("1q", 70, ALWAYS), ("1p", 80, ALWAYS)]))
    assert new_cands == [("1q", ("1p", 70, 80, b"", 0))]
    # The longest new document, whatever its id (a passage meets the text it lies in, not a page that
    # shares only part of it); the smallest id of equals.
    assert list(bucket_candidates([("1a", 50, ALWAYS), ("1c", 90, ALWAYS), ("1b", 90, ALWAYS)])) == [
        ("1a", ("1b", 50, 90, b"", 0)), ("1c", ("1b", 90, 90, b"", 0))]
    assert list(screen_at_member("1q", other.tobytes(), [new_cands[0][1]], screen)) == [
        ("1p", ("1q", other.tobytes(), 70, 80))]
    # The one-function reference agrees: star on the root, screened on signatures.
    members = [("1b", same, 60), ("0a", same, 60), ("1c", same, 60), ("1d", other, 60)]
    assert list(bucket_edges(members, 0.9)) == [("0a", "1b"), ("0a", "1c")]


def test_anchor_buckets_make_members_by_size_and_screen_large_ones_at_a_quorum() -> None:
    """In an anchor bucket of at most SMALL_BUCKET documents (by shingle count, old ones included) every
    entry is a member, always screened; in a larger one only the query anchors, and at the member a
    root met that way is screened only in half the member's query anchors; a band candidate always."""
    import numpy as np

    from pipelines.dedupe.candidates import (
        ANCHOR,
        SMALL_BUCKET,
        EdgeScreen,
        anchor_quorum,
        bucket_candidates,
        bucket_size,
        screen_at_member,
    )

    assert SMALL_BUCKET == 3
    small = [("1a", 50, ANCHOR), ("1b", 90, 4), ("1c", 70, ANCHOR), ("1d", 70, ANCHOR)]  # 1d: 1c's count
    assert bucket_size(small) == 3
    assert list(bucket_candidates(small)) == [("1a", ("1b", 50, 90, b"", 0)), ("1c", ("1b", 70, 90, b"", 0)),
                                              ("1d", ("1b", 70, 90, b"", 0))]
    large = small + [("1e", 20, ANCHOR)]
    assert bucket_size(large) == 4
    assert list(bucket_candidates(large)) == []  # no query anchor but the root's
    large += [("1f", 30, 2)]
    assert list(bucket_candidates(large)) == [("1f", ("1b", 30, 90, b"", 2))]
    # An old root's counts count: this bucket of two new documents holds four.
    old_sig = np.arange(4, dtype=np.uint32).tobytes()
    with_old = [("1a", 50, ANCHOR), ("1f", 30, 2), ("0z", 10, old_sig, (10, 11, 12))]
    assert bucket_size(with_old) == 5
    assert list(bucket_candidates(with_old)) == [("1f", ("0z", 30, 10, old_sig, 2))]

    assert [anchor_quorum(q) for q in (1, 2, 3, 4, 5)] == [1, 1, 2, 2, 3]
    sig = np.arange(112, dtype=np.uint32).tobytes()
    screen = EdgeScreen(0.9)
    queried = [("1r", 10, 99, b"", 4), ("1t", 10, 99, b"", 4), ("1r", 10, 99, b"", 4)]
    # 1r met in 2 of 4 query anchors: screened (a request to its root); 1t in 1 of 4: not.
    assert [o[0] for o in screen_at_member("1m", sig, queried, screen)] == ["1r"]
    # A band or small-bucket candidate is screened whatever the queries say, once.
    always = [("1t", 10, 99, b"", 0)]
    assert sorted(o[0] for o in screen_at_member("1m", sig, queried + always + always, screen)) == ["1r", "1t"]


def test_an_exact_twin_leaves_a_bucket_as_it_was_and_old_roots_combine_in_any_order() -> None:
    """An exact duplicate (its twin's count, a larger node id, or an old twin) changes neither a bucket's
    root nor its size, so skipping it at the member gives a run without it. ``old_root`` is the
    smallest old node with the old counts a bucket's size needs, whatever the order it is fed."""
    import random as _random

    from pipelines.dedupe.candidates import ANCHOR, SMALL_BUCKET, bucket_candidates, bucket_size, old_root

    bucket = [("1a", 10, ANCHOR), ("1t", 90, ANCHOR), ("1v", 80, ANCHOR)]
    twin = bucket + [("1u", 90, ANCHOR)]  # 1u: an exact copy of 1t
    assert bucket_size(twin) == bucket_size(bucket) == 3
    assert [c for c in bucket_candidates(twin) if c[0] != "1u"] == list(bucket_candidates(bucket))
    old = [("0t", 90, b"s", (90,))]
    assert bucket_size(bucket[:1] + old + [("1u", 90, ANCHOR)]) == bucket_size(bucket[:1] + old) == 2

    entries = [("0b", 5, b"b"), ("0c", 70, b"c"), ("0d", 70, b"d"), ("0e", 60, b"e"), ("0f", 50, b"f"), ("0g", 9, b"g")]
    want = ("0b", 5, b"b", (5, 9, 50, 60)[:SMALL_BUCKET + 1])
    assert old_root(entries) == want
    rng = _random.Random(0)
    for _ in range(20):
        shuffled = rng.sample(entries, len(entries))
        cut = rng.randrange(1, len(entries))
        assert old_root([old_root(shuffled[:cut]), old_root(shuffled[cut:])]) == want
        assert old_root([old_root([e]) for e in shuffled]) == want
