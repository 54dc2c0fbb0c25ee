"""Every benchmark script starts as BENCHMARKS.md runs it (``python benchmarks/X.py``, from any folder).

The scripts import reference corpora from tests/ and helpers from benchmarks/; a script that only
works from one folder, or whose imports moved away under it, is found here, not on the day someone
wants a figure. ``--help`` runs every top-level import and the argument parser, and measures nothing.

One interpreter runs them all, one after another, each as ``python X.py`` would: ``sys.path`` starts at
the script's folder (not the current one), and every module of this repository imported by the script
before is dropped first, so a script cannot lean on another's path setup or imports. Only third-party
modules (torch, Beam: ~2.5 s each to import) stay loaded between scripts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*REPO.glob("benchmarks/bench_*.py"), REPO / "benchmarks" / "check_determinism.py"])

DRIVER = r"""
import contextlib, io, json, os, runpy, sys
repo, env = os.path.realpath(sys.argv[1]), os.path.realpath(sys.prefix)


def ours(path):
    path = os.path.realpath(path)
    return path.startswith(repo + os.sep) and not path.startswith(env + os.sep)


outside = [p for p in sys.path[1:] if p and not ours(p)]
results = []
for script in sys.argv[2:]:
    for name, module in list(sys.modules.items()):
        where = [getattr(module, "__file__", None) or ""]
        try:  # a namespace package (tests/) has no file, only a path
            where += [str(p) for p in getattr(module, "__path__", None) or []]
        except TypeError:  # torch.classes answers every attribute
            pass
        if any(ours(w) for w in where):
            del sys.modules[name]
    sys.path[:] = [os.path.dirname(script), *outside]
    sys.argv = [script, "--help"]
    out, err, code = io.StringIO(), io.StringIO(), 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException as exc:
        code, err = 1, io.StringIO(err.getvalue() + f"{type(exc).__name__}: {exc}")
    results.append([os.path.basename(script), code, out.getvalue()[:200] + err.getvalue()[-1500:]])
print(json.dumps(results))
"""


@pytest.mark.slow
def test_every_benchmark_script_answers_help_from_another_folder(tmp_path: Path) -> None:
    assert len(SCRIPTS) > 20, SCRIPTS
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(REPO), *map(str, SCRIPTS)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [name for name, _, _ in results] == [s.name for s in SCRIPTS]
    failed = [(name, out) for name, code, out in results if code != 0 or "usage:" not in out]
    assert not failed, failed


def test_the_driver_catches_a_script_that_leans_on_another_ones_imports(tmp_path: Path) -> None:
    """A script importing a repo module without putting the repo root on sys.path fails in the shared
    interpreter as it would alone, even after a script that did put it there ran first."""
    bench = tmp_path / "repo" / "benchmarks"
    bench.mkdir(parents=True)
    (bench / "__init__.py").write_text("")
    (bench / "helper.py").write_text("X = 1\n")
    good = "import sys, argparse\nfrom pathlib import Path\nsys.path.insert(0, str(Path(__file__).resolve().parents[1]))\n" \
           "from benchmarks.helper import X\nargparse.ArgumentParser().parse_args()\n"
    (bench / "a_good.py").write_text(good)
    (bench / "b_bad.py").write_text("import argparse\nfrom benchmarks.helper import X\n"
                                    "argparse.ArgumentParser().parse_args()\n")
    repo = str((tmp_path / "repo").resolve())
    proc = subprocess.run([sys.executable, "-c", DRIVER, repo, str(bench / "a_good.py"), str(bench / "b_bad.py")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    results = {name: (code, out) for name, code, out in json.loads(proc.stdout.strip().splitlines()[-1])}
    assert results["a_good.py"][0] == 0 and "usage:" in results["a_good.py"][1]
    assert results["b_bad.py"][0] == 1 and "ModuleNotFoundError" in results["b_bad.py"][1], results
