"""Readers that do not trust the manifest, through the real CLIs.

One real build per module; each test copies it and tampers with one thing, then runs
`python -m shardforge.cli validate|inspect`, `python -m trainer.train` or
`python -m pipelines.repack` as a user would, in a second process.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from forkserver import run_python

from schemas.errors import UserError
from schemas.manifest import check_corpus_name, parse_manifest
from schemas.sample import (
    ShardFormatError,
    decode_sample,
    encode_sample,
    iter_tar_samples,
    load_npy_1d,
    tar_bytes,
)

pytestmark = pytest.mark.slow
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}


# ---------------------------------------------------------------- helpers

def run(*args: str, cwd: str | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m ARGS` in a second process, as a user would run it."""
    return run_python(["-m", *args], env=ENV, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def one_error_line(r: subprocess.CompletedProcess, *needles: str) -> str:
    """The run failed as a user error: exit 2, exactly one `error:` line holding every needle, no traceback."""
    lines = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert r.returncode == 2 and len(lines) == 1, r.stdout[-2000:] + r.stderr[-4000:]
    assert "Traceback" not in r.stderr, r.stderr[-4000:]
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def train_args(data: str, out: str, steps: int, *sets: str) -> list[str]:
    return ["trainer.train", "--data", data, "--output", out, "--steps", str(steps), "--batch_size", "4",
            "--device", "cpu", "--set", "model.size=tiny", "--set", "log_every=1", *[a for s in sets for a in ("--set", s)]]


def edit_manifest(root: str, change: Any) -> None:
    path = os.path.join(root, "manifest.json")
    with open(path) as f:
        m = json.load(f)
    change(m)
    with open(path, "w") as f:
        f.write(json.dumps(m, sort_keys=True, indent=1) + "\n")


def metric_rows(run_dir: str) -> int:
    path = os.path.join(run_dir, "metrics.jsonl")
    return sum(1 for _ in open(path)) if os.path.exists(path) else 0


@pytest.fixture
def corpus(small_corpus) -> tuple[str, Any]:
    return small_corpus  # conftest: built once per test process, read-only


@pytest.fixture
def copy(corpus_copy) -> str:
    return corpus_copy


@pytest.fixture
def http_server(corpus) -> Iterator[dict[str, Any]]:
    """A loopback HTTP server that serves anything (the real tokenizer model) and counts every request."""
    model = open(os.path.join(corpus[0], corpus[1].tokenizer.path), "rb").read()
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(model)))
            self.end_headers()
            self.wfile.write(model)

        do_HEAD = do_GET  # noqa: N815

        def log_message(self, *_: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield {"url": f"http://127.0.0.1:{srv.server_address[1]}", "seen": seen}
    srv.shutdown()
    srv.server_close()


# ---------------------------------------------------------------- 8: the manifest path rule

GOOD_NAMES = ["train-000000.tar", "versions/v2/train-000001.tar", "tokenizer/spm.model", "dedupe/index",
              "tokenized", "valid-000000.a1b2c3d4.tar"]
BAD_NAMES = ["../../../../etc/passwd", "/etc/passwd", "a/../../b.tar", "http://127.0.0.1:9/spm.model",
             "file:///etc/passwd", "gs://other-bucket/x.tar", "s3://b/x.tar", "..\\..\\x.tar", "a\\b.tar",
             "C:/x.tar", "c:x.tar", "./train-000000.tar", "train-000000.tar/", "a//b.tar", "~/x.tar",
             "%2e%2e/x.tar", "train-*.tar", "x\x00.tar", "", " train-000000.tar", "a/./b", "..", "x" * 2000]


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_plain_relative_names_pass_the_path_rule(name):
    assert check_corpus_name(name) == name


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize("where", ["shard", "tokenizer", "intermediate"])
def test_every_other_name_is_refused_when_the_manifest_is_parsed(corpus, name, where):
    _, m = corpus
    data = json.loads(m.to_json())
    if where == "shard":
        data["shards"][0]["name"] = name
    elif where == "tokenizer":
        data["tokenizer"]["path"] = name
    else:
        data["intermediates"]["tokenized"] = name
    with pytest.raises(UserError, match="plain relative paths inside the corpus"):
        parse_manifest(json.dumps(data), "m.json")


def _point_outside(root: str, where: str, target: str) -> None:
    def change(m: dict[str, Any]) -> None:
        if where == "shard":
            m["shards"][0]["name"] = target
        elif where == "tokenizer":
            m["tokenizer"]["path"] = target
        else:
            m["intermediates"]["tokenized"] = target
    edit_manifest(root, change)


@pytest.mark.parametrize("where,kind", [("shard", "relative"), ("shard", "http"), ("tokenizer", "http"),
                                        ("tokenizer", "absolute"), ("intermediate", "absolute")])
def test_every_reader_refuses_a_name_outside_the_corpus_before_opening_anything(corpus, copy, tmp_path,
                                                                                  http_server, where, kind):
    """validate, inspect, the trainer and repack: one clear line, exit 2, and nothing named was opened.

    The targets are real: a valid copy of the shard / tokenizer / intermediate
    outside the corpus (so a reader that followed the name would succeed), and
    a loopback HTTP server that answers anything (and counts requests).
    """
    _, m = corpus
    outside = tmp_path / "outside"
    outside.mkdir()
    src = {"shard": m.shards[0].name, "tokenizer": m.tokenizer.path, "intermediate": m.intermediates["tokenized"]}[where]
    dst = outside / os.path.basename(src)
    (shutil.copytree if os.path.isdir(os.path.join(copy, src)) else shutil.copy)(os.path.join(copy, src), dst)
    target = {"relative": f"../outside/{dst.name}", "absolute": str(dst),
              "http": f"{http_server['url']}/{dst.name}"}[kind]
    _point_outside(copy, where, target)
    runs = {
        "validate": run("shardforge.cli", "validate", copy, "--no-progress"),
        "inspect": run("shardforge.cli", "inspect", copy),
        "train": run(*train_args(copy, str(tmp_path / "run"), 1)),
        "repack": run("pipelines.repack", "--tokenized", copy, "--output", str(tmp_path / "repacked")),
    }
    for tool, r in runs.items():
        line = one_error_line(r, "not a valid shardforge manifest", "plain relative paths inside the corpus")
        assert target[:40] in line or repr(target[:40])[1:-1] in line, (tool, line)
    assert http_server["seen"] == []  # nothing was fetched
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "repacked").exists()


