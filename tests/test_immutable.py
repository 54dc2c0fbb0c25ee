"""A committed version is never overwritten: checked inputs, conditional creates all the way down.

The data job makes every object's name from its attempt tag, and the tag from its inputs'
fingerprints. Two things keep a committed version's bytes: the reader checks the bytes it reads
against the fingerprints the tag was made from (``storage.open_checked``), so an input rewritten
after the tag was made fails the build in one line; and every object of a version is published by
a conditional create (``write_stream_atomic(create=True)``: ``link(2)`` locally, GCS rewrite with
``ifGenerationMatch=0``, S3 CopyObject with ``If-None-Match: *``), so no writer replaces one, whatever
it read. Through the real CLI on local disk, and the storage primitives on local disk, memory://,
the GCS emulator and the S3 emulator (tests/gcs_emulator.py, tests/s3_emulator.py).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import listing
from forkserver import run_python
from test_serve import articles, small_config

from pipelines.sources.rawfiles import fingerprint, list_raw_files
from shardforge import storage

ROOT = Path(__file__).resolve().parents[1]




# ---------------------------------------------------------------- the primitive, every backend


def test_a_create_never_replaces_an_object_on_every_backend(store_url) -> None:
    url = storage.join(store_url, "train-000000-v1-0123456789abcdef.tar")
    first = b"committed bytes " * 4000
    assert storage.write_stream_atomic(url, lambda f: f.write(first), create=True) == \
        (hashlib.sha256(first).hexdigest(), len(first))
    # The same bytes again: an identical rerun, success.
    assert storage.write_stream_atomic(url, lambda f: f.write(first), create=True)[1] == len(first)
    # Other bytes, same size and not: refused, the object as it was, no temporary left.
    for other in (b"other bytes!!!! " * 4000, b"short"):
        with pytest.raises(storage.ObjectConflict, match="already holds other bytes"):
            storage.write_bytes_atomic(url, other, create=True)
        assert storage.read_bytes(url) == first
    assert listing(store_url) == ["train-000000-v1-0123456789abcdef.tar"]
    # A plain write (a pointer, a report) still replaces.
    storage.write_bytes_atomic(storage.join(store_url, "latest"), b"1")
    storage.write_bytes_atomic(storage.join(store_url, "latest"), b"2")
    assert storage.read_bytes(storage.join(store_url, "latest")) == b"2"


@pytest.mark.parametrize("backend", ["file", "gs", "s3"])
def test_the_publish_step_itself_is_conditional(backend, request, tmp_path, monkeypatch) -> None:
    """A writer that looked before another created the name (the race the exists-check cannot close)
    still never replaces it: the publish step (link / rewrite / CopyObject) is itself conditional."""
    base = str(tmp_path) if backend == "file" else \
        request.getfixturevalue({"gs": "gcs_bucket", "s3": "s3_bucket"}[backend]) + "/race"
    url = storage.join(base, "versions/v1-0123456789abcdef/tokenizer/spm.model")
    storage.write_bytes_atomic(url, b"the winner's bytes", create=True)
    fs, _ = storage.get_fs(url)
    monkeypatch.setattr(type(fs), "exists", lambda self, path, **kw: False)  # "not there yet", it saw
    with pytest.raises(storage.ObjectConflict):
        storage.write_bytes_atomic(url, b"a loser's other bytes", create=True)
    monkeypatch.undo()
    assert storage.read_bytes(url) == b"the winner's bytes"
    assert listing(storage.join(base, "versions/v1-0123456789abcdef/tokenizer")) == ["spm.model"]


# ---------------------------------------------------------------- the reader checks what it reads


@pytest.mark.parametrize("backend", ["file", "gs", "s3"])
def test_bytes_read_are_checked_against_the_listed_fingerprint(backend, request, tmp_path) -> None:
    base = str(tmp_path) if backend == "file" else \
        request.getfixturevalue({"gs": "gcs_bucket", "s3": "s3_bucket"}[backend]) + "/raw"
    url = storage.join(base, "f0.jsonl")
    before = b"".join(json.dumps({"text": t}).encode() + b"\n" for t in articles(1, 30))
    storage.write_bytes_atomic(url, before)
    (listed,) = list_raw_files(url)
    fp = fingerprint(listed)
    assert fp.split(":")[0] == {"file": "sha256", "gs": "md5", "s3": "etag"}[backend]
    with storage.open_checked(url, fp) as f:  # read as it was listed: passes
        assert f.read() == before
        f.check()
    with storage.open_checked(url, fp) as f:  # read in pieces out of order (Parquet): the rest is read
        f.seek(len(before) - 10)
        f.read()
        f.check()
    storage.write_bytes_atomic(url, before.replace(b"the", b"THE"))  # same size, other bytes
    with storage.open_checked(url, fp) as f, pytest.raises(storage.InputChanged, match="changed while"):
        f.read(100)  # a reader that stops early: check() reads the rest
        f.check()


def test_a_peek_at_the_start_then_a_whole_read_hashes_every_byte_once(tmp_path) -> None:
    """The format sniff reads a file's first bytes and seeks back; the read that follows goes on hashing past
    them, so check() reads nothing again, and a changed byte after the peek is still caught."""
    from shardforge.storage.fingerprints import CheckedReader

    data = b"".join(json.dumps({"text": t}).encode() + b"\n" for t in articles(1, 30))
    fp = "sha256:" + hashlib.sha256(data).hexdigest()

    class Counted(io.BytesIO):
        taken = 0

        def read(self, n: int | None = -1) -> bytes:
            out = super().read(n)
            Counted.taken += len(out)
            return out

    for body, changed in ((data, False), (data[:-5] + b"XXXX\n", True)):
        Counted.taken = 0
        f = CheckedReader(Counted(body), "raw/f.jsonl", fp)
        assert f.read(6) == body[:6] and f.seek(0) == 0
        while f.read(1000):
            pass
        if changed:
            with pytest.raises(storage.InputChanged):
                f.check()
        else:
            f.check()
        assert Counted.taken == len(body) + 6  # the peek, then one pass: nothing read again by check()


def test_an_input_that_was_no_file_to_read_or_vanished_is_a_change(tmp_path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"text": "x"}\n')
    for listed_as in ("unreadable:12:0", "skipped:not_a_file"):  # could not be read when listed; now it can
        with storage.open_checked(str(path), listed_as) as f, pytest.raises(storage.InputChanged):
            f.read()
            f.check()
    with pytest.raises(storage.InputChanged, match="now cannot be read"):  # read when listed; now gone
        storage.check_unreadable(str(path), "sha256:00", FileNotFoundError(str(path)))
    storage.check_unreadable(str(path), "unreadable:12:0", PermissionError(str(path)))  # as it was


def test_a_listing_that_differs_from_the_fingerprinted_one_is_refused() -> None:
    expected = {"/raw/a.jsonl": "sha256:00", "/raw/b.jsonl": "sha256:11", "/raw/.part": "skipped:hidden_file",
                "/raw/d": "skipped:not_a_file"}
    storage.check_listed("news", ["/raw/a.jsonl", "/raw/b.jsonl"], expected)  # skipped ones are never read
    storage.check_listed("news", ["/raw/a.jsonl", "/raw/b.jsonl", "/raw/d"], expected)  # the reader rejects d
    with pytest.raises(storage.InputChanged, match="appeared: /raw/c.jsonl; vanished: /raw/b.jsonl"):
        storage.check_listed("news", ["/raw/a.jsonl", "/raw/c.jsonl"], expected)
    with pytest.raises(storage.InputChanged, match="appeared: /raw/.late.jsonl"):  # a hidden name read (asked for)
        storage.check_listed("news", ["/raw/a.jsonl", "/raw/b.jsonl", "/raw/.late.jsonl"], expected)


# ---------------------------------------------------------------- the scenario, through the CLI

REWRITTEN_BUILD = textwrap.dedent("""
    import runpy, shutil, sys
    sys.path.insert(0, {root!r})
    import pipelines.graph as graph

    real, target, replacement = graph.ReadSources, sys.argv[1], sys.argv[2]

    def listed_then_rewritten(*args, **kwargs):
        sources = real(*args, **kwargs)  # the tag's fingerprints and the listing are taken by now
        shutil.copyfile(replacement, target)  # rewritten before the reader opens it
        return sources

    graph.ReadSources = listed_then_rewritten
    sys.argv = ["pipelines.build", *sys.argv[3:]]
    runpy.run_module("pipelines.build", run_name="__main__")
