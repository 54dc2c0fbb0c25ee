"""The fork server of tests/forkserver.py: `python -c "...run_path(this)['main']()" SOCKET STEPS_JSON`.

It runs the steps (imports) with its stdout and stderr on memory files, says ``ready`` on stdout, then for
each connection on SOCKET forks a supervisor, which forks the run and reports ``{"pid": N}`` and then
``{"status": WAIT_STATUS}``. The run takes the connection's three file descriptors as its stdin, stdout and
stderr, the request's working directory and environment, prints what the steps printed, and runs the module
as ``python -m`` does (``runpy._run_module_as_main``) in an emptied ``__main__``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

HEADER = struct.Struct("!I")
MAIN_KEEP = frozenset({"__builtins__", "__name__", "__doc__", "__spec__", "__loader__", "__package__"})


def main() -> None:
    path, steps = sys.argv[1], json.loads(sys.argv[2])
    printed = preload(steps)
    request, fds = serve(path)  # returns in a forked run only
    become(request, fds, printed)


def preload(steps: list[str]) -> tuple[bytes, bytes]:
    """Run `steps` with fd 1 and 2 on memory files; what they printed there."""
    saved = os.dup(1), os.dup(2)
    files = os.memfd_create("stdout"), os.memfd_create("stderr")
    os.dup2(files[0], 1)
    os.dup2(files[1], 2)
    namespace: dict = {}
    for step in steps:
        exec(step, namespace)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(saved[0], 1)
    os.dup2(saved[1], 2)
    printed = []
    for fd in (*files, *saved):
        if fd in files:
            os.lseek(fd, 0, os.SEEK_SET)
            printed.append(os.read(fd, 1 << 24))
        os.close(fd)
    return printed[0], printed[1]


def serve(path: str) -> tuple[dict, list[int]]:
    """Answer connections on `path` until the process that started this one is gone; in a run: its request."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(64)
    listener.settimeout(2.0)
    parent = os.getppid()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    os.write(1, b"ready\n")
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:
                os._exit(0)
            continue
        request, fds = receive(conn)
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            pid = os.fork()
            if pid == 0:
                conn.close()
                return request, fds
            supervise(conn, pid, fds)
        conn.close()
        for fd in fds:
            os.close(fd)


def receive(conn: socket.socket) -> tuple[dict, list[int]]:
    """One length-prefixed JSON request and the three file descriptors sent with it."""
    conn.setblocking(True)
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack(data[:HEADER.size])[0]:
        chunk = conn.recv(1 << 16)
        if not chunk:
            raise RuntimeError("a fork-server request ended early")
        data += chunk
    return json.loads(data[HEADER.size:]), fds


def supervise(conn: socket.socket, pid: int, fds: list[int]) -> None:
    """In the supervisor: report the run's pid, wait for it, report its wait status, exit."""
    for fd in fds:
        os.close(fd)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    _, status = os.waitpid(pid, 0)
    conn.sendall(json.dumps({"status": status}).encode() + b"\n")
    os._exit(0)


def become(request: dict, fds: list[int], printed: tuple[bytes, bytes]) -> None:
    """Turn this forked process into `python ARGS` run in the request's directory and environment."""
    import runpy

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()
    if "tempfile" in sys.modules:
        sys.modules["tempfile"].tempdir = None  # recomputed from this run's environment
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()  # a fresh process's global generator is seeded from the OS
    for fd, data in zip((1, 2), printed, strict=True):
        while data:
            data = data[os.write(fd, data):]
    args = request["args"]
    sys.argv = [args[0], *args[2:]]
    main_globals = sys.modules["__main__"].__dict__
    for name in [n for n in main_globals if n not in MAIN_KEEP]:
        del main_globals[name]
    runpy._run_module_as_main(args[1])