# ---------------------------------------------------------------- 9: hostile sample payloads

def _npy_header(shape: tuple[int, ...], descr: str = "<u2", version: tuple[int, int] = (1, 0)) -> bytes:
    buf = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    if version == (1, 0):
        np.lib.format.write_array_header_1_0(buf, header)
    else:
        np.lib.format.write_array_header_2_0(buf, header)
    return buf.getvalue()


@pytest.mark.parametrize("payload,expect", [
    (_npy_header((2**40,)) + b"\x01\x00" * 5, "header declares shape (1099511627776,)"),
    (_npy_header((2**40,), version=(2, 0)) + b"\x01\x00" * 5, "header declares shape (1099511627776,)"),
    (_npy_header((3,)) + b"\x01\x00" * 5, "header declares shape (3,)"),
    (_npy_header((2, 2**39)) + b"\x01\x00" * 5, "is not 1-D"),
    (_npy_header((5,), descr="|O") + b"\x00" * 40, "object dtype"),
    (b"\x93NUMPY\x01\x00\xff\xff" + b"{" * 20, "not a valid .npy header"),
])
def test_npy_headers_are_checked_against_the_payload_before_allocating(payload, expect):
    with pytest.raises(ShardFormatError, match=expect.replace("(", r"\(").replace(")", r"\)")):
        load_npy_1d(payload, "x")
    with pytest.raises(ShardFormatError):
        decode_sample("k", {"input_ids.npy": payload})
    good = io.BytesIO()
    np.save(good, np.arange(7, dtype=np.uint16), allow_pickle=False)
    assert load_npy_1d(good.getvalue(), "x").tolist() == list(range(7))


