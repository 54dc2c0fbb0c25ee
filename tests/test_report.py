"""The build report: histograms combined in the pipeline, report.json / report.html / PNGs."""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path
from xml.etree import ElementTree

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline  # not a test class to collect
from forkserver import run_python
from realtext import news_documents, write_jsonl

from pipelines.records import Document, Duplicate, Reject, count_words
from pipelines.report.html import sample_bound_text
from pipelines.report.record import REPORT_HTML, REPORT_JSON
from pipelines.report.summaries import (
    ALL,
    BINS_PER_DECADE,
    NUM_BINS,
    SIMILARITY_BINS,
    DedupeStats,
    LengthHistogram,
    RejectExamples,
    bin_edges,
    length_bin,
    similarity_bin,
)
from pipelines.report.writer import WriteReport, write_report
from schemas import UNK_ID

SVG_NS = "{http://www.w3.org/2000/svg}"
CHARTS = ("report-reasons.svg", "report-lengths.svg", "report-dedupe.svg", "report-tokens.svg",
          "report-packing.svg")


def svg_texts(svg: str) -> list[str]:
    """The text nodes of a standalone SVG chart (it must parse as XML in the SVG namespace)."""
    root = ElementTree.fromstring(svg)
    assert root.tag == SVG_NS + "svg"
    return [t.text or "" for t in root.iter(SVG_NS + "text")]

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
    assert length_bin(9) < length_bin(10) == BINS_PER_DECADE + 1 and length_bin(100) == 2 * BINS_PER_DECADE + 1
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
    with BeamTestPipeline(runner="FnApiRunner") as p:
        _ = (p | beam.Create([(d.source, n) for d, n in zip(docs, lengths, strict=True)])
             | beam.CombineGlobally(LengthHistogram())
             | beam.Map(lambda h: out.write_text(json.dumps(h))))
    assert json.loads(out.read_text()) == expected
    fn = LengthHistogram()
    assert fn.extract_output(fn.merge_accumulators([fn.create_accumulator()])) == {}


def test_lengths_and_words_equal_the_two_combines_it_replaces(tmp_path):
    """The kept documents' histogram and word counts come from one pass; both equal their own combines."""
    from pipelines.report.summaries import LengthsAndWords, WordCounts

    rng = __import__("random").Random(5)
    docs = [Document(f"d{i}", rng.choice("abc"), " ".join(["w"] * rng.choice([0, 1, 3, 40, 900])) + " \n x")
            for i in range(60)]
    out = tmp_path / "out.json"
    with BeamTestPipeline(runner="FnApiRunner") as p:
        pc = p | beam.Create(docs)
        both = pc | "Both" >> beam.CombineGlobally(LengthsAndWords())
        hist = (pc | "Words of" >> beam.Map(lambda d: (d.source, count_words(d.text)))
                | "Hist" >> beam.CombineGlobally(LengthHistogram()))
        words = pc | "Words" >> beam.CombineGlobally(WordCounts())
        _ = both | beam.Map(lambda b, h, w: out.write_text(json.dumps([b, h, w])),
                            beam.pvalue.AsSingleton(hist), beam.pvalue.AsSingleton(words))
    (got_hist, got_words), hist, words = json.loads(out.read_text())
    assert got_hist == hist and got_words == words and sum(words.values()) > 0
    fn = LengthsAndWords()
    assert fn.extract_output(fn.merge_accumulators([fn.create_accumulator()] * 2)) == ({}, {})


