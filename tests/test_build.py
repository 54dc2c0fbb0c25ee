"""The build job end to end on Beam's local runner: shards, manifest, determinism, accounting."""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from forkserver import run_python

from pipelines.corpus.commit import manifest_tag
from pipelines.jobs.build import run_build
from pipelines.jobs.summary import summarize
from pipelines.localrunner.heap import ARROW_POOL_ENV
from schemas import BOS_ID, EOS_ID
from schemas.config import BuildConfig
from schemas.naming import shard_name
from shardforge.commands.demo import demo_build_config
from shardforge.storage.contract import load_manifest

pytestmark = pytest.mark.slow


def small_config(globs: dict[str, str], **packing) -> BuildConfig:
    cfg = demo_build_config(globs).model_dump()
    cfg["tokenizer"]["vocab_size"] = 400
    cfg["packing"].update({"max_seq_len": 96, "valid_fraction": 0.1, **packing})
    cfg["shards"] = {"target_samples": 40, "target_bytes": 1 << 30}
    return BuildConfig.model_validate(cfg)


@pytest.fixture(scope="module")
def built(demo_corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("corpus"))
    cfg = small_config(demo_corpus)
    manifest = run_build(cfg, out)
    return cfg, out, manifest


def files_digest(root: str) -> dict[str, str]:
    names = sorted(glob.glob(os.path.join(root, "*.tar"))) + [os.path.join(root, "manifest.json")]
    return {os.path.basename(n): hashlib.sha256(open(n, "rb").read()).hexdigest() for n in names}


def test_manifest_lists_every_shard_with_true_sizes_and_hashes(built):
    _, out, m = built
    on_disk = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "*.tar")))
    assert on_disk == sorted(s.name for s in m.shards)
    for s in m.shards:
        data = open(os.path.join(out, s.name), "rb").read()
        assert len(data) == s.bytes
        assert hashlib.sha256(data).hexdigest() == s.sha256
    assert m.totals["train"].samples == sum(s.samples for s in m.shards_of("train"))
    assert m.shards_of("valid"), "valid split is empty"
    # Contiguous per split, every name carrying the one attempt tag that committed the corpus.
    tag = manifest_tag(m)
    assert tag is not None and tag.startswith("v1-")
    assert [s.name for s in m.shards_of("train")] == [shard_name("train", i, tag)
                                                      for i in range(len(m.shards_of("train")))]
    assert all(v.startswith(f"versions/{tag}/") for v in [*m.intermediates.values(), m.tokenizer.path])


def test_accounting_identity_and_demo_junk(built, demo_corpus):
    _, _, m = built
    raw_root = os.path.dirname(os.path.dirname(demo_corpus["ccnews"]))
    synth = json.load(open(os.path.join(raw_root, "SYNTH.json")))
    for source, acct in m.accounting.items():
        assert acct.balanced, source
    assert sum(a.input for a in m.accounting.values()) == synth["records"]
    cc = m.accounting["ccnews"]
    assert cc.rejected == {"malformed_json": 2, "invalid_utf8": 2, "missing_text_field": 2}
    assert cc.filtered.get("empty") == 2
    s = summarize(m)
    # the exact copies (two within CC-News, one in OpenWebText) are gone
    assert s["duplicates"] >= synth["exact_duplicates"]


def test_shards_read_back_by_plain_webdataset(built):
    import webdataset as wds

    _, out, m = built
    urls = [os.path.join(out, s.name) for s in m.shards_of("train")]
    ds = wds.WebDataset(urls, shardshuffle=False)
    n = 0
    for sample in ds:
        ids = np.load(io.BytesIO(sample["input_ids.npy"]), allow_pickle=False)
        assert ids.dtype == np.uint16
        assert ids[0] == BOS_ID and ids[-1] == EOS_ID
        assert len(ids) <= m.max_seq_len
        assert set(sample) >= {"__key__", "input_ids.npy", "json"}
        n += 1
    assert n == m.totals["train"].samples


