"""The fused masker's GPU code (Triton kernels) generated and run on the CPU: tests/triton_masking.py.

The CUDA tests (tests/test_fused_masking.py, run by benchmarks/gpu.sh) need a GPU; this one checks the
same Triton code without one, under Triton's interpreter: it compiles, it launches at most 10 kernels
a call for every scheme (the reference dispatches 136-336 aten ops, one launch each on a GPU; torch 2.13
makes 3 / 4 / 6 / 6, held here so that a lost fusion fails), and its
masks equal the reference's bit for bit on batches of several shapes and rates with one compile.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SCHEMES = ["token", "whole_word", "span", "ngram"]
# Kernels a call with torch 2.13's inductor (the target: at most 10 for every scheme).
MOST = {"token": 3, "whole_word": 4, "span": 6, "ngram": 6}


@pytest.mark.slow  # four compiles (15-50 s each on 2 busy cores) and interpreted kernels
@pytest.mark.skipif(sys.platform != "linux", reason="the triton package ships Linux wheels only")
def test_fused_masking_as_triton_kernels_equals_the_reference() -> None:
    r = subprocess.run([sys.executable, str(TESTS / "triton_masking.py"), *SCHEMES], capture_output=True,
                       text=True, timeout=1200, cwd=TESTS.parent)
    assert r.returncode == 0, r.stderr[-4000:]
    rows = {row["scheme"]: row for row in map(json.loads, r.stdout.splitlines())}
    assert sorted(rows) == sorted(SCHEMES), r.stdout
    for scheme, row in rows.items():
        assert len(row["checked"]) == 3, row
        assert all(k.startswith("triton_") for k in row["kernels"]), row
        assert 1 <= len(row["kernels"]) <= MOST[scheme] and not row["extern"], (scheme, row["kernels"], row["extern"])