def test_kept_documents_are_measured_by_the_count_the_clean_stage_made():
    from pipelines.report.summaries import LengthsAndWords, words_of_document

    plain = Document("a", "web", "one two three")
    assert words_of_document(plain) == 3 == count_words(plain.text)
    counted = Document("b", "web", "one two three", words=40)  # read, not counted again
    fn = LengthsAndWords()
    hist, words = fn.extract_output(fn.add_input(fn.add_input(fn.create_accumulator(), plain), counted))
    assert words == {"web": 43} and hist["web"][length_bin(40)] == 1 and hist["web"][length_bin(3)] == 1


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
    assert "ccnews" in html and "stories" in html and "malformed_json 2" in html
    assert "<h2>Software</h2>" in html and f"<td>{report['software']['sentencepiece']}</td>" in html
    inline = re.findall(r'<a href="(report-[a-z]+\.svg)" aria-label="[^"]+">(<svg .*?</svg>)</a>', html, re.S)
    assert [name for name, _ in inline] == ["report-reasons.svg", "report-lengths.svg", "report-dedupe.svg",
                                            "report-tokens.svg", "report-packing.svg"]
    for name, svg in inline:  # each chart is inline in the page and the same bytes as its file
        assert (tmp_path / name).read_text() == svg + "\n"
    # The reasons chart draws one labelled bar per reason, its count at the end.
    texts = svg_texts((tmp_path / "report-reasons.svg").read_text())
    for reason, n in report["reasons"].items():
        assert texts.count(reason) == 1 and str(n) in texts
    assert "Records not kept, by reason (14 in, 8 kept)" in texts
    lengths = svg_texts((tmp_path / "report-lengths.svg").read_text())
    assert {"all sources", "ccnews", f"before cleaning ({NUM_BINS})", "after cleaning + dedupe (2)"} <= set(lengths)
    assert "no duplicates removed" in svg_texts((tmp_path / "report-dedupe.svg").read_text())
    assert "no tokens" in svg_texts((tmp_path / "report-tokens.svg").read_text())
    # without the pipeline's summaries the new sections are empty, never invented
    assert report["examples"] == {} and report["token_share"] == {} and report["dedupe"]["cluster_sizes"] == {}
    assert report["rule_counts"]["filtered:min_words"] == {ALL: 2, "ccnews": 2}
    # deterministic: the same inputs give the same bytes
    first = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    write_report(MANIFEST, before, after, str(tmp_path))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == first


def test_the_report_names_the_bound_that_cut_the_tokenizer_sample():
    """report.html says which bound cut the training sample, with its value and config field; an
    unset sample_bytes is the default of the vocabulary size (a manifest records it as null)."""
    unset = {"tokenizer": {"vocab_size": 32000, "sample_bytes": None, "input_sentence_size": 300}}
    assert sample_bound_text("bytes", unset) == ("the bytes bound (64.0 MB: tokenizer.sample_bytes, unset: 2,000 "
                                                 "bytes per vocabulary piece, at least 16 MB)")
    assert sample_bound_text("bytes", {"tokenizer": {"sample_bytes": 40_000}}) == (
        "the bytes bound (40,000 bytes: tokenizer.sample_bytes)")
    assert sample_bound_text("sentences", unset) == "the sentences bound (300: tokenizer.input_sentence_size)"
    assert sample_bound_text("documents", {}) == "the documents bound"


def test_unbalanced_source_is_flagged(tmp_path):
    bad = {"accounting": {"x": {"input": 5, "kept": 1, "filtered": {}, "duplicate": {}, "rejected": {}}}}
    write_report(bad, {}, {}, str(tmp_path))
    report = json.loads((tmp_path / REPORT_JSON).read_text())
    assert report["sources"]["x"]["balanced"] is False
    assert ">NO<" in (tmp_path / REPORT_HTML).read_text()


def _length_bars(svg: str) -> list[list[float]]:
    """The bars of each panel of the length chart: per filled step area, its (x, height) corners."""
    root = ElementTree.fromstring(svg)
    areas = []
    for poly in root.iter(SVG_NS + "polygon"):
        pts = [tuple(map(float, p.split(","))) for p in poly.get("points", "").split()]
        areas.append(pts[1:-1:2])  # each bar's left top corner (the outline goes up, across, down)
    return areas


