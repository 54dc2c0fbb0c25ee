"""Repack: a new packing rule from a corpus's tokenized intermediate, end to end on FnApiRunner."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
import re
import shutil

import apache_beam as beam
import numpy as np
import pytest

from pipelines.jobs.build import run_build
from pipelines.jobs.repack import (
    RepackOptions,
    iter_tokenized,
    repack_config,
    repack_pipeline,
    resolve_parent,
    run_repack,
)
from pipelines.tokenizer.model import load_processor
from schemas import BOS_ID, EOS_ID
from schemas.config import BuildConfig
from schemas.errors import UserError
from schemas.manifest import Manifest
from schemas.naming import SHARD_NAME_RE
from schemas.sample import decode_sample, iter_tar_samples
from shardforge import cli
from shardforge.commands.synth import make_article
from shardforge.storage.contract import load_manifest

pytestmark = pytest.mark.slow


def write_raw(root: str, seed: int = 3) -> dict[str, str]:
    """Two clean JSONL sources (with three exact duplicates, so accounting is not trivial)."""
    rng = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    news = [make_article(rng, rng.randint(8, 20)) for _ in range(70)]
    stories = [make_article(rng, rng.randint(12, 30), story=True) for _ in range(30)]
    paths = {"news": os.path.join(root, "news.jsonl"), "stories": os.path.join(root, "stories.jsonl")}
    for name, texts in (("news", news + news[:3]), ("stories", stories)):
        with open(paths[name], "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    return paths


def quality_rules_off() -> dict:
    """Cleaning settings that keep template text: this file tests packing, not the cleaning rules."""
    from pipelines.clean import rules as clean

    guards = set(getattr(clean, "GUARD_RULES", ()))
    return {"disabled_rules": sorted(set(getattr(clean, "RULE_NAMES", ())) - guards), "english_only": False,
            "min_words": 1}


def parent_config(paths: dict[str, str]) -> BuildConfig:
    return BuildConfig.model_validate({
        "sources": [{"name": n, "input": u} for n, u in sorted(paths.items())],
        "clean": quality_rules_off(),
        "tokenizer": {"vocab_size": 400},
        # Three packing groups: a tokenized part per group and split, read in parallel.
        "packing": {"rule": "full_sentences", "max_seq_len": 96, "valid_fraction": 0.15, "groups": 3},
        "shards": {"target_samples": 40, "target_bytes": 1 << 30},
    })


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> tuple[BuildConfig, str, Manifest]:
    root = tmp_path_factory.mktemp("repack")
    cfg = parent_config(write_raw(str(root / "raw")))
    out = str(root / "corpus")
    return cfg, out, run_build(cfg, out)


def read_corpus(root: str, m: Manifest) -> dict[str, list[dict]]:
    """Every sample of every shard, checked against the manifest's sizes and hashes."""
    out: dict[str, list[dict]] = {"train": [], "valid": []}
    for s in m.shards:
        data = open(os.path.join(root, s.name), "rb").read()
        assert len(data) == s.bytes and hashlib.sha256(data).hexdigest() == s.sha256, s.name
        with open(os.path.join(root, s.name), "rb") as f:
            samples = [decode_sample(k, mem) for k, mem in iter_tar_samples(f, s.name)]
        assert len(samples) == s.samples
        assert sum(len(x["input_ids"]) for x in samples) == s.tokens
        out[s.split] += samples
    return out


def docs_by_split(samples: dict[str, list[dict]]) -> dict[str, set[str]]:
    return {split: {d for x in xs for d in x["meta"]["doc_ids"]} for split, xs in samples.items()}


def shard_digests(root: str) -> dict[tuple[str, int], str]:
    """(split, index) -> sha256: shard names also carry the writing attempt's tag (pipelines.corpus.commit)."""
    out = {}
    for p in sorted(glob.glob(os.path.join(root, "*.tar"))):
        name = SHARD_NAME_RE.match(os.path.basename(p))
        out[(name.group("split"), int(name.group("index")))] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def untagged(shards):
    """The manifest's shard entries without their names (same bytes, counts and order)."""
    return [s.model_copy(update={"name": ""}) for s in shards]


