"""`shardforge inspect` / `validate`, independent readers of our shards, and the no-pickle rule.

One real build per module; mutation tests copy it and break one thing each.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile

import numpy as np
import pytest

from schemas.manifest import Manifest
from schemas.sample import ShardFormatError, decode_sample, encode_sample, iter_tar_samples, tar_bytes
from shardforge import cli
from shardforge.commands.inspect import inspect_corpus
from shardforge.commands.validate import validate_corpus
from shardforge.storage.contract import load_manifest

pytestmark = pytest.mark.slow


@pytest.fixture
def corpus(small_corpus) -> tuple[str, Manifest]:
    return small_corpus  # conftest: built once per test process, read-only


@pytest.fixture
def copy(corpus_copy) -> str:
    return corpus_copy


def raw_tar(members: list[tuple[str, bytes]]) -> bytes:
    """A tar with exactly these member names (bypasses our writer's checks, like a hostile producer)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def replace_shard(root: str, name: str, data: bytes, samples: int | None = None, tokens: int | None = None) -> None:
    """Overwrite a shard and make its manifest entry agree on size and hash (so other checks must catch it)."""
    with open(os.path.join(root, name), "wb") as f:
        f.write(data)
    mpath = os.path.join(root, "manifest.json")
    m = json.load(open(mpath))
    for s in m["shards"]:
        if s["name"] == name:
            s["bytes"], s["sha256"] = len(data), hashlib.sha256(data).hexdigest()
            if samples is not None:
                s["samples"] = samples
            if tokens is not None:
                s["tokens"] = tokens
    split_of = {s["name"]: s["split"] for s in m["shards"]}
    for split, t in m["totals"].items():
        mine = [s for s in m["shards"] if split_of[s["name"]] == split]
        t.update(samples=sum(s["samples"] for s in mine), tokens=sum(s["tokens"] for s in mine),
                 bytes=sum(s["bytes"] for s in mine))
    open(mpath, "w").write(json.dumps(m, sort_keys=True, indent=1) + "\n")


def shard_samples(root: str, name: str) -> list[tuple[str, dict[str, bytes]]]:
    with open(os.path.join(root, name), "rb") as f:
        return list(iter_tar_samples(f, name))


# ---------------------------------------------------------------- validate

def test_validate_passes_on_a_fresh_build(corpus, capsys):
    root, m = corpus
    rep = validate_corpus(root, jobs=3)
    assert rep.ok and not rep.warnings, rep.errors
    assert rep.shards == len(m.shards) >= 4
    assert rep.samples == sum(t.samples for t in m.totals.values())
    assert rep.tokens == sum(t.tokens for t in m.totals.values())
    assert cli.main(["validate", root, "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith(f"OK: {rep.shards} shards, {rep.samples:,} samples, {rep.tokens:,} tokens")


def test_validate_lists_every_problem_and_exits_nonzero(corpus, copy, capsys):
    _, m = corpus
    a, b, c = (s.name for s in m.shards_of("train")[:3])
    os.remove(os.path.join(copy, a))  # missing
    with open(os.path.join(copy, b), "r+b") as f:  # one flipped byte inside a payload
        f.seek(700)
        byte = f.read(1)
        f.seek(700)
        f.write(bytes([byte[0] ^ 0xFF]))
    with open(os.path.join(copy, c), "r+b") as f:  # truncated mid-member
        f.truncate(3000)
    assert cli.main(["validate", copy, "--no-progress", "--jobs", "2"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAILED")
    assert f"{a}: missing" in out
    assert f"{b}: sha256" in out
    assert f"{c}: size 3" in out or f"{c}: unreadable" in out
    rep = validate_corpus(copy, jobs=1)
    assert not rep.ok and {e.split(":")[0] for e in rep.errors} == {a, b, c}
    assert validate_corpus(copy, jobs=4).errors == rep.errors  # parallel reads: same, ordered result


def test_validate_checks_the_sample_spec_against_the_manifest(corpus, copy):
    _, m = corpus
    shards = m.shards_of("train")
    vocab = m.tokenizer.vocab_size
    # 1: int32 ids where the manifest says uint16
    s0 = shard_samples(copy, shards[0].name)
    wrong_dtype = [(k, [("input_ids.npy", _npy(decode_sample(k, mem)["input_ids"].astype(np.int32))),
                        ("json", mem["json"])]) for k, mem in s0]
    replace_shard(copy, shards[0].name, tar_bytes(wrong_dtype))
    # 2: a sequence longer than max_seq_len
    long_ids = np.full(m.max_seq_len + 5, 7, dtype=np.uint16)
    replace_shard(copy, shards[1].name, tar_bytes([("train-99999-00000000", encode_sample(long_ids, vocab, meta={"doc_ids": ["x"]}))]),
                  samples=1, tokens=len(long_ids))
    # 3: manifest counts that do not match the shard
    s2 = shard_samples(copy, shards[2].name)
    data = open(os.path.join(copy, shards[2].name), "rb").read()
    replace_shard(copy, shards[2].name, data, samples=len(s2) + 1)
    # 4: the same sample keys in two shards
    replace_shard(copy, shards[3].name, open(os.path.join(copy, shards[4].name), "rb").read(),
                  samples=shards[4].samples, tokens=shards[4].tokens)
    rep = validate_corpus(copy)
    text = "\n".join(rep.errors)
    assert f"{shards[0].name}: sample" in text and "dtype int32, manifest says uint16" in text
    assert f"> max_seq_len {m.max_seq_len}" in text
    assert f"{shards[2].name}: {len(s2)} samples, manifest says {len(s2) + 1}" in text
    assert f"{shards[4].name}: {shards[4].samples} sample keys also in {shards[3].name}" in text
    assert "missing members ['json']" not in text  # spec members are all present


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


@pytest.mark.parametrize("member,expect", [
    ("train-00000-00000000.pyd", "pickle"),
    ("train-00000-00000000.pickle", "pickle"),
    ("../etc/train-00000-00000000.input_ids.npy", "unsafe member name"),
    ("/abs/train-00000-00000000.input_ids.npy", "unsafe member name"),
    ("train-00000-00000000.exe", "not in the sample spec"),
])
def test_hostile_members_are_refused_and_reported(corpus, copy, member, expect):
    _, m = corpus
    name = m.shards[0].name
    good = shard_samples(copy, name)[0]
    evil = raw_tar([(f"{good[0]}.{s}", p) for s, p in good[1].items()] + [(member, b"\x80\x04K\x01.")])
    with pytest.raises(ShardFormatError, match=expect):
        list(iter_tar_samples(io.BytesIO(evil)))
    replace_shard(copy, name, evil)
    rep = validate_corpus(copy)
    assert any(e.startswith(f"{name}: unreadable") and expect in e for e in rep.errors), rep.errors


def test_validate_warns_about_strays_and_missing_manifest_is_one_line(corpus, copy, tmp_path, capsys):
    _, m = corpus
    n = len(m.shards_of("train"))
    shutil.copy(os.path.join(copy, m.shards[0].name), os.path.join(copy, f"train-{n + 5:06d}.tar"))
    open(os.path.join(copy, f".train-{n:06d}.tar.0123abcd.tmp"), "wb").write(b"partial")
    rep = validate_corpus(copy)
    assert rep.ok and len(rep.warnings) == 2, rep.warnings
    assert cli.main(["validate", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no manifest at")


# ---------------------------------------------------------------- inspect

def test_inspect_summary_samples_and_histogram(corpus, capsys):
    import sentencepiece as spm

    root, m = corpus
    r = inspect_corpus(root, samples=4, max_shards=2)
    assert r["summary"]["samples"] == sum(t.samples for t in m.totals.values())
    assert r["summary"]["packing_rule"] == m.packing_rule
    assert set(r["summary"]["splits"]) == set(m.totals)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(root, m.tokenizer.path))
    first = shard_samples(root, m.shards_of("train")[0].name)
    assert [d["key"] for d in r["samples"]] == [k for k, _ in first[:4]]
    for d, (_, mem) in zip(r["samples"], first, strict=False):
        ids = decode_sample(d["key"], mem)["input_ids"].tolist()
        assert d["text"] == sp.decode(ids) and d["length"] == len(ids)
        assert len(d["text"].split()) > 3
    lens = r["lengths"]
    want = sum(s.samples for s in m.shards_of("train")[:2])
    assert lens["sequences"] == want == sum(b["count"] for b in lens["histogram"])
    assert lens["max"] <= m.max_seq_len
    assert cli.main(["inspect", root, "--json", "--samples", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["shards"] == len(m.shards)
    assert cli.main(["inspect", root, "--split", "valid"]) == 0
    text = capsys.readouterr().out
    assert "samples (valid)" in text and f"{len(m.shards)} shards" in text and "text:" in text
    assert text.splitlines()[0] == f"corpus {root}"  # a plain build: no version said
    from shardforge.commands.inspect import render
    served = {**r, "summary": {**r["summary"], "version": 3}}
    assert render(served).splitlines()[0] == f"corpus {r['url']} (version 3: `shardforge status` lists its versions)"


# ---------------------------------------------------------------- independent readers

def test_plain_webdataset_reads_every_sample(corpus):
    import webdataset as wds

    root, m = corpus
    urls = [os.path.join(root, s.name) for s in m.shards]
    keys, tokens = [], 0
    for sample in wds.WebDataset(urls, shardshuffle=False):
        ids = np.load(io.BytesIO(sample["input_ids.npy"]), allow_pickle=False)
        assert str(ids.dtype) == m.ids_dtype and len(ids) <= m.max_seq_len
        json.loads(sample["json"])
        keys.append(sample["__key__"])
        tokens += len(ids)
    assert len(keys) == len(set(keys)) == sum(s.samples for s in m.shards)
    assert tokens == sum(s.tokens for s in m.shards)


def test_tar_tool_lists_and_extracts(corpus, tmp_path):
    root, m = corpus
    s = m.shards[0]
    names = subprocess.run(["tar", "-tf", os.path.join(root, s.name)], check=True, capture_output=True,
                           text=True).stdout.split()
    assert len(names) == len(m.members) * s.samples
    subprocess.run(["tar", "-xf", os.path.join(root, s.name), "-C", str(tmp_path)], check=True)
    ids = np.load(tmp_path / names[0], allow_pickle=False)
    assert ids.ndim == 1 and str(ids.dtype) == m.ids_dtype


def test_hugging_face_datasets_reads_the_shards(corpus, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from datasets import load_dataset

    root, m = corpus
    files = [os.path.join(root, s.name) for s in m.shards_of("train")]
    ds = load_dataset("webdataset", data_files={"train": files}, split="train", streaming=True)
    n = 0
    for row in ds:
        ids = np.asarray(row["input_ids.npy"])
        assert ids.ndim == 1 and 0 < len(ids) <= m.max_seq_len
        n += 1
    assert n == m.totals["train"].samples
    m2, _ = load_manifest(root)
    assert m2 == m
