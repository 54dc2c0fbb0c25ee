"""Batched builds (--batch_mb): a chain of batch builds with global dedupe, resumable, deterministic."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from forkserver import run_python

from pipelines.corpus.commit import committed_tags
from pipelines.jobs.batched import PLAN_NAME, build_in_batches, plan_batches
from pipelines.jobs.build import run_build
from pipelines.jobs.ingest import RawFile
from pipelines.jobs.summary import batched_report, read_report, summarize, summary_text
from pipelines.localrunner.heap import ARROW_POOL_ENV
from pipelines.report.record import RUN_DEPENDENT_FILES
from schemas.config import BuildConfig
from schemas.errors import UserError
from schemas.manifest import accounting_totals
from shardforge.commands.synth import make_article
from shardforge.storage.contract import load_manifest

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ the plan (no Beam)


def _files(prefix: str, sizes: list[int]) -> list[RawFile]:
    return [RawFile(f"/raw/{prefix}/{i:03d}.jsonl", s, None, None) for i, s in enumerate(sizes)]


def test_batches_are_bounded_mix_sources_and_take_every_file_once() -> None:
    rng = random.Random(0)
    news = _files("news", [rng.randint(1, 40) for _ in range(60)])
    stories = _files("stories", [rng.randint(1, 40) for _ in range(20)] + [500])  # one file over the limit
    batches = plan_batches([("news", news), ("stories", stories)], batch_bytes=100)
    seen = [f for b in batches for _, fs in b.files for f in fs]
    assert sorted(f.url for f in seen) == sorted(f.url for f in news + stories)  # each file exactly once
    for b in batches:
        assert b.size <= 100 or b.count == 1  # only a file bigger than the limit makes a bigger batch
        assert [name for name, _ in b.files] == [n for n in ("news", "stories") if n in dict(b.files)]
    assert [b.size for b in batches if b.size > 100] == [500]
    # Hash order, not name order: the first batch is not the alphabetically first files of one source.
    first = dict(batches[0].files)
    assert set(first) == {"news", "stories"} and [f.url for f in first["news"]] != [f.url for f in news[:3]]
    assert plan_batches([("stories", stories), ("news", news)], 100)[0].files[0][0] == "stories"  # config order
    assert plan_batches([("news", news), ("stories", stories)], 100) == batches  # deterministic
    with pytest.raises(UserError, match="positive"):
        plan_batches([("news", news)], 0)


def test_build_help_lists_the_memory_and_worker_flags() -> None:
    res = subprocess.run([sys.executable, "-m", "pipelines.build", "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert res.returncode == 0
    for flag in ("--batch_mb", "--spill_mb", "--spill_dir", "--direct_num_workers", "--doc_processes"):
        assert flag in res.stdout, flag


# ------------------------------------------------------------------ whole builds


NEWS_FILES, PER_FILE = 6, 14


def write_raw(root: Path) -> dict[str, str]:
    """News JSONL files each holding an exact copy and a near copy of an article of the next file,
    and a stories folder; returns the source globs."""
    rng = random.Random(21)
    arts = [[make_article(rng, rng.randint(8, 14)) for _ in range(PER_FILE)] for _ in range(NEWS_FILES)]
    for i in (1, 4):  # an address in files of different batches: the PII placeholders are summed over batches
        arts[i][2] += f" Readers can write to desk{i}@example.com with corrections."
    (root / "news").mkdir(parents=True)
    for i in range(NEWS_FILES):
        nxt = arts[(i + 1) % NEWS_FILES]
        words = nxt[1].split(" ")
        words[len(words) // 2] = "meanwhile"
        lines = arts[i] + [nxt[0], " ".join(words)]
        if i == 0:
            lines.append("{not json")  # a reject, counted
        (root / "news" / f"n{i}.jsonl").write_text(
            "".join(json.dumps({"text": t}) + "\n" if not t.startswith("{") else t + "\n" for t in lines))
    (root / "stories").mkdir()
    for i in range(3):
        (root / "stories" / f"s{i}.txt").write_text(make_article(rng, 20, story=True))
    return {"news": str(root / "news" / "*.jsonl"), "stories": str(root / "stories" / "*.txt")}


def config(globs: dict[str, str]) -> BuildConfig:
    return BuildConfig.model_validate({
        "sources": [{"name": n, "input": g} for n, g in globs.items()],
        "clean": {"disabled_rules": ["dup_ngrams", "top_ngrams"]},
        "tokenizer": {"vocab_size": 320},
        "packing": {"max_seq_len": 96, "valid_fraction": 0.1},
        "shards": {"target_samples": 16, "target_bytes": 1 << 30},
    })


def batch_mb(globs: dict[str, str]) -> float:
    total = sum(os.path.getsize(p) for g in globs.values() for p in glob.glob(g))
    return total / 2.2 / 1e6  # 3 batches


@pytest.fixture(scope="module")
def batched(tmp_path_factory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("batched")
    globs = write_raw(base / "raw")
    cfg = config(globs)
    out = str(base / "corpus")
    m = build_in_batches(cfg, out, batch_mb(globs))
    return {"base": base, "globs": globs, "cfg": cfg, "out": out, "manifest": m}



def doc_ids_of_shards(root: str, names: list[str]) -> list[str]:
    ids: list[str] = []
    for name in names:
        with tarfile.open(os.path.join(root, name)) as tar:
            for member in tar.getmembers():
                if member.name.endswith(".json"):
                    ids.extend(json.load(tar.extractfile(member))["doc_ids"])  # type: ignore[arg-type]
    return ids


def committed_files(root: str) -> dict[str, str]:
    """sha256 of everything that defines the corpus: manifests, shards, tokenizer, index, rejects."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and not rel.startswith("ingest/ledger/") and rel != "report.html" \
                and not rel.endswith("batch-manifest.json") and "/report" not in rel \
                and p.name not in RUN_DEPENDENT_FILES:  # they measure the run
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.mark.slow
def test_several_batches_one_corpus_same_accounting_as_one_shot(batched, tmp_path) -> None:
    m = batched["manifest"]
    assert m.version >= 3, "the corpus should have been cut into several batches"
    assert load_manifest(batched["out"])[0] == m  # manifest.json is the last version
    one_shot = str(tmp_path / "one-shot")
    one = summarize(run_build(batched["cfg"], one_shot), read_report(one_shot))
    got = summarize(m, batched_report(batched["out"]))
    # Planted: one exact and one near copy per news file, one bad line; every record accounted for.
    assert got["documents_in"] == NEWS_FILES * (PER_FILE + 2) + 1 + 3
    assert got["rejected"] == 1 and got["duplicates"] == 2 * NEWS_FILES
    for k in ("documents_in", "kept", "filtered", "duplicates", "rejected"):
        assert got[k] == one[k], k
    for src, a in m.accounting.items():
        assert a.input == a.kept + sum(a.filtered.values()) + sum(a.duplicate.values()) + \
            sum(a.rejected.values()), src
    # Every input file absorbed by exactly one version.
    absorbed = [f.path for n in range(1, m.version + 1)
                for f in load_manifest(os.path.join(batched["out"], f"manifest-v{n}.json"))[0].inputs]
    assert sorted(absorbed) == sorted(p for g in batched["globs"].values() for p in glob.glob(g))
    # The summary's report figures, merged over the batches' own reports: as the one-shot build's where they
    # count the same records; the rest from the batches' tokens.
    assert got["pii"] == one["pii"] == {"email": 2}
    assert got["token_share"].keys() == one["token_share"].keys() and sum(got["token_share"].values()) == \
        pytest.approx(1, abs=1e-3)
    for split, t in m.totals.items():
        assert got["fill_rate"][split] == round(t.tokens / (t.samples * m.max_seq_len), 4)
    tok = batched_report(batched["out"])["tokenizer"]
    assert tok["tokens"] == sum(a.tokens for a in m.accounting.values())
    assert got["tokenizer"]["tokens_per_word"] == round(tok["tokens"] / tok["words"], 6)
    text = summary_text({**got, "manifest": f"{batched['out']}/manifest.json", "report": "r"}, m).splitlines()
    assert (f"  tokenizer  unigram, {tok['vocab_size']:,} pieces; {tok['tokens'] / tok['words']:.2f} tokens per "
            "word, <unk> 0.00%") in text and "  pii        2 email replaced by placeholders" in text


