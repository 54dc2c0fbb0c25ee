"""Near duplicates that cleaning acted on, and copies that lie in longer texts: the cluster rounds, the dedupe
transform and the real build on families of real docstring prose (``tests/cleaning_families.py``)."""

from __future__ import annotations

import glob
import json
import random
from pathlib import Path

import numpy as np
import pytest
from forkserver import run_python

from pipelines.dedupe.clusters import CENTER_MAX, resolve_cluster
from pipelines.dedupe.sketch import near_rule
from pipelines.records import Document
from schemas.config import CleanConfig, DedupeConfig
from tests.cleaning_families import NEGATIVES, SAME, build_families, score

RULE = near_rule(DedupeConfig())
ROOT = Path(__file__).resolve().parents[1]


def _entries(root: str, docs: dict[str, np.ndarray]) -> list[tuple]:
    """A cluster's group as ``resolve_cluster`` receives it: the root's entry and each member's."""
    out = []
    for node, sh in docs.items():
        if node == root:
            out.append(("root", True, sh.tobytes(), b"", "s"))
        else:
            out.append(("member", node, "s", sh.tobytes(), b""))
    return out


def _span(lo: int, hi: int) -> np.ndarray:
    return np.arange(lo, hi, dtype=np.uint32)


def test_a_passage_goes_to_the_longer_text_it_lies_in_with_its_copies() -> None:
    """The root (smallest id) is a passage published alone; a longer text holds it whole (Jaccard 0.25). The
    longer text is kept; the passage and a near copy of the passage go to it; a page sharing half of the
    passage stays. The longer text never goes for the passage."""
    passage = _span(1000, 1400)
    longer = _span(0, 1600)
    copy = np.union1d(_span(1000, 1350), _span(50_000, 50_040))  # J 0.80 with the passage, 0.85 in longer
    half = np.union1d(_span(1000, 1200), _span(60_000, 60_200))
    docs = {"1a-passage": passage, "1b-longer": longer, "1c-copy": copy, "1d-half": half}
    dups, failed, over = resolve_cluster("1a-passage", _entries("1a-passage", docs), RULE, 1000)
    assert [(d.doc_id, d.dup_of) for d in dups] == [("a-passage", "b-longer"), ("c-copy", "b-longer")]
    assert failed == 1 and over == 0  # the half page
    # An indexed root is never removed: the longer new text stays beside it.
    old = {"0a-passage": passage, "1b-longer": longer}
    assert resolve_cluster("0a-passage", _entries("0a-passage", old), RULE, 1000)[0] == []


def test_the_kept_document_is_the_one_the_most_others_may_go_for() -> None:
    """A page sharing the original's lead has the smallest id and joined the family by a loose edge: the family's
    original is kept and its copies go to it, the lead page stays (before: every copy was verified against the
    lead page, and the whole family stayed)."""
    rng = random.Random(1)
    orig = _span(0, 600)
    copies = {f"1c{i}": np.union1d(np.setdiff1d(orig, rng.sample(range(600), 40)), _span(10_000 * (i + 1), 10_000 * (i + 1) + 40))
              for i in range(3)}
    lead = np.union1d(_span(0, 100), _span(90_000, 90_500))
    docs = {"1a-lead": lead, "1b-orig": orig, **copies}
    dups, failed, _ = resolve_cluster("1a-lead", _entries("1a-lead", docs), RULE, 1000)
    assert [(d.doc_id, d.dup_of) for d in dups] == [(f"c{i}", "b-orig") for i in range(3)]
    assert failed == 1  # the lead page, on its own
    # The same verdicts whatever order the group arrives in.
    entries = _entries("1a-lead", docs)
    random.Random(2).shuffle(entries)
    assert resolve_cluster("1a-lead", entries, RULE, 1000)[0] == dups


def test_a_large_cluster_keeps_one_document_per_family_in_it() -> None:
    """Over ``CENTER_MAX`` documents the cluster is split greedily, longest first: two families of 21 near copies
    each keep one document apiece (the longest) and every other member goes for its own family's."""
    base, other = _span(0, 500), _span(100_000, 100_500)
    docs = {"1a": base, "1b": other}
    docs.update({f"1c{i:02d}": np.union1d(base[:-i - 1], _span(7_000 + 10 * i, 7_000 + 10 * i + 5)) for i in range(20)})
    docs.update({f"1d{i:02d}": np.union1d(other[:-i - 1], _span(8_000 + 10 * i, 8_000 + 10 * i + 5)) for i in range(20)})
    assert len(docs) > CENTER_MAX
    dups, failed, _ = resolve_cluster("1a", _entries("1a", docs), RULE, 1000)
    assert {d.dup_of for d in dups} == {"c00", "d00"} and len(dups) == 40 and failed == 0
    assert all(RULE.accepts(docs["1" + d.dup_of], docs["1" + d.doc_id]) for d in dups)