def test_the_length_chart_chooses_its_bars_from_the_data(tmp_path):
    """Documents of similar lengths (Brown's texts, ~2,000 words each) get many bars, not one; a corpus
    spread over decades gets no more than the chart's maximum."""
    from pipelines.report.plots import MAX_LENGTH_BARS

    fn = LengthHistogram()
    brown = fn.create_accumulator()
    for i in range(500):
        fn.add_length(brown, "brown", 2000 + (i * 7) % 450)  # 2,000-2,449 words
    hist = fn.extract_output(brown)
    write_report({"accounting": {"brown": {"input": 500, "kept": 500}}}, hist, hist, str(tmp_path))
    bars = _length_bars((tmp_path / "report-lengths.svg").read_text())
    assert bars and all(len(b) >= 8 for b in bars), [len(b) for b in bars]
    assert len({y for b in bars for _, y in b}) > 2  # bars of different heights, not one block
    spread = fn.create_accumulator()
    for n in (0, 1, 2, 3, 5, 8, 40, 300, 2000, 15000, 99000):
        fn.add_length(spread, "web", n)
    hist = fn.extract_output(spread)
    write_report({"accounting": {"web": {"input": 11, "kept": 11}}}, hist, hist, str(tmp_path / "spread"))
    bars = _length_bars((tmp_path / "spread" / "report-lengths.svg").read_text())
    assert all(len(b) <= MAX_LENGTH_BARS + 1 for b in bars), [len(b) for b in bars]  # + the empty documents


def test_doc_ids_stay_on_one_line(tmp_path):
    """report.html keeps a document id whole (a browser would break it at its hyphens)."""
    doc, kept = "ccnews-3f2a9c1b04d7e6aa-000123", "ccnews-3f2a9c1b04d7e6aa-000007"
    extra = {"examples": {"duplicate:near": [{"doc_id": doc, "source": "ccnews", "dup_of": kept, "similarity": 0.9}],
                          "filtered:min_words": [{"doc_id": kept, "source": "ccnews", "snippet": "a b c"}]}}
    write_report({"accounting": {"ccnews": {"input": 3, "kept": 1, "filtered": {"min_words": 1},
                                            "duplicate": {"near": 1}}}}, {}, {}, str(tmp_path), extra)
    page = (tmp_path / REPORT_HTML).read_text()
    assert re.search(r"td\.id, span\.id \{[^}]*white-space: nowrap", page)
    assert f"<td class=id>{doc}</td>" in page and f"<td class=id>{kept}</td>" in page
    assert f"duplicate of <span class=id>{kept}</span> (similarity 0.900)" in page
    extra["examples"]["duplicate:exact"] = [{"doc_id": kept, "source": "ccnews", "dup_of": doc, "dup_of_index": True}]
    write_report({"accounting": {"ccnews": {"input": 4, "kept": 1, "filtered": {"min_words": 1},
                                            "duplicate": {"near": 1, "exact": 1}}}}, {}, {}, str(tmp_path), extra)
    page = (tmp_path / REPORT_HTML).read_text()
    assert f"duplicate of <span class=id>{doc}</span> of the dedupe index</td>" in page


def test_write_report_transform(tmp_path):
    raw = [Document(f"r{i}", "ccnews", "word " * (10 * i)) for i in range(6)]
    kept = raw[3:]
    with BeamTestPipeline(runner="FnApiRunner") as p:
        before = p | "Before" >> beam.Create([(d.source, count_words(d.text)) for d in raw])
        after = p | "After" >> beam.Create(kept)
        _ = p | "Manifest" >> beam.Create([MANIFEST]) | WriteReport(str(tmp_path), before, after)
    report = json.loads((tmp_path / REPORT_JSON).read_text())
    assert sum(report["lengths"]["before_clean"][ALL]) == 6
    assert sum(report["lengths"]["after_clean"][ALL]) == 3
    assert report["lengths"]["before_clean"][ALL][0] == 1  # the empty document


