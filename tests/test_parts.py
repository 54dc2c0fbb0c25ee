"""Part files sized by record count (PartCount + WriteParts): a part's writer holds a bounded number of records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.intermediates import PartCount, WriteParts, part_name, parts_for, rejects_to_jsonl
from pipelines.records import Reject, stable_hash


def test_parts_for_bounds_records_per_part():
    for count in (0, 1, 6, 7, 8, 70, 71, 1000):
        parts = parts_for(count, 7)
        assert parts >= 1
        assert parts * 7 >= count  # on average at most per_part records per part
        if count > 7:
            assert (parts - 1) * 7 < count  # and no more parts than needed
    with pytest.raises(ValueError):
        parts_for(10, 0)
    with pytest.raises(ValueError):
        PartCount(0)


def test_part_count_keeps_every_limit():
    """By record count, by a size, or by both (the larger count wins); limits are checked at construction."""
    from apache_beam.testing.util import assert_that, equal_to

    words = ["a" * 9] * 6 + ["b"] * 6  # 12 records, 60 characters
    with BeamTestPipeline(runner="FnApiRunner") as p:
        recs = p | beam.Create(words)
        for label, count, expected in (("ByCount", PartCount(5), 3),  # ceil(12 / 5)
                                       ("BySize", PartCount(size=len, size_per_part=25), 3),  # ceil(60 / 25)
                                       ("Records", PartCount(2, size=len, size_per_part=25), 6),
                                       ("Chars", PartCount(12, size=len, size_per_part=10), 6)):
            assert_that(recs | label >> count, equal_to([expected]), label=f"Check{label}")
    for bad in ({}, {"size": len}, {"size_per_part": 10}, {"size": len, "size_per_part": 0}):
        with pytest.raises(ValueError):
            PartCount(**bad)


def _rejects(n: int) -> list[Reject]:
    return [Reject(f"web-{i:06d}", "web", "filtered", "min_words", f"text {i}") for i in range(n)]


@pytest.mark.parametrize("n", [0, 5, 60])
def test_part_count_grows_with_records(tmp_path: Path, n: int):
    per_part = 8
    out = tmp_path / "rejects"
    with BeamTestPipeline(runner="FnApiRunner") as p:
        recs = p | beam.Create(_rejects(n))
        counted = recs | "Parts" >> PartCount(per_part)
        _ = recs | WriteParts(str(out), "jsonl", rejects_to_jsonl, counted)

    parts = parts_for(n, per_part)
    # WriteParts writes only non-empty parts: exactly those the content hash routes records to.
    expected = {stable_hash("part", r.doc_id) % parts for r in _rejects(n)}
    written = sorted(out.glob("part-*.jsonl")) if out.exists() else []
    assert [f.name for f in written] == [part_name(i, "jsonl") for i in sorted(expected)]
    seen: list[str] = []
    for f in written:
        ids = [json.loads(line)["doc_id"] for line in f.read_text().splitlines()]
        assert ids == sorted(ids)  # deterministic order inside a part
        seen += ids
    assert sorted(seen) == [r.doc_id for r in _rejects(n)]
    # More records than one part holds: they are spread over several files (a fixed count would not grow).
    assert parts == max(1, math.ceil(n / per_part))
    assert (len(written) > 1) == (n > per_part)


def _row_groups_bytes(rows: list[dict], schema, runs: list[tuple[int, int]], **options) -> bytes:
    """The reference: Arrow's from_pylist of row dicts, the given runs of rows as row groups."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    with pq.ParquetWriter(buf, schema, **{"compression": "zstd", **options}) as w:
        for a, b in runs or [(0, 0)]:
            w.write_table(pa.Table.from_pylist(rows[a:b], schema=schema), row_group_size=max(1, b - a))
    return buf.getvalue()


