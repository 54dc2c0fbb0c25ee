"""The current dedupe wiring (exact verdicts from the sketches, one join of the documents) against the
wiring before it (tests/reference_dedupe.py: exact dedupe shuffling whole documents first), in one
Beam pipeline per case: the same kept documents, the same duplicate records (kind, target,
similarity), counters and byte-identical index files, on corpora built to hit every path the change
touches; and the same wiring with the verdicts as side-input lookups and the connected components
in one step (the local runner's).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
import sys
from collections import Counter
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter

from pipelines.dedupe.deduplicate import Deduplicate
from pipelines.records import Document
from schemas.config import DedupeConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.dedupe_corpus import make_corpus  # noqa: E402
from tests.reference_dedupe import ReferenceDeduplicate  # noqa: E402


def _dump(items: list, path: str) -> None:
    Path(path).write_text("\n".join(sorted(json.dumps(dataclasses.asdict(x), sort_keys=True) for x in items)))


def _run_both(docs: list[Document], cfg: DedupeConfig, out: Path, index_in: str | None = None,
              index: bool = True) -> dict[str, dict[str, str]]:
    """Both wirings on the same input in one pipeline; {variant: {kept, duplicates}} as sorted JSON lines.
    With ``index``, each writes its index to ``out/<variant>-index``."""
    inp = out / "docs.jsonl"
    _dump(docs, str(inp))
    # "lookups": the new wiring as the build runs it on the local runner (the verdicts through side
    # inputs, the connected components in one step); "new": as on a distributed runner (a
    # CoGroupByKey, components in rounds).
    variants = {"new": Deduplicate,
                "lookups": functools.partial(Deduplicate, one_machine=True),
                "reference": ReferenceDeduplicate}
    p = beam.Pipeline(runner="FnApiRunner")
    read = (p | "Read" >> beam.io.ReadFromText(str(inp))
            | "Parse" >> beam.Map(lambda line: Document(**json.loads(line))))
    for name, cls in variants.items():
        res = read | name >> cls(cfg, index_in=index_in, index_out=str(out / f"{name}-index") if index else None)
        for part in ("kept", "duplicates"):
            _ = (res[part] | f"{name}-{part}-list" >> beam.combiners.ToList()
                 | f"{name}-{part}-dump" >> beam.Map(_dump, str(out / f"{name}-{part}.jsonl")))
    result = p.run()
    result.wait_until_finish()
    # The dedupe counters (candidate pairs screened, edges, failed verifications, clusters, the
    # index entries read ...), summed per variant: the new wiring does the same near-step work.
    counters: dict[str, Counter[str]] = {name: Counter() for name in variants}
    for c in result.metrics().query(MetricsFilter().with_namespace("dedupe"))["counters"]:
        counters[c.key.step.split("/")[0]][c.key.metric.name] += c.committed
    return {name: {"kept": (out / f"{name}-kept.jsonl").read_text(),
                   "duplicates": (out / f"{name}-duplicates.jsonl").read_text(),
                   "counters": dict(sorted(counters[name].items()))} for name in variants}


def _index_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _with_chains_and_empties(docs: list[Document], rng: random.Random) -> list[Document]:
    """Exact copies of near copies (their twin is removed as a near duplicate: the record is
    re-pointed), several copies of one text, and documents that normalize to nothing."""
    extra = []
    for i, d in enumerate(rng.sample(docs, 12)):
        for j in range(rng.choice([1, 1, 2])):
            extra.append(Document(f"zz-copy-{i}-{j}", d.source, d.text.upper() + " !"))
    extra += [Document(f"aa-empty-{i}", "web", t) for i, t in enumerate(["", "!!!", " - ", "..."])]
    return docs + extra


@pytest.mark.parametrize("spans", [False, True])
def test_new_wiring_removes_what_the_old_one_removed(tmp_path: Path, spans: bool) -> None:
    docs, _ = make_corpus(families=25, unrelated=40, words=120, exact_per_family=2, seed=3)
    docs = _with_chains_and_empties(docs, random.Random(1))
    # A cluster cap of 2: an exact copy taking a cluster's slot would keep a near duplicate in.
    cfg = DedupeConfig(components_rounds=4, repeated_spans=spans, span_sentences=2, max_cluster_size=2)
    got = _run_both(docs, cfg, tmp_path)
    assert got["new"] == got["reference"] == got["lookups"]
    assert got["new"]["counters"]["near_over_cluster_cap"] > 0 and got["new"]["counters"]["exact_duplicates"] > 0
    dups = [json.loads(line) for line in got["new"]["duplicates"].splitlines()]
    kinds = {d["kind"] for d in dups}
    assert {"exact", "near"} <= kinds and len(dups) > 60  # the corpus reaches both steps
    # Some exact copies of a near duplicate were re-pointed past their removed twin.
    copies = [d for d in dups if d["doc_id"].startswith("zz-copy") and d["kind"] == "exact"]
    near_ids = {d["doc_id"] for d in dups if d["kind"] == "near"}
    assert copies and not any(d["dup_of"] in near_ids for d in dups)
    assert _index_files(tmp_path / "new-index") == _index_files(tmp_path / "reference-index") == \
        _index_files(tmp_path / "lookups-index")


def test_new_wiring_matches_against_an_old_index(tmp_path: Path) -> None:
    """A second batch holding exact and near copies of the first batch's documents (and of its own)."""
    rng = random.Random(7)
    first, _ = make_corpus(families=15, unrelated=20, words=120, exact_per_family=1, seed=5)
    cfg = DedupeConfig(components_rounds=4)
    run1 = tmp_path / "run1"
    run1.mkdir()
    got1 = _run_both(first, cfg, run1)
    assert got1["new"] == got1["reference"] == got1["lookups"]
    assert _index_files(run1 / "new-index") == _index_files(run1 / "reference-index") == \
        _index_files(run1 / "lookups-index")

    kept1 = [Document(**json.loads(line)) for line in got1["new"]["kept"].splitlines()]
    second, _ = make_corpus(families=10, unrelated=15, words=120, exact_per_family=1, seed=6)
    for i, d in enumerate(rng.sample(kept1, 10)):
        second.append(Document(f"new-exact-{i}", d.source, d.text.lower()))  # exact copies of old documents
        words = d.text.split()
        words[len(words) // 2] = "changed"
        second.append(Document(f"new-near-{i}", d.source, " ".join(words)))  # near copies of old documents
    second = _with_chains_and_empties(second, rng)
    run2 = tmp_path / "run2"
    run2.mkdir()
    got2 = _run_both(second, cfg, run2, index_in=str(run1 / "new-index"))
    # One counter may differ: the new wiring looks up the old bucket roots of every new document's
    # band keys, exact copies included (they are screened out after), so it reads a few more entries.
    read_new = got2["new"]["counters"].pop("index_bucket_entries_read")
    read_ref = got2["reference"]["counters"].pop("index_bucket_entries_read")
    assert read_new >= read_ref > 0
    assert got2["lookups"]["counters"].pop("index_bucket_entries_read") == read_new
    assert got2["new"] == got2["reference"] == got2["lookups"]
    dups = [json.loads(line) for line in got2["new"]["duplicates"].splitlines()]
    old_ids = {d.doc_id for d in kept1}
    assert {d["kind"] for d in dups if d["dup_of"] in old_ids} == {"exact", "near"}
    assert _index_files(run2 / "new-index") == _index_files(run2 / "reference-index") == \
        _index_files(run2 / "lookups-index")


def test_a_leaky_key_filter_changes_reads_not_verdicts(tmp_path: Path, monkeypatch) -> None:
    """The index lookups probe with a filter of the new keys and hashes; its false positives are read,
    then dropped by the joins by key: with a filter that lets nearly every indexed entry through, the
    verdicts, duplicate records, other counters and index files equal those of the default filter, on
    every wiring."""
    import pyarrow.parquet as pq

    import pipelines.dedupe.index as index

    first, _ = make_corpus(families=12, unrelated=15, words=120, exact_per_family=1, seed=11)
    run1 = tmp_path / "run1"
    run1.mkdir()
    _run_both(first, DedupeConfig(components_rounds=4), run1)
    second, _ = make_corpus(families=8, unrelated=10, words=120, exact_per_family=1, seed=12)
    rng = random.Random(4)
    for i, d in enumerate(rng.sample(first, 8)):
        second.append(Document(f"new-exact-{i}", d.source, d.text.upper()))
        words = d.text.split()
        words[len(words) // 3] = "altered"
        second.append(Document(f"new-near-{i}", d.source, " ".join(words)))
    got = {}
    caps: list[int | None] = []

    def leaky_shape(expected: int, bits_per_hash: int, max_bytes: int | None = None) -> tuple[int, int]:
        caps.append(max_bytes)
        return 3, 1  # 8 bits, 1 probe: nearly every key tests positive

    cfg = DedupeConfig(components_rounds=4, index_filter_mb=1.5)
    for variant in ("tight", "leaky"):
        if variant == "leaky":
            monkeypatch.setattr(index, "bloom_shape", leaky_shape)
        out = tmp_path / variant
        out.mkdir()
        got[variant] = _run_both(second, cfg, out, index_in=str(run1 / "new-index"))
        got[variant]["index"] = {name: _index_files(out / f"{name}-index") for name in ("new", "lookups", "reference")}
    tight, leaky = got["tight"], got["leaky"]
    # Each wiring built two filters (band keys, exact hashes), each capped at dedupe.index_filter_mb.
    assert caps == [int(1.5 * (1 << 20))] * 6
    indexed = sum(pq.ParquetFile(p).metadata.num_rows for p in (run1 / "new-index").glob("*.parquet"))
    for name in ("new", "lookups", "reference"):
        read = {k: (tight[name]["counters"].pop(k), leaky[name]["counters"].pop(k))
                for k in ("index_bucket_entries_read", "index_exact_entries_read")}
        # The leaky filter lets through far more than the matches (the exact one: every indexed hash).
        assert all(t < lk for t, lk in read.values()), (name, read)
        assert read["index_exact_entries_read"][1] >= 0.9 * indexed
    assert tight == leaky
    dups = [json.loads(line) for line in tight["new"]["duplicates"].splitlines()]
    old_ids = {d.doc_id for d in first}
    assert {d["kind"] for d in dups if d["dup_of"] in old_ids and d["dup_of_index"]} == {"exact", "near"}
