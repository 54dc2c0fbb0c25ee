"""tests/forkserver.py: a run forked from a warm server is the run a fresh interpreter makes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import forkserver
import pytest
from forkserver import run_python

REPO = Path(__file__).resolve().parent.parent
PROBE = """
import json, os, sys, tempfile
import numpy as np
print(json.dumps({"name": __name__, "argv": sys.argv[1:], "argv0": os.path.basename(sys.argv[0]),
                  "cwd": os.getcwd(), "path0": sys.path[0], "setting": os.environ.get("PROBE_SETTING"),
                  "stdin": sys.stdin.read(), "tempdir": tempfile.gettempdir(), "main": sorted(
                      n for n in vars(sys.modules["__main__"]) if not n.startswith("__"))}))
print("draw", np.random.randint(1 << 30), file=sys.stderr)
if "--crash" in sys.argv:
    raise RuntimeError("probe crashed")
if "--sleep" in sys.argv:
    import faulthandler, signal, time
    faulthandler.register(signal.SIGUSR1)  # as every shardforge command does
    time.sleep(60)
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
"""


@pytest.fixture
def probe(tmp_path, monkeypatch) -> dict[str, str]:
    """A module `forkprobe` on PYTHONPATH that the fork server serves (after a step that prints), and its env."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "forkprobe.py").write_text(PROBE)
    monkeypatch.setitem(forkserver.PRELOADS, "probe", ("import numpy", "print('imported', flush=True)",
                                                       "import sys; print('a warning at import', file=sys.stderr)"))
    monkeypatch.setitem(forkserver.ROUTES, "forkprobe", "probe")
    monkeypatch.setattr(forkserver, "_servers", {})
    monkeypatch.setattr(forkserver, "_seen", forkserver.Counter())
    monkeypatch.setenv("SHARDFORGE_TEST_FORKSERVER", "1")  # these tests are of the server: on even where the suite's is off
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "mods"), "PROBE_SETTING": "first", "PROBE_EXIT": "3",
           "TMPDIR": str(tmp_path)}
    yield {"env": env, "cwd": str(work)}
    forkserver.stop_all()


def probe_run(probe: dict, *extra: str, **kw) -> subprocess.CompletedProcess:
    return run_python(["-m", "forkprobe", "--flag", "x y", *extra], env=kw.pop("env", probe["env"]),
                      cwd=probe["cwd"], capture_output=True, text=True, timeout=kw.pop("timeout", 60), **kw)


def test_a_forked_run_prints_and_exits_as_a_fresh_interpreter_does(probe) -> None:
    fresh = probe_run(probe, input="from stdin\n")
    assert not forkserver._servers  # the first run in an environment: a fresh interpreter, no server yet
    forked = probe_run(probe, input="from stdin\n")
    again = probe_run(probe)
    assert len(forkserver._servers) == 1
    for res in (fresh, forked, again):
        assert res.returncode == 3, res.stderr
    fresh_out = json.loads(fresh.stdout.splitlines()[-1])
    forked_out = json.loads(forked.stdout.splitlines()[-1])
    assert forked.stdout.splitlines()[0] == "imported"  # what the server's steps printed, printed again
    assert forked.stderr.startswith("a warning at import\n")
    assert forked_out == fresh_out, (forked_out, fresh_out)
    assert forked_out == {"name": "__main__", "argv": ["--flag", "x y"], "argv0": "forkprobe.py",
                          "cwd": probe["cwd"], "path0": probe["cwd"], "setting": "first", "stdin": "from stdin\n",
                          "tempdir": probe["env"]["TMPDIR"], "main": ["json", "np", "os", "sys", "tempfile"]}
    assert json.loads(again.stdout.splitlines()[-1])["stdin"] == ""  # no input: an empty stdin
    draws = {res.stderr.splitlines()[-1] for res in (fresh, forked, again)}
    assert len(draws) == 3, draws  # numpy's global generator seeded anew in every run


