"""Helpers shared by the benchmark scripts: machine line, argument parser, results file, timing,
scratch folders and a local GCS emulator.

Every ``bench_*.py`` puts the repository root on ``sys.path`` first, so this module imports as
``benchmarks.common`` both when a script runs as ``python benchmarks/bench_x.py`` and as
``python -m benchmarks.bench_x``. Nothing here imports torch or apache_beam: a pipelines benchmark
must not pay for (or depend on) the trainer's stack just to describe the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Generic, TypeVar

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"

T = TypeVar("T")

# gcsfs reads these when it is imported: without the first, every new filesystem object makes a
# 60 s gRPC probe for the bucket type; the others stop it looking for GCE metadata / credentials.
GCSFS_ENV = {
    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    "NO_GCE_CHECK": "true",
    "FSSPEC_GS_TOKEN": "anon",
}


# ------------------------------------------------------------------ machine and results


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown" where there is none, e.g. not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def package_version(name: str) -> str:
    """Installed version of a distribution, read from its metadata (the package is not imported)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine(*packages: str, torch_details: bool = False, load: bool = False) -> str:
    """One line describing where a benchmark ran, for the results file.

    Always: nproc, CPU model, Python and torch versions; then the versions of ``packages``
    (distribution names, e.g. "apache-beam"). ``torch_details`` adds torch's CPU thread count and
    the GPU name (imports torch: only for benchmarks that use it anyway); ``load`` appends the
    load average now (call it at the end of the run: the machine may be shared).
    """
    parts = [f"nproc {os.cpu_count()}", f"CPU {cpu_model()}", f"Python {platform.python_version()}"]
    if torch_details:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
        parts += [f"torch threads {torch.get_num_threads()}", f"GPU {gpu}"]
    parts += [f"{name} {package_version(name)}" for name in ("torch", *packages)]
    line = ", ".join(parts)
    if load:
        avg = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        line += f"; load average at the end {avg} (a shared machine)"
    return line


def results_path(name: str) -> Path:
    """benchmarks/results/<name>.md, where a benchmark writes its markdown by default."""
    return RESULTS_DIR / f"{name}.md"


def bench_parser(doc: str | None, name: str) -> argparse.ArgumentParser:
    """An argument parser whose --help shows the script's docstring as written, with ``--out``
    (alias ``--output``) defaulting to benchmarks/results/<name>.md."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", "--output", dest="out", default=str(results_path(name)),
                    help="Markdown results file (default: %(default)s).")
    return ap


def command_line() -> str:
    """How this benchmark was invoked, as a script path relative to the repository root."""
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else Path(sys.argv[0])
    return " ".join(["python", shown.as_posix(), *sys.argv[1:]])


def write_results(path: str | Path, lines: str | Sequence[str]) -> Path:
    """Write a markdown results file (lines joined by newlines, one trailing newline) and say so."""
    text = lines if isinstance(lines, str) else "\n".join(lines)
    if not text.endswith("\n"):
        text += "\n"
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}")
    return out


def run_in_venv(python: str, script: str, payload: Any, *args: str, env: Mapping[str, str] | None = None) -> Any:
    """Run ``script`` (a peer tool's side of a benchmark) with another virtual environment's ``python``:
    ``python run.py IN OUT *args``, IN holding ``payload`` as JSON; what it wrote to OUT, parsed. ``env``:
    variables set for that process on top of this one's (a library's thread count, read as it loads)."""
    with tempfile.TemporaryDirectory() as d:
        src, dst, runner = Path(d, "in.json"), Path(d, "out.json"), Path(d, "run.py")
        src.write_text(json.dumps(payload))
        runner.write_text(script)
        subprocess.run([python, str(runner), str(src), str(dst), *args], check=True,
                       env={**os.environ, **env} if env else None)
        return json.loads(dst.read_text())


# ------------------------------------------------------------------ timing


@dataclass(frozen=True)
class Timing(Generic[T]):
    """One measurement: wall seconds and process CPU seconds (user + sys, all threads) per call,
    and what the (last) call returned."""

    wall: float
    cpu: float
    result: T


def time_calls(fn: Callable[[], T], calls: int = 1, sync: Callable[[], None] | None = None) -> Timing[T]:
    """Run ``fn`` ``calls`` times back to back; per-call wall and CPU seconds.

    ``sync`` (e.g. torch.cuda.synchronize) runs before starting and before stopping the clocks,
    so that asynchronous device work is inside the measured interval.
    """
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    if sync is not None:
        sync()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        result = fn()
    if sync is not None:
        sync()
    return Timing((time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls, result)


def best_of(fn: Callable[[], T], repeats: int) -> Timing[T]:
    """The fastest (least wall time) of ``repeats`` runs of ``fn``: on a shared machine the least
    disturbed one. Its CPU time and result come with it."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    return min((time_calls(fn) for _ in range(repeats)), key=lambda t: t.wall)


def interleaved(fns: Mapping[str, Callable[[], T]], rounds: int, *, calls: int = 1, warmup: int = 1,
                sync: Callable[[], None] | None = None) -> dict[str, list[Timing[T]]]:
    """Time several functions round-robin (A B C A B C ...): load from other processes on a shared
    machine then falls on all of them alike. Each function first runs ``warmup`` times untimed
    (allocators, kernels, caches); then per round each is timed over ``calls`` calls."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    if sync is not None and warmup:
        sync()
    times: dict[str, list[Timing[T]]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(time_calls(fn, calls, sync))
    return times


# ------------------------------------------------------------------ scratch space and services


@contextmanager
def scratch_dir(prefix: str, keep_at: str | None = None) -> Iterator[Path]:
    """A scratch folder for one run, removed afterwards; ``keep_at`` (e.g. a --workdir option)
    uses that folder instead and leaves it in place for inspection."""
    if keep_at:
        os.makedirs(keep_at, exist_ok=True)
        yield Path(keep_at)
        return
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def set_gcsfs_env() -> None:
    """Set gcsfs's environment (GCSFS_ENV) unless already set; call before gcsfs is imported."""
    for key, value in GCSFS_ENV.items():
        os.environ.setdefault(key, value)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def local_server(cmd: list[str], port: int, what: str, timeout: float = 30.0) -> Iterator[None]:
    """Run ``cmd`` (a server that listens on 127.0.0.1:``port``) for the duration of the block:
    returns once it accepts connections, stops it on exit."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start on port {port}")
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def gcs_emulator(timeout: float = 30.0) -> Iterator[str]:
    """An in-memory gcp-storage-emulator on 127.0.0.1 for the duration of the block; yields its URL.

    Sets STORAGE_EMULATOR_HOST so that gcsfs (token "anon") talks to it; stops it on exit.
    """
    set_gcsfs_env()
    port = free_port()
    # As a module of this interpreter: its console script may be on no PATH (a venv not activated, or
    # packages installed with pip --target on a GPU machine).
    cmd = [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1", "--port", str(port),
           "--in-memory"]
    with local_server(cmd, port, "gcp-storage-emulator", timeout):
        url = f"http://127.0.0.1:{port}"
        os.environ["STORAGE_EMULATOR_HOST"] = url
        yield url
