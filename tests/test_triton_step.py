"""benchmarks/check_triton_step.py: the compiled step's Triton code under Triton's interpreter, no GPU.

The whole check (model forward and backward on two batch kinds) takes ~5 minutes on 2 cores and is run
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


KERNEL = '''
import sys
sys.path.insert(0, {repo!r})
from benchmarks.check_triton_step import interpret_on_cpu
interpret_on_cpu()
import torch
import triton
import triton.language as tl


@triton.jit
def scatter_add(out, idx, val, n, ROWS: tl.constexpr):
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    col = tl.arange(0, 4)[None, :]
    live = row < n
    i = tl.load(idx + row, live)
    v = tl.load(val + row * 4 + col, live)
    tl.atomic_add(out + tl.broadcast_to(col + 4 * i, [ROWS, 4]), v, live, sem="relaxed")


for rows in (1, 2):
    out = torch.zeros(3, 4)
    scatter_add[(4 // rows,)](out, torch.tensor([0, 0, 2, 0]), torch.ones(4, 4), 4, ROWS=rows)
    print(rows, out.tolist())
'''


@linux_only
def test_the_interpreter_bridge_adds_every_column_of_a_one_row_atomic(tmp_path) -> None:
    """The embedding gradients' pattern (inductor's scatter-add): a mask broadcast from one row."""
    script = tmp_path / "atomic.py"
    script.write_text(KERNEL.format(repo=str(REPO)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = [[3.0] * 4, [0.0] * 4, [1.0] * 4]
    assert proc.stdout.split("\n")[:2] == [f"1 {want}", f"2 {want}"], proc.stdout
