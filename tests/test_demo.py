"""The README's first command, end to end: `shardforge demo` generates, builds, trains and reports.

Runs the real CLI in a subprocess (a few training steps, so it stays fast) and checks what a
user sees: the summary, a corpus that the independent validator accepts, a run with a
checkpoint, and a loss that went down.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_demo_runs_the_whole_path_and_the_model_learns(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    res = subprocess.run([sys.executable, "-m", "shardforge.cli", "demo", "--output", str(out), "--docs", "30",
                          "--steps", "10"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    # The summary is printed once, for a person; the same numbers as JSON go to a file, not the screen.
    assert res.stdout.count("shardforge demo summary") == 1 and '"first_loss"' not in res.stdout, res.stdout[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert f"loss {summary['first_loss']} (step 1) -> {summary['last_loss']} (step 10)" in res.stdout
    assert str(out / "summary.json") in res.stdout.splitlines()[-1]
    assert summary["last_loss"] < summary["first_loss"], summary
    corpus = out / "corpus"
    for name in ("manifest.json", "report.html", "report.json", "timings.json"):
        assert (corpus / name).is_file(), name
    assert sorted(corpus.glob("train-*.tar")) and sorted(corpus.glob("valid-*.tar"))
    assert list((out / "run" / "checkpoints").iterdir())
    check = subprocess.run([sys.executable, "-m", "shardforge.cli", "validate", str(corpus)], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stdout + check.stderr
    # `shardforge status` of the run says where it stands, from its own files; of the demo's folder, what is in it.
    status = subprocess.run([sys.executable, "-m", "shardforge.cli", "status", str(out / "run")], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    lines = dict(line.split(None, 1) for line in status.stdout.splitlines() if not line.startswith("("))
    assert lines["step"].startswith("10 of 10 (finished), epoch ")
    assert f"loss     {summary['last_loss']:.4f} (smoothed" in status.stdout
    assert lines["checkpoints"].startswith("1 kept: ckpt-00000010.pt")
    assert lines["resume"] == ("the run finished; a rerun into this folder with a larger --steps continues it from step "
                               "10 (its learning-rate schedule then ends at the new --steps)")
    assert lines["eval"].startswith("loss ") and lines["eval"].endswith("at step 10")
    folder = subprocess.run([sys.executable, "-m", "shardforge.cli", "status", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert folder.returncode == 2 and len(folder.stderr.strip().splitlines()) == 1, folder.stderr
    assert f"under it: {corpus} (a corpus), {out / 'run'} (a training run)" in folder.stderr


def test_a_one_step_demo_warns_of_nothing_it_chose_itself(tmp_path: Path) -> None:
    """The demo sets the warmup for its steps: none under 10 (a warmup of the run's length warned of the
    demo's own choice). What it does warn of reads as the commands' lines do: `warning: ...`."""
    res = subprocess.run([sys.executable, "-m", "shardforge.cli", "demo", "--output", str(tmp_path / "d"), "--docs",
                          "3", "--steps", "1"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "for 1 step in " in res.stdout and "(step 1) -> " in res.stdout, res.stdout
    assert "warmup_steps" not in res.stderr and "WARNING:" not in res.stderr, res.stderr
    assert "warning: " in res.stderr and "1 partition of ~" in res.stderr, res.stderr  # 3 documents a source


def test_demo_clears_only_a_folder_a_demo_wrote(tmp_path: Path) -> None:
    """The demo clears its --output first: a folder holding anything else is one line, and stays as it was."""
    from schemas.errors import UserError
    from shardforge.commands.demo import check_demo_folder

    mine = tmp_path / "thesis"
    mine.mkdir()
    (mine / "thesis.txt").write_text("three years of work")
    res = subprocess.run([sys.executable, "-m", "shardforge.cli", "demo", "--output", str(mine)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "holds thesis.txt, which no demo wrote" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and (mine / "thesis.txt").read_text() == "three years of work"
    earlier = tmp_path / "demo"
    for name in ("raw", "corpus", "run"):
        (earlier / name).mkdir(parents=True)
    (earlier / "summary.json").write_text("{}")
    check_demo_folder(str(earlier))  # an earlier demo's folder: cleared and written again
    check_demo_folder(str(tmp_path / "empty"))  # absent: nothing to clear
    with pytest.raises(UserError, match="is a file"):
        check_demo_folder(str(mine / "thesis.txt"))