def test_the_command_summarizes_a_batched_build_from_its_batches_reports(batched, tmp_path, capsys) -> None:
    """The command's summary of a batched corpus (here a rerun of the finished build: nothing to do) has the
    report's lines a one-shot build has: the tokenizer, fill rates, PII, taken from the batches' reports."""
    from pipelines.build import main

    cfg = tmp_path / "build.json"
    cfg.write_text(batched["cfg"].model_dump_json())
    assert main(["--config", str(cfg), "--output", batched["out"], "--batch_mb", str(batch_mb(batched["globs"]))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("  tokenizer  unigram, ") and line.endswith(" tokens per word, <unk> 0.00%")
               for line in out), out
    assert "  pii        2 email replaced by placeholders" in out and "; fill rate train " in "\n".join(out)


def test_decontamination_is_summed_over_the_batches_and_its_file_warnings_said_once(batched, tmp_path) -> None:
    """Each batch reads the same evaluation files: what they hold (texts, records that did not parse) is the
    first batch's, the documents each batch removed are summed; the build's warnings read the merged section."""
    import shutil

    from pipelines.report.record import decontamination_warnings

    out = tmp_path / "corpus"
    shutil.copytree(batched["out"], out)
    tags = committed_tags(str(out))
    for n, tag in tags.items():
        path = out / "versions" / tag / "report.json"
        report = json.loads(path.read_text())
        report["decontamination"] = {"ngram": 13, "benchmarks": {"qa.jsonl": {
            "texts": 40, "ngrams": 900, "short_texts": 1, "bad_records": 2, "documents": n, "matched_ngrams": 10 * n}}}
        path.write_text(json.dumps(report))
    merged = batched_report(str(out))["decontamination"]
    batches = len(tags)
    assert merged["benchmarks"]["qa.jsonl"] == {"texts": 40, "ngrams": 900, "short_texts": 1, "bad_records": 2,
                                                "documents": batches * (batches + 1) // 2,
                                                "matched_ngrams": 10 * batches * (batches + 1) // 2}
    summary = summarize(batched["manifest"], batched_report(str(out)))
    assert summary["decontaminated"] == {"qa.jsonl": batches * (batches + 1) // 2}
    assert summary["warnings"] == decontamination_warnings(merged)  # --json's warnings, as a one-shot build's
    assert decontamination_warnings(merged) == ["warning: decontamination: 2 records of 'qa.jsonl' are not JSON and "
                                                "were not read"]


def test_status_of_a_batched_corpus_counts_each_batch_and_names_the_index_report(batched) -> None:
    from shardforge.commands.status import corpus_status, render

    st = corpus_status(batched["out"])
    m = batched["manifest"]
    assert st["batched"] and st["report"] == os.path.join(batched["out"], "report.html")
    total = accounting_totals(m)
    assert sum(r["input"] for r in st["versions"]) == total["input"]
    assert sum(r["rejected"] for r in st["versions"]) == total["rejected"] == 1
    text = render(st)
    assert f"report   {st['report']}  (the batched build's: its totals, and each batch's report)" in text
    assert "built in batches (--batch_mb)" in text and "pass --watch GLOB" not in text


@pytest.mark.slow
def test_duplicates_are_caught_across_batches_and_no_document_is_kept_twice(batched) -> None:
    root, m = batched["out"], batched["manifest"]
    seen_before: set[str] = set()
    crossing = 0
    for n in range(1, m.version + 1):
        v = load_manifest(os.path.join(root, f"manifest-v{n}.json"))[0]
        prev = {s.name for s in load_manifest(os.path.join(root, f"manifest-v{n - 1}.json"))[0].shards} if n > 1 \
            else set()
        new_ids = doc_ids_of_shards(root, [s.name for s in v.shards if s.name not in prev])
        assert not seen_before & set(new_ids)
        for part in glob.glob(os.path.join(root, f"versions/v{n}-*/rejects/*.jsonl")):
            for line in open(part):
                r = json.loads(line)
                if r.get("bucket") == "duplicate" and r["dup_of"] in seen_before:
                    crossing += 1
        seen_before |= set(new_ids)
    ids = doc_ids_of_shards(root, [s.name for s in m.shards])
    assert len(set(ids)) == m.totals["train"].documents + m.totals["valid"].documents == summarize(m)["kept"]
    assert crossing >= 2, "copies in later batches of documents kept by earlier ones must be removed"


@pytest.mark.slow
def test_shards_validate_and_read_with_plain_webdataset(batched) -> None:
    import webdataset as wds

    res = subprocess.run([sys.executable, "-m", "shardforge.cli", "validate", batched["out"]], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    m = batched["manifest"]
    urls = [os.path.join(batched["out"], s.name) for s in m.shards_of("train")]
    n = sum(1 for _ in wds.WebDataset(urls, shardshuffle=False))
    assert n == m.totals["train"].samples
    page = Path(batched["out"], "report.html").read_text()
    assert f"{m.version} batches" in page
    tags = committed_tags(batched["out"])
    for n in range(1, m.version + 1):  # the root page links every batch's own report, which exists
        folder = f"versions/{tags[n]}"
        assert f'href="{folder}/report.html"' in page and Path(batched["out"], folder, "report.html").exists()
    # Why records were left out, over every batch; each batch's own counts, which sum to the corpus's.
    total = accounting_totals(m)
    assert '<tr><td style="text-align:left">rejected:malformed_json</td><td>1</td></tr>' in page
    assert f'<td style="text-align:left">duplicate:exact</td><td>{m.accounting["news"].duplicate["exact"]}</td>' in page
    rows = re.findall(r"<tr><td>v(\d+)</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td>", page)
    assert [int(r[0]) for r in rows] == list(range(1, m.version + 1))
    assert [sum(int(r[i]) for r in rows) for i in range(1, 6)] == [total[k] for k in
                                                                   ("input", "kept", "duplicate", "filtered", "rejected")]
    index = json.loads(Path(batched["out"], f"versions/{tags[m.version]}/dedupe/index/index.json").read_text())
    assert len(index["parts"]) >= m.version and all(p.startswith("../") for p in index["parts"][:-1])


@pytest.mark.slow
def test_an_interrupted_build_resumes_to_byte_identical_output(batched, tmp_path, capfd, monkeypatch) -> None:
    """Resumed under another spelling of its folder (relative, then absolute): what a batch records of its
    folder is absolute, so an attempt cut short writes the same bytes however --output is spelled."""
    from pipelines.jobs.ingest import recover

    out = str(tmp_path / "corpus")
    mb = batch_mb(batched["globs"])
    monkeypatch.chdir(tmp_path)
    first = build_in_batches(batched["cfg"], "./corpus", mb, max_batches=1)
    assert first.version == 1 and recover("corpus", clean_orphans=False).root == out
    capfd.readouterr()
    final = build_in_batches(batched["cfg"], out, mb)
    err = capfd.readouterr().err
    assert "resuming" in err
    # Each batch's line says where its records went (its version's accounting less its parent's).
    for n in range(2, final.version + 1):
        now, before = (accounting_totals(load_manifest(os.path.join(out, f"manifest-v{v}.json"))[0])
                       for v in (n, n - 1))
        grew = {k: now[k] - before[k] for k in now}
        assert (f" -> v{n}: documents {grew['input']} in, {grew['kept']} kept; {grew['duplicate']} "
                f"duplicate{'' if grew['duplicate'] == 1 else 's'}, {grew['filtered']} filtered, "
                f"{grew['rejected']} rejected; +") in err
    assert final == batched["manifest"]
    assert committed_files(out) == committed_files(batched["out"])  # another folder, the same bytes
    # A rerun of a finished build does nothing and returns the same corpus.
    assert build_in_batches(batched["cfg"], out, mb) == final


@pytest.mark.slow
def test_a_batch_cut_before_its_commit_resumes_after_the_folder_moved(batched, tmp_path, monkeypatch) -> None:
    """A batch's own manifest names the corpus's tokenizer and index relative to the corpus, so the
    attempt's objects do not depend on the folder: cut before its commit, moved, resumed, the same corpus."""
    import pipelines.jobs.ingest as ingest

    out, moved = str(tmp_path / "corpus"), str(tmp_path / "moved")
    mb = batch_mb(batched["globs"])
    build_in_batches(batched["cfg"], out, mb, max_batches=1, isolate=False)
    commit = ingest.commit_version

    def cut(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # batch 2's pipeline wrote its objects; its commit never happens

    monkeypatch.setattr(ingest, "commit_version", cut)
    with pytest.raises(KeyboardInterrupt):
        build_in_batches(batched["cfg"], out, mb, isolate=False)
    monkeypatch.setattr(ingest, "commit_version", commit)
    attempt = list(Path(out, "versions").glob("v2-*/batch-manifest.json"))
    assert len(attempt) == 1 and out not in attempt[0].read_text()
    os.rename(out, moved)
    assert build_in_batches(batched["cfg"], moved, mb, isolate=False) == batched["manifest"]
    assert committed_files(moved) == committed_files(batched["out"])


@pytest.mark.slow
def test_a_batch_with_document_processes_writes_the_same_bytes(batched, tmp_path, monkeypatch) -> None:
    """``--doc_processes 2`` reaches a batch's own process (its pipeline cleans, sketches and splits in
    two document processes) and its version is byte-identical to the first version of the build without."""
    out = str(tmp_path / "corpus")
    first = build_in_batches(batched["cfg"], out, batch_mb(batched["globs"]), ["--doc_processes", "2"], max_batches=1)
    assert first.version == 1
    mine, full = committed_files(out), committed_files(batched["out"])
    for latest in ("manifest.json", "latest"):  # name the latest version: v1 here, the last one there
        mine.pop(latest)
    assert mine and all(full.get(k) == v for k, v in mine.items()), sorted(k for k in mine if full.get(k) != mine[k])


@pytest.mark.slow
def test_other_inputs_or_a_plain_corpus_are_refused_with_one_line(batched, tmp_path) -> None:
    with pytest.raises(UserError, match="other inputs or another config"):
        build_in_batches(batched["cfg"], batched["out"], batch_mb(batched["globs"]) / 2)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "manifest.json").write_text("{}")
    with pytest.raises(UserError, match="not built with --batch_mb"):
        build_in_batches(batched["cfg"], str(plain), 1.0)
    assert not (plain / PLAN_NAME).exists()
    res = run_python(["-m", "pipelines.build", "--input", "/no/such/*.jsonl", "--output",
                      str(tmp_path / "x"), "--batch_mb", "10"], capture_output=True, text=True, cwd=ROOT,
                     timeout=120)
    assert res.returncode != 0 and "no files match" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
def test_a_batched_corpus_repacks_from_every_versions_intermediate(batched, tmp_path) -> None:
    from pipelines.jobs.repack import run_repack

    m = batched["manifest"]
    new = run_repack(batched["out"], str(tmp_path / "doc"), rule="doc_sentences")
    assert new.packing_rule == "doc_sentences" and new.accounting == m.accounting
    assert new.counters["repack_parts"] >= m.version  # at least one part per version
    old_ids = set(doc_ids_of_shards(batched["out"], [s.name for s in m.shards]))
    assert set(doc_ids_of_shards(str(tmp_path / "doc"), [s.name for s in new.shards])) == old_ids


def test_a_file_in_two_sources_or_the_corpus_under_the_input_glob(tmp_path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.jsonl").write_text(json.dumps({"text": "x"}) + "\n")
    both = BuildConfig.model_validate({"sources": [{"name": "news", "input": str(raw / "*.jsonl")},
                                                   {"name": "web", "input": str(raw / "a.*")}]})
    with pytest.raises(UserError, match="sources news and web"):
        build_in_batches(both, str(tmp_path / "out"), 1.0)
    # Files of the corpus being built (here: under the input folder) are never input.
    (raw / "corpus" / "ingest").mkdir(parents=True)
    (raw / "corpus" / "stale.jsonl").write_text("{}\n")
    only_corpus = BuildConfig.model_validate({"sources": [{"name": "news", "input": str(raw / "corpus")}]})
    with pytest.raises(UserError, match="no files match"):
        build_in_batches(only_corpus, str(raw / "corpus"), 1.0)


def test_a_relative_tokenizer_path_stays_valid_for_later_batches(tmp_path, monkeypatch) -> None:
    from pipelines.jobs.ingest import CorpusState, batch_config

    monkeypatch.chdir(tmp_path)
    cfg = BuildConfig.model_validate({"sources": [{"name": "news", "input": "raw/*.jsonl"}],
                                      "tokenizer": {"model_url": "models/spm.model"}})
    first = batch_config(CorpusState(str(tmp_path / "corpus"), [], None), cfg.sources, cfg)
    assert first.tokenizer.model_url == str(tmp_path / "models" / "spm.model")


@pytest.mark.slow
def test_a_failing_batch_process_reports_the_users_error_and_commits_nothing(batched, tmp_path, monkeypatch) -> None:
    bad = batched["cfg"].model_copy(update={"tokenizer": batched["cfg"].tokenizer.model_copy(
        update={"model_url": str(tmp_path / "no-such.model")})})
    out = tmp_path / "corpus"
    temp = tmp_path / "temp"  # the batch process's temp folder
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    with pytest.raises(UserError, match="no-such.model"):
        build_in_batches(bad, str(out), batch_mb(batched["globs"]))
    assert not (out / "manifest.json").exists() and not list(out.glob("manifest-v*.json"))
    # The error came while the batch's graph was built, inside its Pipeline's block: Beam removes
    # the Pipeline's temp folder only when it runs, so ours removes it however the block ends.
    assert [p.name for p in temp.iterdir() if p.name.startswith("beam-pipeline-temp")] == []


def test_a_big_one_shot_local_build_suggests_batching(tmp_path, monkeypatch) -> None:
    from pipelines.jobs import memory as build

    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.jsonl").write_bytes(b"x" * 3000)
    cfg = BuildConfig.model_validate({"sources": [{"name": "news", "input": str(raw / "*.jsonl")}]})
    assert build.batching_hint(cfg) is None
    monkeypatch.setattr(build, "HINT_INPUT_BYTES", 2000)
    assert build.batching_hint(cfg) is None  # big enough to sample, but the estimate is small
    monkeypatch.setattr(build, "HINT_RSS_BYTES", 0)
    hint = build.batching_hint(cfg)
    assert hint is not None and "--batch_mb" in hint and "0 MB of input" in hint
    assert "sample of 1 record from 1 file," in hint and "if everything were kept" in hint
    assert "tokenizer.sample_bytes" in hint and "--spill_mb" in hint
    held = build.batching_hint(cfg, spilled=False)
    assert held is not None and "Drop --spill_mb -1" in held


def test_the_local_memory_estimate_follows_the_tokenizer_sample() -> None:
    """Spilled, a one-shot build's estimate grows ~1 MB per MB kept plus ~22 per MB of tokenizer
    sample, which stops at tokenizer.sample_bytes; Beam's runner holding everything grows ~33."""
    from pipelines.jobs.memory import LOCAL_RSS_BASE, local_rss_estimate

    cfg = BuildConfig.model_validate({"sources": [{"name": "news", "input": "x.jsonl"}],
                                      "tokenizer": {"sample_bytes": 100_000_000}})
    gb = 1_000_000_000
    assert local_rss_estimate(cfg, 0) == LOCAL_RSS_BASE
    assert local_rss_estimate(cfg, 50_000_000) == LOCAL_RSS_BASE + 23 * 50_000_000
    big, bigger = local_rss_estimate(cfg, 10 * gb), local_rss_estimate(cfg, 20 * gb)
    assert bigger - big == 10 * gb  # past the sample cap: 1 byte per byte kept
    reused = cfg.model_copy(update={"tokenizer": cfg.tokenizer.model_copy(update={"model_url": "spm.model"})})
    assert local_rss_estimate(reused, 10 * gb) == LOCAL_RSS_BASE + 10 * gb
    assert local_rss_estimate(cfg, gb, spilled=False) == LOCAL_RSS_BASE + 33 * gb


def test_a_batch_process_leaves_out_the_integrations_a_local_build_never_uses(tmp_path, monkeypatch):
    """A --batch_mb batch runs in a spawned process whose target is ``pipelines.jobs.batch_process.run_batch``
    (light at import): it leaves out the Beam integrations a local build never uses before it
    imports the batch's code. Here, in a fresh interpreter, the batch's code is a stand-in that
    imports what a batch imports and reports what got loaded."""
    import multiprocessing as mp

    from pipelines.jobs import batched
    from pipelines.jobs.batch_process import run_batch
    from pipelines.localrunner.preflight import UNUSED_INTEGRATIONS

    started = []
    spawn = mp.get_context("spawn")

    class Ctx:  # what _run_isolated spawns, without spawning it
        def Pipe(self, duplex):
            return spawn.Pipe(duplex=duplex)

        def Process(self, target, args, name):
            started.append(target)
            raise RuntimeError("not started")

    monkeypatch.setattr(mp, "get_context", lambda method: Ctx())
    with pytest.raises(RuntimeError, match="not started"):
        batched._run_isolated("unused", [], BuildConfig.model_validate({"sources": [{"name": "x", "input": "y"}]}), [])
    assert started == [run_batch]

    report = tmp_path / "loaded.json"
    code = f"""
import json, sys, types
stand_in = types.ModuleType("pipelines.jobs.ingest")
class Batch:
    accounting = {{}}
class Result:
    version, new_shards, timings, batch = 1, 0, None, Batch()
def recover(output, clean_orphans):
    return output
def ingest_sources(state, batch_files, cfg, beam_args):
    import apache_beam, pyarrow, pyarrow.parquet, pipelines.graph
    from pipelines.localrunner.preflight import UNUSED_INTEGRATIONS
    open(state, "w").write(json.dumps([sorted(m for m in UNUSED_INTEGRATIONS if m in sys.modules),
                                       pyarrow.default_memory_pool().backend_name]))
    return Result()
stand_in.recover, stand_in.ingest_sources = recover, ingest_sources
sys.modules["pipelines.jobs.ingest"] = stand_in
import multiprocessing as mp
recv, send = mp.Pipe(duplex=False)
from pipelines.jobs.batch_process import run_batch
run_batch({str(report)!r}, [], None, [], send)
assert recv.recv()[0] == "ok"
"""
    env = {k: v for k, v in os.environ.items() if k != ARROW_POOL_ENV}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600, env=env)
    assert json.loads(report.read_text()) == [[], "system"]  # and pyarrow allocating from glibc's malloc
    assert set(UNUSED_INTEGRATIONS) & set(sys.modules)  # Beam loads them where nothing leaves them out


@pytest.mark.slow
def test_a_user_error_inside_a_batch_is_one_line_from_the_command(tmp_path) -> None:
    """The batch process set up no Beam log rules: a user error raised inside its pipeline (here the
    tokenizer's empty clean corpus) came with Beam's ERROR log of it and its traceback before the command's
    one line."""
    from test_cli_errors import one_line_error, run

    globs = write_raw(tmp_path / "raw")
    res = run("-m", "pipelines.build", "--input", f"news={globs['news']}", "--output", str(tmp_path / "corpus"),
              "--min_words", "100000", "--batch_mb", str(batch_mb(globs)))
    line = one_line_error(res)
    assert line.startswith("error: tokenizer: the clean corpus is empty") and "--min_words N" in line, line
    assert "apache_beam" not in res.stderr and "Traceback" not in res.stderr


def test_stray_files_after_a_flag_say_the_shell_expanded_a_glob(tmp_path) -> None:
    from shardforge.console.args import unknown_args_message

    files = [str(tmp_path / f"part-{i}.jsonl") for i in range(5)]
    for f in files:
        Path(f).write_text("{}\n")
    line = unknown_args_message(files[1:], ["--input", "--output"])
    assert line == (f"unexpected arguments: {files[1]} {files[2]} {files[3]} ... (4 in all) (a glob the shell "
                    "expanded? quote it, and the command gets the pattern: 'raw/*.jsonl')")
    assert unknown_args_message(["b", "c"], ["--input"]) == "unexpected arguments: b c"
