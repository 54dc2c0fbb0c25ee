"""Commit safety: concurrent writers on one corpus, leftovers of killed writers.

Every race here is between real processes (``python -m pipelines.serve`` /
``pipelines.build`` runs, started together from tests/forkserver.py's threads,
or subprocesses calling the commit primitive), on local disk and on the GCS and
S3 emulators (the GCS emulator runs through tests/gcs_emulator.py, which adds
GCS's ifGenerationMatch=0 rule).
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from forkserver import run_python, run_python_together
from test_serve import SOURCE, articles, small_config

from pipelines.corpus.commit import manifest_tag
from schemas.naming import SHARD_NAME_RE, shard_tag
from shardforge.storage import get_fs, invalidate, is_tmp_name, join, list_names, tmp_name
from shardforge.storage.contract import committed_versions, load_manifest, load_version

ROOT = Path(__file__).resolve().parents[1]
LOST = re.compile(r"committed by another writer .*while this one \((v\d+-[0-9a-f]{16})\) was building")


def env_for(store: str, s3_endpoint: str | None = None) -> dict[str, str]:
    """The environment of a child process: this worktree first, the emulators' settings inherited."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if s3_endpoint:
        env["FSSPEC_S3_ENDPOINT_URL"] = s3_endpoint  # fsspec reads FSSPEC_<PROTOCOL>_<KWARG>
    return env


@pytest.fixture(params=["local", "gs", "s3"])
def store(request, tmp_path) -> dict[str, Any]:
    """A folder URL on one backend, plus the child environment that reaches it."""
    if request.param == "local":
        return {"kind": "local", "base": str(tmp_path / "store"), "env": env_for("local")}
    if request.param == "gs":
        bucket = request.getfixturevalue("gcs_bucket")
        return {"kind": "gs", "base": f"{bucket}/store", "env": env_for("gs")}
    bucket = request.getfixturevalue("s3_bucket")
    endpoint = request.getfixturevalue("s3_emulator")
    return {"kind": "s3", "base": f"{bucket}/store", "env": env_for("s3", endpoint)}


def put(url: str, data: bytes) -> None:
    fs, path = get_fs(url)
    if "://" not in url:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    fs.pipe_file(path, data)
    invalidate(fs)


def every_object(root: str) -> list[str]:
    """Every object under root (relative paths), freshly listed."""
    fs, path = get_fs(root)
    invalidate(fs)
    return sorted(os.path.relpath(p, path) if "://" not in root else p[len(path.rstrip("/")) + 1:]
                  for p in fs.find(path))


def validate(url: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardforge.cli", "validate", url, "--no-progress"],
                          env=env, capture_output=True, text=True, timeout=300)


# ---------------------------------------------------------------- the primitive, raced by processes

RACER = textwrap.dedent("""
    import sys
    from shardforge.storage import create_if_absent
    url, me = sys.argv[1], sys.argv[2]
    print("ready", flush=True)
    sys.stdin.readline()  # the test sends "go" to every racer once all of them have imported
    print(create_if_absent(url, (me * 1000).encode()))
""")