def test_tar_tool_lists_members(built):
    _, out, m = built
    listing = subprocess.run(["tar", "-tf", os.path.join(out, m.shards[0].name)], check=True,
                             capture_output=True, text=True).stdout.split()
    assert len(listing) == 2 * m.shards[0].samples  # input_ids.npy + json per sample
    with tarfile.open(os.path.join(out, m.shards[0].name)) as t:
        assert all(i.mtime == 0 and i.uname == "" for i in t.getmembers())


def test_rebuild_is_byte_identical(built, demo_corpus, tmp_path):
    cfg, out, _ = built
    again = str(tmp_path / "again")
    run_build(cfg, again)
    assert files_digest(again) == files_digest(out)


def test_reused_tokenizer_by_url(built, demo_corpus, tmp_path):
    cfg, out, m = built
    data = cfg.model_dump()
    data["tokenizer"]["model_url"] = os.path.join(out, m.tokenizer.path)
    m2 = run_build(BuildConfig.model_validate(data), str(tmp_path / "reuse"))
    assert m2.tokenizer.sha256 == m.tokenizer.sha256
    # copied into the corpus, in the build's attempt folder (the path rule)
    assert m2.tokenizer.path.startswith("versions/v1-") and m2.tokenizer.path.endswith("/tokenizer/spm.model")
    with open(tmp_path / "reuse" / m2.tokenizer.path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == m.tokenizer.sha256
    assert [s.sha256 for s in m2.shards] == [s.sha256 for s in m.shards]


def test_cli_bad_input_gives_one_clear_line(tmp_path):
    r = run_python(["-m", "pipelines.build", "--input", str(tmp_path / "nothing*.jsonl"),
                    "--output", str(tmp_path / "o")], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("error: source other: no files match")
    assert "Traceback" not in r.stderr


def test_a_corpus_that_cleaning_empties_gives_one_clear_line(tmp_path):
    """Every document filtered: the error is raised inside a stage (the tokenizer has nothing to
    train on), yet the user sees one line, not Beam's log of the stage's traceback."""
    raw = tmp_path / "tiny.jsonl"
    raw.write_text('{"text": "hi"}\n{"text": "a short one"}\n')
    r = run_python(["-m", "pipelines.build", "--input", str(raw), "--output", str(tmp_path / "o")],
                   capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: tokenizer: the clean corpus is empty"), lines[0]
    # Why, counted, and what to change for the reason that took them all.
    assert "all 2 documents left it (2 empty_after_line_rules)" in lines[0] and "line_rules: false" in lines[0]


def test_a_corpus_of_repetitive_text_names_the_repetition_rules(tmp_path):
    """Templated text (a form letter with a number changed) is removed by Gopher's repetition rules; the
    line named no rule to change ('check the inputs, and the clean rules'), now the config that keeps it."""
    letter = ("Dear customer, your order number {i} has shipped today. Your order number {i} has shipped today "
              "and will arrive soon. Thank you for your order, thank you for your order, thank you. ")
    raw = tmp_path / "letters.jsonl"
    raw.write_text("".join(json.dumps({"text": letter.format(i=i) * 3}) + "\n" for i in range(6)))
    r = run_python(["-m", "pipelines.build", "--input", f"news={raw}", "--output", str(tmp_path / "o"),
                    "--min_words", "5"], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and "6 top_ngrams" in line.split("): ", 1)[0], line
    assert line.endswith("switch them off (clean: {disabled_rules: [dup_ngrams, top_ngrams]} in a --config file; "
                         "docs/cleaning.md)"), line


def test_a_wrong_text_field_is_named_in_the_one_line(tmp_path):
    """Records whose text is under another field: every one is rejected as missing_text_field, and
    the line says so and names the flag, rather than only that the corpus is empty."""
    raw = tmp_path / "news.jsonl"
    body = "The council met on Tuesday to discuss the budget for the coming year. Members voted to approve it."
    raw.write_text("".join(json.dumps({"body": f"{body} Item {i}."}) + "\n" for i in range(7)))
    r = run_python(["-m", "pipelines.build", "--input", f"news={raw}", "--output",
                    str(tmp_path / "o"), "--vocab_size", "300"], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "all 7 documents left it (7 missing_text_field)" in lines[0] and "--text_field FIELD" in lines[0], lines[0]
    ok = run_python(["-m", "pipelines.build", "--input", f"news={raw}", "--output",
                     str(tmp_path / "o"), "--vocab_size", "300", "--text_field", "body", "--min_words", "5"],
                    capture_output=True, text=True)
    assert ok.returncode == 0 and "missing_text_field" not in ok.stderr, ok.stderr[-2000:]


def test_text_in_another_encoding_is_named_and_read_with_encoding(tmp_path):
    """A Latin-1 file among UTF-8 ones (real news with '£'): rejected as invalid_utf8 with a warning that
    names --encoding (it was a count in the report alone); read with --encoding it is kept as written."""
    import pyarrow.parquet as pq
    from realtext import news_documents, write_jsonl

    docs = news_documents()
    pound = next(d for d in docs if "£" in d)
    raw = tmp_path / "raw"
    raw.mkdir()
    write_jsonl(str(raw / "news.jsonl"), [d for d in docs[:30] if d != pound])
    (raw / "old.txt").write_bytes(pound.encode("latin-1"))
    args = ["-m", "pipelines.build", "--output", str(tmp_path / "o1"), "--vocab_size", "600", "--min_words", "20"]
    r = run_python([*args, "--input", str(raw / "*"), "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    warning = next(line for line in r.stderr.splitlines() if "invalid_utf8" in line)
    assert warning in json.loads(r.stdout)["warnings"]  # --json's summary carries the lines stderr has
    assert warning.startswith("warning: 1 of 31 documents of source 'other' were rejected as invalid_utf8"), warning
    assert "--encoding CODEC" in warning and "invalid_utf8: repair" in warning, warning
    args[3] = str(tmp_path / "o2")
    r = run_python([*args, "--input", str(raw / "old.txt"), "--encoding", "latin-1"], capture_output=True, text=True)
    assert r.returncode == 0 and "invalid_utf8" not in r.stderr, r.stderr[-2000:]
    clean = glob.glob(str(tmp_path / "o2" / "versions" / "*" / "clean" / "*.parquet"))
    assert [row["text"] for row in pq.read_table(clean).to_pylist()] == [pound]


def test_the_empty_corpus_line_counts_the_commonest_reasons_first():
    from pipelines.tokenizer.train import empty_corpus_message

    why = {"filtered:min_words": 3, "duplicate:exact": 5, "rejected:binary": 1, "filtered:language": 3,
           "filtered:markup": 2}
    line = empty_corpus_message(why, {"exact duplicate": "HINT"})
    assert line.endswith("all 14 documents left it (5 exact duplicate, 3 language, 3 min_words, 2 markup, ...): HINT")
    assert "clean rules" in empty_corpus_message({"filtered:markup": 1}, {})
    assert ": the one document left it (1 invalid_utf8): H" in empty_corpus_message({"rejected:invalid_utf8": 1},
                                                                                 {"invalid_utf8": "H"})
    from pipelines.stages import LOSS_HINTS as hints

    # one text file of many stories is one document, over max_doc_bytes: the line names --delimiter
    assert "(--delimiter LINE" in empty_corpus_message({"filtered:max_doc_bytes": 1}, hints)
    assert "no document held a sentence" in empty_corpus_message({}, {})
    from pipelines.stages import LOSS_HINTS

    # every document in another language than --languages asks: the way to keep any language too
    assert empty_corpus_message({"filtered:language": 58}, LOSS_HINTS).endswith(
        "(58 language): the language rule kept none: give the corpus's languages (--languages CODES, e.g. en,de), "
        "or --languages any to keep every language")


def test_manifest_loads(built):
    _, out, m = built
    again, root = load_manifest(out)
    assert again == m and root == out


def test_local_build_shows_progress_bars(demo_corpus, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("SHARDFORGE_PROGRESS", "1")
    run_build(small_config(demo_corpus), str(tmp_path / "p"))
    err = capfd.readouterr().err
    assert "read ccnews files: 100%" in err and "tokenize documents" in err and "write shards" in err


def test_a_local_build_in_a_log_writes_a_progress_line_now_and_then(demo_corpus, tmp_path, monkeypatch, capfd):
    """stderr not a terminal (a build under nohup): a line every LINE_EVERY_S seconds with what was counted,
    none after the build."""
    import time

    from pipelines.localrunner import progress

    monkeypatch.delenv("SHARDFORGE_PROGRESS", raising=False)
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.2)
    m = run_build(small_config(demo_corpus), str(tmp_path / "p"))
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("progress ")]
    assert len(lines) >= 2 and all(re.fullmatch(r"progress \d+m\d\ds: .+", line) for line in lines), err
    assert any("read ccnews records " in line for line in lines), lines
    read = max(int(m.group(1).replace(",", "")) for line in lines
               for m in [re.search(r"read ccnews records ([\d,]+)", line)] if m)
    assert 0 < read <= m.accounting["ccnews"].input
    time.sleep(0.5)
    assert "progress " not in capfd.readouterr().err  # the line's thread ended with the build


def test_manifest_redacts_credentials_in_every_recorded_url(built):
    """Credentials in the tokenizer / dedupe-index URLs never reach the manifest (nor do source ones)."""
    from pipelines.corpus.shards import assemble_manifest

    cfg, out, m = built
    with open(os.path.join(out, m.tokenizer.path), "rb") as f:
        model = f.read()
    secret_tok = "https://alice:hunter2@models.example/spm.model?token=hunter2&v=3"
    data = cfg.model_dump()
    data["tokenizer"]["model_url"] = secret_tok
    data["dedupe"]["index"] = "s3://idx/v1?X-Amz-Signature=hunter2"
    data["sources"][0]["input"] = "https://bob:hunter2@raw.example/*.jsonl"
    # A reused model is copied into the corpus (the manifest path rule): the path is the copy's,
    # the URL it came from is only recorded in the config.
    m2 = assemble_manifest([], [], model, m.accounting, BuildConfig.model_validate(data), "tokenizer/spm.model",
                           None, {}, {})
    text = m2.to_json()
    assert "hunter2" not in text
    assert m2.config["tokenizer"]["model_url"] == "https://models.example/spm.model?v=3"
    assert m2.config["dedupe"]["index"] == "s3://idx/v1"


def test_direct_num_workers_means_worker_processes():
    from apache_beam.options.pipeline_options import DirectOptions

    from pipelines.options import BuildOptions, finalize_options

    def mode(*flags: str) -> str:
        return finalize_options(BuildOptions(list(flags))).view_as(DirectOptions).direct_running_mode

    assert mode() == "in_memory"
    assert mode("--direct_num_workers", "2") == "multi_processing"
    assert mode("--direct_num_workers=0") == "multi_processing"  # 0: one per core (Beam's rule)
    assert mode("--direct_num_workers", "2", "--direct_running_mode", "in_memory") == "in_memory"  # as asked


def test_several_workers_spread_the_read_documents(built, tmp_path):
    """One big input file is read by one worker; with several workers (or a distributed runner) the
    read documents are reshuffled so that every worker cleans and sketches; in-process, no reshuffle."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.graph import build_pipeline
    from pipelines.options import BuildOptions, RunnerPlan, finalize_options, spreads_documents

    cfg, _, _ = built

    def top_steps(opts) -> set[str]:
        p = beam.Pipeline(options=opts)
        build_pipeline(p, cfg, str(tmp_path / "graph"), plan=RunnerPlan.of(opts))
        return {t.full_label for t in p.transforms_stack[0].parts}

    one, two = (finalize_options(BuildOptions(f)) for f in ([], ["--direct_num_workers", "2"]))
    assert not spreads_documents(one) and "SpreadDocuments" not in top_steps(one)
    assert spreads_documents(two) and "SpreadDocuments" in top_steps(two)
    assert spreads_documents(finalize_options(BuildOptions(["--direct_num_workers=0"])))  # one per core
    assert spreads_documents(PipelineOptions(["--runner", "DataflowRunner"]))


def test_two_worker_processes_through_the_cli_are_byte_identical(built, tmp_path):
    """`python -m pipelines.build --direct_num_workers 2` (worker processes: that two distinct
    processes run the bundles is the next test) writes the same bytes as in-process."""
    cfg, out, _ = built
    config = tmp_path / "config.json"
    config.write_text(cfg.model_dump_json())
    two = tmp_path / "two"
    res = run_python(["-m", "pipelines.build", "--config", str(config), "--output", str(two),
                      "--direct_num_workers", "2"], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    assert files_digest(str(two)) == files_digest(out)


def test_document_processes_build_the_same_bytes(built, tmp_path, monkeypatch):
    """``--doc_processes 2``: cleaning, sketching and sentence splitting run in two document processes
    (pipelines.localrunner.docpool), every batch of the three steps handed over, and the corpus is byte-identical
    to the in-process build."""
    from pipelines.clean.rules import clean_batch
    from pipelines.clean.sentences import split_batch
    from pipelines.dedupe.minhash import sketch_arrays
    from pipelines.localrunner.docpool import DocPool

    cfg, out, _ = built
    handed: list[tuple[str, int]] = []
    real = DocPool.submit

    def submit(self, fn, *args, **kw):
        handed.append((fn.__name__, len(args[0])))
        return real(self, fn, *args, **kw)

    monkeypatch.setattr(DocPool, "submit", submit)
    run_build(cfg, str(tmp_path / "pooled"), ["--doc_processes", "2"])
    assert files_digest(str(tmp_path / "pooled")) == files_digest(out)
    accounts = load_manifest(out)[0].accounting.values()
    cleaned = sum(n for f, n in handed if f == clean_batch.__name__)
    sketched = sum(n for f, n in handed if f == sketch_arrays.__name__)
    # Every document clean kept was sketched (those dedupe removed too); clean saw those and the filtered.
    assert sketched == sum(a.kept + sum(a.duplicate.values()) for a in accounts) > 0, handed
    assert sketched + sum(sum(a.filtered.values()) for a in accounts) <= cleaned <= sum(a.input for a in accounts)
    split = sum(n for f, n in handed if f == split_batch.__name__)
    assert sum(a.kept for a in accounts) <= split <= sketched  # dedupe's survivors (some may have no tokens)


def test_the_cli_process_builds_the_same_bytes_without_unused_integrations(built, tmp_path):
    """`python -m pipelines.build` (its module run as __main__, as the command runs it) loads none of
    the optional integrations a local build never uses (pipelines.localrunner.preflight.UNUSED_INTEGRATIONS:
    pandas, pymongo, bson, boto3), has pyarrow allocate from glibc's malloc, and writes the same
    bytes as a build in a process that has those integrations and pyarrow's own allocator."""
    cfg, out, _ = built
    config = tmp_path / "config.json"
    config.write_text(cfg.model_dump_json())
    cli = tmp_path / "cli"
    code = f"""
import json, runpy, sys
sys.argv = ["pipelines.build", "--config", {str(config)!r}, "--output", {str(cli)!r}]
try:
    runpy.run_module("pipelines.build", run_name="__main__", alter_sys=True)
except SystemExit as e:
    assert not e.code, e.code
import pyarrow
from pipelines.localrunner.preflight import UNUSED_INTEGRATIONS
print(json.dumps([sorted(m for m in UNUSED_INTEGRATIONS if m in sys.modules), pyarrow.default_memory_pool().backend_name]))
"""
    env = {k: v for k, v in os.environ.items() if k != ARROW_POOL_ENV}  # the command chooses the pool
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    # none of the integrations, and pyarrow allocating from glibc's malloc (pipelines.localrunner.heap.use_system_allocator)
    assert json.loads(res.stdout.strip().splitlines()[-1]) == [[], "system"]
    assert files_digest(str(cli)) == files_digest(out)
    assert "pandas" in sys.modules  # this (test) process has them: the comparison is against a build that does


def test_only_a_local_build_skips_unused_integrations():
    from pipelines.localrunner.preflight import is_local_runner

    assert is_local_runner(None) and is_local_runner("FnApiRunner") and is_local_runner("DirectRunner")
    assert is_local_runner("direct")
    assert not is_local_runner("DataflowRunner") and not is_local_runner("apache_beam.runners.dataflow.DataflowRunner")
    assert not is_local_runner("PortableRunner")


def test_worker_processes_run_bundles_quietly(tmp_path):
    """make_pipeline with --direct_num_workers 2 (as the drivers run it): bundles run in two
    `pipelines.localrunner.sdkworker` processes (not the driver), whose pyarrow allocates from glibc's malloc, and
    stderr carries none of Beam's start-up logs."""
    code = f"""
import os
from pipelines.options import BuildOptions, finalize_options, make_pipeline, quiet_beam  # before Beam, as the CLI
import apache_beam as beam
quiet_beam()
opts = finalize_options(BuildOptions(["--direct_num_workers", "2"]))
with make_pipeline(opts) as p:
    _ = (p | beam.Create(range(64)) | beam.Reshuffle()
         | beam.Map(lambda x: open(os.path.join({str(tmp_path)!r}, str(os.getpid())), "a").write(f"{{x}}\\n")))
    _ = (p | "Pool" >> beam.Create([0]) | beam.Map(lambda _: open(os.path.join({str(tmp_path)!r}, "pool"), "w").write(
        __import__("pyarrow").default_memory_pool().backend_name)))
print("driver", os.getpid())
"""
    env = {k: v for k, v in os.environ.items() if k != ARROW_POOL_ENV}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    driver = int(res.stdout.split()[-1])
    assert (tmp_path / "pool").read_text() == "system"  # a worker's pyarrow allocates from glibc's malloc
    workers = {int(n) for n in os.listdir(tmp_path) if n != "pool"}
    assert len(workers) == 2 and driver not in workers, workers
    assert sum(len(open(tmp_path / str(w)).read().split()) for w in workers) == 64
    assert "apitools" not in res.stderr and "INFO:" not in res.stderr, res.stderr[-2000:]


def test_shardforge_build_skips_unused_integrations_only_as_the_program(tmp_path):
    """`shardforge build` run as the program leaves out the Beam integrations a local build never
    uses; ``shardforge.cli.main([...])`` called in-process leaves the caller's imports alone (a
    program that imports torch later needs them: torch probes them with importlib.util.find_spec).
    The build is one whose flags are right and whose input matches nothing: it gets past the flag
    check (where --help ends, before either) and stops at the listing."""
    code = """
import runpy, sys
from pipelines.localrunner.preflight import _SkipUnused
from shardforge.cli import main
args = ["build", "--input", "nothing/*.jsonl", "--output", "o"]
assert main(args) == 2
print(any(isinstance(f, _SkipUnused) for f in sys.meta_path))
sys.argv = ["shardforge", *args]
try:
    runpy.run_module("shardforge.cli", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print(any(isinstance(f, _SkipUnused) for f in sys.meta_path))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))})
    assert res.returncode == 0, res.stderr[-3000:]
    assert [line for line in res.stdout.splitlines() if line in ("False", "True")] == ["False", "True"]