def _tamper_first_sample(root: str, name: str, input_ids_npy: bytes | None = None,
                         ids: np.ndarray | None = None) -> str:
    """Replace the first sample's input_ids of shard `name` and make the manifest agree on bytes and sha256,
    so only the sample checks can catch it (a hostile or buggy producer). Returns the sample key."""
    from test_tools import replace_shard

    with open(os.path.join(root, name), "rb") as f:
        samples = list(iter_tar_samples(f, name))
    key, members = samples[0]
    if ids is not None:
        input_ids_npy = dict(encode_sample(ids, 65536))["input_ids.npy"]
    samples[0] = (key, {**members, "input_ids.npy": input_ids_npy})
    replace_shard(root, name, tar_bytes([(k, list(mem.items())) for k, mem in samples]))
    return key


def test_validate_and_inspect_report_an_npy_bomb_instead_of_crashing(corpus, copy):
    _, m = corpus
    name = m.shards_of("train")[0].name
    key = _tamper_first_sample(copy, name, _npy_header((2**40,)) + b"\x05\x00" * 8)
    r = run("shardforge.cli", "validate", copy, "--no-progress")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{name}: sample '{key}' input_ids.npy: header declares shape (1099511627776,)" in r.stdout
    assert "MemoryError" not in r.stdout + r.stderr and "Traceback" not in r.stderr
    one_error_line(run("shardforge.cli", "inspect", copy), name, "header declares shape (1099511627776,)")


@pytest.fixture
def out_of_vocab(corpus, copy) -> tuple[str, str, str]:
    """A copy whose first train shard holds one sample with a token id >= vocab (sha256 made to match)."""
    _, m = corpus
    name = m.shards_of("train")[0].name
    with open(os.path.join(copy, name), "rb") as f:
        key, members = next(iter_tar_samples(f, name))
    ids = decode_sample(key, members)["input_ids"].astype(np.int64)
    ids[1] = m.tokenizer.vocab_size + 5
    _tamper_first_sample(copy, name, ids=ids)
    return copy, name, key


def test_a_token_id_past_the_vocabulary_is_a_corrupt_shard_under_either_policy(corpus, out_of_vocab, tmp_path):
    copy, name, key = out_of_vocab
    vocab = corpus[1].tokenizer.vocab_size
    n_train = len(corpus[1].shards_of("train"))
    # fail (the default): one line naming the shard, the sample and the id
    r = run(*train_args(copy, str(tmp_path / "fail"), 3 * n_train, "shuffle_buffer=1"))
    one_error_line(r, f"corrupt shard {name}", f"sample {key}: token id {vocab + 5} outside the vocabulary of "
                   f"{vocab}", "corrupt_shards=skip")
    # skip: the run goes on without the shard, says why, and finishes
    r = run(*train_args(copy, str(tmp_path / "skip"), 3 * n_train, "shuffle_buffer=1", "corrupt_shards=skip"))
    assert r.returncode == 0, r.stderr[-4000:]
    assert "Traceback" not in r.stderr and "ValueError" not in r.stderr
    assert f"corrupt shard {name}: sample {key}: token id {vocab + 5} outside the vocabulary" in r.stderr
    assert f"skipping corrupt shard {name}" in r.stderr
    assert f"trained to step {3 * n_train}" in r.stdout
    # validate agrees
    v = run("shardforge.cli", "validate", copy, "--no-progress")
    assert v.returncode == 1 and f"token id {vocab + 5} >= vocab size {vocab}" in v.stdout


