"""`run_python(args, ...)`: `subprocess.run([sys.executable, *args], ...)` for the tests' command runs, from a warm start.

Each `python -m trainer.train ...` or `python -m pipelines.build ...` a test runs as a user would first spends 1-2
CPU-s importing torch or Apache Beam: about 250 CPU-s of the suite. Here a fork server per kind of command has done
that once, the way the command's own entry point does it (a data job's local-process set-up,
``pipelines.localrunner.preflight.local_build_process``, before Beam; torch and torch._dynamo for the trainer), and
forks a new process for each run. The run is still a separate process with its own pid, argv, environment, working
directory, stdin, stdout, stderr and exit code, and it imports our modules itself (the server imports only what the
command imports before its own code starts, and torch._dynamo, which a training run imports too); what the server
printed while importing is printed again at the start of every run, as a fresh interpreter would print it.

What a forked run shares with the server, and so where it is not used (those call ``subprocess`` directly):
the hash seed (tests that compare two processes' output for determinism), the process group and session
(signals), the interpreter's start-up (``-X`` options, ``sys.orig_argv``). A run goes to a server only for
a module in ``ROUTES`` or a ``shardforge.cli`` command in ``CLI_ROUTES``, a data job on a local runner, and a
start-up environment (the variables an interpreter or its imports read as they load: ``STARTUP_PREFIXES``)
seen before in this test process (one server per start-up environment, started at the second run that needs
it; the run's other variables are its own); anything else starts a fresh interpreter. ``SHARDFORGE_TEST_FORKSERVER=0`` starts a fresh interpreter for every run.

A run still going at its timeout, forked or fresh, is sent SIGUSR1 first (every shardforge command then prints
each of its threads' stacks to its stderr) and killed STACKS_WAIT_S later; the failing test prints the end of its
stderr, so a hang seen once in a suite shows where it waited.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pipelines.localrunner.preflight import is_local_runner, runner_in_argv

# What a server imports before it forks, per kind of command: the steps the command's entry point takes
# before its own modules are imported. A training run also imports torch._dynamo before its first step
# (torch.optim's optimizers load it when built: 2.7 s on a 2-vCPU machine, as long as torch itself), so the
# torch server loads it as well (an export run finds it loaded and does not use it).
PRELOADS = {
    "torch": ("import torch", "import torch._dynamo"),
    "beam-local": ("from pipelines.localrunner.preflight import local_build_process", "local_build_process()",
                   "import apache_beam"),
}
ROUTES = {"trainer.train": "torch", "trainer.export": "torch", "trainer.evaluate_cli": "torch", "pipelines.build": "beam-local",
          "pipelines.serve": "beam-local", "pipelines.repack": "beam-local"}
# `python -m shardforge.cli COMMAND`: the commands that import torch or Beam; the cli's data jobs set up a local
# build's process as `python -m pipelines.build` does (``before_beam``). The others are light.
CLI_ROUTES = {"train": "torch", "export": "torch", "evaluate": "torch", "build": "beam-local", "serve": "beam-local",
              "repack": "beam-local"}
REPO = str(Path(__file__).resolve().parent.parent)
# The environment variables a server's interpreter and its imports may have read when it started (Python's
# own, the OpenMP / BLAS / allocator libraries torch and pyarrow load, torch, Beam, gRPC, numpy, the locale):
# a run goes to a server started with the same values of these. Every other variable is the run's own.
STARTUP_PREFIXES = ("PYTHON", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS", "TORCH", "PYTORCH", "TRITON", "CUDA",
                    "NCCL", "LD_", "MALLOC_", "ARROW_", "GRPC_", "NUMPY", "BEAM", "LC_")
STARTUP_NAMES = frozenset({"LANG", "TZ", "HOME", "PATH"})
HEADER = struct.Struct("!I")
# Servers kept per test process (the least recently used is stopped): each holds 250-400 MB.
MAX_SERVERS = 4
# A run still going at its timeout is sent SIGUSR1 and killed this long after (its stacks, if it prints
# them, are the end of its stderr, STACKS_TAIL characters of which the failing test prints).
STACKS_WAIT_S = 3.0
STACKS_TAIL = 12000

_servers: dict[tuple, Server] = {}
_seen: Counter = Counter()
_lock = threading.Lock()


def route(args: Sequence[str], env: dict[str, str], cwd: str) -> str | None:
    """The kind of server that can run `python ARGS` in `env` and `cwd`, or None (a fresh interpreter): a data
    job's server imports our preflight module, so it serves only where a fresh process would import the
    repository's (its folder on PYTHONPATH, or the working directory)."""
    if len(args) >= 3 and list(args[:2]) == ["-m", "shardforge.cli"]:
        kind, flags = CLI_ROUTES.get(args[2]), args[3:]
    elif len(args) >= 2 and args[0] == "-m" and args[1] in ROUTES:
        kind, flags = ROUTES[args[1]], args[2:]
    else:
        return None
    if kind == "beam-local" and (not is_local_runner(runner_in_argv(flags))
                                 or REPO not in (*env.get("PYTHONPATH", "").split(os.pathsep), cwd)):
        return None
    return kind


