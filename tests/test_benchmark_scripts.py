"""Every benchmark script starts as BENCHMARKS.md runs it (``python benchmarks/X.py``, from any folder).

The scripts import reference corpora from tests/ and helpers from benchmarks/; a script that only
works from one folder, or whose imports moved away under it, is found here, not on the day someone
wants a figure. ``--help`` runs every top-level import and the argument parser, and measures nothing.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*REPO.glob("benchmarks/bench_*.py"), REPO / "benchmarks" / "check_determinism.py"])


@pytest.mark.slow
def test_every_benchmark_script_answers_help_from_another_folder(tmp_path: Path) -> None:
    assert len(SCRIPTS) > 20, SCRIPTS

    def run(script: Path) -> tuple[str, int, str]:
        res = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                             cwd=tmp_path, timeout=180)
        return script.name, res.returncode, (res.stdout[:200] + res.stderr[-1500:])

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, SCRIPTS))
    failed = [(name, out) for name, code, out in results if code != 0 or "usage:" not in out]
    assert not failed, failed
