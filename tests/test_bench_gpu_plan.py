"""benchmarks/bench_gpu.py's plans: which parts a GPU run starts in its limit, by the costs an H200 measured.

The plans decide what a short lent-GPU window measures, so they are checked without a GPU: the full run
holds the parts the targets are judged on, its compiles made beforehand by the warm pool beside the tests;
what it leaves out is ``--rest``'s; ``--plan`` prints the same decision the run makes. The warm pool itself
runs here too: its slots, failures and deadline, and a real compile whose graphs the run then loads.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import bench_gpu as bg  # noqa: E402
from benchmarks import gpu_warm  # noqa: E402

F, D = bg.F, bg.D


def started(s: bg.Setup) -> list:
    return [p.item for p in bg.expected(s) if p.starts]


def test_the_full_run_holds_what_the_targets_are_judged_on() -> None:
    plan = bg.expected(bg.GPU)
    runs = [p.item for p in plan if p.starts]
    for part in ("tests", "masking", "datawait", ("base", F, "masked-only", "compile"),
                 ("base", D, "masked-only", "compile"), ("large", F, "masked-only", "compile by layers")):
        assert part in runs, part
    for size in ("base", "large"):
        for kind in (F, D):
            assert (size, kind, "masked-only", "eager") in runs
    assert ("base", F, "HF", "eager") in runs and ("base", D, "HF", "eager") in runs
    assert bg.planned_total(bg.GPU, plan) <= bg.GPU.limit_s
    # The base compiled row's cost counts its micro-batch sweep, which the run starts after it.
    cost = {p.item: p.cost for p in plan}
    assert cost[("base", F, "masked-only", "compile")] == bg.part_cost(("base", F, "masked-only", "compile"),
                                                                       warmed=True) + bg.COST["sweep"]


def test_the_warm_pool_takes_the_compiles_and_runs_beside_the_tests() -> None:
    plan = bg.expected(bg.GPU)
    warmed = [p.item for p in plan if p.warmed]
    assert "masking" in warmed and ("base", F, "masked-only", "compile") in warmed
    assert all(bg.warmable(x) for x in warmed) and not any(p.warmed and not p.starts for p in plan)
    # Without the pool the same limit holds fewer of the parts the targets are judged on.
    cold = bg.planned(bg.GPU, warm=False)
    assert sum(p.starts for p in cold) < sum(p.starts for p in plan)
    assert ("base", D, "masked-only", "compile") not in [p.item for p in cold if p.starts]
    # The time before the first timed part: the tests, or the pool's dearest slot, crowded.
    pool = [bg.warm_cost(x) for x in warmed]
    assert bg.pool_wait(bg.GPU, pool, bg.COST["tests"]) == max(
        bg.COST["tests"], gpu_warm.makespan(pool, bg.WARM_SLOTS) * bg.CROWDED)
    # off: every row compiles in its turn (the plan before the pool); a dry run has no pool.
    off = replace(bg.GPU, warm="off")
    assert not any(p.warmed for p in bg.expected(off)) and bg.DRY.warm == "off"


def test_auto_leaves_the_pool_out_where_it_would_only_be_a_wait() -> None:
    """--quick runs no tests: the pool would hold every timed part back for its whole compile."""
    assert not any(p.warmed for p in bg.expected(bg.QUICK))
    assert any(p.warmed for p in bg.expected(replace(bg.QUICK, warm="on")))
    quick = bg.expected(bg.QUICK)
    assert all(p.starts for p in quick) and bg.planned_total(bg.QUICK, quick) <= bg.QUICK.limit_s


def test_makespan_puts_the_dearest_first_on_the_least_loaded_slot() -> None:
    assert gpu_warm.makespan([], 4) == 0
    # 5 | 4, then each 3 onto the slot free first: 5+3 | 4+3+3 (the pool's order; the best split, 9, is not sought)
    assert gpu_warm.makespan([3, 5, 3, 4, 3], 2) == 10
    assert gpu_warm.makespan([10, 1, 1, 1], 4) == 10
    assert gpu_warm.makespan([3, 3, 3], 1) == 9
    assert gpu_warm.pool_slots(16, 4) == 4 and gpu_warm.pool_slots(2, 4) == 1 and gpu_warm.pool_slots(64, 4) == 4


def test_what_the_full_run_leaves_out_is_the_rest_runs_job() -> None:
    left = [p.item for p in bg.expected(bg.GPU) if not p.starts]
    assert left and set(left) == set(bg.REST_PLAN)
    rest_runs = started(bg.REST)
    assert ("base", F, "masked-only", "compile+cudagraphs") in rest_runs
    assert ("base", F, "masked-only", "compile+compiled AdamW") in rest_runs
    assert ("large", F, "masked-only", "compile") in rest_runs
    large = replace(bg.REST, sizes=("large",), plan=tuple(x for x in bg.REST_PLAN if x[0] == "large"))
    assert ("large", D, "masked-only", "compile") in started(large)


def test_a_part_too_dear_is_passed_over_and_cheaper_ones_after_it_still_run() -> None:
    s = replace(bg.GPU, plan=(("large", F, "masked-only", "compile"), ("base", F, "masked-only", "eager")),
                limit_s=100, warm="off")
    assert started(s) == [("base", F, "masked-only", "eager")]


def test_parts_slower_than_their_costs_make_the_later_ones_dearer(tmp_path) -> None:
    """On a device slower than the H200 the costs come from, a part that would pass the limit at the pace
    measured so far is not started (gpu.sh would kill it there); a faster pace plans nothing bolder."""
    import torch

    clock = [100.0]
    bench = bg.Bench(replace(bg.DRY, limit_s=20, scale=1.0), torch.device("cpu"), str(tmp_path / "gpu.md"))
    bench.clock, bench.t0 = (lambda: clock[0]), clock[0]
    assert bench.fits("a", 2)
    clock[0] += 4  # twice its cost
    assert bench.fits("the tests", 1, timed=False) and bench.pace() == 2.0
    clock[0] += 3  # an untimed part: no pace of its own
    assert bench.fits("b", 5) and bench.pace() == 2.0  # at 7 s: 7 + 5 x 2 <= 20
    clock[0] += 5
    assert not bench.fits("c", 8)  # at 12 s, 8 s would fit, 8 x 9/7 would not
    assert bench.pace() == pytest.approx(9 / 7)
    assert bench.res.skipped == ["c: not started, 10 s (8 s expected × 1.29, the pace of the parts so far) would "
                                 "pass the 20 s limit at 12 s"]
    assert bench.fits("d", 6)
    clock[0] += 1  # far quicker than expected: the pace stays at 1 at least
    bench.part_done()
    assert bench.pace() == 1.0 and bench.paced == [(2, 4), (5, 5), (6, 1)]
    bench.save()
    text = (tmp_path / "gpu.md").read_text()
    assert "Pace: the 3 timed part(s) so far took 10 s against 13 s expected (**0.77×**" in text


def test_plan_prints_the_decision_without_a_gpu() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_gpu.py"), "--plan", "--rest"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = bg.REST
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"bench_gpu {s.mode}: limit {s.limit_s:.0f} s")
    assert lines[1].startswith("  warm pool: ")
    listed = [line.split(" s  ", 1)[1].removesuffix("  (warmed)") for line in lines[2:-1]]
    assert listed == [bg.item_name(x) for x in s.plan]
    assert sum(line.strip().startswith("runs") for line in lines[2:-1]) == len(started(s))
    assert sum(line.endswith("(warmed)") for line in lines) == sum(p.warmed for p in bg.expected(s))


def _job(name: str, code: str, cost: float) -> tuple[str, list[str], float]:
    return name, [sys.executable, "-c", code], cost


def test_the_pool_keeps_its_slots_full_and_says_what_each_part_came_to(tmp_path, capsys) -> None:
    ok = f"print('compiling'); print({gpu_warm.WARMED!r} + '{{\"seconds\": 1.5, \"note\": \"n\"}}')"
    jobs = [_job("a", ok, 3), _job("b", "import sys; print('boom'); sys.exit(3)", 2), _job("c", ok, 1)]
    pool = gpu_warm.WarmPool(jobs, 2, tmp_path / "logs").start()
    done = pool.wait(60)
    assert [(w.item, w.state) for w in done] == [("a", "compiled"), ("b", "failed"), ("c", "compiled")]
    assert done[0].seconds == 1.5 and done[0].note == "n"
    assert done[1].note == "exit 3: boom"
    # the failed part's log stays (and is named); the compiled parts' logs are gone
    assert [p.read_text() for p in (tmp_path / "logs").iterdir()] == ["boom\n"]
    assert str(tmp_path / "logs") in capsys.readouterr().err
    clean = gpu_warm.WarmPool([_job("a", ok, 1)], 1, tmp_path / "clean").start()
    assert [w.state for w in clean.wait(60)] == ["compiled"] and not (tmp_path / "clean").exists()


def test_the_pool_stops_at_its_deadline_with_the_compile_workers(tmp_path) -> None:
    """A part still compiling at the deadline is killed with what it started (inductor's worker processes),
    and a part that never got a slot says so."""
    pid_file = tmp_path / "child.pid"
    slow = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
            f"time.sleep(60)']); open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    pool = gpu_warm.WarmPool([_job("slow", slow, 9), _job("later", "print()", 1)], 1, tmp_path / "logs").start()
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    done = pool.wait(0.5)
    assert [(w.item, w.state) for w in done] == [("slow", "stopped"), ("later", "not started")]
    child = int(pid_file.read_text())
    for _ in range(50):  # the grandchild is reaped by init once killed
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the warm process's own child outlived the pool's stop")


def test_a_run_that_exits_without_waiting_stops_its_pool(tmp_path) -> None:
    """The warm processes run in their own sessions: a run ended early (an error, gpu.sh's timeout) must not
    leave them compiling on the GPU machine after it."""
    pid_file = tmp_path / "warm.pid"
    child = tmp_path / "warm.py"
    child.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    script = tmp_path / "run.py"
    script.write_text(
        "import os, sys, time\n"
        "from pathlib import Path\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from benchmarks import gpu_warm\n"
        f"gpu_warm.WarmPool([('slow', [sys.executable, {str(child)!r}], 1)], 1, Path({str(tmp_path / 'logs')!r})).start()\n"
        f"while not os.path.exists({str(pid_file)!r}) or not Path({str(pid_file)!r}).read_text():\n"
        "    time.sleep(0.05)\n"
        "raise SystemExit(3)\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr[-2000:]
    pid = int(pid_file.read_text())
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("a warm process outlived its run")


@pytest.mark.slow  # ~25 s: inductor (C++) compiles a one-layer tiny model's step, then the same from the caches
def test_a_warmed_row_loads_its_graphs_from_the_caches_the_pool_filled(tmp_path) -> None:
    """The pool's process compiles the row (cache misses); the run's own compile of it then hits inductor's
    FX graph cache and AOT autograd's for every graph: the same Setup, the same graphs."""
    script = tmp_path / "run.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from dataclasses import replace\n"
        "import torch\n"
        "from benchmarks import bench_gpu as bg\n"
        "s = replace(bg.DRY, plan=(('tiny', bg.F, 'full head', 'compile'),), compile_backend='inductor', "
        "warm='on', limit_s=600, steps=2, warmup=1, layers=1)\n"
        "bg.Bench(s, torch.device('cpu'), sys.argv[1]).run()\n")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    out = tmp_path / "gpu.md"
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=600,
                          env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = out.read_text()
    warm = re.search(r"^\| tiny FULL-SENTENCES full head compile \| compiled \| ([\d.]+) \| FX graph cache 0 hit / "
                     r"(\d+) missed, AOT autograd cache 0 hit / 1 missed \|$", text, re.M)
    assert warm and int(warm[2]) >= 1, text
    row = re.search(r"^\| tiny \| FULL-SENTENCES \| full head \| compile \| .* \| ([\d.]+) \| 1 \| — \| warmed: "
                    r"compiled beforehand in ([\d.]+) s; here: FX graph cache (\d+) hit / 0 missed, AOT autograd "
                    r"cache 1 hit / 0 missed \|$", text, re.M)
    assert row and int(row[3]) == int(warm[2]), text
    assert float(row[1]) < float(warm[1])  # the row's first steps, from the caches, against the cold compile


def test_the_masking_part_masks_a_batch_of_its_own() -> None:
    """The masking part's batch is a new tensor, never the rows' (a compiled row's step marks those dynamic,
    which would make the fused masker's graph another than the warm process's: a cache miss on the CPU,
    where ``.to`` hands the same tensor back)."""
    import torch

    bench = bg.Bench(replace(bg.DRY, plan=("masking",)), torch.device("cpu"), "")
    ids = bench.masking_ids()
    rows = bench.kinds[F][0]["input_ids"]
    assert torch.equal(ids, rows) and ids.data_ptr() != rows.data_ptr()


def test_the_no_dropout_lever_builds_its_model_without_dropout_and_stays_out_of_the_target() -> None:
    """The lever's row is the recipe's model with dropout 0 (embeddings, attention, residuals); every other row
    keeps RoBERTa's 0.1. Its MFU is listed as the lever's, never taken as the MFU target's best row."""
    import torch

    from benchmarks.gpu_report import Results, targets

    bench = bg.Bench(replace(bg.DRY, plan=()), torch.device("cpu"), "")
    for mode, p, attention in (("eager+no dropout", 0.0, 0.0), ("eager", 0.1, 0.1),
                               ("eager+no attention dropout", 0.1, 0.0)):
        _, _, raw, _, _ = bench.build("tiny", F, "masked-only", mode)
        drops = [m.p for m in raw.modules() if isinstance(m, torch.nn.Dropout)]
        assert drops and set(drops) == {p}, (mode, drops)
        assert {m.dropout for m in raw.modules() if isinstance(getattr(m, "dropout", None), float)} == {attention}
    res = Results(mode="full", device="test")
    res.rows = [bg.Row("base", F, "masked-only", "eager"), bg.Row("base", F, "masked-only", "compile+no dropout")]
    res.rows[0].mfu, res.rows[0].tokens_s = 0.30, 1.0
    res.rows[1].mfu, res.rows[1].tokens_s = 0.40, 1.5
    lines = targets(replace(bg.GPU, sizes=("base",)), res)
    assert "- MFU ≥ 50% at base/512/bf16 (best row or sweep point): 30.0%: **missed**" in lines, lines
    assert "- base FULL-SENTENCES compile+no dropout (a recipe change; not the target's row): MFU 40.0%" in lines
    assert not any(x.startswith("- proposed:") for x in lines)  # no matmul rate measured: no such line
    # The proposed target: the best row's MFU against the rate this device reached on dense matmuls.
    res.peak, res.matmul = 989e12, 618.125e12
    lines = targets(replace(bg.GPU, sizes=("base",)), res)
    assert "- proposed: MFU against the measured matmul rate (618 TFLOP/s) ≥ 50% at base: 48.0%: **missed**" \
        in lines, lines


def test_each_lever_is_set_against_the_row_it_changes() -> None:
    """The levers' section pairs a lever's row with its base row of the same run (same size, batches, head),
    and leaves out a lever whose base row was not measured and a row that measured nothing."""
    from benchmarks.gpu_report import Results, lever_table

    def row(size: str, mode: str, ms: float) -> bg.Row:
        r = bg.Row(size, F, "masked-only", mode)
        r.ms, r.tokens_s, r.mfu, r.peak_gib = ms, 1000.0 / ms, 0.01 * 300 / ms, 8.0
        return r

    res = Results(mode="full", device="test")
    res.rows = [row("base", "eager", 40.0), row("base", "eager+no dropout", 32.0), row("base", "compile", 30.0),
                row("base", "compile by layers", 33.0), row("base", "compile+cudagraphs", math.nan),
                row("large", "compile by layers", 80.0)]
    lines = lever_table(res)
    body = [x for x in lines if x.startswith("| base") or x.startswith("| large")]
    assert body == [
        "| base | FULL-SENTENCES | masked-only | no dropout | eager | 32.0 vs 40.0 | **1.25** | 9.4% vs 7.5% | "
        "8.0 vs 8.0 |",
        "| base | FULL-SENTENCES | masked-only | by layers | compile | 33.0 vs 30.0 | **0.91** | 9.1% vs 10.0% | "
        "8.0 vs 8.0 |"], lines
    res.rows = res.rows[:1]
    assert lever_table(res) == []
