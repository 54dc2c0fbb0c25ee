"""Configs and the manifest: round trips and one clear error for user mistakes."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from schemas.config import BuildConfig, TrainConfig
from schemas.configfile import parse_config
from schemas.errors import UserError
from schemas.manifest import LATEST_NAME, Manifest, ShardInfo, TokenizerInfo, parse_manifest
from schemas.naming import manifest_version, version_key_prefix, version_manifest_name
from schemas.sample import (
    ShardFormatError,
    decode_sample,
    encode_sample,
    ids_dtype,
    iter_tar_samples,
    tar_bytes,
)
from shardforge.storage.contract import (
    committed_versions,
    load_config,
    load_manifest,
    load_version,
    read_latest_pointer,
)


def tiny_manifest(**kw) -> Manifest:
    return Manifest(
        config={"sources": []}, packing_rule="full_sentences", max_seq_len=16, ids_dtype="uint16",
        members=["input_ids.npy"],
        tokenizer=TokenizerInfo(path="tokenizer/spm.model", sha256="0" * 64, model_type="unigram", vocab_size=100,
                                normalization_rule="nmt_nfkc"),
        shards=[ShardInfo(name="train-000000.tar", split="train", samples=3, tokens=30, bytes=10240,
                          sha256="a" * 64)],
        totals={}, accounting={}, **kw)


def test_manifest_round_trip_is_canonical(tmp_path):
    m = tiny_manifest()
    text = m.to_json()
    assert parse_manifest(text) == m
    assert parse_manifest(text).to_json() == text
    assert json.loads(text) == json.loads(json.dumps(json.loads(text), sort_keys=True))
    (tmp_path / "manifest.json").write_text(text)
    loaded, root = load_manifest(str(tmp_path))
    assert loaded == m and root == str(tmp_path)


def test_version_names_round_trip_and_the_chain_is_read_from_them(tmp_path):
    """One place names a version's manifest; the chain readers find exactly those names."""
    assert [version_manifest_name(n) for n in (1, 12)] == ["manifest-v1.json", "manifest-v12.json"]
    assert [manifest_version(version_manifest_name(n)) for n in (1, 7, 123)] == [1, 7, 123]
    assert [manifest_version(x) for x in ("manifest.json", "manifest-v1.json.tmp", ".manifest-v2.json.x.tmp",
                                          "manifest-v.json", "latest")] == [None] * 5
    assert version_key_prefix(3) == "v000003-"
    assert committed_versions(str(tmp_path)) == [] and read_latest_pointer(str(tmp_path)) is None
    for n in (2, 10, 1):  # numeric, not lexical, order
        (tmp_path / version_manifest_name(n)).write_text(tiny_manifest(version=n).to_json())
    (tmp_path / "manifest.json").write_text(tiny_manifest().to_json())
    (tmp_path / ".manifest-v11.json.0a1b.tmp").write_text("half written")
    assert committed_versions(str(tmp_path)) == [1, 2, 10]
    assert load_version(str(tmp_path), 10).version == 10
    (tmp_path / LATEST_NAME).write_text(version_manifest_name(10) + "\n")
    assert read_latest_pointer(str(tmp_path)) == 10
    (tmp_path / LATEST_NAME).write_text("manifest.json\n")  # not a version: no pointer
    assert read_latest_pointer(str(tmp_path)) is None


def test_missing_manifest_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="no manifest at .*nope does not exist"):
        load_manifest(str(tmp_path / "nope"))
    with pytest.raises(UserError, match="no manifest at .*is a folder but not a corpus.*writes the manifest last"):
        load_manifest(str(tmp_path))


def test_invalid_manifest_names_the_field(tmp_path):
    bad = json.loads(tiny_manifest().to_json())
    bad["shards"][0]["sha256"] = "xyz"
    (tmp_path / "manifest.json").write_text(json.dumps(bad))
    with pytest.raises(UserError, match=r"shards\.0\.sha256"):
        load_manifest(str(tmp_path))
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_manifest(str(tmp_path))


def test_other_json_is_told_apart_from_a_damaged_manifest():
    """JSON that is no manifest at all gets one sentence; a manifest with a bad field still names the field."""
    good = json.loads(tiny_manifest().to_json())
    for other in ([1, 2], {"shards": 17, "tokens": 118016}, {"kind": "something-else", "shards": []}, "text"):
        with pytest.raises(UserError, match="is JSON but not a shardforge manifest"):
            parse_manifest(json.dumps(other))
    for damaged in ({k: v for k, v in good.items() if k != "kind"} | {"max_seq_len": "x"},
                    {k: v for k, v in good.items() if k != "tokenizer"}, {**good, "kind": "something-else"}):
        with pytest.raises(UserError, match="is not a valid shardforge manifest: (max_seq_len|tokenizer|kind)"):
            parse_manifest(json.dumps(damaged))


def test_newer_schema_is_refused():
    data = json.loads(tiny_manifest().to_json())
    data["schema_version"] = 999
    with pytest.raises(UserError, match="newer than this shardforge"):
        parse_manifest(json.dumps(data))


