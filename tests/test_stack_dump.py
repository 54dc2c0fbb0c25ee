"""``kill -USR1 PID`` makes a running command print every thread's stack to its stderr, and the command goes on.

The command here is the continuous-ingest service on an empty watched folder: a real long-running
command, waiting between polls. And the tests' own runner asks a command for its stacks when it
outlives its timeout (tests/forkserver.py), so that a hang seen once in a suite shows where it waited.
"""

from __future__ import annotations

import json
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forkserver import run_python

ROOT = Path(__file__).resolve().parents[1]


def wait_for(path: Path, pattern: str, proc: subprocess.Popen, timeout: float = 120) -> str:
    """The text of path once pattern (a regular expression) is found in it; fails if proc exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = path.read_text(errors="replace")
        if re.search(pattern, out):
            return out
        if proc.poll() is not None:
            raise AssertionError(f"exited ({proc.returncode}) before printing {pattern!r}:\n{out[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"no {pattern!r} in {timeout} s:\n{path.read_text(errors='replace')[-3000:]}")


HEADER = r"(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):"


def test_sigusr1_prints_every_threads_stack_and_the_command_goes_on(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"sources": [{"name": "news", "input": "unused"}]}))
    log = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "pipelines.serve", "--watch", f"{raw}/*.jsonl", "--corpus", str(tmp_path / "corpus"),
           "--source", "news", "--poll", "0.05", "--settle", "0", "--config", str(cfg)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        wait_for(log, "at version 0", proc)
        proc.send_signal(signal.SIGUSR1)
        dump = wait_for(log, r'File "[^"]*pipelines/jobs/serve\.py", line \d+ in run', proc)  # the poll loop
        assert re.search(HEADER, dump), dump
        time.sleep(0.5)  # the default action of SIGUSR1 would have ended the process by now
        assert proc.poll() is None, log.read_text()

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
        assert "stopped at version 0" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_document_process_of_a_local_build_prints_its_stacks_too(tmp_path):
    """The build's helper processes answer SIGUSR1 as the build does: here a document process
    (``pipelines.localrunner.docworker``) after a task, in its loop (answering it, or waiting for the next)."""
    from pipelines.localrunner.docpool import read_frame, write_frame

    err = tmp_path / "stderr"
    with open(err, "wb") as errors:
        proc = subprocess.Popen([sys.executable, "-m", "pipelines.localrunner.docworker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errors, cwd=ROOT)
    try:
        write_frame(proc.stdin, 7, (len, ("abc",)))
        answer = pickle.dumps((True, 3), protocol=pickle.HIGHEST_PROTOCOL)  # as write_frame writes it
        assert read_frame(proc.stdout) == (7, answer)  # it ran the task: it waits in its loop
        proc.send_signal(signal.SIGUSR1)
        dump = wait_for(err, r'File "[^"]*pipelines/localrunner/docworker\.py", line \d+ in main', proc, 30)
        assert re.search(HEADER, dump), dump
        assert proc.poll() is None
        proc.stdin.close()  # its stdin's end ends it, as the pool ends it
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_command_that_outlives_its_timeout_is_asked_for_its_stacks(tmp_path, capsys):
    """A run killed at its timeout fails with its stacks: here a fresh interpreter that waits forever."""
    code = "import faulthandler, signal, threading; faulthandler.register(signal.SIGUSR1); threading.Event().wait()"
    with pytest.raises(subprocess.TimeoutExpired) as info:
        run_python(["-c", code], capture_output=True, text=True, timeout=2)
    assert "(most recent call first):" in info.value.stderr and 'line 1 in <module>' in info.value.stderr
    err = capsys.readouterr().err
    assert "still running after 2 s: sent SIGUSR1" in err and "(most recent call first):" in err, err