# ---------------------------------------------------------------- 10: checksum before use

def _flip_payload_byte(path: str) -> None:
    """The low byte of the first sample's second token (id +- 1, still in the vocabulary): the tar stays
    well-formed and every sample check passes; only the sha256 tells."""
    with open(path, "r+b") as f:
        f.seek(512 + 128 + 2)
        b = f.read(1)
        f.seek(512 + 128 + 2)
        f.write(bytes([b[0] ^ 0x01]))


def test_no_sample_of_a_changed_shard_is_trained_on_with_shuffle_buffer_1(corpus, copy, tmp_path):
    """Every train shard changed after the build: the run must stop before its first step.

    (Before the fix, with shuffle_buffer=1 the first samples of each shard were
    released before the shard's end was hashed, so steps ran on changed data.)
    """
    _, m = corpus
    for s in m.shards_of("train"):
        _flip_payload_byte(os.path.join(copy, s.name))
    out = str(tmp_path / "run")
    r = run(*train_args(copy, out, 100, "shuffle_buffer=1"))
    one_error_line(r, "corrupt shard train-", "sha256 does not match the manifest")
    assert metric_rows(out) == 0, open(os.path.join(out, "metrics.jsonl")).read()[:500]
    assert not re.search(r"^step 1/", r.stdout, re.M), r.stdout  # no progress line: no step ran


# ---------------------------------------------------------------- 11: the tokenizer travels with the corpus

