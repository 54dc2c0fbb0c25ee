"""benchmarks/bench_gpu.py's plans: which parts a GPU run starts in its limit, by the costs an H200 measured.

The plans decide what a short lent-GPU window measures, so they are checked without a GPU: the full run
holds the tests, every eager row, the base compiled row with its sweep, masking and the data wait; what it
leaves out is ``--rest``'s; ``--plan`` prints the same decision the run makes.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import bench_gpu as bg  # noqa: E402

F, D = bg.F, bg.D


def started(s: bg.Setup) -> list:
    return [item for item, _, starts in bg.expected(s) if starts]


def test_the_full_run_holds_the_tests_eager_rows_base_compile_masking_and_data_wait() -> None:
    runs = started(bg.GPU)
    for part in ("tests", "masking", "datawait", ("base", F, "masked-only", "compile")):
        assert part in runs, part
    eager = [x for x in bg.FULL_PLAN if isinstance(x, tuple) and x[3] == "eager"]
    assert eager and all(x in runs for x in eager)
    assert sum(c for _, c, starts in bg.expected(bg.GPU) if starts) <= bg.GPU.limit_s
    # The base compiled row's cost counts its micro-batch sweep, which the run starts after it.
    cost = dict((item, c) for item, c, _ in bg.expected(bg.GPU))
    assert cost[("base", F, "masked-only", "compile")] == bg.COST["compile"] + bg.COST["sweep"]


def test_what_the_full_run_leaves_out_is_the_rest_runs_job() -> None:
    left = [item for item, _, starts in bg.expected(bg.GPU) if not starts]
    assert left and set(left) == set(bg.REST_PLAN)
    rest_runs = started(bg.REST)
    assert ("base", F, "masked-only", "compile+cudagraphs") in rest_runs
    assert ("base", F, "masked-only", "compile+compiled AdamW") in rest_runs
    assert ("base", D, "masked-only", "compile") in rest_runs
    large = replace(bg.REST, sizes=("large",), plan=tuple(x for x in bg.REST_PLAN if x[0] == "large"))
    assert ("large", F, "masked-only", "compile") in started(large)


def test_a_part_too_dear_is_passed_over_and_cheaper_ones_after_it_still_run() -> None:
    s = replace(bg.GPU, plan=(("large", F, "masked-only", "compile"), ("base", F, "masked-only", "eager")),
                limit_s=100)
    assert started(s) == [("base", F, "masked-only", "eager")]


def test_plan_prints_the_decision_without_a_gpu() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_gpu.py"), "--plan", "--rest"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = bg.REST
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"bench_gpu {s.mode}: limit {s.limit_s:.0f} s")
    listed = [line.split(" s  ", 1)[1] for line in lines[1:-1]]
    assert listed == [bg.item_name(x) for x in s.plan]
    assert sum(line.strip().startswith("runs") for line in lines[1:-1]) == len(started(s))