def test_same_rule_gives_byte_identical_shards(parent, tmp_path):
    """The intermediate is lossless: repacking with the parent's own settings reproduces its shards."""
    cfg, out, m = parent
    import pyarrow.parquet as pq

    from pipelines.pack.step import packing_key, tokenized_part_index

    files = sorted(glob.glob(os.path.join(out, m.intermediates["tokenized"], "part-*.parquet")))
    # One part per packing group that holds documents: train's groups 0-2, then valid's 3-5
    # (pipelines.corpus.shards.tokenized_part_index); each document in the part of the group it routes to.
    groups = cfg.packing.groups
    where = {}
    for f in files:
        for doc_id in pq.read_table(f, columns=["doc_id"]).column("doc_id").to_pylist():
            split, group, _ = packing_key(doc_id, cfg.seed, cfg.packing.valid_fraction, groups)
            where[doc_id] = (os.path.basename(f), f"part-{tokenized_part_index(split, group, groups):05d}.parquet")
    assert where and all(found == routed for found, routed in where.values())
    assert {os.path.basename(f) for f in files} <= {f"part-{i:05d}.parquet" for i in range(2 * groups)}
    assert len(files) >= 4  # 70 documents, 15 % valid: most groups hold some
    assert m.accounting["news"].kept == 70 and m.accounting["news"].duplicate == {"exact": 3}
    again = str(tmp_path / "same")
    m2 = run_repack(out, again)
    assert shard_digests(again) == shard_digests(out)
    assert untagged(m2.shards) == untagged(m.shards) and m2.totals == m.totals
    assert m2.parent == os.path.join(out, "manifest.json")
    assert m2.accounting == m.accounting
    assert m2.tokenizer.sha256 == m.tokenizer.sha256
    assert m2.tokenizer.path.startswith("versions/v1-") and m2.tokenizer.path.endswith("/tokenizer/spm.model")
    assert open(os.path.join(again, m2.tokenizer.path), "rb").read() == \
        open(os.path.join(out, m.tokenizer.path), "rb").read()
    # Packing counters are the new run's; the repack's own say what it read.
    assert {k: v for k, v in m2.counters.items() if k.startswith("pack_")} == m.counters
    assert m2.counters["repack_documents"] == sum(a.kept for a in m.accounting.values())
    assert m2.counters["repack_parts"] == len(files)


def test_clean_intermediate_records_language(parent):
    """The clean stage records each kept document's language code and score (schema clean/2),
    also with the language rule switched off (english_only: false)."""
    import pyarrow.parquet as pq

    _, out, m = parent
    parts = sorted(glob.glob(os.path.join(out, m.intermediates["clean"], "part-*.parquet")))
    assert parts
    table = pq.read_table(parts[0])
    assert table.schema.metadata[b"shardforge.schema"] == b"clean/2"
    rows = table.to_pylist()
    assert rows and all(r["language"] == "en" and 0.5 <= r["language_score"] <= 1.0 for r in rows)


def test_doc_sentences_from_the_tokenized_folder(parent, tmp_path):
    cfg, out, m = parent
    new = str(tmp_path / "doc")
    m2 = run_repack(os.path.join(out, m.intermediates["tokenized"]), new, rule="doc_sentences", shard_samples=25)
    assert m2.packing_rule == "doc_sentences" and m2.config["packing"]["rule"] == "doc_sentences"
    assert m2.parent == os.path.join(out, "manifest.json")
    assert m2.accounting == m.accounting
    samples = read_corpus(new, m2)
    assert samples["train"] and samples["valid"]
    for x in samples["train"] + samples["valid"]:
        ids = x["input_ids"]
        assert len(x["meta"]["doc_ids"]) == 1  # DOC-SENTENCES never crosses a document
        assert ids[0] == BOS_ID and ids[-1] == EOS_ID and len(ids) <= m2.max_seq_len
        assert "token_type_ids" not in x and "label" not in x
    split_docs = docs_by_split(samples)
    assert not split_docs["train"] & split_docs["valid"]
    # The same split as the parent (same seed): every document keeps its side.
    parent_docs = docs_by_split(read_corpus(out, m))
    assert split_docs == parent_docs
    assert m2.totals["train"].documents + m2.totals["valid"].documents == m2.counters["repack_documents"]


