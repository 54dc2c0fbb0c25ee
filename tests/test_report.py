"""The build report: histograms combined in the pipeline, report.json / report.html / PNGs."""

from __future__ import annotations

import base64
import json
import re

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline

from pipelines.records import Document
from pipelines.report import (
    ALL,
    NUM_BINS,
    REPORT_HTML,
    REPORT_JSON,
    LengthHistogram,
    WriteReport,
    bin_edges,
    length_bin,
    write_report,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

MANIFEST = {
    "accounting": {
        "ccnews": {"input": 10, "kept": 5, "filtered": {"min_words": 2}, "duplicate": {"exact": 1},
                   "rejected": {"malformed_json": 2}},
        "stories": {"input": 4, "kept": 3, "filtered": {"english": 1}, "duplicate": {}, "rejected": {}},
    },
    "shards": [{"name": "train-000000.tar"}],
    "totals": {"train": {"shards": 1, "samples": 7, "tokens": 900, "bytes": 1, "documents": 8}},
    "counters": {},
}


def test_length_bins_are_log_scale():
    assert length_bin(0) == 0 and length_bin(1) == 1
    assert length_bin(9) == 4 and length_bin(10) == 5 and length_bin(100) == 9
    assert length_bin(10**12) == NUM_BINS - 1
    edges = bin_edges()
    assert len(edges) == NUM_BINS and edges[0] == 0 and edges[1] == 1
    for n in (1, 3, 17, 999, 12345):
        b = length_bin(n)
        assert edges[b] <= n and (b + 1 == NUM_BINS or n < edges[b + 1])


def test_histogram_combines_in_beam(tmp_path):
    lengths = [0, 1, 5, 50, 50, 500, 7000]
    docs = [Document(f"d{i}", "a" if i % 2 else "b", " ".join(["w"] * n)) for i, n in enumerate(lengths)]
    expected = {ALL: [0] * NUM_BINS, "a": [0] * NUM_BINS, "b": [0] * NUM_BINS}
    for d, n in zip(docs, lengths, strict=True):
        expected[ALL][length_bin(n)] += 1
        expected[d.source][length_bin(n)] += 1
    out = tmp_path / "hist.json"
    with TestPipeline(runner="FnApiRunner") as p:
        _ = (p | beam.Create(docs) | beam.CombineGlobally(LengthHistogram())
             | beam.Map(lambda h: out.write_text(json.dumps(h))))
    assert json.loads(out.read_text()) == expected
    fn = LengthHistogram()
    assert fn.extract_output(fn.merge_accumulators([fn.create_accumulator()])) == {}


def test_report_files(tmp_path):
    before = {ALL: [1] * NUM_BINS, "ccnews": [1] * NUM_BINS}
    after = {ALL: [0, 0, 0, 2] + [0] * (NUM_BINS - 4), "ccnews": [0, 0, 0, 2] + [0] * (NUM_BINS - 4)}
    url = write_report(MANIFEST, before, after, str(tmp_path))
    assert url.endswith(REPORT_HTML)
    report = json.loads((tmp_path / REPORT_JSON).read_text())
    assert report["totals"] == {"input": 14, "kept": 8, "filtered": 3, "duplicate": 1, "rejected": 2}
    assert report["sources"]["ccnews"]["balanced"] and report["sources"]["stories"]["balanced"]
    assert report["reasons"] == {"filtered:min_words": 2, "rejected:malformed_json": 2, "duplicate:exact": 1,
                                 "filtered:english": 1}
    assert report["lengths"]["before_clean"] == before and report["lengths"]["after_clean"] == after
    html = (tmp_path / REPORT_HTML).read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == 2 and all(base64.b64decode(i).startswith(PNG_MAGIC) for i in images)
    assert "ccnews" in html and "stories" in html and "malformed_json 2" in html
    for png in ("report-reasons.png", "report-lengths.png"):
        assert (tmp_path / png).read_bytes().startswith(PNG_MAGIC)
    # deterministic: the same inputs give the same bytes
    first = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    write_report(MANIFEST, before, after, str(tmp_path))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == first


def test_unbalanced_source_is_flagged(tmp_path):
    bad = {"accounting": {"x": {"input": 5, "kept": 1, "filtered": {}, "duplicate": {}, "rejected": {}}}}
    write_report(bad, {}, {}, str(tmp_path))
    report = json.loads((tmp_path / REPORT_JSON).read_text())
    assert report["sources"]["x"]["balanced"] is False
    assert ">NO<" in (tmp_path / REPORT_HTML).read_text()


def test_write_report_transform(tmp_path):
    raw = [Document(f"r{i}", "ccnews", "word " * (10 * i)) for i in range(6)]
    kept = raw[3:]
    with TestPipeline(runner="FnApiRunner") as p:
        before = p | "Before" >> beam.Create(raw)
        after = p | "After" >> beam.Create(kept)
        _ = p | "Manifest" >> beam.Create([MANIFEST]) | WriteReport(str(tmp_path), before, after)
    report = json.loads((tmp_path / REPORT_JSON).read_text())
    assert sum(report["lengths"]["before_clean"][ALL]) == 6
    assert sum(report["lengths"]["after_clean"][ALL]) == 3
    assert report["lengths"]["before_clean"][ALL][0] == 1  # the empty document