def test_a_relative_tokenizer_is_copied_in_and_validate_opens_it_as_the_trainer_does(corpus, demo_corpus,
                                                                                     tmp_path):
    from test_storage import store_config

    base_root, m = corpus
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    shutil.copytree(base_root, work / "base")
    cfg = store_config(demo_corpus, target_samples=32).model_dump(mode="json")
    (work / "build.json").write_text(json.dumps(cfg))
    out = str(tmp_path / "reused")
    b = run("pipelines.build", "--config", "build.json", "--output", out, "--tokenizer", f"base/{m.tokenizer.path}",
            cwd=str(work), timeout=600)
    assert b.returncode == 0, b.stderr[-4000:]
    with open(os.path.join(out, "manifest.json")) as f:
        tok = json.load(f)["tokenizer"]
    # The copy sits in the build's attempt folder, inside the corpus (the path rule).
    assert re.fullmatch(r"versions/v1-[0-9a-f]{16}/tokenizer/spm\.model", tok["path"]), tok["path"]
    assert tok["sha256"] == m.tokenizer.sha256
    with open(os.path.join(out, tok["path"]), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == m.tokenizer.sha256
    shutil.rmtree(work / "base")  # the original is gone: the corpus must not need it
    v = run("shardforge.cli", "validate", out, "--no-progress", cwd=str(elsewhere))
    assert v.returncode == 0 and v.stdout.startswith("OK:"), v.stdout + v.stderr
    t = run(*train_args(out, str(tmp_path / "run"), 2), cwd=str(elsewhere))
    assert t.returncode == 0 and "trained to step 2" in t.stdout, t.stderr[-4000:]

    # Tampered: validate and the trainer say the same thing, through the same opener.
    model = os.path.join(out, tok["path"])
    os.remove(model)
    v = run("shardforge.cli", "validate", out, "--no-progress", cwd=str(elsewhere))
    assert v.returncode == 1 and "tokenizer: tokenizer model" in v.stdout and "does not exist" in v.stdout
    one_error_line(run(*train_args(out, str(tmp_path / "run2"), 2), cwd=str(elsewhere)),
                   "tokenizer model", "does not exist")
    with open(model, "wb") as f:
        f.write(b"not a model")
    v = run("shardforge.cli", "validate", out, "--no-progress", cwd=str(elsewhere))
    assert v.returncode == 1 and "it changed after the build" in v.stdout, v.stdout
    one_error_line(run(*train_args(out, str(tmp_path / "run3"), 2), cwd=str(elsewhere)),
                   "it changed after the build")


# ---------------------------------------------------------------- 12: a truncated newest checkpoint

def test_resume_skips_a_truncated_newest_checkpoint_and_says_so(corpus, tmp_path):
    root, _ = corpus
    out = str(tmp_path / "run")
    r = run(*train_args(root, out, 4, "checkpoint_every=2"))
    assert r.returncode == 0, r.stderr[-4000:]
    ckpts = sorted(os.listdir(os.path.join(out, "checkpoints")))
    assert ckpts == ["ckpt-00000002.pt", "ckpt-00000002.pt.sha256", "ckpt-00000004.pt", "ckpt-00000004.pt.sha256"]
    newest = os.path.join(out, "checkpoints", "ckpt-00000004.pt")
    with open(newest, "r+b") as f:  # a full disk / an interrupted copy
        f.truncate(os.path.getsize(newest) // 2)
    r = run(*train_args(root, out, 6, "checkpoint_every=2"))
    assert r.returncode == 0, r.stderr[-4000:]
    skipped = [x for x in r.stderr.splitlines() if "skipping checkpoint" in x]
    assert len(skipped) == 1 and "ckpt-00000004.pt" in skipped[0] and "does not load" in skipped[0], skipped
    assert "resumed from" in r.stderr and "ckpt-00000002.pt at step 2" in r.stderr
    assert "trained to step 6" in r.stdout
    rows = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))]
    assert [x["step"] for x in rows] == [1, 2, 3, 4, 5, 6]  # steps 3-4 trained again, logged once

    # Bytes flipped inside the newest (its size unchanged: torch.load would take it): its sha256 says so.
    newest = os.path.join(out, "checkpoints", "ckpt-00000006.pt")
    with open(newest, "r+b") as f:
        f.seek(os.path.getsize(newest) // 2)
        chunk = f.read(64)
        f.seek(-len(chunk), os.SEEK_CUR)
        f.write(bytes(b ^ 0xFF for b in chunk))
    r = run(*train_args(root, out, 8, "checkpoint_every=2"))
    assert r.returncode == 0, r.stderr[-4000:]
    skipped = [x for x in r.stderr.splitlines() if "skipping checkpoint" in x]
    assert len(skipped) == 1 and "ckpt-00000006.pt" in skipped[0] and "do not match the sha256" in skipped[0], skipped
    assert "ckpt-00000004.pt at step 4" in r.stderr

    # Every checkpoint damaged: one clear line, not a silent restart from scratch.
    for name in os.listdir(os.path.join(out, "checkpoints")):
        path = os.path.join(out, "checkpoints", name)
        if name.endswith(".pt"):
            with open(path, "r+b") as f:
                f.truncate(100)
    r = run(*train_args(root, out, 10, "checkpoint_every=2"))
    one_error_line(r, "none of the", "checkpoints in", "loads")
    assert len([x for x in r.stderr.splitlines() if "skipping checkpoint" in x]) == 3


# ---------------------------------------------------------------- hostile values: one line, never a traceback

DEEP = "[" * 100_000 + "]" * 100_000


def _hostile_value(root: str, case: str, m: Any) -> str:
    """Write one hostile value into a corpus copy; returns what the one line must say."""
    path = os.path.join(root, "manifest.json")
    text = open(path).read()
    if case == "json_member":  # a sample's .json member nested 100k deep (bytes and sha256 made to match)
        from test_tools import replace_shard

        for name in (s.name for s in m.shards):  # every one: whichever the trainer reads first
            with open(os.path.join(root, name), "rb") as f:
                samples = [(k, {**mem, "json": DEEP.encode()}) for k, mem in iter_tar_samples(f, name)]
            replace_shard(root, name, tar_bytes([(k, list(mem.items())) for k, mem in samples]))
        return "nested too deep"
    value = {"digits": "9" * 5000, "nesting": DEEP, "max_seq_len": "-1"}[case]
    at = text.rindex('"max_seq_len": ')  # the manifest's own, not the config record's
    end = text.index(",", at)
    if case == "nesting":
        text = text[:at] + f'"counters_x": {value}, ' + text[at:]
    else:
        text = text[:at] + f'"max_seq_len": {value}' + text[end:]
    open(path, "w").write(text)
    return {"digits": "not valid JSON (Exceeds the limit", "nesting": "not valid JSON (nested too deep)",
            "max_seq_len": "max_seq_len: Input should be greater than or equal to 8"}[case]


@pytest.mark.parametrize("case", ["digits", "nesting", "max_seq_len", "json_member"])
def test_hostile_values_are_one_line_in_validate_inspect_and_train(corpus, copy, case, tmp_path):
    """A 5,000-digit integer, 100k-deep nesting, max_seq_len -1, a sample .json member 100k deep: each
    is one line (exit 2) in inspect and train, and in validate one line or its list of problems (exit 1),
    never a traceback."""
    needle = _hostile_value(copy, case, corpus[1])
    v = run("shardforge.cli", "validate", copy, "--no-progress")
    if case == "json_member":  # validate lists every problem it finds
        assert v.returncode == 1 and needle in v.stdout and "Traceback" not in v.stderr, v.stdout + v.stderr
    else:
        one_error_line(v, needle)
    one_error_line(run("shardforge.cli", "inspect", copy), needle)
    one_error_line(run(*train_args(copy, str(tmp_path / "run"), 2)), needle)


def _checkpoint_file(path: str, state: Any = None, pickled: bytes | None = None) -> str:
    """A torch checkpoint file of ``state``, or a torch zip whose data.pkl is ``pickled``."""
    import zipfile

    import torch

    buf = io.BytesIO()
    torch.save(state if pickled is None else {}, buf)
    if pickled is not None:
        src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
            for n in src.namelist():
                z.writestr(n, pickled if n.endswith("data.pkl") else src.read(n))
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return path


def test_export_of_a_malicious_checkpoint_is_one_line_and_runs_nothing(corpus, tmp_path):
    """A pickle that would call os.system, a foreign file, a state that is not a checkpoint, and a
    vocab_size that would allocate a 10^12-row embedding: one line each; nothing is run or built."""
    import pickle

    import torch

    root, m = corpus
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    run_dir = tmp_path / "trained"
    r = run(*train_args(root, str(run_dir), 1))
    assert r.returncode == 0, r.stderr[-3000:]
    good = torch.load(run_dir / "checkpoints" / "ckpt-00000001.pt", weights_only=True)
    cases = {
        "evil.pt": (_checkpoint_file(str(tmp_path / "evil.pt"), pickled=pickle.dumps({"model": Evil()}, protocol=2)),
                    "it names posix.system, which no checkpoint holds; refused without running any of it"),
        "plain.pt": (str(tmp_path / "plain.pt"), "it does not load as one"),
        "list.pt": (_checkpoint_file(str(tmp_path / "list.pt"), [1, 2]), "it holds no training config and model"),
        "vocab.pt": (_checkpoint_file(str(tmp_path / "vocab.pt"), {**good, "vocab_size": 10**12}),
                     "its tensors are not those of the model its config describes"),
    }
    (tmp_path / "plain.pt").write_bytes(pickle.dumps(Evil()))
    tokenizer = os.path.join(root, m.tokenizer.path)
    for name, (path, needle) in cases.items():
        line = one_error_line(run("shardforge.cli", "export", path, str(tmp_path / f"hf-{name}"),
                                  "--tokenizer", tokenizer), needle)
        assert "weights_only=False" not in line and "\n" not in line, line
        assert not (tmp_path / f"hf-{name}").exists()
    assert not marker.exists()