def test_tokenized_parquet_is_byte_identical_to_row_conversion(tmp_path: Path, monkeypatch):
    """The columnar writer must not change the intermediate: same bytes as Arrow's from_pylist of rows,
    in row groups of at most TOKENIZED_ROW_GROUP_IDS ids (a longer document alone)."""
    import io
    import random

    import pyarrow.parquet as pq

    import pipelines.intermediates as files
    from pipelines.intermediates import (
        TOKENIZED_SCHEMA,
        read_tokenized_parquet,
        size_runs,
        write_tokenized_parquet,
    )
    from pipelines.records import TokenizedDocument

    monkeypatch.setattr(files, "TOKENIZED_ROW_GROUP_IDS", 120)
    rng = random.Random(3)
    docs = [TokenizedDocument(f"web-{i:04d}", "web" if i % 3 else "news",
                              tuple(tuple(rng.randrange(5, 70000) for _ in range(rng.randint(1, 30)))
                                    for _ in range(rng.randint(0, 6))), 0) for i in range(300)]
    docs = [TokenizedDocument(d.doc_id, d.source, d.sentences, sum(map(len, d.sentences))) for d in docs]
    assert any(not d.sentences for d in docs)  # documents without sentences are covered
    assert any(d.num_tokens > 120 for d in docs)  # and documents longer than a row group
    for batch in (docs, docs[:1], []):
        rows = [{"doc_id": d.doc_id, "source": d.source, "sentences": [list(s) for s in d.sentences],
                 "num_tokens": d.num_tokens} for d in batch]
        buf = io.BytesIO()
        write_tokenized_parquet(batch, buf)
        data = buf.getvalue()
        runs = size_runs([d.num_tokens for d in batch], 120)
        assert data == _row_groups_bytes(rows, TOKENIZED_SCHEMA, runs)
        path = tmp_path / "part.parquet"
        path.write_bytes(data)
        assert read_tokenized_parquet(str(path)) == batch
        meta = pq.ParquetFile(path).metadata
        groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        assert groups == ([b - a for a, b in runs] or [0])
        if len(batch) > 1:
            assert len(groups) > 10
            for a, b in runs:  # every group within the bound, or one document
                assert b - a == 1 or sum(d.num_tokens for d in batch[a:b]) <= 120


def test_clean_parquet_row_groups_are_bounded_by_text(tmp_path: Path, monkeypatch):
    """Clean parts: the same bytes as from_pylist of the documents' rows in row groups of at most
    CLEAN_ROW_GROUP_CHARS characters of text, dictionaries only for the repeating columns."""
    import io
    import random

    import pyarrow.parquet as pq

    import pipelines.intermediates as files
    from pipelines.intermediates import (
        CLEAN_DICTIONARY_COLUMNS,
        CLEAN_SCHEMA,
        size_runs,
        write_documents_parquet,
    )
    from pipelines.records import Document

    monkeypatch.setattr(files, "CLEAN_ROW_GROUP_CHARS", 2_000)
    rng = random.Random(5)
    words = "the of a river town was built in stone and later rebuilt after the fire".split()
    docs = [Document(f"web-{i:04d}", "web", " ".join(rng.choice(words) for _ in range(rng.randint(1, 900))),
                     url=f"https://example.org/{i}" if i % 4 else None, language="en", language_score=0.5 + i / 1000)
            for i in range(200)]
    for batch in (docs, []):
        buf = io.BytesIO()
        write_documents_parquet(batch, buf)
        runs = size_runs([len(d.text) for d in batch], 2_000)
        assert len(runs) > 20 or not batch
        rows = [{f.name: getattr(d, f.name) for f in CLEAN_SCHEMA} for d in batch]  # the schema's columns
        assert buf.getvalue() == _row_groups_bytes(rows, CLEAN_SCHEMA, runs, use_dictionary=CLEAN_DICTIONARY_COLUMNS)
        path = tmp_path / "clean.parquet"
        path.write_bytes(buf.getvalue())
        assert pq.read_table(path).to_pylist() == rows
        meta = pq.ParquetFile(path).metadata
        assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == ([b - a for a, b in runs] or [0])


def test_size_runs_cut_within_the_limits():
    from pipelines.intermediates import size_runs

    assert size_runs([], 10) == []
    assert size_runs([3, 3, 3, 3], 6) == [(0, 2), (2, 4)]
    assert size_runs([12, 1, 1], 10) == [(0, 1), (1, 3)]  # a record over the limit is a run of its own
    assert size_runs([1] * 5, 100, max_count=2) == [(0, 2), (2, 4), (4, 5)]
    assert size_runs([4, 7, 4], 10) == [(0, 1), (1, 2), (2, 3)]