def startup_env(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The variables of `env` a server's start-up may have read (STARTUP_PREFIXES, STARTUP_NAMES), sorted."""
    return tuple(sorted((k, v) for k, v in env.items() if k in STARTUP_NAMES or k.startswith(STARTUP_PREFIXES)))


def run_python(args: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None,
               timeout: float | None = None, input: str | bytes | None = None, capture_output: bool = False,
               text: bool = False, check: bool = False) -> subprocess.CompletedProcess:
    """`subprocess.run([sys.executable, *args], ...)` with those arguments; from a fork server where it can be."""
    env = dict(os.environ if env is None else env)
    cwd = os.path.realpath(cwd or os.getcwd())
    kind = route(args, env, cwd) if os.environ.get("SHARDFORGE_TEST_FORKSERVER", "1") != "0" else None
    key = (kind, startup_env(env))
    with _lock:  # runs from several threads at once (processes racing) share the servers
        _seen[key] += 1
        server = None
        if kind is not None and (key in _servers or _seen[key] >= 2):
            if key not in _servers:
                if len(_servers) >= MAX_SERVERS:
                    _servers.pop(next(iter(_servers))).stop()
                _servers[key] = Server(PRELOADS[kind], env)
            server = _servers[key] = _servers.pop(key)  # the most recently used last
    if server is None:
        res = run_fresh([sys.executable, *args], env=env, cwd=cwd, timeout=timeout, input=input,
                        capture_output=capture_output, text=text)
    else:
        res = server.run(list(args), env, cwd, timeout, input, capture_output, text)
    if check and res.returncode:
        raise subprocess.CalledProcessError(res.returncode, res.args, res.stdout, res.stderr)
    return res


def run_fresh(cmd: list[str], *, env: dict[str, str], cwd: str, timeout: float | None, input: str | bytes | None,
              capture_output: bool, text: bool) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, ...)` in a fresh interpreter, except at a timeout: the run is first asked for its stacks."""
    pipe = subprocess.PIPE if capture_output else None
    with subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                          stdout=pipe, stderr=pipe, text=text) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)
            try:
                out, err = proc.communicate(timeout=STACKS_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            _tell_timeout(cmd, timeout, err)
            raise subprocess.TimeoutExpired(cmd, timeout or 0, out, err) from None
        except BaseException:  # a Ctrl-C of the suite: the run goes with it, as subprocess.run does
            proc.kill()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _tell_timeout(cmd: Sequence[str], timeout: float | None, err: str | bytes | None) -> None:
    """Print to the test's stderr (pytest shows it with the failure) that a run outlived its timeout, with
    the end of its captured stderr: where it had printed each thread's stack (SIGUSR1, STACKS_WAIT_S)."""
    tail = (err.decode(errors="replace") if isinstance(err, bytes) else err or "")[-STACKS_TAIL:]
    print(f"{' '.join(cmd[1:3])} still running after {timeout} s: sent SIGUSR1 (every shardforge command prints "
          f"its threads' stacks), then killed it; its stderr ends:\n{tail}", file=sys.stderr)


def run_python_together(arg_lists: Sequence[Sequence[str]], *, envs: Sequence[dict[str, str]] | None = None,
                        **kwargs) -> list[subprocess.CompletedProcess]:
    """Several `run_python` runs at once, each from its own thread (processes racing each other, or the ranks
    of one job: ``envs``, each run's environment); their results in the order given."""
    from concurrent.futures import ThreadPoolExecutor

    envs = [kwargs.pop("env", None)] * len(arg_lists) if envs is None else list(envs)
    if len(envs) != len(arg_lists):
        raise ValueError(f"{len(arg_lists)} runs, {len(envs)} environments")
    with ThreadPoolExecutor(len(arg_lists)) as pool:
        return list(pool.map(lambda args, env: run_python(args, env=env, **kwargs), arg_lists, envs))


def stop_all() -> None:
    """Stop this test process's servers (at exit, and in tests that start their own)."""
    with _lock:
        for server in _servers.values():
            server.stop()


atexit.register(stop_all)


class Server:
    """One fork server: a `python -c` process that ran PRELOADS steps and answers on a Unix socket."""

    def __init__(self, steps: Sequence[str], env: dict[str, str]) -> None:
        self.dir = tempfile.mkdtemp(prefix="forkserver-")
        self.path = os.path.join(self.dir, "socket")
        code = f"import runpy; runpy.run_path({str(Path(__file__).with_name('forkserver_main.py'))!r})['main']()"
        self.proc = subprocess.Popen([sys.executable, "-c", code, self.path, json.dumps(list(steps))], env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, cwd=REPO)
        ready = self.proc.stdout.readline()
        if ready.strip() != b"ready":
            self.proc.kill()
            raise RuntimeError(f"fork server for {steps} did not start: {ready!r}")

    def run(self, args: list[str], env: dict[str, str], cwd: str, timeout: float | None,
            input: str | bytes | None, capture_output: bool, text: bool) -> subprocess.CompletedProcess:
        """Run `python ARGS` in a process forked from this server; the CompletedProcess subprocess.run returns."""
        with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            if input is not None:
                stdin.write(input.encode() if isinstance(input, str) else input)
                stdin.seek(0)
            fds = [stdin.fileno() if input is not None else os.open(os.devnull, os.O_RDONLY),
                   out.fileno() if capture_output else 1, err.fileno() if capture_output else 2]
            try:
                status = self._exchange(args, env, cwd, fds, timeout)
            finally:
                if input is None:
                    os.close(fds[0])
            outputs = []
            for f in (out, err):
                f.seek(0)
                data = f.read()
                outputs.append(_text(data) if text else data)
        cmd = [sys.executable, *args]
        if status is None:
            _tell_timeout(cmd, timeout, outputs[1] if capture_output else None)
            raise subprocess.TimeoutExpired(cmd, timeout, *(outputs if capture_output else (None, None)))
        code = os.waitstatus_to_exitcode(status)
        return subprocess.CompletedProcess(cmd, code, *(outputs if capture_output else (None, None)))

    def _exchange(self, args: list[str], env: dict[str, str], cwd: str, fds: list[int],
                  timeout: float | None) -> int | None:
        """Send one run, wait for its end; its wait status, or None after killing it at `timeout`."""
        request = json.dumps({"args": args, "env": env, "cwd": cwd}).encode()
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(self.path)
            socket.send_fds(conn, [HEADER.pack(len(request)) + request], fds)
            lines = _Lines(conn)
            pid = lines.next()["pid"]
            conn.settimeout(timeout)
            try:
                return lines.next()["status"]
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGUSR1)  # every shardforge command prints its threads' stacks
                conn.settimeout(STACKS_WAIT_S)
                with contextlib.suppress(TimeoutError):
                    lines.next()  # it ended (SIGUSR1's default action where nothing handles it)
                    return None
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                conn.settimeout(None)
                lines.next()
                return None

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir)


class _Lines:
    """The JSON lines a server sends on one connection, one at a time."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.buf = conn, b""

    def next(self) -> dict:
        while b"\n" not in self.buf:
            chunk = self.conn.recv(4096)
            if not chunk:
                raise RuntimeError("the fork server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def _text(data: bytes) -> str:
    """Bytes as subprocess.run(text=True) decodes them: the locale's encoding, universal newlines."""
    import locale

    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")