def test_sop_via_cli_and_a_repacked_corpus_points_back_to_its_origin(parent, tmp_path, capsys):
    """`shardforge repack` to SOP. A repack lists no intermediates of its parent (the manifest path rule):
    repacking a repack says, in one line, to repack the corpus that holds the documents."""
    _, out, m = parent
    first = str(tmp_path / "doc")
    m1 = run_repack(out, first, rule="doc_sentences")
    assert m1.intermediates == {} and m1.parent == os.path.join(out, "manifest.json")
    sop = str(tmp_path / "sop")
    rc = cli.main(["repack", "--tokenized", first, "--output", sop, "--rule", "sop"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"is a repack of {out}" in err[0] and f"--tokenized {out}" in err[0]
    # The reference flag is refused in one line: a manifest names only files inside its corpus.
    rc = cli.main(["repack", "--tokenized", out, "--output", sop, "--tokenizer_ref"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--tokenizer_ref" in err[0]
    assert not os.path.exists(sop)
    rc = cli.main(["repack", "--tokenized", out, "--output", sop, "--rule", "sop", "--max_seq_len", "64",
                   "--seed", "99", "--json"])
    assert rc == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["packing_rule"] == "sop"
    m2, _ = load_manifest(sop)
    assert m2.parent == os.path.join(out, "manifest.json")
    assert m2.members == ["input_ids.npy", "token_type_ids.npy", "label.cls", "json"]
    assert m2.max_seq_len == 64 and m2.config["seed"] == 99
    # Copied, never referenced: the corpus is self-contained (under its attempt folder).
    assert re.fullmatch(r"versions/v1-[0-9a-f]{16}/tokenizer/spm\.model", m2.tokenizer.path)
    with open(os.path.join(sop, m2.tokenizer.path), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == m.tokenizer.sha256
    samples = read_corpus(sop, m2)
    labels = []
    for x in samples["train"] + samples["valid"]:
        ids, tt = x["input_ids"], x["token_type_ids"]
        assert tt.shape == ids.shape and set(np.unique(tt)) <= {0, 1}
        assert len(x["meta"]["doc_ids"]) == 1  # SOP segments come from one document
        assert (ids == EOS_ID).sum() == 2 and ids[0] == BOS_ID
        labels.append(x["label"])
    assert set(labels) == {0, 1}
    # The cut rate is in the manifest: SOP chunks close at sentence boundaries, so no pair is cut.
    assert m2.counters["pack_pairs"] == len(samples["train"]) + len(samples["valid"])
    assert m2.counters["pack_truncated_pairs"] == 0
    assert m2.counters["pack_cut_segments"] == 2 * m2.counters["pack_split_for_pair"]
    split_docs = docs_by_split(samples)
    assert not split_docs["train"] & split_docs["valid"]


def test_a_repack_flag_out_of_range_is_named_as_the_flag(parent):
    src = resolve_parent(parent[1])
    with pytest.raises(UserError) as e:
        repack_config(src.manifest, max_seq_len=3, shard_samples=0)
    assert str(e.value).startswith("invalid repack config: --max_seq_len (packing.max_seq_len): Input should be")
    assert "--shard_samples (shards.target_samples)" in str(e.value)


def test_repack_graph_has_no_clean_dedupe_or_tokenize(parent, tmp_path):
    _, out, m = parent
    src = resolve_parent(out)
    cfg = repack_config(src.manifest, rule="doc_sentences")
    p = beam.Pipeline(options=RepackOptions(["--runner", "FnApiRunner"]))
    repack_pipeline(p, src, cfg, str(tmp_path / "graph"))
    labels = {t.unique_name for t in p.to_runner_api().components.transforms.values()}
    assert any(name.startswith("ReadTokenized/ReadParts") for name in labels)
    assert any(name.startswith("WriteCorpus/CommitManifest") for name in labels)
    for stage in ("Read[", "Clean", "Dedupe", "SplitSentences", "TrainTokenizer", "Tokenize/", "Encode"):
        assert not [name for name in labels if stage in name], stage
    # And the build graph does contain them (the check above can fail).
    from pipelines.jobs.build import build_pipeline

    pb = beam.Pipeline(options=RepackOptions(["--runner", "FnApiRunner"]))
    build_pipeline(pb, BuildConfig.model_validate(m.config), str(tmp_path / "b"))
    build_labels = {t.unique_name for t in pb.to_runner_api().components.transforms.values()}
    assert any("Clean" in n for n in build_labels) and any("Tokenize/" in n for n in build_labels)


def test_iter_tokenized_matches_the_build_tokens(parent):
    _, out, m = parent
    tokens = 0
    sp = load_processor(open(os.path.join(out, m.tokenizer.path), "rb").read())
    for part in sorted(glob.glob(os.path.join(out, m.intermediates["tokenized"], "part-*.parquet"))):
        for d in iter_tokenized(part, batch_rows=7):  # small batches: offsets across batch boundaries
            assert d.num_tokens == sum(len(s) for s in d.sentences) > 0
            assert all(0 <= t < sp.get_piece_size() for s in d.sentences for t in s)
            tokens += d.num_tokens
    assert tokens == m.counters["pack_input_tokens"]


def test_repack_errors_are_one_clear_line(parent, tmp_path, capsys):
    _, out, m = parent
    # No corpus at all.
    assert cli.main(["repack", "--tokenized", str(tmp_path / "nothing"), "--output", str(tmp_path / "o")]) == 2
    assert "no corpus manifest" in capsys.readouterr().err
    # Writing over the parent.
    with pytest.raises(UserError, match="is the parent corpus"):
        run_repack(out, out, rule="doc_sentences")
    # A tokenizer that is not the one the manifest names.
    other = str(tmp_path / "other")
    shutil.copytree(out, other)
    mf = json.load(open(os.path.join(other, "manifest.json")))
    mf["tokenizer"]["sha256"] = "0" * 64
    open(os.path.join(other, "manifest.json"), "w").write(json.dumps(mf))
    with pytest.raises(UserError, match="does not match the parent manifest's sha256"):
        resolve_parent(other)
    # A missing part file: the documents no longer match the parent's accounting.
    broken = str(tmp_path / "broken")
    shutil.copytree(out, broken)
    os.remove(sorted(glob.glob(os.path.join(broken, m.intermediates["tokenized"], "part-*.parquet")))[0])
    rc = cli.main(["repack", "--tokenized", broken, "--output", str(tmp_path / "o2"), "--rule", "doc_sentences"])
    err = capsys.readouterr().err
    assert rc == 2 and "does not match the parent's accounting" in err and "Traceback" not in err
    assert not os.path.exists(os.path.join(tmp_path, "o2", "manifest.json"))
    # A folder that is not the corpus's tokenized intermediate.
    with pytest.raises(UserError, match="is not the tokenized intermediate"):
        resolve_parent(os.path.join(out, m.intermediates["clean"]))


def test_options_coexist_with_build_options():
    """Beam parses all PipelineOptions subclasses with one parser: shared flags must not clash."""
    from pipelines.options import BuildOptions

    o = RepackOptions(["--tokenized", "a", "--output", "b", "--rule", "sop", "--max_seq_len", "64"])
    r = o.view_as(RepackOptions)
    assert (r.tokenized, r.output, r.rule, r.max_seq_len) == ("a", "b", "sop", 64)
    assert o.view_as(BuildOptions).output == "b"
    o.get_all_options()  # raises argparse.ArgumentError on a clash


def test_repack_on_object_storage(parent, gcs_bucket):
    """Parent and new version on gs:// (emulator): listing, streaming Parquet reads, atomic shard writes."""
    import gcsfs

    _, out, m = parent
    fs = gcsfs.GCSFileSystem(token="anon")
    remote = f"{gcs_bucket}/v1"
    for local in glob.glob(os.path.join(out, "**", "*"), recursive=True):
        if os.path.isfile(local):
            fs.put_file(local, f"{remote}/{os.path.relpath(local, out)}")
    fs.invalidate_cache()
    m2 = run_repack(remote, f"{gcs_bucket}/v1-same")
    assert m2.parent == f"{remote}/manifest.json"
    assert [s.sha256 for s in m2.shards] == [s.sha256 for s in m.shards]
    again, _ = load_manifest(f"{gcs_bucket}/v1-same")
    assert again == m2 and again.intermediates == {}  # the parent's stay with the parent


def test_a_repack_in_a_log_counts_the_tokenized_documents_it_read(small_corpus, tmp_path, monkeypatch, capfd):
    """stderr no terminal: the repack's progress line counts the parent's tokenized documents as it reads them."""
    from pipelines.jobs.repack import run_repack
    from pipelines.localrunner import progress

    root, m = small_corpus
    monkeypatch.delenv("SHARDFORGE_PROGRESS", raising=False)
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.2)
    run_repack(root, str(tmp_path / "r"), rule="doc_sentences")
    counted = [int(found.group(1).replace(",", "")) for line in capfd.readouterr().err.splitlines()
               for found in [re.search(r"^progress .*read tokenized documents ([\d,]+)", line)] if found]
    assert counted and max(counted) <= sum(t.documents for t in m.totals.values()), counted