def test_a_large_cluster_chained_by_loose_edges_finds_every_family_in_it() -> None:
    """Loose edges joined 30 unrelated pages and 8 families (an original and a copy with one word replaced) into
    one cluster whose smallest id is an unrelated page. Every copy goes for its original, whatever the ids and the
    order the group arrives in; no unrelated page goes (before: four rounds of the smallest ids found none)."""
    docs = {f"1a{i:02d}": _span(1000 * i, 1000 * i + 120) for i in range(30)}
    for f in range(8):
        orig = _span(200_000 + 1000 * f, 200_000 + 1000 * f + 150)
        docs[f"1f{f}-orig"] = orig
        docs[f"1e{f}-copy"] = np.union1d(orig[3:], _span(900_000 + 10 * f, 900_000 + 10 * f + 3))
    assert len(docs) > CENTER_MAX
    dups, failed, over = resolve_cluster("1a00", _entries("1a00", docs), RULE, 1000)
    # Each pair is as long: the smaller node id, the copy, is kept.
    assert [(d.doc_id, d.dup_of) for d in dups] == [(f"f{f}-orig", f"e{f}-copy") for f in range(8)]
    assert failed == 30 and over == 0
    entries = _entries("1a00", docs)
    random.Random(3).shuffle(entries)
    assert resolve_cluster("1a00", entries, RULE, 1000)[0] == dups


def test_the_containment_screen_needs_the_jaccard_its_share_implies() -> None:
    """Two documents of ~100 shingles carry samples of six: all six shared says little, and their signatures agree
    on a fifth of the values (Jaccard ~0.2, where 82 % of one in the other implies ~0.66): no edge (before: an
    edge, which chained unrelated pages into one cluster). A 400-shingle passage in a 954-shingle text (Jaccard
    0.42, its whole sample shared) stays an edge."""
    from pipelines.dedupe.candidates import EdgeScreen

    screen = EdgeScreen.of(RULE, 112)
    sig = np.arange(112, dtype=np.uint32)

    def with_sample(equal: int, sample: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        other = sig.copy()
        other[equal:] += 1000
        return np.concatenate([sig, sample]), np.concatenate([other, sample])

    a, b = with_sample(22, _span(5000, 5006))
    assert not screen.passes(a, 104, b, 98)
    a, b = with_sample(47, _span(5000, 5025))
    assert screen.passes(a, 954, b, 400)


def _cleaned(items) -> list[Document]:
    from pipelines.clean.rules import clean_batch

    docs = [Document(it.doc_id, "web", it.text) for it in items]
    return [r[0] for r in clean_batch(docs, CleanConfig(), {"web": True}) if type(r[0]) is Document]


def _families(bases: int, seed: int = 0):
    from pipelines.clean.rules import clean_document
    from tests.docstring_prose import docstring_documents

    def accept(text: str) -> bool:
        return type(clean_document(Document("x", "web", text), CleanConfig(), True)) is Document

    return build_families(docstring_documents(("networkx",)), 450, max_bases=bases, seed=seed, accept=accept)


def test_copies_that_the_line_rules_cut_are_caught_after_cleaning() -> None:
    """Real docstring prose through the clean step's own function, then the Beam dedupe: truncations mid-sentence,
    5 % substitutions that took full stops, syndicated copies, excerpts and texts quoted whole are caught,
    in their direction; no negative (shared template, menu, lead, half, quotation) is touched."""
    from tests.dedupe_corpus import run_dedupe

    items = _families(5)
    docs = _cleaned(items)
    assert any(d.before_line_rules for d in docs)
    _, dups = run_dedupe(docs, DedupeConfig())
    q = score(items, {d.doc_id: d.dup_of for d in dups}, {d.doc_id for d in docs}, {d.doc_id: d.text for d in docs})
    assert q["wrong"] == 0 and q["negatives_removed"] == 0, q
    for edit in SAME:
        caught, n = q["recall"][edit]
        assert n >= 4 and caught == n, (edit, q["recall"])


@pytest.mark.slow
def test_the_build_catches_them_through_its_cli(tmp_path: Path) -> None:
    """The real build (``python -m pipelines.build``, source ``web``: C4 line rules on) on four families: every
    copy goes, in its direction, and the reject log names each removal's kept document; no negative goes."""
    items = _families(4, seed=1)
    raw = tmp_path / "web.jsonl"
    raw.write_text("".join(json.dumps({"text": it.text}) + "\n" for it in items), encoding="utf-8")
    out = tmp_path / "corpus"
    proc = run_python(["-m", "pipelines.build", "--input", f"web={raw}", "--output", str(out),
                       "--vocab_size", "600"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    by_line = {i: it.doc_id for i, it in enumerate(items)}
    dup_of, filtered = {}, set()
    for part in glob.glob(str(out / "versions" / "*" / "rejects" / "part-*.jsonl")):
        for line in open(part, encoding="utf-8"):
            r = json.loads(line)
            d = by_line[int(r["doc_id"].rsplit("-", 1)[1])]
            if r["bucket"] == "duplicate":
                dup_of[d] = by_line[int(r["dup_of"].rsplit("-", 1)[1])]
            else:
                filtered.add(d)
    edit = {it.doc_id: it.edit for it in items}
    assert not any(edit[d] in NEGATIVES for d in dup_of)
    q = score(items, dup_of, {it.doc_id for it in items} - filtered)
    assert q["wrong"] == 0, q
    for e in ("trunc", "sub5", "syndication", "excerpt", "quoted"):
        caught, n = q["recall"][e]
        assert n >= 3 and caught == n, (e, q["recall"])