def test_a_report_swept_by_another_writers_commit_is_a_warning_not_a_failed_step(tmp_path, monkeypatch, caplog):
    """An ingest batch writes its report into its attempt folder; a winner's cleanup may sweep it meanwhile.

    The step must not raise: a runner would log the error with a traceback (and retry); the
    driver reports the lost commit in one line (test_commit's two-serve race hits this by chance).
    """
    import pipelines.report.writer as report_mod
    from shardforge.storage import TemporaryRemoved

    def swept(url, data):
        raise TemporaryRemoved(f"{url}: removed before it was published")

    monkeypatch.setattr(report_mod, "write_text_atomic", swept)
    raw = [Document("r1", "ccnews", "word " * 10)]
    with caplog.at_level("WARNING", logger="shardforge.commit"), BeamTestPipeline(runner="FnApiRunner") as p:
        docs = p | "Docs" >> beam.Create(raw)
        words = p | "Words" >> beam.Create([("ccnews", 10)])
        _ = p | "Manifest" >> beam.Create([MANIFEST]) | WriteReport(str(tmp_path), words, docs)
    assert [r.getMessage() for r in caplog.records if "report lost" in r.getMessage()], caplog.text
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------ reject examples and dedupe stats, combined in Beam

def test_examples_are_the_smallest_doc_ids_per_reason_on_any_split():
    recs = [Reject(f"s-{i:03d}", "s", "filtered", "min_words", f"text {i}") for i in range(10)]
    recs += [Duplicate("s-900", "s", "s-001", "near", 0.91), Reject("t-1", "t", "rejected", "bad", "x"),
             Duplicate("s-901", "s", "s-001", "exact", dup_of_index=True)]
    fn = RejectExamples(3)
    whole = fn.extract_output(fn.merge_accumulators([
        fn.add_input(fn.create_accumulator(), r) for r in reversed(recs)]))
    halves = []
    for part in (recs[::2], recs[1::2]):
        acc = fn.create_accumulator()
        for r in part:
            acc = fn.add_input(acc, r)
        halves.append(acc)
    assert fn.extract_output(fn.merge_accumulators(halves)) == whole
    assert [e["doc_id"] for e in whole["filtered:min_words"]] == ["s-000", "s-001", "s-002"]
    assert whole["filtered:min_words"][1]["snippet"] == "text 1"
    assert whole["duplicate:near"] == [{"doc_id": "s-900", "source": "s", "dup_of": "s-001", "similarity": 0.91}]
    assert whole["duplicate:exact"] == [{"doc_id": "s-901", "source": "s", "dup_of": "s-001", "dup_of_index": True}]
    assert list(whole) == ["duplicate:exact", "duplicate:near", "filtered:min_words", "rejected:bad"]


def test_dedupe_stats_in_beam(tmp_path):
    dups = [Duplicate("a2", "x", "a1", "exact"), Duplicate("a3", "x", "a1", "near", 0.93),
            Duplicate("b2", "y", "b1", "near", 0.71), Duplicate("c2", "y", "c1", "span"),
            # an indexed document of id a1 is another cluster than this build's a1
            Duplicate("a4", "x", "a1", "exact", dup_of_index=True)]
    out = tmp_path / "stats.json"
    with BeamTestPipeline(runner="FnApiRunner") as p:
        _ = p | beam.Create(dups) | DedupeStats() | beam.Map(lambda s: out.write_text(json.dumps(s)))
    stats = json.loads(out.read_text())
    assert stats["cluster_sizes"] == {"2": 3, "3": 1}
    want = [0] * SIMILARITY_BINS
    want[similarity_bin(0.93)] += 1
    want[similarity_bin(0.71)] += 1
    assert stats["similarity"] == want and sum(want) == 2 and similarity_bin(1.0) == SIMILARITY_BINS - 1


# ------------------------------------------------------------------ a real build through the CLI