def test_config_errors_are_readable(tmp_path):
    with pytest.raises(UserError, match=r"packing\.rule"):
        parse_config(BuildConfig, {"sources": [{"name": "a", "input": "x"}], "packing": {"rule": "nope"}})
    with pytest.raises(UserError, match=r"stepz: unknown key \(did you mean steps\?\)"):
        parse_config(TrainConfig, {"data": "x", "stepz": 3})
    p = tmp_path / "c.yaml"
    p.write_text("sources: [{name: a, input: x}]\npacking: {max_seq_len: 3}\n")
    with pytest.raises(UserError, match=r"max_seq_len"):
        load_config(BuildConfig, str(p))
    with pytest.raises(UserError, match="config not found"):
        load_config(BuildConfig, str(tmp_path / "missing.yaml"))


def test_cli_missing_manifest_prints_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "trainer.train", "--data", str(tmp_path), "--steps", "1"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("error: no manifest at")
    assert "Traceback" not in r.stderr


def test_sample_spec_dtype_and_round_trip():
    assert ids_dtype(65536) == np.uint16 and ids_dtype(65537) == np.int32
    members = encode_sample([0, 7, 2], 100, token_type_ids=[0, 0, 1], label=1, meta={"b": 1, "a": 2})
    data = tar_bytes([("k-1", members)])
    [(key, got)] = list(iter_tar_samples(__import__("io").BytesIO(data)))
    s = decode_sample(key, got)
    assert s["input_ids"].tolist() == [0, 7, 2] and s["input_ids"].dtype == np.uint16
    assert s["token_type_ids"].tolist() == [0, 0, 1] and s["label"] == 1 and s["meta"] == {"a": 2, "b": 1}
    assert tar_bytes([("k-1", members)]) == data  # deterministic bytes


def test_reader_refuses_pickles_and_unknown_members():
    import io
    import pickle

    data = tar_bytes([("k", [("input_ids.npy", b"x")])])
    evil = io.BytesIO()
    import tarfile

    with tarfile.open(fileobj=evil, mode="w") as t:
        payload = pickle.dumps({"boom": 1})
        info = tarfile.TarInfo("k.pyd")
        info.size = len(payload)
        t.addfile(info, io.BytesIO(payload))
    with pytest.raises(ShardFormatError, match="pickle"):
        list(iter_tar_samples(io.BytesIO(evil.getvalue())))
    with pytest.raises(ShardFormatError, match="truncated|corrupt"):
        list(iter_tar_samples(io.BytesIO(data[:700])))


# ------------------------------------------------------------------ config files a user got wrong


@pytest.mark.parametrize("text,where", [
    ("sources: [\n", "line 2, column 1: expected the node content, but found '<stream end>' "
                     "(while parsing a flow node at line 2, column 1)"),
    ("a: b\n  c: d\n", "line 2, column 4: mapping values are not allowed here"),
    ('key: "unterminated\n', "line 2, column 1: found unexpected end of stream "
                             "(while scanning a quoted scalar at line 1, column 6)"),
])
def test_a_yaml_mistake_is_one_line_with_its_place(tmp_path, text, where) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_config(BuildConfig, str(path))
    assert str(info.value) == f"{path} is not valid YAML: {where}"
    assert "\n" not in str(info.value)


def test_a_config_that_is_not_utf8_is_one_line(tmp_path) -> None:
    """A config saved as Latin-1 was a UnicodeDecodeError traceback."""
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"sources:\n  - name: web\n    input: raw.jsonl\n# caf\xe9\n")
    with pytest.raises(UserError) as info:
        load_config(BuildConfig, str(path))
    assert str(info.value) == f"{path} is not UTF-8 text: byte 0xe9 on line 4 (invalid continuation byte); save it as UTF-8"


@pytest.mark.parametrize("cls,text,where", [
    (BuildConfig, "tokenizer:\n  vocab_size: 300\ntokenizer:\n  model_type: bpe\n",
     "line 3, column 1: duplicate key 'tokenizer' (first on line 1)"),
    (TrainConfig, "data: toy\noptim:\n  lr: 1.0e-4\n  warmup_steps: 1\n  lr: 2.0e-4\n",
     "line 5, column 3: duplicate key 'lr' (first on line 3)"),
])
def test_a_key_given_twice_in_a_yaml_config_is_one_line(tmp_path, cls, text, where) -> None:
    """PyYAML keeps the last of a repeated key: the first section or value was dropped silently."""
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_config(cls, str(path))
    assert str(info.value) == f"{path} is not valid YAML: {where}: write each key once"


def test_a_key_given_twice_in_a_json_config_is_one_line_and_yaml_merges_still_override(tmp_path) -> None:
    path = tmp_path / "dup.json"
    path.write_text('{"data": "toy", "optim": {"lr": 0.001, "lr": 0.002}}')
    with pytest.raises(UserError) as info:
        load_config(TrainConfig, str(path))
    assert str(info.value) == f"{path} is not valid JSON: duplicate key 'lr': write each key once"
    merged = tmp_path / "merged.yaml"
    merged.write_text("data: toy\noptim: {<<: {lr: 1.0e-4, warmup_steps: 2}, lr: 2.0e-4}\n")
    optim = load_config(TrainConfig, str(merged)).optim
    assert (optim.lr, optim.warmup_steps) == (2.0e-4, 2)
