"""Processes beside the local runner for the per-document work (``--doc_processes N``).

The in-process local runner executes every bundle on one thread, so a build used one core
however many the machine had; Beam's worker processes (``--direct_num_workers``) spread the
stages but cost 1.7-1.8x the CPU for the same output (docs/scaling.md), because every element
of every stage crosses gRPC to and from the controller. Here the runner stays in-process and
only the costly pure per-document work (cleaning with language ID, MinHash sketches, sentence
splitting) goes to ``N`` plain worker processes, in batches: the step that owns the work
(``pipelines.localrunner.batching``, ``PooledBatches``) hands a batch over, keeps going with the next, and
emits the results in the order it handed the batches over. Outputs do not depend on ``N`` (each
document's result is a pure function of the document and the config).

The workers run ``python -m pipelines.localrunner.docworker``: they import only the pure modules their
tasks name (no Beam: ~0.4 CPU-s and ~45 MB each at the start, against ~1.8 CPU-s and ~150 MB
for a Beam worker); the one that sketches (``lanes``) also loads the numba MinHash kernel (~1 CPU-s,
~130 MB) once it has hashed enough, as the runner's process would. A process holds its imports
and one batch at a time: ~55 MB cleaning and splitting, ~95 MB sketching on numpy, ~230 MB with
the kernel, whatever the input size (docs/scaling.md). A task is a module-level function and its
arguments, pickled over the worker's pipes: both ends are this build's own processes (nothing from
the input or a bucket is unpickled that was not pickled by this build).
"""

from __future__ import annotations

import atexit
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pipelines

HEADER = struct.Struct("<QQ")  # a frame's task id and length, then its pickled body
WORKER_MODULE = "pipelines.localrunner.docworker"


class WorkerFailed(RuntimeError):
    """A document process raised (its traceback is the message) or died."""


def read_frame(stream: Any) -> tuple[int, bytes]:
    """The next frame of ``stream``: its task id and its pickled body; EOFError at the stream's end."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        raise EOFError
    task_id, size = HEADER.unpack(head)
    body = stream.read(size)
    if len(body) < size:
        raise EOFError
    return task_id, body


def write_frame(stream: Any, task_id: int, obj: Any) -> None:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(task_id, len(body)))
    stream.write(body)
    stream.flush()


class _Worker:
    """One worker process: a thread writes the tasks to its stdin (a task larger than the pipe's
    buffer would otherwise hold the step until the worker is done with the one before), and another
    reads the results from its stdout."""

    def __init__(self, index: int) -> None:
        env = dict(os.environ)
        # The worker imports this checkout's modules whatever its working folder: the folder that holds
        # the `pipelines` package (never a folder inside it, whose rooms would shadow standard modules).
        root = os.path.dirname(os.path.dirname(os.path.abspath(pipelines.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen([sys.executable, "-m", WORKER_MODULE], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, close_fds=True)
        self.index = index
        self.pending: dict[int, Future] = {}
        self.lock = threading.Lock()
        self.dead: str | None = None
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.reader = threading.Thread(target=self._read, name=f"docpool-reader-{index}", daemon=True)
        self.writer = threading.Thread(target=self._write, name=f"docpool-writer-{index}", daemon=True)
        self.reader.start()
        self.writer.start()

    def _write(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                break
            task_id, fn, args = item
            del item
            try:
                write_frame(self.proc.stdin, task_id, (fn, args))
            except (OSError, ValueError) as e:  # the process is gone: the reader fails what is in flight
                self._fail(task_id, f"a document process is gone ({e})")
            del fn, args
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def _fail(self, task_id: int, why: str) -> None:
        with self.lock:
            fut = self.pending.pop(task_id, None)
        if fut is not None and not fut.done():
            fut.set_exception(WorkerFailed(why))

    def _read(self) -> None:
        while True:
            try:
                task_id, body = read_frame(self.proc.stdout)
                ok, payload = pickle.loads(body)
            except (EOFError, OSError, pickle.UnpicklingError):
                break
            with self.lock:
                fut = self.pending.pop(task_id, None)
            if fut is None:
                continue
            if ok:
                fut.set_result(payload)
            else:
                fut.set_exception(WorkerFailed(f"a document process raised:\n{payload}"))
        code = self.proc.wait()
        with self.lock:
            self.dead = f"a document process ended (exit code {code}) with tasks in flight"
            pending, self.pending = self.pending, {}
        for fut in pending.values():
            fut.set_exception(WorkerFailed(self.dead))

    def submit(self, task_id: int, fut: Future, fn: Callable, args: tuple) -> None:
        with self.lock:
            if self.dead is not None:
                raise WorkerFailed(self.dead)
            self.pending[task_id] = fut
        self.queue.put((task_id, fn, args))

    def load(self) -> int:
        with self.lock:
            return len(self.pending)

    def close(self) -> None:
        self.queue.put(None)  # the writer closes stdin after the tasks before it: the worker ends
        self.writer.join(timeout=30)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=5)


class DocPool:
    """``size`` worker processes; ``submit(fn, *args)`` runs ``fn(*args)`` in the least loaded one."""

    def __init__(self, size: int) -> None:
        self.size = max(1, int(size))
        self._workers: list[_Worker] = []
        self._next_id = 0
        self._lock = threading.Lock()
        self.tasks = 0

    @property
    def in_flight(self) -> int:
        """How many batches a step may have handed over and not yet emitted: two per worker."""
        return 2 * self.size

    def _start(self) -> None:
        if not self._workers:
            self._workers = [_Worker(i) for i in range(self.size)]

    def submit(self, fn: Callable, *args: Any, lanes: int | None = None) -> Future:
        """``fn(*args)`` in the least loaded worker (of the first ``lanes`` only, if given: a task whose
        module is costly to load, such as the numba MinHash kernel, ~1 CPU-s and ~130 MB a process,
        keeps to a few)."""
        fut: Future = Future()
        with self._lock:
            self._start()
            task_id, self._next_id = self._next_id, self._next_id + 1
            worker = min(self._workers[:lanes] if lanes else self._workers, key=_Worker.load)
            self.tasks += 1
        worker.submit(task_id, fut, fn, args)
        return fut

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    def close(self) -> None:
        with self._lock:
            workers, self._workers = self._workers, []
        for w in workers:
            w.close()


_size = 1
_pool: DocPool | None = None
_pool_lock = threading.Lock()


def resolve(n: int | None) -> int:
    """``--doc_processes`` as a process count: 0 is one per core; None or 1 (the default): none."""
    if n is None:
        return 1
    if n < 0:
        from schemas.errors import UserError

        raise UserError(f"--doc_processes must be 0 (one per core) or more, not {n}")
    return n if n > 0 else (os.cpu_count() or 1)


def configure(n: int | None) -> None:
    """Use ``resolve(n)`` processes in this process's steps from now on (1: none, the work stays in
    the runner's thread). A running pool of another size is closed."""
    global _size
    size = resolve(n)
    with _pool_lock:
        if _pool is not None and _pool.size != size:
            _close_locked()
        _size = size


def current() -> DocPool | None:
    """The pool of this process (started with its first task), or None without ``--doc_processes``."""
    global _pool
    if _size <= 1:
        return None
    with _pool_lock:
        if _pool is None:
            _pool = DocPool(_size)
        return _pool


def _close_locked() -> None:
    global _pool
    if _pool is not None:
        _pool.close()
        _pool = None


def shutdown() -> None:
    """Stop the workers (a run's end) and go back to none; the workers' CPU is then the process's
    children's."""
    global _size
    with _pool_lock:
        _close_locked()
        _size = 1


atexit.register(shutdown)
