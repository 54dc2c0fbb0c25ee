"""The fused masker's Triton kernels, run on the CPU: inductor's Triton backend under Triton's interpreter.

A GPU compiles the fused masker (trainer/fused_masking.py) into Triton kernels. Inductor writes the same
kind of Triton code for CPU tensors when its ``cpu_backend`` is "triton", and ``TRITON_INTERPRET=1``
makes Triton run those kernels in numpy instead of compiling them for a device. So the code a GPU runs
is generated, type-checked by Triton's frontend and executed here, with no GPU: its kernels are counted
and its masks compared with the reference Masker's, bit for bit.

    python tests/triton_masking.py SCHEME [SCHEME ...]

prints one JSON line per scheme: the Triton kernels one call launches (in order), any other calls
(extern kernels, aten fallbacks), and the batches checked; it exits 1 at the first batch whose masks
differ from the reference's, or when a later batch compiles again. Interpreted kernels are slow (the
pairwise reductions are O(L^2) per row, in numpy): batches stay small. tests/test_triton_masking.py
runs it; needs the ``triton`` package (the dev extra), no GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

# Sets TRITON_INTERPRET before any kernel is defined, and inductor's Triton backend for CPU tensors.
from benchmarks.check_triton_step import interpret_on_cpu  # noqa: E402

interpret_on_cpu()

import torch  # noqa: E402
from test_fused_masking import assert_same, ragged  # noqa: E402
from test_masking import masker, word_table  # noqa: E402

from trainer.fused_masking import FusedMasker, launches  # noqa: E402

# (rows, columns, masking rate, a separator token every n positions): the first compiles, the others
# must reuse that compile (dynamic shapes, every constant a tensor input).
BATCHES = [(3, 24, 0.15, 9), (3, 20, 0.4, 5), (2, 11, 0.05, 0)]


def check(scheme: str) -> dict[str, object]:
    from torch._dynamo.utils import counters
    from torch._inductor.utils import run_and_get_code

    gen = torch.Generator().manual_seed(17)
    ws = word_table(gen)
    checked, kernels, extern, graphs = [], [], [], None
    for i, (B, L, rate, sep) in enumerate(BATCHES):
        ref = masker(scheme, ws, rate=rate)
        fused = FusedMasker(masker(scheme, ws, rate=rate))
        ids, sids = ragged(gen, B, L, separator_every=sep), torch.randint(0, 2**40, (B,), generator=gen)
        seed, epoch = 1000 + i, 3 * i
        if i == 0:
            got, codes = run_and_get_code(lambda: fused(ids, sids, epoch=epoch, seed=seed))  # noqa: B023
            if len(codes) != 1:
                raise SystemExit(f"{scheme}: {len(codes)} graphs (a graph break)")
            kernels, extern = launches(codes[0])
            graphs = counters["stats"]["unique_graphs"]
        else:
            got = fused(ids, sids, epoch=epoch, seed=seed)
            if counters["stats"]["unique_graphs"] != graphs:
                raise SystemExit(f"{scheme}: the {B}x{L} batch compiled again")
        if fused.fallback is not None:
            raise SystemExit(f"{scheme}: the Triton code did not run: {fused.fallback}")
        assert_same(ref(ids, sids, epoch=epoch, seed=seed), got, f"{scheme} {B}x{L} rate {rate}")
        checked.append([B, L, rate])
    return {"scheme": scheme, "kernels": kernels, "extern": extern, "checked": checked}


def main(schemes: list[str]) -> int:
    for scheme in schemes:
        try:
            row = check(scheme)
        except AssertionError as e:
            print(f"{scheme}: the masks differ from the reference's: {e}", file=sys.stderr)
            return 1
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["token", "whole_word", "span", "ngram"]))
