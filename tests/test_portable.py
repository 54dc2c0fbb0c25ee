"""The graph a distributed runner gets, run end to end: Beam's PortableRunner, a job server and a pool of SDK workers.

On Dataflow, Flink or Spark the build runs another graph than on the local runner
(``pipelines.options.RunnerPlan``: the documents spread after the read, dedupe's verdicts joined by a
CoGroupByKey, the near step's components in rounds of GroupByKeys, nothing spilled). Here that graph
runs for real, offline, on 127.0.0.1: a job server (``tests/portable_jobserver.py``: Beam's own, with
``--sdk_worker_parallelism`` SDK workers per job) and Beam's external worker pool
(``python -m apache_beam.runners.worker.worker_pool_main``), which starts each SDK worker as its own
process. Two workers per job, so every stage's bundles are dealt over two processes. The build
(three formats, exact and near duplicates, rejects), a repack and one serve batch go through the
real command lines, and every file they write equals the in-process run's byte for byte (stage
timings aside). One module-wide job server and pool serve every test.

And the runner mistakes a user can make, each one line from the real command, before any work
(``pipelines/localrunner/preflight.py``, ``pipelines.options.runner_download_failed``).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import posixpath
import random
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import free_port, wait_port
from determinism import compare
from forkserver import run_python

from shardforge.storage import is_tmp_name

ROOT = Path(__file__).resolve().parents[1]
WORKERS = 2


# ---------------------------------------------------------------- the job server and the worker pool

def worker_cpu(pool_pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each live child of the pool: its SDK workers."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if int(fields[1]) == pool_pid and fields[0] != "Z":
            out[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    return out


@dataclass
class Watch:
    """The SDK workers seen while a command ran (pid -> the most CPU seconds seen), sampled every 50 ms."""

    pool_pid: int
    cpu: dict[int, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(0.05):
            for pid, s in worker_cpu(self.pool_pid).items():
                self.cpu[pid] = max(s, self.cpu.get(pid, 0.0))


@dataclass
class Cluster:
    job_port: int
    pool: subprocess.Popen
    pool_port: int
    env: dict[str, str]

    def flags(self) -> list[str]:
        return ["--runner", "PortableRunner", "--job_endpoint", f"localhost:{self.job_port}",
                "--environment_type", "EXTERNAL", "--environment_config", f"localhost:{self.pool_port}",
                "--sdk_worker_parallelism", str(WORKERS)]

    def run(self, module: str, args: list[str], timeout: float = 300) -> tuple[subprocess.CompletedProcess, Watch]:
        """``python -m module args`` on the portable runner, with the workers it got watched."""
        watch = Watch(self.pool.pid)
        t = threading.Thread(target=watch.run, daemon=True)
        t.start()
        try:
            res = run_python(["-m", module, *args, *self.flags()], capture_output=True, text=True, cwd=ROOT, env=self.env,
                             timeout=timeout)  # a fresh interpreter (not a local runner); at the timeout, its stacks
        finally:
            watch.stop.set()
            t.join()
        return res, watch


def start(cmd: list[str], port: int, env: dict[str, str], log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log, "wb"), env=env, cwd=ROOT)
    try:
        wait_port(port, proc, timeout=60)
    except Exception:
        proc.kill()
        raise
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)  # the pool stops its workers on the way out
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    logs = tmp_path_factory.mktemp("portable-logs")
    # The pool starts each SDK worker as `python -c ...`: this interpreter's, with this tree's code.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(ROOT)}
    job_port, pool_port = free_port(), free_port()
    job = start([sys.executable, str(ROOT / "tests" / "portable_jobserver.py"), "--port", str(job_port)], job_port,
                env, logs / "jobserver.log")
    try:
        pool = start([sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main", "--service_port",
                      str(pool_port)], pool_port, env, logs / "pool.log")
    except Exception:
        stop(job)
        raise
    yield Cluster(job_port, pool, pool_port, env)
    stop(pool)
    stop(job)


# ---------------------------------------------------------------- the input and the in-process runs

@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    """The demo corpus's three sources in three formats: gzipped JSONL (with exact and near duplicates,
    malformed JSON, invalid UTF-8, empty records), Parquet (one row without text) and a tar.xz of text
    files. Returns {source name: glob}."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardforge.commands.synth import make_article, write_demo_corpus

    root = tmp_path_factory.mktemp("portable-raw")
    demo = write_demo_corpus(str(root / "demo"), docs_per_source=60, seed=11)
    (root / "ccnews").mkdir()
    # Near copies beside the demo's own: long articles, and each again with one short sentence added (a few
    # shingles of hundreds differ), the copy in the other file.
    rng = random.Random(3)
    originals = [make_article(rng, 40) for _ in range(3)]
    near = [json.dumps({"text": t}) for a in originals for t in (a, a + " Thanks for reading this article.")]
    for i, path in enumerate(sorted(Path(demo["ccnews"]).parent.glob("*.jsonl"))):
        data = path.read_bytes() + "".join(line + "\n" for line in near[i::2]).encode()
        (root / "ccnews" / (path.name + ".gz")).write_bytes(gzip.compress(data, mtime=0))

    def texts(source: str) -> list[str]:
        (path,) = Path(demo[source]).parent.glob("*.jsonl")
        return [json.loads(line)["text"] for line in path.read_text().splitlines()]

    web = texts("openwebtext")
    (root / "web").mkdir()
    pq.write_table(pa.table({"text": [*web, None], "url": [f"https://web.example/{i}" for i in range(len(web) + 1)]}),
                   root / "web" / "pages.parquet", row_group_size=25)
    stories = texts("stories")
    (root / "stories").mkdir()
    with tarfile.open(root / "stories" / "stories.tar.xz", "w:xz") as tar:
        for i, text in enumerate(stories):
            data = text.encode()
            info = tarfile.TarInfo(f"stories/{i:04d}.txt")
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return {"ccnews": str(root / "ccnews" / "*.jsonl.gz"), "web": str(root / "web" / "*.parquet"),
            "stories": str(root / "stories" / "*.tar.xz")}


