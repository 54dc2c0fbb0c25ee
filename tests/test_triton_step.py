"""benchmarks/check_triton_step.py: the compiled step's Triton code under Triton's interpreter, no GPU.

The whole check (model forward and backward on two batch kinds) takes ~80 s on 2 cores and is run
by hand before GPU time is spent; the suite runs its optimizer part (compiled AdamW's Triton kernels
against the fused step) and checks the interpreter bridge it relies on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="the triton package ships Linux wheels only")


@pytest.mark.slow  # ~25 s: a compile and its kernels interpreted, in one process (handed out with the slow files)
@linux_only
def test_compiled_adamw_as_triton_kernels_matches_the_fused_step() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "check_triton_step.py"), "--optimizer-only"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "compiled AdamW: parameters within" in proc.stdout and "passed" in proc.stdout


BRIDGES = '''
import sys
sys.path.insert(0, {repo!r})
from benchmarks.check_triton_step import interpret_on_cpu
interpret_on_cpu()
import torch
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from triton.runtime import interpreter


def elementwise(*args):
    raise AssertionError("a max or min reduction went through the interpreter's element-by-element path")


interpreter.ReduceOps.generic_reduce = elementwise


@triton.jit
def scatter_add(out, idx, val, n, ROWS: tl.constexpr):
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    col = tl.arange(0, 4)[None, :]
    live = row < n
    i = tl.load(idx + row, live)
    v = tl.load(val + row * 4 + col, live)
    tl.atomic_add(out + tl.broadcast_to(col + 4 * i, [ROWS, 4]), v, live, sem="relaxed")


@triton.jit
def extremes(x, hi, lo, COLS: tl.constexpr):
    row = tl.program_id(0)
    v = tl.load(x + row * COLS + tl.arange(0, COLS))[None, :]
    tl.store(hi + row + tl.arange(0, 1), tl.reshape(triton_helpers.max2(v, 1), [1]))
    tl.store(lo + row + tl.arange(0, 1), tl.reshape(triton_helpers.min2(v, 1), [1]))


for rows in (1, 2):
    out = torch.zeros(3, 4)
    scatter_add[(4 // rows,)](out, torch.tensor([0, 0, 2, 0]), torch.ones(4, 4), 4, ROWS=rows)
    print("atomic", rows, out.tolist())

nan = float("nan")
for x in (torch.tensor([[1.0, -2.0, 7.5, 0.0], [nan, 3.0, -1.0, 2.0], [-4.0, -3.0, nan, -9.0]]),
          torch.tensor([[2**40, -(2**41), 5, 0], [-1, -1, -1, -1], [9, 2**62, -(2**62), 3]]),
          torch.tensor([[True, False, False, False], [False, False, False, False], [True, True, True, True]])):
    hi, lo = torch.empty(3, dtype=x.dtype), torch.empty(3, dtype=x.dtype)
    extremes[(3,)](x, hi, lo, COLS=4)
    same = all(torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0), b.nan_to_num(0))
               if a.is_floating_point() else torch.equal(a, b) for a, b in ((hi, x.amax(1)), (lo, x.amin(1))))
    print("extremes", x.dtype, same, hi.tolist(), lo.tolist())
'''


@pytest.fixture(scope="module")
def bridges(tmp_path_factory) -> dict[str, list[str]]:
    """The interpreter bridges' kernels, run in one interpreter process: its lines by kernel."""
    script = tmp_path_factory.mktemp("bridges") / "bridges.py"
    script.write_text(BRIDGES.format(repo=str(REPO)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        kernel, rest = line.split(" ", 1)
        lines.setdefault(kernel, []).append(rest)
    return lines


@linux_only
def test_the_interpreter_bridge_adds_every_column_of_a_one_row_atomic(bridges) -> None:
    """The embedding gradients' pattern (inductor's scatter-add): a mask broadcast from one row."""
    want = [[3.0] * 4, [0.0] * 4, [1.0] * 4]
    assert bridges["atomic"] == [f"1 {want}", f"2 {want}"], bridges


@linux_only
def test_the_interpreter_bridge_reduces_inductors_max_and_min_as_torch_does(bridges) -> None:
    """Inductor's max2 / min2 (a reduction over its own maximum / minimum) run as numpy's max and min, not
    one element at a time (the script fails if any goes that way): NaN propagates, 64-bit integers and
    booleans compare exactly."""
    rows = [line.split(" ", 2) for line in bridges["extremes"]]
    assert [r[:2] for r in rows] == [[f"torch.{t}", "True"] for t in ("float32", "int64", "bool")], rows
    assert rows[0][2] == "[7.5, nan, nan] [-2.0, nan, nan]", rows