def _cli_build(config: dict, tmp: Path, name: str) -> tuple[Path, dict, dict, dict, str]:
    """Run `python -m pipelines.build --config` in a second process: (out, manifest, report, summary, stderr)."""
    cfg_path = tmp / f"{name}.json"
    cfg_path.write_text(json.dumps(config))
    out = tmp / name
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = run_python(["-m", "pipelines.build", "--config", str(cfg_path), "--output", str(out),
                       "--json"], capture_output=True, text=True, env=env, cwd=root, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (out, json.loads((out / "manifest.json").read_text()), json.loads((out / REPORT_JSON).read_text()),
            json.loads(proc.stdout), proc.stderr)


@pytest.fixture(scope="module")
def real_builds(tmp_path_factory):
    """Two builds of real news (tests/realtext.py) through the CLI.

    normal: sources news and wire; wire repeats four news articles exactly (one of them twice, a
    cluster of 3), holds two near copies and one malformed line; the "javascript" rule is off.
    bad: the same plus "briefs", mostly one-sentence articles (min_words removes 40 of 50), and a
    vocabulary far larger than the text supports, trained without byte fallback (so some <unk>).
    """
    tmp = tmp_path_factory.mktemp("realreport")
    docs = news_documents()
    news = docs[:120]
    wire = docs[120:180] + docs[:4] + [docs[0], docs[5].replace(" the ", " a ", 2), docs[6] + " Reuters."]
    write_jsonl(str(tmp / "news.jsonl"), news)
    with open(tmp / "wire.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in wire)
        f.write("{not json\n")
    write_jsonl(str(tmp / "briefs.jsonl"), [d.split(". ")[0] + "." for d in docs[200:240]] + docs[240:250])
    config = {"sources": [{"name": "news", "input": str(tmp / "news.jsonl")},
                          {"name": "wire", "input": str(tmp / "wire.jsonl")}],
              "clean": {"disabled_rules": ["javascript"]},
              "tokenizer": {"vocab_size": 2000}, "packing": {"max_seq_len": 128, "valid_fraction": 0.1},
              "shards": {"target_samples": 200}, "write_intermediates": True}
    normal = _cli_build(config, tmp, "normal")
    config["sources"].append({"name": "briefs", "input": str(tmp / "briefs.jsonl")})
    # no byte fallback: characters outside the coverage become <unk> (the report must count them)
    config["tokenizer"] = {"vocab_size": 20000, "byte_fallback": False, "character_coverage": 0.995}
    bad = _cli_build(config, tmp, "bad")
    return {"normal": normal, "bad": bad}


def _reject_log(out: Path, m: dict) -> list[dict]:
    rows = []
    for part in sorted((out / m["intermediates"]["rejects"]).glob("part-*.jsonl")):
        rows += [json.loads(line) for line in part.read_text().splitlines() if line]
    return rows


def _shard_ids(out: Path, m: dict) -> list[np.ndarray]:
    from schemas.sample import decode_sample, iter_tar_samples

    ids = []
    for s in m["shards"]:
        with open(out / s["name"], "rb") as f:
            ids += [decode_sample(key, members)["input_ids"] for key, members in iter_tar_samples(f)]
    return ids


@pytest.mark.slow
def test_real_build_report_sections_hold_the_true_numbers(real_builds):
    out, m, report, summary, stderr = real_builds["normal"]
    # per-rule counts are the manifest's accounting, per source and in all
    for name, a in m["accounting"].items():
        for bucket in ("filtered", "duplicate", "rejected"):
            for reason, n in a[bucket].items():
                assert report["rule_counts"][f"{bucket}:{reason}"][name] == n
    assert {k: v[ALL] for k, v in report["rule_counts"].items()} == report["reasons"]
    assert summary["rules"] == report["rule_counts"]
    assert report["rule_counts"]["duplicate:exact"] == {ALL: 5, "wire": 5}
    assert report["rule_counts"]["rejected:malformed_json"] == {ALL: 1, "wire": 1}

    # examples: the smallest doc_ids of each reason, as the reject log holds them
    log = {r["doc_id"]: r for r in _reject_log(out, m)}
    assert len(log) == sum(v[ALL] for v in report["rule_counts"].values())
    for key, exs in report["examples"].items():
        bucket, reason = key.split(":", 1)
        ids = sorted(d for d, r in log.items() if r["bucket"] == bucket and r.get("reason", r.get("kind")) == reason)
        assert [e["doc_id"] for e in exs] == ids[:3]
        for e in exs:
            row = log[e["doc_id"]]
            assert e["source"] == row["source"]
            assert e.get("snippet", e.get("dup_of")) == row.get("snippet", row.get("dup_of"))
    assert set(report["examples"]) == set(report["rule_counts"])
    assert report["examples"]["rejected:malformed_json"][0]["snippet"] == "{not json"

    # dedupe: a cluster is the kept document and its removed copies; near copies carry their similarity
    sizes = {int(k): v for k, v in report["dedupe"]["cluster_sizes"].items()}
    assert sum((k - 1) * v for k, v in sizes.items()) == sum(report["rule_counts"].get(f"duplicate:{k}", {}).get(
        ALL, 0) for k in ("exact", "near", "span"))
    assert sizes[3] == 1  # news article 0 and its two exact copies
    near = [r for r in log.values() if r.get("kind") == "near"]
    # the two planted copies, and two near copies the Lee corpus itself holds (articles 59/72 and 98/107,
    # the second contained whole in a longer report); the recorded similarity is the verified Jaccard,
    # at least the containment path's floor
    assert len(near) == 4 and all(m["config"]["dedupe"]["containment_min_jaccard"] <= r["similarity"] <= 1
                                  for r in near)
    sims = report["dedupe"]["similarity"]["counts"]
    assert sum(sims) == len(near)
    assert sorted(i for i, c in enumerate(sims) for _ in range(c)) == sorted(similarity_bin(r["similarity"])
                                                                           for r in near)

    # tokenizer: document tokens are the packer's input tokens; words those of the clean intermediate
    t = report["tokenizer"]
    assert (t["requested_vocab_size"], t["vocab_size"]) == (2000, m["tokenizer"]["vocab_size"])
    assert t["tokens"] == m["counters"]["pack_input_tokens"]
    clean_words = sum(len(text.split()) for part in sorted((out / m["intermediates"]["clean"]).glob("*.parquet"))
                      for text in pq.read_table(part, columns=["text"]).column("text").to_pylist())
    assert t["words"] == clean_words and t["tokens_per_word"] == pytest.approx(t["tokens"] / clean_words)
    assert 1.0 < t["tokens_per_word"] < 3.0
    ids = _shard_ids(out, m)
    assert m["counters"]["pack_truncated_tokens"] == m["counters"]["pack_dropped_tokens"] == 0
    assert t["unk_tokens"] == sum(int((a == UNK_ID).sum()) for a in ids) and t["unk_rate"] == 0.0

    # token share per source
    share = report["token_share"]
    assert set(share) == {"news", "wire"} and sum(s["share"] for s in share.values()) == pytest.approx(1.0)
    assert sum(s["tokens"] for s in share.values()) == t["tokens"]
    assert share["news"]["share"] > share["wire"]["share"] > 0

    # packed lengths: one count per sample, ids as the shards hold them
    pk = report["packing"]
    for split, tot in m["totals"].items():
        sp = pk["splits"][split]
        assert sum(sp["counts"]) == sp["sequences"] == tot["samples"]
        assert sp["tokens"] == tot["tokens"]
        assert sp["fill_rate"] == pytest.approx(tot["tokens"] / (tot["samples"] * m["max_seq_len"]))
    assert pk["splits"][ALL]["sequences"] == len(ids)
    lengths = np.array([len(a) for a in ids])
    hist = np.bincount(lengths // pk["bin_width"], minlength=len(pk["bin_lower_edges"]))
    assert hist.tolist() == pk["splits"][ALL]["counts"]

    # effective config, with the disabled rule off and the others on
    assert report["config"] == m["config"]
    assert report["rules_enabled"]["javascript"] is False
    assert all(on for r, on in report["rules_enabled"].items() if r != "javascript")

    # the software that wrote it: the tokenizer library's version among them (models differ across versions)
    import importlib.metadata
    import platform

    sw = report["software"]
    assert sw["python"] == platform.python_version()
    assert sw["sentencepiece"] == importlib.metadata.version("sentencepiece") == spm_version()
    assert sw["apache-beam"] == importlib.metadata.version("apache-beam") and sw["shardforge"] != "not installed"

    # a normal build warns about nothing
    assert report["warnings"] == [] and "warning:" not in stderr
    assert set(summary["wall_seconds"]) == {"tag", "pipeline"} and summary["wall_seconds"]["pipeline"] > 0
    assert summary["token_share"] == {k: round(v["share"], 4) for k, v in share.items()}


@pytest.mark.slow
def test_real_build_report_html_links_existing_charts(real_builds):
    out, _, report, _, _ = real_builds["normal"]
    page = (out / REPORT_HTML).read_text()
    links = re.findall(r'<a href="([^"]+\.svg)" aria-label=', page)
    assert tuple(links) == CHARTS
    for name in links:
        assert svg_texts((out / name).read_text())
    # The packing chart titles each split with its sequences and fill rate, as the table does.
    packing = svg_texts((out / "report-packing.svg").read_text())
    for split, sp in report["packing"]["splits"].items():
        if split != ALL:
            assert f"{split}: {sp['sequences']} sequences, fill {100 * sp['fill_rate']:.1f}%" in packing
    for heading in ("Records removed per rule and source", "Examples per reason", "Dedupe clusters",
                    "Tokenizer", "Token share per source", "Packed sequences", "Effective config"):
        assert f"<h2>{heading}" in page
    assert "{not json" in page and "Rules switched off: javascript" in page
    assert report["reject_log"] in page and "<h2>Warnings" not in page


@pytest.mark.slow
def test_cli_warns_when_a_rule_removes_most_of_a_source_or_the_vocabulary_is_small(real_builds):
    out, m, report, _, stderr = real_builds["bad"]
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    page = (out / REPORT_HTML).read_text()
    assert page.index("<h2>Warnings") < page.index("<h2>Records per source")
    assert all(html.escape(w) in page for w in warnings)
    briefs = m["accounting"]["briefs"]
    assert briefs["filtered"]["min_words"] > briefs["input"] / 2
    assert warnings == report["warnings"] and len(warnings) == 2
    assert "'min_words' removed 40 of 50 documents (80%) of source 'briefs'" in warnings[0]
    vocab = m["tokenizer"]["vocab_size"]
    assert vocab < 20000 and f"came out at {vocab} pieces, smaller than the 20000 asked" in warnings[1]
    assert report["tokenizer"]["requested_vocab_size"] == 20000


@pytest.mark.slow
def test_real_build_unk_rate_counts_the_unk_in_the_shards(real_builds):
    out, m, report, summary, _ = real_builds["bad"]
    t = report["tokenizer"]
    assert m["counters"]["pack_truncated_tokens"] == m["counters"]["pack_dropped_tokens"] == 0
    unk = sum(int((a == UNK_ID).sum()) for a in _shard_ids(out, m))
    assert unk > 0 and t["unk_tokens"] == unk
    assert t["unk_rate"] == pytest.approx(unk / m["counters"]["pack_input_tokens"])
    assert summary["tokenizer"]["unk_rate"] == round(t["unk_rate"], 6)


@pytest.mark.slow
def test_real_build_reports_the_tokenizer_training_cost(real_builds):
    """report.json's tokenizer section says what the tokenizer trained on and how long it took:
    here (the sample bounds far above the corpus) every sentence of every kept document."""
    import pyarrow.parquet as pq

    from pipelines.clean.sentences import split_sentences

    out, m, report, _, _ = real_builds["normal"]
    texts = pq.read_table(str(out / m["intermediates"]["clean"])).column("text").to_pylist()
    sentences = [s[:8192] for t in texts for s in split_sentences(t)]
    training = report["tokenizer"]["training"]
    assert training["documents"] == len(texts) > 100
    assert training["sentences"] == len(sentences)
    assert training["bytes"] == sum(len(s.encode("utf-8")) for s in sentences)
    assert training["bounded_by"] is None
    assert "seconds" not in training  # the report is deterministic: the time is logged
    html_text = (out / "report.html").read_text()
    assert f"Trained on {len(sentences):,} sentences" in html_text


def test_token_counts_are_the_tokenize_steps_batch_counts_summed():
    """The Tokenize step counts each batch as it encodes it (documents, tokens, <unk>); the report sums them."""
    from apache_beam.pvalue import TaggedOutput

    from pipelines.records import SentencedDocument, TokenizedDocument
    from pipelines.report.summaries import TokenCounts
    from pipelines.tokenizer.encode import TOKEN_COUNTS, EncodeBatches

    class Encoder:  # "?" encodes to <unk> and a piece, blank to nothing, anything else to three pieces
        def encode(self, sentences, num_threads=1):
            return [[UNK_ID, 5] if "?" in s else [] if not s.strip() else [5, 6, 7] for s in sentences]

    fn = EncodeBatches(8)
    fn.setup()
    model = b"model"
    fn._tok, fn._model_ref, fn._unk = Encoder(), model, UNK_ID  # the tokenizer loaded, its <unk> id
    docs = [SentencedDocument("a", "web", ("x?", "y")), SentencedDocument("b", "news", (" ",)),
            SentencedDocument("c", "web", ("z", "w?"))]
    assert [o for d in docs for o in fn.process(d, model)] == []  # a batch of 8 is not full: held
    # ... until the bundle ends; outputs made then carry their window
    out = [TaggedOutput(o.tag, o.value.value) if isinstance(o, TaggedOutput) else o.value for o in fn.finish_bundle()]
    tokenized = [o for o in out if isinstance(o, TokenizedDocument)]
    batches = [o.value for o in out if isinstance(o, TaggedOutput) and o.tag == TOKEN_COUNTS]
    assert batches == [{"news": (1, 0, 0), "web": (2, 10, 2)}]  # the empty document counts as a document
    assert [d.num_tokens for d in tokenized] == [5, 0, 5]
    assert sum(s.count(UNK_ID) for d in tokenized for s in d.sentences) == 2
    fn_ = TokenCounts()
    acc = fn_.add_input(fn_.create_accumulator(), batches[0])
    other = fn_.add_input(fn_.create_accumulator(), {"web": (1, 3, 0)})
    assert fn_.extract_output(fn_.merge_accumulators([acc, other])) == {
        "news": {"documents": 1, "tokens": 0, "unk": 0}, "web": {"documents": 3, "tokens": 13, "unk": 2}}


def spm_version() -> str:
    import sentencepiece

    return sentencepiece.__version__


def test_an_empty_valid_split_is_a_warning_unless_none_was_asked_for() -> None:
    from pipelines.report.record import build_warnings

    def manifest(fraction: float, valid_docs: int) -> dict:
        totals = {"train": {"documents": 58, "tokens": 17988}}
        if valid_docs:
            totals["valid"] = {"documents": valid_docs, "tokens": 300}
        return {"config": {"packing": {"valid_fraction": fraction}}, "totals": totals, "accounting": {}}

    (line,) = build_warnings(manifest(0.01, 0))
    assert line == ("warning: the valid split is empty: none of the 58 kept documents fell in it (valid_fraction "
                    "0.01), so training on it cannot evaluate; a repack of this corpus with a larger "
                    "--valid_fraction gives it documents (shardforge repack --tokenized CORPUS --output NEW "
                    "--valid_fraction 0.38)")  # 1,000 / (15% of 17,988 tokens) = 0.371, up to two digits
    assert build_warnings(manifest(0.01, 1)) == [] and build_warnings(manifest(0.0, 0)) == []
    # The build names its corpus; a corpus of many small documents takes at least 3 of them expected.
    (line,) = build_warnings({**manifest(0.01, 0), "totals": {"train": {"documents": 40, "tokens": 332748}}}, "gs://b/c")
    assert line.endswith("(shardforge repack --tokenized gs://b/c --output NEW --valid_fraction 0.075)")