@pytest.fixture(scope="module")
def config(inputs, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("portable-config") / "build.json"
    path.write_text(json.dumps({
        "sources": [{"name": name, "input": glob} for name, glob in inputs.items()],
        "clean": {"disabled_rules": ["dup_ngrams", "top_ngrams"]},  # the generated text repeats its phrases
        "tokenizer": {"vocab_size": 400},
        "packing": {"max_seq_len": 96, "valid_fraction": 0.1},
        "shards": {"target_samples": 40},
    }))
    return path


@pytest.fixture(scope="module")
def in_process(config, tmp_path_factory) -> Path:
    """The build of the same input and config on the local runner, in this process."""
    from pipelines.jobs.build import run_build
    from schemas.config import BuildConfig
    from shardforge.storage.contract import load_config

    out = tmp_path_factory.mktemp("portable-ref") / "corpus"
    run_build(load_config(BuildConfig, str(config)), str(out))
    return out


def summary(res: subprocess.CompletedProcess) -> dict:
    assert res.returncode == 0, res.stderr[-4000:]
    out = res.stdout
    return json.loads(out[out.index("{"):])


def assert_two_workers(watch: Watch) -> None:
    """The job got its SDK workers from the pool, each its own process, and each did more than start
    (an idle worker's import and connection cost it under a second of CPU)."""
    assert len(watch.cpu) >= WORKERS, watch.cpu
    busy = sorted(watch.cpu.values(), reverse=True)[:WORKERS]
    assert min(busy) > 0.3, watch.cpu


# The serve ledger's clock readings (when a file landed, was seen, was committed): run-dependent.
LEDGER_TIMES = ("seen_at", "committed_at")


def differences(a: Path, b: Path) -> list[str]:
    """``determinism.compare`` of two corpus folders, the serve ledgers compared without their clock readings."""
    out = []
    for line in compare(a, b):
        name = line.split("] ", 1)[-1].split(":", 1)[0]
        if line.startswith("only in one build: ") and is_tmp_name(posixpath.basename(line.rsplit(": ", 1)[-1])):
            # A worker of a failed job that outlived it may leave a hidden temporary (never listed, never
            # read) that a later commit sweeps once its writer is gone and it is older than the grace.
            continue
        if name.startswith("ingest/ledger/"):
            rows = [[{k: v for k, v in json.loads(r).items() if k not in LEDGER_TIMES}
                     for r in (d / name).read_text().splitlines()] for d in (a, b)]
            if rows[0] == rows[1]:
                continue
        out.append(line)
    return out


# ---------------------------------------------------------------- the tests

def kill_a_worker_mid_build(cluster: Cluster, cmd: list[str], out: Path) -> tuple[subprocess.Popen, str, str, float]:
    """Run cmd; once the job's workers have written a first intermediate, SIGKILL one of them.
    Returns the finished process, its stdout and stderr, and how long after the kill it ended."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=cluster.env)
    killed = None
    while proc.poll() is None and killed is None:
        workers = worker_cpu(cluster.pool.pid)
        if len(workers) >= WORKERS and any((out / "versions").glob("*/*/*")):
            os.kill(max(workers), signal.SIGKILL)
            killed = time.monotonic()
        time.sleep(0.05)
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # where each of its threads waits (shardforge.console.run.stacks_on_sigusr1)
        proc.send_signal(signal.SIGUSR1)
        time.sleep(3)
        proc.kill()
        stdout, stderr = proc.communicate()
        raise AssertionError(f"the command did not end in 120 s; its threads then:\n{stderr[-8000:]}") from None
    assert killed is not None, f"the build ended before a worker could be killed:\n{stderr[-2000:]}"
    return proc, stdout, stderr, time.monotonic() - killed


@pytest.mark.slow
def test_build_on_the_portable_runner_survives_a_killed_worker_and_writes_the_in_process_bytes(
        cluster, config, in_process, tmp_path):
    """A worker killed mid-build: the local job server's runner does not retry a bundle whose worker
    died, so the job fails, and the command says so in one line (exit 2), at once, committing nothing.
    The same command again finishes the build over what the killed attempt left, on two workers, and
    writes every file the in-process build writes, byte for byte."""
    out = tmp_path / "corpus"
    args = ["--config", str(config), "--output", str(out)]
    proc, stdout, stderr, failed_after = kill_a_worker_mid_build(
        cluster, [sys.executable, "-m", "pipelines.build", *args, *cluster.flags()], out)
    lines = stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, stderr[-4000:]
    assert lines[0].startswith("error: the PortableRunner job failed (") and "nothing unfinished was committed" in lines[0]
    assert stdout == "" and not (out / "manifest.json").exists() and any((out / "versions").iterdir())
    assert failed_after < 30, failed_after  # seen at once, not after a timeout

    res, watch = cluster.run("pipelines.build", [*args, "--json"])
    got = summary(res)
    # The input exercises what the distributed graph changes: every source, both kinds of duplicate, rejects.
    accounting = json.loads((out / "manifest.json").read_text())["accounting"]
    assert sorted(accounting) == ["ccnews", "stories", "web"]
    for kind in ("exact", "near"):
        assert sum(a["duplicate"].get(kind, 0) for a in accounting.values()) >= 1, (kind, accounting)
    assert got["rejected"] >= 5, got
    assert differences(in_process, out) == []
    assert_two_workers(watch)


@pytest.mark.slow
def test_repack_on_the_portable_runner_writes_the_in_process_bytes(cluster, in_process, tmp_path):
    from pipelines.jobs.repack import run_repack

    run_repack(str(in_process), str(tmp_path / "local"), rule="sop", shard_samples=30)
    res, watch = cluster.run("pipelines.repack", ["--tokenized", str(in_process), "--output", str(tmp_path / "portable"),
                                                  "--rule", "sop", "--shard_samples", "30"])
    assert res.returncode == 0, res.stderr[-4000:]
    assert differences(tmp_path / "local", tmp_path / "portable") == []
    assert_two_workers(watch)


@pytest.mark.slow
def test_a_serve_batch_on_the_portable_runner_writes_the_in_process_bytes(cluster, config, inputs, tmp_path):
    from pipelines.jobs.serve import run

    args = ["--watch", inputs["ccnews"], "--source", "ccnews", "--once", "--settle", "0", "--config", str(config)]
    assert run([*args, "--corpus", str(tmp_path / "local")]) == 0
    res, watch = cluster.run("pipelines.serve", [*args, "--corpus", str(tmp_path / "portable")])
    assert res.returncode == 0, res.stderr[-4000:]
    assert (tmp_path / "portable" / "manifest-v1.json").exists()
    assert differences(tmp_path / "local", tmp_path / "portable") == []
    assert_two_workers(watch)


# ---------------------------------------------------------------- runner mistakes, in one line

def one_line(args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> tuple[str, float]:
    """``python -m pipelines.build ARGS`` that must fail in one line (exit 2) having written nothing:
    the line and the seconds it took."""
    out = tmp_path / "out"
    start_time = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "pipelines.build", "--input", str(tmp_path / "x.jsonl"), "--output",
                          str(out), *args], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    wall = time.monotonic() - start_time
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.stderr[-3000:]
    assert not out.exists() and res.stdout == ""
    return lines[0], wall


@pytest.fixture
def raw(tmp_path: Path) -> Path:
    (tmp_path / "x.jsonl").write_text(json.dumps({"text": "A sentence of a document. " * 20}) + "\n")
    return tmp_path


def test_a_runner_that_cannot_download_what_it_runs_names_it_and_the_flag_for_a_local_copy(raw):
    """Offline, Beam's download of the Prism binary or a job-server jar fails when the job starts; before, that
    read "cannot reach the object store ... STORAGE_EMULATOR_HOST". Every proxy here refuses, and the home
    folder (Beam's download cache) is empty, so the downloads fail however the machine is connected."""
    offline = {"HOME": str(raw / "home"), "https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
               "no_proxy": "", "NO_PROXY": ""}
    for runner, flag, file in [("PrismRunner", "--prism_location", "prism-linux-amd64.zip"),
                               ("FlinkRunner", "--flink_job_server_jar", "beam-runners-flink-")]:  # Spark's: Flink's code
        # A Java launcher that is there: the jar is fetched before Java would start.
        line, wall = one_line(["--runner", runner, "--job_server_java_launcher", sys.executable], raw, offline)
        assert f"--runner {runner} needs " in line and f"pass {flag} PATH" in line and file in line, line
        assert "STORAGE_EMULATOR_HOST" not in line and wall < 60, (line, wall)


def test_runner_mistakes_found_before_beam_starts_are_one_line_at_once(raw):
    # A local copy that is not there.
    line, wall = one_line(["--runner", "FlinkRunner", "--flink_job_server_jar", str(raw / "flink-job-server.jar")], raw)
    assert "--flink_job_server_jar" in line and "no such file" in line and wall < 10, (line, wall)
    # A local copy that is no jar (Beam's job service failed to start, in 11 ERROR lines).
    (raw / "notes.jar").write_text("not a jar\n")
    line, wall = one_line(["--runner", "FlinkRunner", "--flink_job_server_jar", str(raw / "notes.jar")], raw)
    assert "notes.jar: not a jar" in line and wall < 10, (line, wall)
    # A job server nothing answers at (Beam waited 300 s for it).
    line, wall = one_line(["--runner", "PortableRunner", "--job_endpoint", f"localhost:{free_port()}"], raw)
    assert "nothing answers at --job_endpoint" in line and wall < 10, (line, wall)
    # No job server named at all (the job started, then failed with "run the same command again to finish").
    line, wall = one_line(["--runner", "PortableRunner"], raw)
    assert line.startswith("error: --runner PortableRunner submits the job to a running job server: pass "
                           "--job_endpoint HOST:PORT") and wall < 10, (line, wall)
    # The options of the runner --runner names are known to the flag check: DaskRunner's option is not
    # "an unknown flag", and the runner is refused with the reason.
    line, wall = one_line(["--runner", "DaskRunner", "--dask_client_address", "tcp://127.0.0.1:8786"], raw)
    assert "DaskRunner cannot run the build" in line and "finish_bundle" in line and wall < 10, (line, wall)
    assert "unknown flag" not in line
    # A runner Beam does not know.
    line, wall = one_line(["--runner", "Flinkrunner2"], raw)
    assert "Beam knows no such runner" in line and "FlinkRunner" in line, line


def test_a_failed_job_on_a_distributed_runner_is_one_line():
    """The driver of a distributed runner only sees the job fail with the remote traceback as text: the line
    names the runner, the remote error, and what is committed; a user error inside is the command's own line."""
    from pipelines.options import job_failed
    from shardforge.console.run import find_user_error

    remote = ("Pipeline job-1 failed in state FAILED: Error running pipeline.\nTraceback (most recent call last):\n"
              "  File \"x.py\", line 1, in f\nRuntimeError: SDK worker lost [while running 'Clean']\n")
    e = job_failed("PortableRunner", RuntimeError(remote))
    assert str(e).startswith("the PortableRunner job failed (RuntimeError: SDK worker lost [while running 'Clean'])")
    assert "nothing unfinished was committed" in str(e) and "\n" not in str(e)
    assert find_user_error(RuntimeError(remote + "schemas.errors.UserError: bad config\n")).args == ("bad config",)
