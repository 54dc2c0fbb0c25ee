"""The edges, through the real commands: readable records kept, links kept inside, every reject
traceable to its file and place, report.html free of raw control bytes, a tokenizer folder named
as such, the loader's message when every shard is skipped, and ``inspect`` over plain HTTP from a
server that ignores range requests.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from forkserver import run_python

from schemas.sample import iter_tar_samples, tar_bytes

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}
SECRET = "The lighthouse keeper wrote about zebras"


def run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """`python -m ARGS`, as a user would run it."""
    return run_python(["-m", *args], env=ENV, capture_output=True, text=True, timeout=timeout)


def one_error_line(r: subprocess.CompletedProcess) -> str:
    lines = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    return lines[0]


def decodable_lines(data: bytes) -> int:
    out = zlib.decompressobj(31).decompress(data)
    return sum(1 for line in out.split(b"\n")[:-1] if line.strip())


def hostile_edges(root: Path, demo_corpus: dict[str, str]) -> tuple[str, int, dict[str, int]]:
    """raw/: good CC-News lines, and every edge of readable records; a link out to a secret.
    Returns (glob, records read, the place each edge file's reject must name)."""
    demo = Path(demo_corpus["ccnews"]).parent
    lines = [x for x in (demo / "part-0.jsonl").read_bytes().split(b"\n") if x.strip()]
    more = [x for x in (demo / "part-1.jsonl").read_bytes().split(b"\n") if x.strip()]
    raw, outside = root / "raw", root / "outside"
    raw.mkdir()
    outside.mkdir()
    (raw / "good.jsonl").write_bytes(b"\n".join(lines[:10]) + b"\n")
    nul = lines[10:22]
    nul[1] = nul[1][:30] + b"\x00" + nul[1][30:]  # one NUL byte in line 2
    (raw / "nul.jsonl").write_bytes(b"\n".join(nul) + b"\n")
    (raw / "cr.jsonl").write_bytes(b"\r".join(lines[22:]) + b"\r")  # classic Mac line ends
    whole = gzip.compress(b"\n".join(more) + b"\n")
    cut = whole[: int(len(whole) * 0.9)]
    (raw / "cut.jsonl.gz").write_bytes(cut)
    (raw / "tail.jsonl.gz").write_bytes(gzip.compress(b"\n".join(more[:6]) + b"\n") + b"trailing garbage")
    secret = " ".join([f"{SECRET} number {i} in the harbour town." for i in range(30)])
    (outside / "secret.jsonl").write_text(json.dumps({"text": secret}) + "\n")
    os.symlink(outside / "secret.jsonl", raw / "leak.jsonl")
    kept_cut = decodable_lines(cut)
    read = 10 + len(nul) + len(lines[22:]) + (kept_cut + 1) + (6 + 1) + 1
    return str(raw / "*"), read, {"cut": kept_cut}


def reject_rows(out: Path) -> list[dict]:
    return [json.loads(line) for p in sorted(out.glob("versions/*/rejects/part-*.jsonl"))
            for line in p.read_text(encoding="utf-8").splitlines()]


def test_cli_build_keeps_readable_records_refuses_links_out_and_traces_every_reject(tmp_path, demo_corpus):
    pattern, expected, where = hostile_edges(tmp_path, demo_corpus)
    out = tmp_path / "corpus"
    r = run("pipelines.build", "--input", f"ccnews={pattern}", "--input", f"other={demo_corpus['stories']}",
            "--input", demo_corpus["openwebtext"], "--vocab_size", "400", "--output", str(out))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    accounting = json.loads((out / "manifest.json").read_text())["accounting"]
    assert set(accounting) == {"ccnews", "other", "other2"}  # the tag other= is kept
    for name, a in accounting.items():
        out_total = a["kept"] + sum(a["filtered"].values()) + sum(a["duplicate"].values()) + sum(a["rejected"].values())
        assert a["input"] == out_total, name
    acct = accounting["ccnews"]
    assert acct["input"] == expected
    assert {k: acct["rejected"].get(k) for k in ("binary", "truncated", "corrupt_compressed", "not_a_file")} == \
        {"binary": 1, "truncated": 1, "corrupt_compressed": 1, "not_a_file": 1}
    clean = " ".join(t for p in out.glob("versions/*/clean/part-*.parquet") for t in pq.read_table(p).column("text").to_pylist())
    assert "zebras" not in clean and "zebras" not in (out / "report.json").read_text()

    rows = reject_rows(out)
    assert rows and all(row.get("file") and row.get("position") for row in rows)  # every entry is traceable
    by_reason = {row["reason"]: row for row in rows if row["source"] == "ccnews"}
    raw = Path(pattern).parent
    assert (by_reason["binary"]["file"], by_reason["binary"]["position"]) == (str(raw / "nul.jsonl"), "line 2")
    assert (by_reason["truncated"]["file"], by_reason["truncated"]["position"]) == \
        (str(raw / "cut.jsonl.gz"), f"after line {where['cut']}")
    assert by_reason["corrupt_compressed"]["position"] == "after line 6"
    assert (by_reason["not_a_file"]["file"], by_reason["not_a_file"]["position"]) == (str(raw / "leak.jsonl"), "whole file")
    # a record rejected or filtered by cleaning, or removed as a duplicate, points at its line in its file
    checked = 0
    for row in rows:
        m = re.fullmatch(r"line (\d+)", row["position"])
        if m and row["file"].endswith(".jsonl") and row["reason"] != "binary":
            line = Path(row["file"]).read_bytes().replace(b"\r", b"\n").split(b"\n")[int(m[1]) - 1]
            if row["bucket"] == "filtered":
                assert row["snippet"][:20] in json.loads(line)["text"].replace("\n\n", "\n"), row
                checked += 1
            elif row["reason"] == "malformed_json":
                assert row["snippet"][:20] in line.decode("utf-8", "replace"), row
                checked += 1
    assert checked >= 3
    html = (out / "report.html").read_bytes()
    assert not re.search(rb"[\x00-\x08\x0b\x0e-\x1f\x7f]", html)  # the binary line's snippet, escaped
    assert b"\\x00" in html


def test_serve_refuses_a_link_out_of_its_watch_folder(tmp_path, demo_corpus):
    watch, outside = tmp_path / "watch", tmp_path / "outside"
    watch.mkdir()
    outside.mkdir()
    for name in ("ccnews", "openwebtext", "stories"):
        for i, p in enumerate(sorted(Path(demo_corpus[name]).parent.glob("*.jsonl"))):
            shutil.copy(p, watch / f"{name}-{i}.jsonl")
    secret = " ".join([f"{SECRET} number {i} in the harbour town." for i in range(30)])
    (outside / "secret.jsonl").write_text(json.dumps({"text": secret}) + "\n")
    os.symlink(outside / "secret.jsonl", watch / "leak.jsonl")
    corpus = tmp_path / "served"
    r = run("pipelines.serve", "--watch", str(watch / "*.jsonl"), "--corpus", str(corpus), "--once", "--settle", "0",
            "--vocab_size", "300")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    manifest = json.loads(next(corpus.glob("manifest-v1.json")).read_text())
    assert manifest["accounting"]["other"]["rejected"].get("not_a_file") == 1
    clean = " ".join(t for p in corpus.glob("versions/*/clean/part-*.parquet") for t in pq.read_table(p).column("text").to_pylist())
    assert clean and "zebras" not in clean
    assert any(row["reason"] == "not_a_file" and row["file"] == str(watch / "leak.jsonl") for row in reject_rows(corpus))


def test_a_tokenizer_path_that_is_a_folder_is_named_a_folder(tmp_path, demo_corpus):
    folder = tmp_path / "tok"
    folder.mkdir()
    line = one_error_line(run("pipelines.build", "--input", demo_corpus["ccnews"], "--tokenizer", str(folder),
                              "--output", str(tmp_path / "out")))
    assert "folder" in line and "not found" not in line, line


def test_a_single_process_run_with_every_shard_skipped_says_so(tmp_path, corpus_copy):
    for p in Path(corpus_copy).glob("train-*.tar"):
        p.unlink()
    line = one_error_line(run("trainer.train", "--data", corpus_copy, "--output", str(tmp_path / "run"),
                              "--steps", "2", "--batch_size", "4", "--device", "cpu", "--set", "model.size=tiny",
                              "--set", "corrupt_shards=skip"))
    assert "rank" not in line and "skipped" in line, line


@pytest.fixture
def no_range_server(corpus_copy) -> Iterator[str]:
    """The corpus over plain HTTP from a server that answers every range request with the whole file."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=corpus_copy)
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def grow_first_shard(root: str, min_bytes: int = 12 << 20) -> int:
    """Rewrite the first train shard as its samples over and over (new keys) past min_bytes, and
    record it in the manifest: past the first block a reader fetches (8 MiB). Returns its samples."""
    path = os.path.join(root, "manifest.json")
    m = json.loads(open(path).read())
    shard = next(s for s in m["shards"] if s["split"] == "train")
    with open(os.path.join(root, shard["name"]), "rb") as f:
        samples = [members for _, members in iter_tar_samples(f)]
    prefix = shard["name"].split("-")[0] + "-00000-"
    copies, size = [], 0
    while size < min_bytes:
        members = samples[len(copies) % len(samples)]
        copies.append((f"{prefix}{len(copies):08d}", sorted(members.items())))
        size += sum(1024 + len(v) for v in members.values())
    data = tar_bytes(copies)
    with open(os.path.join(root, shard["name"]), "wb") as f:
        f.write(data)
    factor = len(copies) / shard["samples"]
    grown = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "samples": len(copies),
             "tokens": round(shard["tokens"] * factor)}
    totals = m["totals"]["train"]
    for k in ("bytes", "samples", "tokens"):
        totals[k] += grown[k] - shard[k]
    shard.update(grown)
    open(path, "w").write(json.dumps(m, sort_keys=True, indent=1) + "\n")
    return len(copies)


def test_inspect_over_plain_http_without_range_requests(corpus_copy, no_range_server):
    n = grow_first_shard(corpus_copy)
    r = run("shardforge.cli", "inspect", no_range_server, "--max-shards", "1", "--json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert json.loads(r.stdout)["lengths"]["sequences"] == n
