"""A full disk and a read-only output through the real CLIs: one line, nothing committed, a clean rerun.

The full disk is a real one where the kernel allows it: a size-limited tmpfs mounted in a user and
mount namespace of its own (``unshare -rm``), so every write, fsync and link under the output meets
the kernel's ENOSPC. Where namespaces are not allowed, the same commands run under a quota on the
bytes written through Python's ``open()`` to files under the output (``QUOTA``), at the OS boundary
of our writers. Either way the debris is kept for the rerun, which runs with room to spare. A
read-only output is a folder the command's process may not write: a folder of mode 555, and for
root a process without CAP_DAC_OVERRIDE (``setpriv``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from forkserver import run_python
from test_serve import articles, small_config

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
TRAIN = ["--steps", "2", "--batch_size", "4", "--device", "cpu", "--set", "model.size=tiny",
         "--set", "model.dropout=0.0", "--set", "shuffle_buffer=8"]

# Fallback full disk: files opened for writing under a folder share a byte quota, then ENOSPC.
QUOTA = textwrap.dedent("""
    import builtins, errno, io, os, runpy, sys
    quota, folder = int(sys.argv[1]), os.path.abspath(sys.argv[2]) + os.sep
    used = [0]
    real_open = builtins.open

    class Full:
        def __init__(self, f):
            self._f = f
        def write(self, data):
            n = len(data.encode() if isinstance(data, str) else data)
            if used[0] + n > quota:
                raise OSError(errno.ENOSPC, "No space left on device")
            used[0] += n
            return self._f.write(data)
        def __getattr__(self, name):
            return getattr(self._f, name)
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self._f.close()

    def limited(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        writes = any(c in mode for c in "wax+") and isinstance(file, (str, bytes, os.PathLike))
        return Full(f) if writes and os.path.abspath(os.fsdecode(file)).startswith(folder) else f

    builtins.open = io.open = limited
    sys.argv = [sys.argv[3], *sys.argv[4:]]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
""")


def namespaces_allowed() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


def run_on_small_disk(size_kb: int, disk: Path, module: str, *args: str, quota: int | None = None,
                      ballast_kb: int = 0) -> subprocess.CompletedProcess:
    """``python -m module args`` with ``disk`` (an empty folder) on a disk of ``size_kb`` KB, ``ballast_kb``
    of it taken (``quota`` bytes free under the fallback, which counts bytes where tmpfs counts 4 KB
    pages); what it left there stays in ``disk`` afterwards."""
    disk.mkdir(parents=True, exist_ok=True)
    if not namespaces_allowed():
        quota = size_kb * 1024 if quota is None else quota
        return subprocess.run([sys.executable, "-c", QUOTA, str(quota), str(disk), module, *args],
                              env=ENV, capture_output=True, text=True, timeout=600)
    saved = disk.with_name(disk.name + ".saved")
    saved.mkdir()
    script = ('d="$2"; s="$3"; mount -t tmpfs -o size="$1"k tmpfs "$d" || exit 97; '
              'if [ "$4" != 0 ]; then head -c "$4"k /dev/zero > "$d/ballast"; fi; shift 4; '
              '"$@"; rc=$?; rm -f "$d/ballast"; cp -a "$d/." "$s/"; exit $rc')
    res = subprocess.run(["unshare", "-rm", "sh", "-c", script, "_", str(size_kb), str(disk), str(saved),
                          str(ballast_kb), sys.executable, "-m", module, *args], env=ENV, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode != 97, res.stderr
    shutil.rmtree(disk)
    saved.rename(disk)
    return res


def one_line(res: subprocess.CompletedProcess, *needles: str) -> str:
    errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-4000:]
    for n in needles:
        assert n in errors[0], errors[0]
    return errors[0]


def leftovers(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob(".*.tmp")]


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("raw")
    (d / "f0.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in articles(100, 24)))
    (d / "config.json").write_text(json.dumps(small_config()))
    return {"input": d / "f0.jsonl", "config": d / "config.json"}


def build_args(raw: dict[str, Path], out: Path) -> list[str]:
    return ["--input", f"news={raw['input']}", "--output", str(out), "--config", str(raw["config"])]


def test_a_full_disk_during_a_build_is_one_line_commits_nothing_and_a_rerun_is_clean(raw, tmp_path) -> None:
    disk = tmp_path / "disk"
    res = run_on_small_disk(400, disk, "pipelines.build", *build_args(raw, disk / "corpus"))
    one_line(res, "No space left on device: ", str(disk / "corpus"), "run the same command again")
    assert not (disk / "corpus" / "manifest.json").exists() and not leftovers(disk)
    # Room again: the same command over the debris commits what a build on an empty disk commits.
    again = run_python(["-m", "pipelines.build", *build_args(raw, disk / "corpus")], env=ENV,
                       capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    clean = run_python(["-m", "pipelines.build", *build_args(raw, tmp_path / "clean")], env=ENV,
                       capture_output=True, text=True, timeout=600)
    assert clean.returncode == 0, clean.stderr[-3000:]
    rerun, fresh = disk / "corpus", tmp_path / "clean"
    assert (rerun / "manifest.json").read_bytes() == (fresh / "manifest.json").read_bytes()
    shards = sorted(p.name for p in fresh.glob("*.tar"))
    assert shards and sorted(p.name for p in rerun.glob("*.tar")) == shards
    assert all((rerun / n).read_bytes() == (fresh / n).read_bytes() for n in shards)
    assert not leftovers(rerun)


@pytest.mark.parametrize("size_kb, quota, ballast_kb, full", [(600, None, 0, "checkpoints/ckpt-00000002.pt"),
                                                              (4, 100, 4, "metrics.jsonl")])
def test_a_full_disk_during_training_is_one_line_and_a_rerun_is_clean(raw, tmp_path, size_kb, quota, ballast_kb,
                                                                       full) -> None:
    """The checkpoint save (600 KB: the 1.5 MB checkpoint does not fit) or the metrics log (a full disk,
    TensorBoard off) meets ENOSPC: one line naming the file, no partial checkpoint and no half line;
    the rerun trains to the end."""
    corpus = tmp_path / "corpus"
    built = run_python(["-m", "pipelines.build", *build_args(raw, corpus)], env=ENV,
                       capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    disk = tmp_path / "disk"
    tensorboard = ["--set", "trackers.tensorboard=false"] if ballast_kb else []
    res = run_on_small_disk(size_kb, disk, "trainer.train", "--data", str(corpus), "--output", str(disk / "run"),
                            *TRAIN, *tensorboard, quota=quota, ballast_kb=ballast_kb)
    one_line(res, f"No space left on device: {disk / 'run' / full}")
    assert not list((disk / "run").glob("checkpoints/*.pt")) and not leftovers(disk)
    again = run_python(["-m", "trainer.train", "--data", str(corpus), "--output",
                        str(disk / "run"), *TRAIN], env=ENV, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "trained to step 2" in again.stdout, again.stderr[-3000:]
    rows = [json.loads(line) for line in (disk / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows and rows[-1]["step"] == 2


def test_a_full_disk_under_tensorboards_writer_thread_is_one_line(raw, tmp_path) -> None:
    """TensorBoard writes from a thread of its own, which prints the traceback of its error and leaves
    it to the next call of the training loop: the command says it once, in one line (exit 2)."""
    corpus = tmp_path / "corpus"
    built = run_python(["-m", "pipelines.build", *build_args(raw, corpus)], env=ENV,
                       capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    run = tmp_path / "run"
    res = run_on_small_disk(4, run / "tb", "trainer.train", "--data", str(corpus), "--output", str(run),
                            *TRAIN[2:], "--steps", "20", "--set", "log_every=1", "--set", "checkpoint_every=0")
    one_line(res, "No space left on device (", "run the same command again")
    assert "Exception in thread" not in res.stderr, res.stderr[-3000:]


def without_write_permission(args: list[str]) -> list[str]:
    """args run by a process that file modes bind: as it is for a user, without CAP_DAC_OVERRIDE for root."""
    if os.geteuid() != 0:
        return args
    assert shutil.which("setpriv"), "root needs setpriv (util-linux) to run a process that file modes bind"
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *args]


@pytest.mark.parametrize("batched", [False, True])
def test_a_read_only_output_is_one_line_before_any_work(raw, tmp_path, batched) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        for out in (locked, locked / "sub" / "corpus"):
            res = subprocess.run(without_write_permission(
                [sys.executable, "-m", "pipelines.build", *build_args(raw, out),
                 *(["--batch_mb", "1"] if batched else [])]), env=ENV, capture_output=True, text=True, timeout=600)
            one_line(res, f"--output {out} cannot be written (Permission denied: {locked})")
            assert "stage timings" not in res.stderr  # refused before the build ran
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)