def test_a_run_has_its_own_environment_and_a_new_start_up_environment_its_own_server(probe) -> None:
    for _ in range(2):
        assert probe_run(probe).returncode == 3
    other = {**probe["env"], "PROBE_SETTING": "second", "PROBE_EXIT": "0"}
    res = probe_run(probe, env=other)
    assert res.returncode == 0 and json.loads(res.stdout.splitlines()[-1])["setting"] == "second"
    assert "imported" in res.stdout and len(forkserver._servers) == 1  # forked: the same start-up environment
    threads = {**probe["env"], "OMP_NUM_THREADS": "1"}  # read by libgomp as torch loads: another server's
    for _ in range(2):
        res = probe_run(probe, env=threads)
        assert res.returncode == 3 and ("imported" in res.stdout) == (len(forkserver._servers) == 2)
    assert len(forkserver._servers) == 2


def test_a_crash_is_a_traceback_and_exit_1_and_a_timeout_kills_the_run(probe, capsys) -> None:
    """And a run still going at its timeout is first asked for its stacks (SIGUSR1): the test that fails
    prints them."""
    probe_run(probe)
    res = probe_run(probe, "--crash")
    assert forkserver._servers
    assert res.returncode == 1 and "RuntimeError: probe crashed" in res.stderr.splitlines()[-1], res.stderr
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as info:
        probe_run(probe, "--sleep", timeout=3)
    assert time.monotonic() - start < 30
    assert '"argv": ["--flag", "x y", "--sleep"]' in info.value.stdout
    assert re.search(r'File "[^"]*forkprobe\.py", line \d+ in <module>', info.value.stderr), info.value.stderr
    told = capsys.readouterr().err
    assert "-m forkprobe still running after 3 s: sent SIGUSR1" in told and "forkprobe.py" in told, told
    with pytest.raises(subprocess.CalledProcessError):
        probe_run(probe, check=True)


def test_only_routed_modules_on_a_local_runner_go_to_a_server(probe, monkeypatch) -> None:
    cwd = str(REPO)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    assert forkserver.route(["-m", "pipelines.build", "--input", "x"], env, cwd) == "beam-local"
    assert forkserver.route(["-m", "pipelines.build", "--runner", "PortableRunner"], env, cwd) is None
    assert forkserver.route(["-m", "pipelines.build"], {}, "/") is None  # a fresh process would not find it
    assert forkserver.route(["-m", "trainer.train"], {}, "/") == "torch"
    assert forkserver.route(["-c", "pass"], env, cwd) is None
    assert forkserver.route(["-m", "shardforge.cli", "demo"], env, cwd) is None
    assert forkserver.route(["-m", "shardforge.cli", "build", "--input", "x"], env, cwd) == "beam-local"
    assert forkserver.route(["-m", "shardforge.cli", "serve", "--runner", "FlinkRunner"], env, cwd) is None
    assert forkserver.route(["-m", "shardforge.cli", "repack", "--input", "x"], {}, "/") is None
    assert forkserver.route(["-m", "shardforge.cli", "validate", "x"], env, cwd) is None
    assert forkserver.route(["-m", "shardforge.cli", "export", "a", "b"], {}, "/") == "torch"
    monkeypatch.setenv("SHARDFORGE_TEST_FORKSERVER", "0")
    for _ in range(3):
        assert probe_run(probe, env={**probe["env"], "SHARDFORGE_TEST_FORKSERVER": "0"}).returncode == 3
    assert not forkserver._servers


@pytest.mark.parametrize("args", [
    ["-m", "pipelines.build", "--input", "/no/such/*.jsonl", "--output", "/nonexistent/out"],
    ["-m", "trainer.export", "/no/such/run", "/nonexistent/hf"],
    ["-m", "shardforge.cli", "export", "/no/such/run", "/nonexistent/hf"],
    ["-m", "shardforge.cli", "build", "--input", "/no/such/*.jsonl", "--output", "/nonexistent/out"],
], ids=["build", "export", "cli-export", "cli-build"])
def test_real_commands_answer_the_same_forked_and_fresh(args, monkeypatch) -> None:
    monkeypatch.setattr(forkserver, "_servers", {})
    monkeypatch.setattr(forkserver, "_seen", forkserver.Counter())
    monkeypatch.setenv("SHARDFORGE_TEST_FORKSERVER", "1")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        runs = [run_python(args, env=env, cwd=REPO, capture_output=True, text=True, timeout=120) for _ in range(2)]
        assert len(forkserver._servers) == 1
    finally:
        forkserver.stop_all()
    fresh = subprocess.run([sys.executable, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
    for res in runs:
        assert (res.returncode, res.stdout, res.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert fresh.returncode == 2 and fresh.stderr.startswith("error: ")