def test_clean_parts_counted_from_the_documents_before_dedupe(tmp_path: Path, monkeypatch):
    """``WriteClean(sized_by=...)``: the part count comes from the given documents (the build's clean
    documents before dedupe), so parts hold at most the limit of characters, fewer when documents left."""
    import pyarrow.parquet as pq

    from pipelines import intermediates as files
    from pipelines.records import Document

    monkeypatch.setattr(files, "CLEAN_PART_CHARS", 100)
    everything = [Document(f"d{i:02d}", "web", "x" * 50) for i in range(12)]  # 600 characters: 6 parts
    kept = everything[:3]  # 150 characters: 2 parts if counted from the kept documents
    def expected(parts: int) -> set[str]:  # the files routing by a count of `parts` writes
        return {part_name(stable_hash("part", d.doc_id) % parts, "parquet") for d in kept}

    assert expected(2) != expected(6)  # the two counts are told apart by the files written
    for label, sized_by, parts in (("kept", None, 2), ("before", everything, 6)):
        out = tmp_path / label
        with BeamTestPipeline(runner="FnApiRunner") as p:
            basis = None if sized_by is None else p | "All" >> beam.Create(sized_by)
            _ = p | "Kept" >> beam.Create(kept) | files.WriteClean(str(out), sized_by=basis)
        written = sorted((out / "clean").glob("*.parquet"))
        assert {f.name for f in written} == expected(parts), label
        assert sorted(r for f in written for r in pq.read_table(f).column("doc_id").to_pylist()) == \
            [d.doc_id for d in kept]


_maybe_text = st.none() | st.text(max_size=40)


@settings(max_examples=200, deadline=None)
@given(doc_id=st.text(min_size=1, max_size=30), text=st.text(max_size=300), url=_maybe_text, title=_maybe_text,
       date=_maybe_text, language=_maybe_text,
       score=st.none() | st.floats(min_value=0.0, max_value=1.0), words=st.none() | st.integers(0, 2**40))
def test_document_bytes_round_trip_every_field(doc_id, text, url, title, date, language, score, words):
    """``encode_document`` / ``decode_document`` (the bytes a clean part's documents cross the shuffle in)
    give back every field, None kept apart from "", lone surrogates and all (``words`` is not part of a
    Document's equality: compared on its own)."""
    from pipelines.coders import decode_document, encode_document
    from pipelines.records import Document

    doc = Document(doc_id, "web", text + "\ud800", url, title, date, language, score, words)
    back = decode_document(encode_document(doc))
    assert back == doc and back.words == doc.words and back.language_score == doc.language_score
    assert [getattr(back, f) is None for f in ("url", "title", "date", "language")] == \
        [getattr(doc, f) is None for f in ("url", "title", "date", "language")]


def test_clean_parts_cross_the_shuffle_as_bytes(tmp_path: Path):
    """The clean step's documents cross the shuffle as ``encode_document`` bytes (the routed elements are
    typed ``(int, bytes)``, not pickled Documents) and reach the part writer whole."""
    import pyarrow.parquet as pq

    from pipelines import intermediates as files
    from pipelines.records import Document

    docs = [Document(f"d{i:02d}", "web", f"text {i} \u00e9", f"https://x/{i}", None, "2020-01-01", "en", 0.5, i + 2)
            for i in range(9)]
    with BeamTestPipeline(runner="FnApiRunner") as p:
        _ = p | beam.Create(docs) | "Clean" >> files.WriteClean(str(tmp_path))
        routed = [t for t in p.transforms_stack[0].parts[-1].parts[-1].parts if t.full_label.endswith("/Route")]
        assert routed and routed[0].outputs[None].element_type == beam.typehints.Tuple[int, bytes]
    rows = sorted((r for f in (tmp_path / "clean").glob("*.parquet") for r in pq.read_table(f).to_pylist()),
                  key=lambda r: r["doc_id"])
    assert [r["doc_id"] for r in rows] == [d.doc_id for d in docs]
    assert rows[3]["text"] == "text 3 \u00e9" and rows[3]["url"] == "https://x/3" and rows[3]["title"] is None
    assert rows[3]["language_score"] == 0.5 and rows[3]["date"] == "2020-01-01"
