"""Continuous ingest end to end: the serve process on a local folder (killed and restarted), and on GCS.

The module fixture runs one scenario and the tests check its outcome: three
batches of raw files dropped over time, the service SIGKILLed in the middle of
the second batch and restarted, near and exact copies of earlier documents in
later batches, a file changed after it was absorbed.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from pipelines.jobs.ingest import read_ledger, recover
from pipelines.records import make_doc_id
from schemas.errors import UserError
from schemas.manifest import LATEST_NAME, Manifest
from schemas.naming import BATCH_MANIFEST_NAME, SHARD_NAME_RE
from shardforge.commands.synth import make_article
from shardforge.storage.contract import (
    committed_versions,
    latest_manifest_url,
    load_version,
    read_latest_pointer,
)

pytestmark = pytest.mark.slow

SOURCE = "news"
DOCS_PER_FILE = 24


def small_config() -> dict[str, Any]:
    """Version 1's build config: tiny vocabulary and shards; the synthetic text's n-gram rules off."""
    return {
        "sources": [{"name": SOURCE, "input": "unused"}],
        "clean": {"disabled_rules": ["dup_ngrams", "top_ngrams"]},
        "tokenizer": {"vocab_size": 300},
        "packing": {"max_seq_len": 96, "valid_fraction": 0.1},
        "shards": {"target_samples": 16, "target_bytes": 1 << 30},
    }


def articles(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [make_article(rng, rng.randint(8, 16)) for _ in range(n)]


def near_copy(text: str, at: float = 0.5) -> str:
    """The text with one word changed: 5-gram shingle Jaccard about 0.9 with the original."""
    words = text.split(" ")
    i = int(len(words) * at)
    words[i] = "meanwhile" if words[i] != "meanwhile" else "however"
    return " ".join(words)


def drop(folder: Path, name: str, texts: list[str], tail: str = "") -> Path:
    """Land a raw JSONL file atomically (hidden temporary name, then rename), like an uploader would;
    tail: raw lines after the records."""
    tmp = folder / f".{name}.part"
    tmp.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts) + tail)
    os.replace(tmp, folder / name)
    return folder / name


def wait_for(pred, timeout: float, proc: subprocess.Popen | None = None, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"serve exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def serve_cmd(watch: str, corpus: str, cfg: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.serve", "--watch", watch, "--corpus", corpus, "--source", SOURCE,
            "--poll", "0.3", "--settle", "0", "--config", cfg]


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=open(log, "ab"), stderr=subprocess.STDOUT, cwd=Path(__file__).parents[1])


def shard_doc_ids(root: str, m: Manifest, names: set[str] | None = None) -> tuple[set[str], list[str]]:
    """(document ids, sample keys) of the listed shards (all of m's shards by default)."""
    docs: set[str] = set()
    keys: list[str] = []
    for s in m.shards:
        if names is not None and s.name not in names:
            continue
        with tarfile.open(os.path.join(root, s.name)) as tar:
            for member in tar.getmembers():
                key, suffix = member.name.split(".", 1)
                if suffix == "json":
                    docs.update(json.load(tar.extractfile(member))["doc_ids"])  # type: ignore[arg-type]
                    keys.append(key)
    return docs, keys


def sha256_file(path: str) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("serve")
    raw, corpus = base / "incoming", str(base / "corpus")
    raw.mkdir()
    cfg = base / "config.json"
    cfg.write_text(json.dumps(small_config()))
    log = base / "serve.log"
    cmd = serve_cmd(str(raw / "*.jsonl"), corpus, str(cfg))
    out: dict[str, Any] = {"raw": raw, "corpus": corpus, "log": log, "files": []}

    b1 = articles(1, 2 * DOCS_PER_FILE)
    proc = start(cmd, log)
    try:
        out["files"] += [drop(raw, "b1-0.jsonl", b1[:DOCS_PER_FILE]), drop(raw, "b1-1.jsonl", b1[DOCS_PER_FILE:])]
        wait_for(lambda: os.path.exists(os.path.join(corpus, "manifest-v1.json")), 240, proc, "version 1")
        v1 = load_version(corpus, 1)
        out["v1_bytes"] = {s.name: sha256_file(os.path.join(corpus, s.name)) for s in v1.shards}
        out["v1_manifest"] = open(os.path.join(corpus, "manifest-v1.json"), "rb").read()

        # Batch 2: new articles, plus a near copy and an exact copy of version-1 documents.
        b2 = articles(2, 2 * DOCS_PER_FILE)
        near_src = b1[3]
        b2_file0 = b2[:DOCS_PER_FILE] + [near_copy(near_src)]
        out["near_v1"] = (str(raw / "b2-0.jsonl"), DOCS_PER_FILE)  # (path, record index) of the near copy
        out["exact_v1"] = (str(raw / "b2-1.jsonl"), DOCS_PER_FILE)
        out["files"] += [drop(raw, "b2-0.jsonl", b2_file0), drop(raw, "b2-1.jsonl", b2[DOCS_PER_FILE:] + [b1[7]])]
        # Kill it in the middle of batch 2: its work folder exists, its version is not committed.
        wait_for(lambda: bool(glob.glob(os.path.join(corpus, "versions", "v2-*", "dedupe"))), 120, proc,
                 "batch 2 to be under way")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        out["killed_mid_batch"] = not os.path.exists(os.path.join(corpus, "manifest-v2.json"))
        out["orphans_after_kill"] = sorted(
            os.path.basename(p) for p in glob.glob(os.path.join(corpus, "*.tar"))
            if os.path.basename(p) not in out["v1_bytes"])

        proc = start(cmd, log)
        wait_for(lambda: os.path.exists(os.path.join(corpus, "manifest-v2.json")), 240, proc, "version 2")
        # Batch 3: a near copy of a version-2 document, a near copy of a version-1 one, new text.
        b3 = articles(3, DOCS_PER_FILE) + [near_copy(b2[5], 0.3), near_copy(b1[11], 0.7)]
        out["near_v3"] = [(str(raw / "b3-0.jsonl"), DOCS_PER_FILE), (str(raw / "b3-0.jsonl"), DOCS_PER_FILE + 1)]
        out["files"].append(drop(raw, "b3-0.jsonl", b3, tail='{"text": "a record cut off\n'))  # one malformed
        wait_for(lambda: os.path.exists(os.path.join(corpus, "manifest-v3.json")), 240, proc, "version 3")
        # A file changed after it was absorbed: reported, never re-ingested.
        with open(raw / "b1-0.jsonl", "a") as f:
            f.write(json.dumps({"text": articles(9, 1)[0]}) + "\n")
        wait_for(lambda: "changed after ingest" in log.read_text(), 60, proc, "the change to be reported")
        proc.send_signal(signal.SIGTERM)
        out["exit_code"] = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out


def chain(corpus: str) -> list[Manifest]:
    return [load_version(corpus, n) for n in committed_versions(corpus)]


def test_every_file_absorbed_exactly_once_across_a_kill(served):
    corpus = served["corpus"]
    assert served["killed_mid_batch"], "the kill landed after batch 2 committed; the test proves less"
    assert served["exit_code"] == 0
    ms = chain(corpus)
    assert [m.version for m in ms] == [1, 2, 3]
    absorbed = [f.path for m in ms for f in m.inputs]
    assert sorted(absorbed) == sorted(str(p) for p in served["files"])
    assert len(set(absorbed)) == len(absorbed)
    assert [sorted(os.path.basename(f.path) for f in m.inputs) for m in ms] == [
        ["b1-0.jsonl", "b1-1.jsonl"], ["b2-0.jsonl", "b2-1.jsonl"], ["b3-0.jsonl"]]
    ledger = read_ledger(corpus, [1, 2, 3])
    assert sorted(ledger) == sorted(absorbed)
    assert {e.path: e.version for e in ledger.values()} == {f.path: m.version for m in ms for f in m.inputs}
    for e in ledger.values():
        assert e.fingerprint.startswith("sha256:") and e.committed_at and e.landed_at


def test_manifests_chain_and_old_versions_never_change(served):
    corpus = served["corpus"]
    ms = chain(corpus)
    assert [m.parent for m in ms] == [None, "manifest-v1.json", "manifest-v2.json"]
    assert open(os.path.join(corpus, "manifest-v1.json"), "rb").read() == served["v1_manifest"]
    for older, newer in zip(ms, ms[1:], strict=False):
        assert newer.shards[: len(older.shards)] == older.shards  # old shards first, unchanged
        assert len(newer.shards) > len(older.shards)
        assert newer.tokenizer == older.tokenizer  # frozen after version 1
        for split, t in older.totals.items():
            assert newer.totals[split].tokens >= t.tokens
    for name, digest in served["v1_bytes"].items():
        assert sha256_file(os.path.join(corpus, name)) == digest
    latest = ms[-1]
    assert read_latest_pointer(corpus) == 3
    assert latest_manifest_url(corpus) == os.path.join(corpus, "manifest-v3.json")  # what a follower reads
    assert open(os.path.join(corpus, "manifest.json")).read() == open(os.path.join(corpus, "manifest-v3.json")).read()
    # Names continue per split; everything on disk is listed (the killed batch's orphans were cleaned up).
    for split in ("train", "valid"):
        names = [s.name for s in latest.shards_of(split)]
        assert [int(SHARD_NAME_RE.match(n).group("index")) for n in names] == list(range(len(names)))
    on_disk = sorted(os.path.basename(p) for p in glob.glob(os.path.join(corpus, "*.tar")))
    assert on_disk == sorted(s.name for s in latest.shards)
    for s in latest.shards:
        assert sha256_file(os.path.join(corpus, s.name)) == s.sha256
    for m in ms:
        assert all(a.balanced for a in m.accounting.values())


def test_no_document_kept_twice_across_versions(served):
    corpus = served["corpus"]
    ms = chain(corpus)
    seen: set[str] = set()
    all_keys: list[str] = []
    for older, newer in zip([None, *ms], ms, strict=False):
        new_names = {s.name for s in newer.shards} - ({s.name for s in older.shards} if older else set())
        docs, keys = shard_doc_ids(corpus, newer, new_names)
        assert docs and not (docs & seen), f"v{newer.version} repeats documents of earlier versions"
        seen |= docs
        all_keys += keys
    assert len(all_keys) == len(set(all_keys)), "sample keys collide across versions"
    dropped = [served["near_v1"], served["exact_v1"], *served["near_v3"]]
    for path, index in dropped:
        assert make_doc_id(SOURCE, path, index) not in seen, f"a copy of an earlier document was kept: {path}:{index}"
    acct = ms[-1].accounting[SOURCE]
    assert acct.duplicate.get("near", 0) >= 3 and acct.duplicate.get("exact", 0) >= 1
    assert acct.input == 5 * DOCS_PER_FILE + 5  # 2 + 2 + 1 files of new text, plus 4 copies and a malformed line
    assert acct.kept == 5 * DOCS_PER_FILE and acct.rejected == {"malformed_json": 1}


def test_status_reports_versions_pending_and_changed(served, capsys):
    from shardforge.commands.status import corpus_status, main

    corpus, raw = served["corpus"], served["raw"]
    drop(raw, "b4-0.jsonl", articles(4, 3))  # landed after the service stopped: pending
    st = corpus_status(corpus)
    assert [r["version"] for r in st["versions"]] == [1, 2, 3]
    assert [r["files"] for r in st["versions"]] == [2, 2, 1]
    assert all(r["documents"] > 0 and r["tokens"] > 0 for r in st["versions"])
    assert sum(r["tokens"] for r in st["versions"]) == st["totals"]["tokens"]
    assert [os.path.basename(p["path"]) for p in st["pending"]] == ["b4-0.jsonl"]
    assert [os.path.basename(c["path"]) for c in st["changed"]] == ["b1-0.jsonl"]
    assert st["oldest_pending_age_s"] is not None and all(r["max_lag_s"] is not None for r in st["versions"])
    assert main([corpus]) == 0
    text = capsys.readouterr().out
    assert "pending  1 file;" in text and "b1-0.jsonl" in text and "v3" in text and "5 files absorbed" in text
    os.remove(raw / "b4-0.jsonl")
    # Where each version's records went: batch 2 held two copies of version 1's documents, batch 3 two near
    # copies and one malformed line; each version's own report.
    ins, dups, rejected = ([r[k] for r in st["versions"]] for k in ("input", "duplicates", "rejected"))
    assert ins == [2 * DOCS_PER_FILE, 2 * DOCS_PER_FILE + 2, DOCS_PER_FILE + 3]
    assert dups == [0, 2, 2] and rejected == [0, 0, 1]
    assert [r["documents"] + r["duplicates"] + r["filtered"] + r["rejected"] for r in st["versions"]] == ins
    for r in st["versions"]:
        assert os.path.isfile(r["report"]) and f"/versions/v{r['version']}-" in r["report"]
    v3 = st["versions"][2]
    assert (f"     v3     1 {v3['input']:>8,} {v3['documents']:>7,}     2 {v3['filtered']:>8,}        1 "
            f"{v3['tokens']:>11,}") in text
    assert f"report   {v3['report']}  (v3's: what it kept" in text
    # The service said the same as each version committed.
    said = served["log"].read_text()
    for r in st["versions"]:
        files = "1 file" if r["files"] == 1 else f"{r['files']} files"
        copies = "1 duplicate" if r["duplicates"] == 1 else f"{r['duplicates']} duplicates"
        assert (f"committed v{r['version']}: {files} (documents {r['input']} in, {r['documents']} kept; {copies}, "
                f"{r['filtered']} filtered, {r['rejected']} rejected), ") in said
        assert f"; report {r['report']}\n" in said


def test_a_batch_warns_as_a_build_does_and_judges_the_valid_split_over_the_corpus(served):
    """The build's warnings over a batch's own records (undecodable ones here); a batch that added nothing
    to the valid split is no warning while the corpus has one, and is one when the corpus has none."""
    from pipelines.jobs.ingest import BatchResult
    from pipelines.jobs.serve import batch_warnings
    from schemas.manifest import SourceAccount, SplitTotals, parse_manifest

    corpus = served["corpus"]
    path = glob.glob(os.path.join(corpus, "versions", "v3-*", BATCH_MANIFEST_NAME))[0]
    batch = parse_manifest(open(path).read(), path)
    v3 = load_version(corpus, 3)
    a = batch.accounting[SOURCE]
    bad = batch.model_copy(update={
        "accounting": {SOURCE: SourceAccount(input=a.input + 4, kept=a.kept, filtered=a.filtered,
                                             duplicate=a.duplicate, rejected={**a.rejected, "invalid_utf8": 4})},
        "totals": {"train": batch.totals["train"]}})
    res = BatchResult(3, v3, bad, 1, 1, 1.0, "r")
    said = batch_warnings(res)
    assert len(said) == 1 and said[0].startswith(f"warning: 4 of {a.input + 4} documents of source '{SOURCE}' "
                                                 "were rejected as invalid_utf8")
    assert batch_warnings(BatchResult(3, v3, batch, 1, 1, 1.0, "r")) == []
    none_valid = v3.model_copy(update={"totals": {"train": v3.totals["train"], "valid": SplitTotals()}})
    (empty,) = [w for w in batch_warnings(BatchResult(3, none_valid, bad, 1, 1, 1.0, "r"), corpus)
                if "the valid split is empty" in w]
    assert f"(shardforge repack --tokenized {corpus} --output NEW --valid_fraction " in empty


def test_recover_repairs_every_crash_window_after_the_commit(served, tmp_path):
    """Manifest committed, then the crash: ledger, latest and manifest.json are rebuilt from the chain."""
    corpus = str(tmp_path / "copy")
    shutil.copytree(served["corpus"], corpus)
    want = read_ledger(corpus, [1, 2, 3])
    os.remove(os.path.join(corpus, "ingest", "ledger", "v3.jsonl"))
    Path(corpus, LATEST_NAME).write_text("manifest-v2.json\n")
    shutil.copy(os.path.join(corpus, "manifest-v2.json"), os.path.join(corpus, "manifest.json"))
    Path(corpus, "train-009999.tar").write_bytes(b"orphan of an abandoned batch")
    state = recover(corpus)
    assert state.version == 3 and len(state.repaired) == 4
    assert read_latest_pointer(corpus) == 3
    assert sorted(read_ledger(corpus, [1, 2, 3])) == sorted(want)
    assert open(os.path.join(corpus, "manifest.json")).read() == open(os.path.join(corpus, "manifest-v3.json")).read()
    assert not os.path.exists(os.path.join(corpus, "train-009999.tar"))
    assert recover(corpus).repaired == []  # idempotent


def test_once_on_the_gcs_emulator(gcs_bucket, tmp_path):
    import gcsfs

    from pipelines.jobs.serve import run

    fs = gcsfs.GCSFileSystem(token="anon")
    bucket = gcs_bucket[len("gs://"):]
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(small_config()))
    texts = articles(21, 2 * DOCS_PER_FILE)
    fs.pipe_file(f"{bucket}/raw/a.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts).encode())
    fs.invalidate_cache()
    watch, corpus = f"{gcs_bucket}/raw/*.jsonl", f"{gcs_bucket}/corpus"
    args = ["--watch", watch, "--corpus", corpus, "--source", SOURCE, "--once", "--settle", "0", "--config", str(cfg)]
    assert run(args) == 0
    # A second file: one exact copy of a version-1 document and new text.
    more = articles(22, DOCS_PER_FILE) + [texts[0]]
    fs.pipe_file(f"{bucket}/raw/b.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in more).encode())
    fs.invalidate_cache()
    assert run(args) == 0
    assert run(args) == 0  # nothing pending: no new version
    assert committed_versions(corpus) == [1, 2]
    m2 = load_version(corpus, 2)
    assert m2.parent == "manifest-v1.json"
    assert [f.path for f in m2.inputs] == [f"{gcs_bucket}/raw/b.jsonl"]
    assert m2.inputs[0].fingerprint.split(":")[0] in ("md5", "crc32c", "etag")
    assert m2.accounting[SOURCE].duplicate.get("exact") == 1
    ledger = read_ledger(corpus, [1, 2])
    assert sorted(ledger) == [f"{gcs_bucket}/raw/a.jsonl", f"{gcs_bucket}/raw/b.jsonl"]
    fs.invalidate_cache()
    assert fs.cat_file(f"{bucket}/corpus/{LATEST_NAME}").decode().strip() == "manifest-v2.json"
    for s in m2.shards:
        data = fs.cat_file(f"{bucket}/corpus/{s.name}")
        assert hashlib.sha256(data).hexdigest() == s.sha256
        tarfile.open(fileobj=io.BytesIO(data)).getmembers()


def test_a_following_loader_adopts_new_shards_at_the_epoch_boundary_and_resumes_exactly(tmp_path):
    """The trainer side of the service: ShardLoader(follow=True) over a corpus that pipelines.jobs.serve grows."""
    import torch

    from pipelines.jobs.serve import run
    from trainer.loader import ShardLoader

    raw, corpus = tmp_path / "raw", str(tmp_path / "corpus")
    raw.mkdir()
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(small_config()))
    args = ["--watch", str(raw / "*.jsonl"), "--corpus", corpus, "--source", SOURCE, "--once", "--settle", "0",
            "--config", str(cfg)]
    drop(raw, "a.jsonl", articles(31, DOCS_PER_FILE))
    assert run(args) == 0

    def train_ids(m: Manifest) -> list[int]:
        ids, base = [], 0
        for s in m.shards:  # global sample ids run over all shards in manifest order
            if s.split == "train":
                ids += range(base, base + s.samples)
            base += s.samples
        return ids

    def real(batches) -> list[int]:
        return sorted(i for b in batches for i in b["sample_ids"][~b["is_pad"]].tolist())

    kw = {"follow": True, "batch_size": 4, "shuffle_buffer": 16, "partitions": 4}
    loader = ShardLoader(corpus, **kw)
    it = iter(loader)
    epoch0 = [next(it) for _ in range(loader.steps_per_epoch - 1)]
    drop(raw, "b.jsonl", articles(32, DOCS_PER_FILE))
    assert run(args) == 0  # version 2 lands mid-epoch
    epoch0.append(next(it))  # the last batch of epoch 0 ends the epoch: the loader adopts v2
    assert real(epoch0) == train_ids(load_version(corpus, 1))
    assert loader.manifest_url.endswith("manifest-v2.json")
    head = [next(it) for _ in range(2)]
    state = loader.state_dict()
    tail = [next(it) for _ in range(loader.steps_per_epoch - 2)]
    assert real(head + tail) == train_ids(load_version(corpus, 2))  # old and new shards, each once
    resumed = ShardLoader(corpus, **kw)
    resumed.load_state_dict(state)
    again = iter(resumed)
    for want in tail:
        got = next(again)
        assert all(torch.equal(got[k], want[k]) for k in want)


def _one_file_service(tmp_path: Path, *extra: str) -> tuple[list[str], Path]:
    """serve's arguments for a watch folder holding one raw file, and the corpus folder."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in articles(37, DOCS_PER_FILE)))
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(small_config()))
    corpus = tmp_path / "corpus"
    return ["--watch", f"{raw}/*.jsonl", "--corpus", str(corpus), "--source", SOURCE, "--settle", "0",
            "--poll", "0.05", "--config", str(cfg), *extra], corpus


def test_a_listing_that_cannot_reach_the_store_waits_for_the_next_poll(tmp_path, monkeypatch, capsys):
    """The service outlives an outage of the watched store: a transient listing error is logged and
    the listing tried again a poll later (it ended the service); --once fails on it instead."""
    import pipelines.jobs.serve as serve

    args, corpus = _one_file_service(tmp_path)
    raw = tmp_path / "raw"
    real_scan, calls = serve.scan, []
    stopper = serve.Stopper()

    def flaky_scan(*a: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionRefusedError(111, "Connection refused")
        if len(calls) >= 3:
            stopper.requested = True  # stop once the batch of the second look is committed
        return real_scan(*a, **kw)

    monkeypatch.setattr(serve, "scan", flaky_scan)
    with pytest.raises(ConnectionRefusedError):
        serve.run([*args, "--once"])
    calls.clear()
    assert serve.run(args, stopper) == 0  # its log goes to stderr (run sets up logging itself)
    assert committed_versions(str(corpus)) == [1]
    err = capsys.readouterr().err
    assert f"cannot list {raw}/*.jsonl (ConnectionRefusedError: [Errno 111] Connection refused); looking again " \
           "in 0 s" in err, err


def test_serve_puts_an_in_process_callers_logging_back(tmp_path, capsys):
    """run() logs to the stderr of its call, then leaves the root logger as it found it: a handler it
    left behind would write to that stream after its owner closed it (as capsys does after a test)."""
    import logging

    import pipelines.jobs.serve as serve

    args, _ = _one_file_service(tmp_path)
    root = logging.getLogger()
    mine = logging.StreamHandler(io.StringIO())
    root.addHandler(mine)
    handlers, level = root.handlers[:], root.level
    try:
        assert serve.run([*args, "--once"]) == 0
        err = capsys.readouterr().err
        assert "shardforge.serve INFO stopped at version 1" in err and "at version 0 (0 files absorbed)" in err
        assert root.handlers == handlers and root.level == level
        logging.getLogger("pipelines.test").warning("after the run")
        assert mine.stream.getvalue().endswith("after the run\n")
    finally:
        root.removeHandler(mine)


def test_a_batch_that_fails_on_a_transient_error_is_tried_again_in_place(tmp_path, monkeypatch, capsys):
    """A batch whose build fails on a transient error is tried again after a pause (it ended the
    service); a failure after the batch committed does not ingest its files twice."""
    import pipelines.jobs.serve as serve

    args, corpus = _one_file_service(tmp_path)
    real_ingest, calls = serve.ingest_batch, []
    stopper = serve.Stopper()

    def flaky_ingest(*a: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # before anything is committed
            raise ConnectionResetError(104, "Connection reset by peer")
        res = real_ingest(*a, **kw)
        if len(calls) == 2:  # committed, then failed (as if writing its timings)
            raise TimeoutError("timed out writing timings.json")
        return res

    real_scan, looks = serve.scan, []

    def counted_scan(*a: Any, **kw: Any) -> Any:
        looks.append(1)
        out = real_scan(*a, **kw)
        if len(calls) >= 2 and not out.pending:
            stopper.requested = True  # the committed batch's files are absorbed: stop
        return out

    monkeypatch.setattr(serve, "ingest_batch", flaky_ingest)
    monkeypatch.setattr(serve, "scan", counted_scan)
    assert serve.run(args, stopper) == 0
    assert len(calls) == 2  # tried again once; not a third time after the commit
    assert committed_versions(str(corpus)) == [1]
    assert len(recover(str(corpus), clean_orphans=False).ledger) == 1
    err = capsys.readouterr().err
    assert "batch of 1 file failed on a transient error (ConnectionResetError: [Errno 104] Connection reset " \
           "by peer); trying it again in 0 s (1 of 3)" in err, err
    assert "(TimeoutError: timed out writing timings.json); trying it again in 0 s (2 of 3)" in err, err


def test_a_batch_error_that_is_not_transient_or_outlasts_its_retries_stops_the_service(tmp_path, monkeypatch):
    """Bad data or a bug is raised at once; a transient error after --batch_retries tries, and under
    --once at once."""
    import pipelines.jobs.serve as serve

    args, corpus = _one_file_service(tmp_path)
    calls: list[int] = []

    def failing(exc: Exception):
        def ingest(*a: Any, **kw: Any) -> Any:
            calls.append(1)
            raise exc
        return ingest

    monkeypatch.setattr(serve, "ingest_batch", failing(ValueError("not transient")))
    with pytest.raises(ValueError):
        serve.run(args)
    assert len(calls) == 1
    calls.clear()
    monkeypatch.setattr(serve, "ingest_batch", failing(ConnectionRefusedError(111, "Connection refused")))
    with pytest.raises(ConnectionRefusedError):
        serve.run([*args, "--batch_retries", "2"])
    assert len(calls) == 3  # the first try and two more
    calls.clear()
    with pytest.raises(ConnectionRefusedError):
        serve.run([*args, "--once"])
    assert len(calls) == 1
    calls.clear()
    with pytest.raises(ConnectionRefusedError):
        serve.run([*args, "--batch_retries", "0"])
    assert len(calls) == 1
    assert not committed_versions(str(corpus))
    from schemas.errors import UserError

    with pytest.raises(UserError, match="--batch_retries must be 0 or more"):
        serve.run([*args, "--batch_retries", "-1"])


def test_a_version_that_kept_no_document_still_repacks(tmp_path):
    """A batch whose every document is a copy of earlier ones commits a version with no tokenized part: repack
    said 'the tokenized intermediate is missing' and refused the corpus."""
    import pipelines.jobs.serve as serve
    from pipelines.jobs.repack import run_repack

    args, corpus = _one_file_service(tmp_path)
    assert serve.run([*args, "--once"]) == 0
    shutil.copy(tmp_path / "raw" / "a.jsonl", tmp_path / "raw" / "b.jsonl")  # the same documents again
    assert serve.run([*args, "--once"]) == 0
    assert committed_versions(str(corpus)) == [1, 2]
    v1, v2 = (load_version(str(corpus), n) for n in (1, 2))
    assert sum(a.kept for a in v2.accounting.values()) == sum(a.kept for a in v1.accounting.values())
    assert not (corpus / v2.intermediates["tokenized"]).exists()  # nothing kept, nothing written
    m = run_repack(str(corpus), str(tmp_path / "sop"), rule="sop")
    assert m.packing_rule == "sop" and m.accounting == v2.accounting
    # A version that kept documents and lost its parts is still refused.
    shutil.rmtree(corpus / v1.intermediates["tokenized"])
    with pytest.raises(UserError, match="the tokenized intermediate is missing"):
        run_repack(str(corpus), str(tmp_path / "sop2"), rule="sop")


def test_serve_reads_new_files_with_the_encoding_it_is_given(tmp_path):
    """serve passed --format to the batches' source but dropped --text_field and --encoding: a batch of
    Latin-1 files, served with --encoding latin-1 after a UTF-8 first version, was rejected as invalid_utf8."""
    import pipelines.jobs.serve as serve

    args, corpus = _one_file_service(tmp_path)
    assert serve.run([*args, "--once"]) == 0
    texts = [t.replace(".", ". The café's £5 tea.", 1) for t in articles(41, DOCS_PER_FILE)]
    (tmp_path / "raw" / "b.jsonl").write_bytes("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n"
                                                       for t in texts).encode("latin-1"))
    assert serve.run([*args, "--once", "--encoding", "latin-1"]) == 0
    v2 = load_version(str(corpus), 2)
    assert "invalid_utf8" not in v2.accounting[SOURCE].rejected
    assert v2.accounting[SOURCE].input == 2 * DOCS_PER_FILE
    assert [s["encoding"] for s in v2.config["sources"]] == ["iso8859-1"]
