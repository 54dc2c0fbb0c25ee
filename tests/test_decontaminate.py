"""Benchmark decontamination: real evaluation texts planted into a real corpus are found, near misses kept.

The n-gram hashes and their normalization, the bounded Bloom filter (no false negatives, its size
capped whatever the evaluation set), the evaluation file formats (a JSON array split by the streaming
scanner), the Beam stage on the in-process runner (document and spans modes; a filter far too small
and an index in many partitions still give exact verdicts), the attempt tag following the evaluation
files' content, and a build through the real command line with one evaluation set on the GCS
emulator: every removed document counted as ``filtered: decontaminated``, the report naming each
benchmark file with its counts.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys

import apache_beam as beam
import numpy as np
import pytest
from decontamination_corpus import planted_corpus
from forkserver import run_python

from pipelines.dedupe.bloom import Bloom
from pipelines.dedupe.decontaminate import DECONTAMINATED, Decontaminate
from pipelines.dedupe.evalsets import (
    batch_ngram_hashes,
    eval_text,
    eval_texts,
    filter_shape,
    ngram_hashes,
    record_text,
)
from pipelines.records import Document, Reject
from schemas.config import DecontaminateConfig
from schemas.errors import UserError


def test_ngrams_ignore_case_punctuation_spacing_and_unicode_form() -> None:
    a = ngram_hashes("The cat sat on the mat, near 3.14 dogs.", 4)
    assert len(a) == 7  # the, cat, sat, on, the, mat, near, 3, 14, dogs: 10 words
    assert np.array_equal(a, ngram_hashes("THE  cat\nsat on -- the MAT near 3 14 dogs", 4))
    assert not np.array_equal(a, ngram_hashes("The cat sat on a mat near 3.14 dogs.", 4))
    assert np.array_equal(ngram_hashes(eval_text("Café au lait served in Zürich today"), 3),
                          ngram_hashes("cafe\u0301 au lait served in zu\u0308rich today".replace(
                              "cafe\u0301", "Café").replace("zu\u0308rich", "Zürich"), 3))
    assert np.array_equal(ngram_hashes(eval_text("cafe\u0301 au lait served"), 3), ngram_hashes("café au lait served", 3))
    assert len(ngram_hashes("too short", 13)) == 0


def test_a_batch_hashes_each_text_as_alone() -> None:
    texts = ["one two three four five", "", "six seven", "eight nine ten eleven twelve thirteen", "a b c d"]
    hashes, owner = batch_ngram_hashes(texts, 3)
    assert np.array_equal(hashes, np.concatenate([ngram_hashes(t, 3) for t in texts]))
    assert owner.tolist() == [0, 0, 0, 3, 3, 3, 3, 4, 4]
    assert [len(x) for x in batch_ngram_hashes(["a b", "c"], 3)] == [0, 0]


def test_bloom_never_misses_and_its_size_is_bounded() -> None:
    rng = np.random.default_rng(5)
    members = rng.integers(-(2**63), 2**63 - 1, size=200_000, dtype=np.int64)
    others = rng.integers(-(2**63), 2**63 - 1, size=200_000, dtype=np.int64)
    bloom = Bloom.empty(*filter_shape(len(members), 64 << 20))
    bloom.add(members)
    assert bloom.contains(members).all()
    assert bloom.contains(others).mean() < 1e-4
    # However many n-grams, the filter stays within its bound (false positives grow, never misses).
    assert filter_shape(10**12, 1 << 20) == (23, 1)
    small = Bloom.empty(16, 2)
    small.add(members)
    assert small.contains(members).all() and len(small.bits) == 1 << 13


def test_evaluation_file_formats(tmp_path) -> None:
    jl = tmp_path / "qa.jsonl"
    jl.write_text('{"q": "first question", "choices": ["a b", "c"], "n": 3}\n\n{broken\n"a bare string"\n')
    assert list(eval_texts(str(jl))) == ["first question\na b\nc", None, "a bare string"]
    assert list(eval_texts(str(jl), ["choices"])) == ["a b\nc", None, "a bare string"]
    js = tmp_path / "set.json.gz"
    js.write_bytes(gzip.compress(json.dumps([{"text": "one"}, {"text": "two"}]).encode()))
    assert list(eval_texts(str(js))) == ["one", "two"]
    pretty = tmp_path / "pretty.json"  # items split by the streaming scanner: brackets and commas inside strings
    pretty.write_text('[\n  {"q": "a, [b] {c}", "choices": ["x", "y,]"]},\n  "bare",\n  {broken},\n  {"z": "\\"}"}\n]\n')
    assert list(eval_texts(str(pretty))) == ["a, [b] {c}\nx\ny,]", "bare", None, '"}']
    one = tmp_path / "one.json"
    one.write_text('{"question": "only one", "answer": "yes"}')
    assert list(eval_texts(str(one), ["question"])) == ["only one"]
    tx = tmp_path / "passages.txt"
    tx.write_text("para one\nstill one\n\n\npara two\n")
    assert list(eval_texts(str(tx))) == ["para one\nstill one\n", "para two\n"]
    assert record_text({"a": {"b": ["x", 1, "y"]}, "c": None}) == "x\ny"
    # Parquet, as a Hugging Face dataset's split: every column's strings (nested answers too), or --fields'
    import pyarrow as pa
    import pyarrow.parquet as pq

    squad = tmp_path / "validation-00000-of-00001.parquet"
    table = pa.table({"id": ["q1", "q2"], "context": ["The first passage.", "The second passage."],
                      "question": ["Which one?", "And now?"],
                      "answers": [{"text": ["first"], "answer_start": [4]}, {"text": ["second"], "answer_start": [4]}]})
    pq.write_table(table, squad, row_group_size=1)
    assert list(eval_texts(str(squad))) == ["q1\nThe first passage.\nWhich one?\nfirst",
                                            "q2\nThe second passage.\nAnd now?\nsecond"]
    assert list(eval_texts(str(squad), ["context", "answers"])) == ["The first passage.\nfirst",
                                                                    "The second passage.\nsecond"]
    assert list(eval_texts(str(squad), ["sentence"])) == []  # no such column: no text


def _run(docs: list[str], cfg: DecontaminateConfig, tmp_path) -> dict:
    """The stage on the in-process runner: {"kept": {doc_id: text}, "removed": {doc_id: snippet}, "stats": ...}."""
    out_dir = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
    out_dir.mkdir()
    records = [Document(f"news-{i:04d}", "news", t) for i, t in enumerate(docs)]
    with beam.Pipeline(runner="FnApiRunner") as p:
        res = p | beam.Create(records) | Decontaminate(cfg)
        for name in ("documents", "rejects", "stats"):
            _ = (res[name] | f"Json{name}" >> beam.Map(_as_json)
                 | f"Write{name}" >> beam.io.WriteToText(str(out_dir / name), shard_name_template=""))
    lines = {n: [json.loads(x) for x in (out_dir / n).read_text().splitlines()] for n in ("documents", "rejects", "stats")}
    return {"kept": {d["doc_id"]: d["text"] for d in lines["documents"]},
            "removed": {r["doc_id"]: r for r in lines["rejects"]}, "stats": lines["stats"][0]}


def _as_json(x) -> str:
    if isinstance(x, Document):
        return json.dumps({"doc_id": x.doc_id, "text": x.text})
    if isinstance(x, Reject):
        return json.dumps({"doc_id": x.doc_id, "bucket": x.bucket, "reason": x.reason, "snippet": x.snippet})
    return json.dumps(x)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    corpus = planted_corpus()
    folder = tmp_path_factory.mktemp("evals")
    path = folder / "wiki_qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in corpus.eval_records) + "{not json\n")
    (folder / "short.txt").write_text("Only a few words here.\n\nAnd here.\n")
    return corpus, str(path), str(folder / "short.txt")


def test_planted_passages_are_removed_and_near_misses_kept(planted, tmp_path) -> None:
    corpus, evals, short = planted
    res = _run(corpus.documents, DecontaminateConfig(paths=[evals, short]), tmp_path)
    removed = {int(k.split("-")[1]) for k in res["removed"]}
    assert removed == set(corpus.contaminated)  # recall 1.0, no wrong removal
    assert len(res["kept"]) + len(removed) == len(corpus.documents)
    assert all(r["bucket"] == "filtered" and r["reason"] == DECONTAMINATED for r in res["removed"].values())
    for k, r in res["removed"].items():  # the snippet is the overlap
        assert r["snippet"].split()[0].lower().strip(".,") in corpus.contaminated[int(k.split("-")[1])].lower()
    s = res["stats"]
    assert s["benchmarks"]["wiki_qa.jsonl"]["documents"] == len(corpus.contaminated)
    assert s["benchmarks"]["wiki_qa.jsonl"]["bad_records"] == 1
    assert s["benchmarks"]["wiki_qa.jsonl"]["texts"] == len(corpus.eval_records)
    assert s["benchmarks"]["short.txt"] == {"texts": 0, "ngrams": 0, "short_texts": 2, "bad_records": 0,
                                            "documents": 0, "matched_ngrams": 0}
    assert s["sources"] == {"news": {"removed": len(removed), "trimmed": 0, "words_cut": 0}}
    assert s["candidates"] == len(removed)  # at 32 bits an n-gram, no false candidate here
    assert [e["doc_id"] for e in s["examples"]] == sorted(res["removed"])[:3]


def test_spans_mode_cuts_only_the_overlap(planted, tmp_path) -> None:
    corpus, evals, _ = planted
    res = _run(corpus.documents, DecontaminateConfig(paths=[evals], mode="spans"), tmp_path)
    assert res["removed"] == {}
    evaluated = {h for r in corpus.eval_records for h in ngram_hashes(record_text(r), 13).tolist()}
    for i, plant in corpus.contaminated.items():
        text = res["kept"][f"news-{i:04d}"]
        head, tail = corpus.original[i]
        words = list(re.finditer(r"\w+", plant))  # cut from its first word to its last: punctuation around stays
        lead, trail = plant[:words[0].start()], plant[words[-1].end():]
        if corpus.forms[i] != "no punctuation":
            assert text == (head + lead).strip() + "\n\n" + (trail + " " + tail).strip()
        else:  # "U.S." written "US" is another word: up to 12 words beside it stay, no 13-gram of the plant
            assert text.startswith(head.strip()) and text.endswith(tail.strip())
            assert not set(ngram_hashes(text, 13).tolist()) & evaluated
    for i, t in enumerate(corpus.documents):
        if i not in corpus.contaminated:
            assert res["kept"][f"news-{i:04d}"] == t
    s = res["stats"]["sources"]["news"]
    assert s["trimmed"] == len(corpus.contaminated) and s["removed"] == 0
    planted_words = sum(len(p.split()) for p in corpus.contaminated.values())
    assert 0.8 * planted_words <= s["words_cut"] <= planted_words


def test_a_filter_far_too_small_costs_work_never_a_wrong_removal(planted, tmp_path) -> None:
    """The in-memory filter bounded to 8 KB: most documents become candidates, the keyed join still
    removes exactly the contaminated ones."""
    corpus, evals, _ = planted
    cfg = DecontaminateConfig(paths=[evals], filter_mb=8 / 1024)
    assert Decontaminate(cfg).shape[0] == 16
    res = _run(corpus.documents, cfg, tmp_path)
    assert {int(k.split("-")[1]) for k in res["removed"]} == set(corpus.contaminated)
    assert res["stats"]["candidates"] > 3 * len(corpus.contaminated)


def test_an_index_in_many_partitions_gives_the_same_verdicts(planted, tmp_path, monkeypatch) -> None:
    """Partitions of ~64 evaluation hashes (hundreds of them, as a large evaluation set gets at the default
    size): each candidate's hashes meet only their partition's, and every contaminated document is
    still found, nothing else."""
    corpus, evals, _ = planted
    monkeypatch.setattr(Decontaminate, "PART_HASHES", 64)
    stage = Decontaminate(DecontaminateConfig(paths=[evals]))
    assert stage.log2_parts >= 7
    res = _run(corpus.documents, DecontaminateConfig(paths=[evals]), tmp_path)
    assert {int(k.split("-")[1]) for k in res["removed"]} == set(corpus.contaminated)


def test_a_path_matching_nothing_or_an_unread_kind_is_one_line(tmp_path) -> None:
    with pytest.raises(UserError, match="no file matches it"):
        Decontaminate(DecontaminateConfig(paths=[str(tmp_path / "nothing*.jsonl")]))
    (tmp_path / "evals.zip").write_bytes(b"PK\x03\x04")
    with pytest.raises(UserError, match="zip files are not read; give JSONL, JSON, Parquet or text files"):
        Decontaminate(DecontaminateConfig(paths=[str(tmp_path / "evals.zip")]))


# mtime=0: the gzip header holds no clock, so every xdist worker collects the same parameters.
@pytest.mark.parametrize("name,data", [("evals.parquet", b"PAR1 not a parquet file"),
                                       ("evals.jsonl.gz", gzip.compress(b'{"text": "a b c"}\n' * 50, mtime=0)[:40])],
                         ids=["parquet", "gzip-cut"])
def test_an_evaluation_file_that_does_not_decode_is_one_line(tmp_path, name, data) -> None:
    """A file named .parquet that is none, or a cut .gz: Beam's log of the stage's traceback, now the
    file's name and why, as the user's one line."""
    (tmp_path / name).write_bytes(data)
    cfg = DecontaminateConfig(paths=[str(tmp_path / name)])
    with pytest.raises(UserError, match=rf"^--decontaminate {name}: does not read as (Parquet|JSONL) to its end \("):
        _run(["A document of a few words that the stage reads."], cfg, tmp_path)


def test_the_attempt_tag_follows_the_evaluation_files(tmp_path) -> None:
    from pipelines.corpus.commit import one_shot_attempt
    from schemas.config import BuildConfig

    raw = tmp_path / "raw.jsonl"
    raw.write_text(json.dumps({"text": "x"}) + "\n")
    ev = tmp_path / "ev.jsonl"
    ev.write_text('{"q": "one"}\n')
    base = BuildConfig.model_validate({"sources": [{"name": "news", "input": str(raw)}]})
    with_ev = base.model_copy(update={"decontaminate": DecontaminateConfig(paths=[str(ev)])})
    tags = [one_shot_attempt(base).tag, one_shot_attempt(with_ev).tag]
    ev.write_text('{"q": "two"}\n')
    tags.append(one_shot_attempt(with_ev).tag)
    assert len(set(tags)) == 3
    assert one_shot_attempt(base).tag == tags[0]


@pytest.mark.slow
def test_build_removes_contaminated_documents_with_the_accounting_balanced(planted, tmp_path, gcs_bucket) -> None:
    """Through ``python -m pipelines.build``: one evaluation set gzipped on the GCS emulator, one local."""
    import gcsfs

    corpus, evals, short = planted
    raw = tmp_path / "news.jsonl"
    raw.write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus.documents))
    url = f"{gcs_bucket}/evals/wiki_qa.jsonl.gz"
    with gcsfs.GCSFileSystem(token="anon").open(url, "wb") as f:
        f.write(gzip.compress(open(evals, "rb").read()))
    out = tmp_path / "corpus"
    # C4's line rules off: they would drop the line a plant's first half ends (no end mark) before it is looked at.
    config = tmp_path / "build.json"
    config.write_text(json.dumps({"sources": [{"name": "news", "input": str(raw)}], "clean": {"line_rules": False}}))
    res = run_python(["-m", "pipelines.build", "--config", str(config), "--output", str(out),
                      "--vocab_size", "400", "--decontaminate", url, "--decontaminate", short],
                     capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    news = report["sources"]["news"]
    assert news["balanced"] and news["input"] == len(corpus.documents)
    rejects = [json.loads(x) for p in out.rglob("rejects/part-*.jsonl") for x in p.read_text().splitlines()]
    line = {r["doc_id"]: int(r["position"].split()[1]) - 1 for r in rejects}  # each names its input line
    removed = sorted(line[r["doc_id"]] for r in rejects if r.get("reason") == DECONTAMINATED)
    # Every contaminated article the clean rules kept, and nothing else (a rule may filter one first).
    earlier = {line[r["doc_id"]] for r in rejects if r.get("reason") not in (None, DECONTAMINATED)}
    earlier &= set(corpus.contaminated)
    assert removed == sorted(set(corpus.contaminated) - earlier) and len(earlier) <= 2
    assert news["reasons"][f"filtered:{DECONTAMINATED}"] == len(removed)
    d = report["decontamination"]
    assert d["benchmarks"]["wiki_qa.jsonl.gz"]["documents"] == len(removed)
    assert d["benchmarks"]["short.txt"]["short_texts"] == 2
    assert any("short.txt" in w and "cannot match" in w for w in report["warnings"])
    assert "Decontamination" in (out / "report.html").read_text()
    # The same build elsewhere: the same bytes (manifest, report, reject log).
    again = tmp_path / "again"
    res = subprocess.run([sys.executable, "-m", "pipelines.build", "--config", str(config), "--output", str(again),
                          "--vocab_size", "400", "--decontaminate", url, "--decontaminate", short],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    for name in ("manifest.json", "report.json"):
        assert (again / name).read_bytes() == (out / name).read_bytes(), name
    assert ([p.read_bytes() for p in sorted(again.rglob("rejects/part-*.jsonl"))]
            == [p.read_bytes() for p in sorted(out.rglob("rejects/part-*.jsonl"))])