""")


def error_lines(res: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in res.stderr, res.stderr
    return [line for line in res.stderr.splitlines() if line.startswith("error:")]


def test_an_input_rewritten_during_a_build_never_overwrites_a_committed_version(tmp_path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    original = "".join(json.dumps({"text": t}) + "\n" for t in articles(100, 24))
    (raw / "f0.jsonl").write_text(original)
    (tmp_path / "edition2.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in articles(999, 24)))
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(small_config()))
    out = tmp_path / "corpus"
    args = ["--input", f"news={raw / 'f0.jsonl'}", "--output", str(out), "--config", str(cfg)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    # 1. Rewritten after the fingerprint, before the read: one line, nothing committed.
    res = subprocess.run([sys.executable, "-c", REWRITTEN_BUILD.format(root=str(ROOT)), str(raw / "f0.jsonl"),
                          str(tmp_path / "edition2.jsonl"), *args], env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 2, res.stderr
    (line,) = error_lines(res)
    assert f"input {raw / 'f0.jsonl'} changed while this build read it" in line and "nothing was committed" in line
    assert "[while running" not in line
    assert not (out / "manifest.json").exists()

    # 2. Restored, the same command again: a clean build, exit 0, and it validates.
    (raw / "f0.jsonl").write_text(original)
    build = ["-m", "pipelines.build", *args]
    res = run_python(build, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    check = subprocess.run([sys.executable, "-m", "shardforge.cli", "validate", str(out), "--no-progress"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    committed = {p.name: p.read_bytes() for p in out.iterdir() if p.name.endswith(".tar")} | \
        {"manifest.json": (out / "manifest.json").read_bytes()}

    # 3. A committed shard whose bytes are not what this build makes (a version committed before
    # inputs were checked, or tampered with): a rerun refuses in one line and replaces nothing.
    victim = sorted(n for n in committed if n.startswith("train-"))[1]
    tampered = bytearray(committed[victim])
    tampered[600] ^= 1
    (out / victim).write_bytes(bytes(tampered))
    res = run_python(build, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 2, res.stderr
    (line,) = error_lines(res)
    assert f"{out / victim} already holds other bytes" in line and "never replaced" in line, line
    assert (out / victim).read_bytes() == bytes(tampered)
    assert {n: (out / n).read_bytes() for n in committed if n != victim} == \
        {n: b for n, b in committed.items() if n != victim}
    assert not [p for p in out.rglob(".*.tmp")]