def test_create_if_absent_has_exactly_one_winner_among_processes(store) -> None:
    url = join(store["base"], "manifest.json")
    procs = [subprocess.Popen([sys.executable, "-c", RACER, url, f"writer{i}"], env=store["env"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(6)]
    deadline = time.monotonic() + 120
    for p in procs:  # each says "ready" once imported (bounded: a racer hung while importing fails the test)
        ready = select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]
        if not ready or p.stdout.readline() != "ready\n":
            for q in procs:
                q.kill()
            raise AssertionError(f"a racer did not start in 120 s: {p.communicate(timeout=60)[1][-3000:]}")
    for p in procs:  # all at once
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    results = [o.strip() for o, _ in outs]
    assert sorted(results) == ["created"] + ["taken"] * 5, results
    from shardforge.storage import read_bytes

    winner = results.index("created")
    assert read_bytes(url) == f"writer{winner}".encode() * 1000
    # The same bytes again: an identical rerun (or a retried request that landed) has succeeded.
    from shardforge.storage import create_if_absent

    assert create_if_absent(url, f"writer{winner}".encode() * 1000) == "identical"
    assert not [n for n in list_names(store["base"]) if is_tmp_name(n)]


# ---------------------------------------------------------------- two serve processes on one corpus

def drop_raw(store: dict[str, Any], n_files: int) -> str:
    """n raw JSONL files under the store; returns the watch glob."""
    for i in range(n_files):
        texts = articles(100 + i, 24)
        put(join(store["base"], "raw", f"f{i}.jsonl"), "".join(json.dumps({"text": t}) + "\n" for t in texts).encode())
    return join(store["base"], "raw", "*.jsonl")


def assert_clean_committed_corpus(corpus: str, env: dict[str, str], loser_tag: str | None) -> None:
    """The committed versions validate; nothing of the loser and no unreferenced shard or folder remains."""
    res = validate(corpus, env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "does not list" not in res.stdout and "leftover temporary" not in res.stdout, res.stdout
    m, _ = load_manifest(corpus)
    objects = every_object(corpus)
    if loser_tag is not None:
        assert not [o for o in objects if loser_tag in o], loser_tag
    listed = {s.name for s in m.shards}
    assert {o for o in objects if SHARD_NAME_RE.match(o)} == listed
    tags = {manifest_tag(load_version(corpus, n)) for n in committed_versions(corpus)} or {manifest_tag(m)}
    folders = {o.split("/")[1] for o in objects if o.startswith("versions/")}
    assert folders <= tags, (folders, tags)
    assert not [o for o in objects if is_tmp_name(os.path.basename(o))]


def one_line_loss(stderr: str) -> re.Match:
    """The loser says why in one `error:` line (no traceback); returns the match naming its tag."""
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    lost = LOST.search(errors[0])
    assert lost, errors[0]
    return lost


def run_racers(cmds: list[list[str]], env: dict[str, str]) -> list[tuple[int, str]]:
    """`python CMD` for each of cmds, started together, each its own process; each one's exit code and stderr."""
    done = run_python_together(cmds, env=env, capture_output=True, text=True, timeout=600)
    return [(r.returncode, r.stderr) for r in done]


# Local and S3 (the stores whose conditional create differs most): on GCS, the same race of
# builds (below), create_if_absent among processes and serve's own emulator test cover it.
@pytest.mark.parametrize("store", ["local", "s3"], indirect=True)
def test_two_serve_processes_one_commits_the_loser_cleans_up(store, tmp_path) -> None:
    """Two services ingest one corpus at once with different batches: one version 1, never a mixed one."""
    watch = drop_raw(store, 3)
    corpus = join(store["base"], "corpus")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(small_config()))
    base = ["-m", "pipelines.serve", "--watch", watch, "--corpus", corpus, "--source", SOURCE,
            "--once", "--settle", "0", "--config", str(cfg), "--log_level", "WARNING"]
    # Different --max_files: two attempts at version 1 of different inputs (different tags).
    outs = run_racers([base + ["--max_files", "2"], base + ["--max_files", "3"]], store["env"])
    codes = sorted(c for c, _ in outs)
    assert codes == [0, 2], outs
    loser_err = next(e for c, e in outs if c == 2)
    lost = one_line_loss(loser_err)
    loser_tag = lost.group(1)
    v1 = load_version(corpus, 1)
    assert manifest_tag(v1) != loser_tag and loser_tag.startswith("v1-")
    assert_clean_committed_corpus(corpus, store["env"], loser_tag)
    # Committed versions are immutable: the winner's shards are exactly what its manifest hashed
    # (validate checked every sha256), and a restart absorbs what is left on top of them.
    before = {n: load_version(corpus, n).to_json() for n in committed_versions(corpus)}
    done = run_python(base, env=store["env"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    for n, text in before.items():
        assert load_version(corpus, n).to_json() == text
    assert sum(len(load_version(corpus, n).inputs) for n in committed_versions(corpus)) == 3
    assert_clean_committed_corpus(corpus, store["env"], loser_tag)


def test_two_identical_serve_processes_both_succeed_with_one_version(tmp_path) -> None:
    """The same batch twice at once: the same tag, the same bytes; the second finds its own manifest."""
    store = {"kind": "local", "base": str(tmp_path / "store"), "env": env_for("local")}
    watch = drop_raw(store, 2)
    corpus = join(store["base"], "corpus")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(small_config()))
    cmd = ["-m", "pipelines.serve", "--watch", watch, "--corpus", corpus, "--source", SOURCE,
           "--once", "--settle", "0", "--config", str(cfg), "--log_level", "WARNING"]
    outs = run_racers([cmd, cmd], store["env"])
    assert [c for c, _ in outs] == [0, 0], outs
    assert committed_versions(corpus) == [1]
    assert_clean_committed_corpus(corpus, store["env"], None)


# ---------------------------------------------------------------- two one-shot builds into one output

def build_cmd(glob: str, out: str, cfg: Path) -> list[str]:
    """`python`'s arguments for a build of `glob` into `out`."""
    return ["-m", "pipelines.build", "--input", f"{SOURCE}={glob}", "--output", out,
            "--config", str(cfg)]


def test_two_builds_into_one_output_one_commits_the_loser_cleans_up(store, tmp_path) -> None:
    glob = drop_raw(store, 2)
    out = join(store["base"], "corpus")
    cfgs = []
    for seed in (1, 2):  # two configs: different shards for the same names, were names not tagged
        c = tmp_path / f"config{seed}.json"
        c.write_text(json.dumps({**small_config(), "seed": seed}))
        cfgs.append(c)
    outs = run_racers([build_cmd(glob, out, c) for c in cfgs], store["env"])
    assert sorted(c for c, _ in outs) == [0, 2], outs
    lost = one_line_loss(next(e for c, e in outs if c != 0))
    assert_clean_committed_corpus(out, store["env"], lost.group(1))
    # The committed corpus is the winner's: its config's seed.
    winner_seed = (1, 2)[[c for c, _ in outs].index(0)]
    assert load_manifest(out)[0].config["seed"] == winner_seed


SWEPT_BUILD = textwrap.dedent("""
    import os, runpy, sys
    sys.path.insert(0, {root!r})
    import pipelines.corpus.shards as corpus
    from shardforge.storage import create_if_absent, is_tmp_name

    winner, out = sys.argv[1], sys.argv[2]
    real = corpus.write_stream_atomic

    def swept(url, produce, **kwargs):
        # The winner commits while this build writes its first shard, and its cleanup
        # sweeps this attempt's temporaries (what test_two_builds_... hits by chance).
        def produce_then_swept(f):
            produce(f)
            create_if_absent(os.path.join(out, "manifest.json"), open(winner, "rb").read())
            for name in os.listdir(out):
                if is_tmp_name(name):
                    os.remove(os.path.join(out, name))
        return real(url, produce_then_swept, **kwargs)

    corpus.write_stream_atomic = swept
    sys.argv = ["pipelines.build", *sys.argv[3:]]
    runpy.run_module("pipelines.build", run_name="__main__")
""")


def test_a_build_whose_temporaries_a_winner_swept_loses_in_one_line(tmp_path) -> None:
    store = {"kind": "local", "base": str(tmp_path / "store"), "env": env_for("local")}
    glob = drop_raw(store, 1)
    cfgs = []
    for seed in (1, 2):
        c = tmp_path / f"config{seed}.json"
        c.write_text(json.dumps({**small_config(), "seed": seed}))
        cfgs.append(c)
    winner = str(tmp_path / "winner")
    first = run_python(build_cmd(glob, winner, cfgs[0]), env=store["env"], capture_output=True, text=True,
                       timeout=600)
    assert first.returncode == 0, first.stderr
    out = str(tmp_path / "corpus")
    res = subprocess.run([sys.executable, "-c", SWEPT_BUILD.format(root=str(ROOT)), join(winner, "manifest.json"),
                          out, *build_cmd(glob, out, cfgs[1])[2:]],
                         env=store["env"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 2, res.stderr
    lost = one_line_loss(res.stderr)
    assert "lost" in res.stderr  # the shard writer said what happened, as a warning
    assert not [o for o in every_object(out) if lost.group(1) in o or is_tmp_name(os.path.basename(o))]


SWEPT_TOKENIZER = textwrap.dedent("""
    import runpy, sys
    sys.path.insert(0, {root!r})
    import pipelines.tokenizer.train as tokenizer
    from shardforge.storage import TemporaryRemoved

    real = tokenizer.write_bytes_atomic

    def swept(url, data, **kwargs):
        if url.endswith(".model"):  # a cleaner took the model's temporary (no other writer committed)
            raise TemporaryRemoved(url + ": removed before it was published")
        return real(url, data, **kwargs)

    tokenizer.write_bytes_atomic = swept
    sys.argv = ["pipelines.build", *sys.argv[1:]]
    runpy.run_module("pipelines.build", run_name="__main__")
""")


def test_a_build_missing_a_swept_object_commits_nothing_and_says_so(tmp_path) -> None:
    """A write inside the pipeline whose temporary vanished only warns (a winner's sweep is the
    one way it happens); the commit step then finds the object missing and commits nothing."""
    store = {"kind": "local", "base": str(tmp_path / "store"), "env": env_for("local")}
    glob = drop_raw(store, 1)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(small_config()))
    out = str(tmp_path / "corpus")
    res = subprocess.run([sys.executable, "-c", SWEPT_TOKENIZER.format(root=str(ROOT)),
                          *build_cmd(glob, out, cfg)[2:]], env=store["env"], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 2, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "nothing was committed" in errors[0] and "Traceback" not in res.stderr, res.stderr
    assert "tokenizer model lost" in res.stderr and "not committing" in res.stderr, res.stderr
    assert not os.path.exists(os.path.join(out, "manifest.json"))


# Rewritten by every run that commits or reruns: the report, and the timings that measure the run.
RUN_WRITTEN = ("report", "timings.")


def test_a_build_into_a_committed_corpus_is_refused_unless_identical(tmp_path) -> None:
    store = {"kind": "local", "base": str(tmp_path / "store"), "env": env_for("local")}
    glob = drop_raw(store, 1)
    out = str(tmp_path / "corpus")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(small_config()))
    first = run_python(build_cmd(glob, out, cfg), env=store["env"], capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    committed = {p: (Path(out) / p).read_bytes() for p in every_object(out) if not p.startswith(RUN_WRITTEN)}
    # The same build again: an idempotent rerun, exit 0, the same bytes.
    again = run_python(build_cmd(glob, out, cfg), env=store["env"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"{out} holds this very build already (v1-" in again.stderr, again.stderr  # said before the work
    assert f"shardforge validate {out}" in again.stderr and "holds this very build" not in first.stderr
    assert {p: (Path(out) / p).read_bytes() for p in every_object(out) if not p.startswith(RUN_WRITTEN)} == committed
    before = {p: (Path(out) / p).read_bytes() for p in every_object(out)}
    # Another config into it: one line, before any work, and nothing changed.
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**small_config(), "seed": 7}))
    t0 = time.monotonic()
    refused = run_python(build_cmd(glob, out, other), env=store["env"], capture_output=True, text=True,
                         timeout=600)
    assert refused.returncode == 2
    err = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "already holds a committed corpus" in err[0] and "another --output" in err[0], err
    assert "Traceback" not in refused.stderr
    assert time.monotonic() - t0 < 60
    assert {p: (Path(out) / p).read_bytes() for p in every_object(out)} == before  # not even the report or timings


# ---------------------------------------------------------------- leftovers of killed writers (item 7)

HOLDER = textwrap.dedent("""
    import sys, time
    from shardforge.storage import write_stream_atomic
    def produce(f):
        f.write(b"x" * 1000)
        print("writing", flush=True)
        time.sleep(3600)  # a writer in the middle of a shard
    write_stream_atomic(sys.argv[1], produce)
""")


def start_holder(url: str, env: dict[str, str]) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, url], env=env, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "writing"
    return p


def test_stale_temporaries_of_killed_writers_go_with_the_next_commit_live_ones_stay(tmp_path) -> None:
    store = {"kind": "local", "base": str(tmp_path / "store"), "env": env_for("local")}
    glob = drop_raw(store, 1)
    out = tmp_path / "corpus"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(small_config()))
    cmd = build_cmd(glob, str(out), cfg)
    # A build SIGKILLed while writing: shards in progress leave hidden temporaries.
    killed = subprocess.Popen([sys.executable, *cmd], env=store["env"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dead_writers = [start_holder(str(out / "train-000000-v1-0000000000000000.tar"), store["env"]),
                    start_holder(str(out / "versions" / "v1-0000000000000000" / "rejects" / "part-00000.jsonl"),
                                 store["env"])]
    live_writer = start_holder(str(out / "report.html"), store["env"])
    deadline = time.monotonic() + 300
    while not list(out.glob("*.tar")) and time.monotonic() < deadline and killed.poll() is None:
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    for p in dead_writers:
        p.send_signal(signal.SIGKILL)
        p.wait()
    # Their temporaries, as a killed build leaves them (and aged, like leftovers from an earlier day).
    tmps = [p for p in out.rglob(".*.tmp")]
    assert len(tmps) >= 3, tmps
    old = time.time() - 3600
    for p in tmps:
        os.utime(p, (old, old))
    live_tmp = [p for p in tmps if p.name.startswith(".report.html.")]
    assert len(live_tmp) == 1
    try:
        done = run_python(cmd, env=store["env"], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        left = [p for p in out.rglob(".*.tmp")]
        assert left == live_tmp, left  # a live writer's temporary (it holds the lock) is never taken
    finally:
        live_writer.send_signal(signal.SIGKILL)
        live_writer.wait()
    for p in live_tmp:  # the test's own writer, now killed too
        p.unlink()
    assert not (out / "train-000000-v1-0000000000000000.tar").exists()
    assert_clean_committed_corpus(str(out), store["env"], "v1-0000000000000000")


def test_a_temporary_names_its_target_and_tags_are_parsed() -> None:
    base = os.path.basename(tmp_name("corpus/train-000001-v1-0123456789abcdef.tar"))
    assert is_tmp_name(base) and shard_tag(base[1:-4].rsplit(".", 1)[0]) == "v1-0123456789abcdef"
    assert shard_tag("train-000001.tar") is None and shard_tag("train-000001-v1-0123.tar") is None
    assert SHARD_NAME_RE.match("valid-000012-v3-0123456789abcdef.tar").group("index") == "000012"


def test_create_if_absent_names_a_store_that_let_another_writer_replace_its_bytes(monkeypatch) -> None:
    """A store that does not honour the condition: the check after the write says what happened."""
    from fsspec.implementations.memory import MemoryFileSystem

    from shardforge.storage import IncompleteWriteError, create_if_absent

    real = MemoryFileSystem.pipe_file

    def then_another_writer(self, path, value, **kwargs):
        real(self, path, value, **kwargs)
        real(self, path, b"another writer's manifest", mode="overwrite")

    monkeypatch.setattr(MemoryFileSystem, "pipe_file", then_another_writer)
    with pytest.raises(IncompleteWriteError, match="another writer replaced them .*create-if-absent condition"):
        create_if_absent("memory://sf-create-test/manifest.json", b"mine" * 100)
