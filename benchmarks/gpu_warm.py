"""The GPU benchmark's compile warm pool: a run's compiled rows compiled side by side in subprocesses while
the CUDA tests run, so that each row, when its turn comes, loads its graphs from inductor's on-disk caches.

A whole-model compile on the H200's 16-vCPU host took 1.5-4 minutes, most of it one Python thread (dynamo,
AOT autograd, inductor's lowering). Compiled side by side, several take about the longest one's time instead
of their sum, and the same graph compiled again in another process hits the FX graph and AOT autograd
caches (torch's defaults, one cache folder per user) for the price of a dynamo trace: on the CPU, the tiny
model's training step with inductor's C++ took 32.2 s cold and 3.1 s warm.

Nothing is timed while the pool runs: ``bench_gpu`` waits for it (and stops what is left at a deadline)
before its first timed part, so only the CUDA tests run beside it. The warm processes keep inductor's
autotuning results to themselves (``autotune_local_cache`` off; it is outside the cache key): a row picks its
kernels' launch configurations itself, on a quiet GPU.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

WARMED = "WARMED "  # the line a warm process ends with: this prefix, then a JSON object


class Warmed(NamedTuple):
    item: str  # the plan item's name (bench_gpu.item_name)
    state: str  # compiled | failed | stopped (the deadline) | not started (the deadline)
    seconds: float  # the warm process's compile (its warm-up steps), or its time until it failed or stopped
    note: str  # failed: the error's last line; compiled: inductor's cache counters


def makespan(costs: Sequence[float], slots: int) -> float:
    """The pool's expected wall time: the dearest first, each onto the least loaded of ``slots``."""
    loads = [0.0] * max(1, slots)
    for cost in sorted(costs, reverse=True):
        loads[loads.index(min(loads))] += cost
    return max(loads)


def pool_slots(cpus: int, most: int) -> int:
    """Side-by-side compiles for a host of ``cpus``: one per four CPUs (each compile's Triton workers get the
    rest), at least one, at most ``most``."""
    return max(1, min(most, cpus // 4))


class WarmPool:
    """Runs ``jobs`` (name, argv, expected seconds), at most ``slots`` at a time, the dearest first, each in
    its own session so a stop takes its compile workers with it; a thread keeps the slots full."""

    def __init__(self, jobs: Sequence[tuple[str, list[str], float]], slots: int, logs: Path,
                 env: dict[str, str] | None = None, expected: float = 0.0) -> None:
        self.pending = sorted(jobs, key=lambda j: -j[2])
        self.slots, self.logs, self.env = max(1, slots), logs, env
        self.running: dict[str, tuple[subprocess.Popen, float]] = {}
        self.done: dict[str, Warmed] = {}
        self.order = [name for name, _, _ in jobs]
        self.log_of: dict[str, Path] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="warm-pool", daemon=True)
        self.t0 = time.monotonic()
        self.expected = expected  # seconds the caller expects the pool to take (its report's figure)

    def start(self) -> WarmPool:
        """Starts the jobs; should the caller exit without ``wait`` (an error, SIGTERM turned into SystemExit),
        the jobs are stopped at its exit: in their own sessions, nothing else would."""
        self.logs.mkdir(parents=True, exist_ok=True)
        atexit.register(self.wait, 0.0)
        self._thread.start()
        return self

    def _launch(self, name: str, argv: list[str]) -> None:
        log = self.logs / f"{len(self.log_of):02d}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                    start_new_session=True)
        self.running[name] = (proc, time.monotonic())
        self.log_of[name] = log

    def _finish(self, name: str, proc: subprocess.Popen, started: float) -> None:
        seconds = time.monotonic() - started
        text = self.log_of[name].read_text(errors="replace")
        lines = [x for x in text.splitlines() if x.strip()]
        result = next((x for x in reversed(lines) if x.startswith(WARMED)), None)
        if proc.returncode == 0 and result is not None:
            info = json.loads(result[len(WARMED):])
            self.done[name] = Warmed(name, "compiled", float(info["seconds"]), info.get("note", ""))
        else:
            last = lines[-1][:200] if lines else "no output"
            self.done[name] = Warmed(name, "failed", seconds, f"exit {proc.returncode}: {last}")

    def _loop(self) -> None:
        while (self.pending or self.running) and not self._stop.is_set():
            while self.pending and len(self.running) < self.slots:
                name, argv, _ = self.pending.pop(0)
                self._launch(name, argv)
            for name, (proc, started) in list(self.running.items()):
                if proc.poll() is not None:
                    del self.running[name]
                    self._finish(name, proc, started)
            self._stop.wait(0.2)

    def wait(self, timeout: float) -> list[Warmed]:
        """What each job came to, in the jobs' order: waits up to ``timeout`` s, then stops what is left."""
        atexit.unregister(self.wait)
        self._thread.join(max(0.0, timeout))
        self._stop.set()
        self._thread.join()
        for name, (proc, started) in list(self.running.items()):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
                self.done[name] = Warmed(name, "stopped", time.monotonic() - started, "the pool's deadline")
            else:
                self._finish(name, proc, started)
        self.running.clear()
        for name, _, _ in self.pending:
            self.done[name] = Warmed(name, "not started", 0.0, "the pool's deadline")
        self.pending.clear()
        self._tidy_logs()
        return [self.done[name] for name in self.order]

    def _tidy_logs(self) -> None:
        """Remove the logs of the parts that compiled (their results are in ``done``), and the folder if that
        empties it; the logs of parts that failed or were stopped stay, and the folder is named on stderr."""
        for name, log in self.log_of.items():
            if name in self.done and self.done[name].state == "compiled":
                log.unlink(missing_ok=True)
        try:
            self.logs.rmdir()
        except FileNotFoundError:
            pass
        except OSError:  # not empty
            print(f"warm pool: the logs of the parts that did not compile are in {self.logs}", file=sys.stderr)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


def warm_argv(script: Path, spec: dict) -> list[str]:
    """The command of one warm process: ``script --warm-one JSON`` with this interpreter."""
    return [sys.executable, str(script), "--warm-one", json.dumps(spec)]
