"""Benchmark: compiling the whole model against compiling it by layers (``compile_scope``), one run.

For each size: the whole model under ``torch.compile`` (the baseline, the trainer's default) and the model
compiled by layers (each attention and feed-forward block and the LM head compiled in place: one compile
serves every layer), both with inductor on the device at hand (C++ on a CPU, Triton on a GPU). It times the
first training step (compilation included) and the steps after it, counts dynamo's graphs, and checks the
loss and every gradient against the eager model on the same batch. Prints the compile-time ratio. Each
(size, scope) runs in a process of its own with an empty inductor cache, so neither reuses the other's
compiled kernels.

    python benchmarks/bench_compile_scope.py                      # tiny and small on whatever device
    python benchmarks/bench_compile_scope.py --sizes base large   # the papers' sizes (a GPU's job)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import bench_parser, command_line, machine, write_results  # noqa: E402


def batches(vocab: int, rows: int, seq: int, n: int) -> list[dict]:
    """FULL-SENTENCES rows (the no-mask path), 15 % of positions as targets."""
    import torch

    from benchmarks.bench_gpu import make_batch

    g = torch.Generator().manual_seed(0)
    return [make_batch([seq] * rows, vocab, g) for _ in range(n)]


def one_scope(size: str, scope: str, dev, rows: int, seq: int, steps: int,  # noqa: ANN001 - torch.device
              backend: str) -> dict:
    """The eager reference and one scope on one model size: its row."""
    import torch
    from torch._dynamo.utils import counters

    from benchmarks.gpu_levers import step_inputs
    from schemas.config import ModelConfig
    from trainer.model import Encoder
    from trainer.precision import Precision, maybe_compile

    vocab = 50265 if dev.type == "cuda" else 8000
    host = batches(vocab, rows, seq, 2)
    prec = Precision("bf16" if dev.type == "cuda" else "fp32", dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def fresh() -> torch.nn.Module:
        torch.manual_seed(0)
        return Encoder(ModelConfig(size=size, dropout=0.0), vocab).to(dev)

    def loss_and_grads(model: torch.nn.Module, kw: dict) -> tuple[float, dict[str, torch.Tensor]]:
        for p in model.parameters():
            p.grad = None
        with prec.autocast():
            loss = model(**kw)["loss"]
        loss.backward()
        inner = getattr(model, "_orig_mod", model)
        return float(loss.detach()), {n: p.grad.detach().float().clone() for n, p in inner.named_parameters()
                             if p.grad is not None}

    eager = fresh()
    want = loss_and_grads(eager, step_inputs(host, dev, False, eager.dims)(0))
    del eager
    torch._dynamo.reset()
    counters.clear()
    raw = fresh()
    model = maybe_compile(raw, True, dev, backend=backend, scope=scope)
    inputs = step_inputs(host, dev, True, raw.dims)
    t0 = time.perf_counter()
    got = loss_and_grads(model, inputs(0))
    sync()
    first = time.perf_counter() - t0
    t1 = time.perf_counter()
    for i in range(steps):
        loss_and_grads(model, inputs(i % len(host)))
    sync()
    ms = (time.perf_counter() - t1) / steps * 1e3
    grad_diff = max(float((got[1][n] - want[1][n]).abs().max()) for n in want[1])
    row = {"size": size, "scope": scope, "first_s": first, "ms": ms,
           "graphs": int(counters["stats"]["unique_graphs"]), "loss_diff": abs(got[0] - want[0]),
           "grad_diff": grad_diff, "same_keys": list(got[1]) == list(want[1])}
    print(f"  {size} {scope}: first step {first:.1f} s, then {ms:.1f} ms/step, graphs {row['graphs']}, "
          f"|loss - eager| {row['loss_diff']:.2e}, max |grad - eager| {grad_diff:.2e}", flush=True)
    del model, raw
    return row


def in_own_process(size: str, scope: str, args) -> dict:  # noqa: ANN001 - argparse.Namespace
    """one_scope in a child process with an empty inductor cache (its printed line passed on)."""
    import json
    import os
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sf-compile-scope-") as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        cmd = [sys.executable, __file__, "--one", size, scope, "--steps", str(args.steps), "--backend", args.backend,
               "--rows", str(args.rows), "--seq", str(args.seq)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"bench_compile_scope: {size} {scope} failed:\n{proc.stderr[-3000:]}")
    for line in lines[:-1]:
        print(line, flush=True)
    return json.loads(lines[-1])


def main() -> int:
    ap = bench_parser(__doc__, "compile_scope")
    ap.add_argument("--sizes", nargs="+", default=None, help="Model sizes (default: tiny small; base on a GPU).")
    ap.add_argument("--rows", type=int, default=None, help="Rows per batch (default: 8 on CPU, 32 on a GPU).")
    ap.add_argument("--seq", type=int, default=None, help="Tokens per row (default: 128 on CPU, 512 on a GPU).")
    ap.add_argument("--steps", type=int, default=3, help="Timed steps after the first (default: %(default)s).")
    ap.add_argument("--backend", default="inductor", help="torch.compile backend (default: %(default)s).")
    ap.add_argument("--one", nargs=2, metavar=("SIZE", "SCOPE"), help=argparse.SUPPRESS)  # a child's part
    args = ap.parse_args()

    import json

    import torch

    dev = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    cuda = dev.type == "cuda"
    sizes = args.sizes or (["base"] if cuda else ["tiny", "small"])
    args.rows, args.seq = args.rows or (32 if cuda else 8), args.seq or (512 if cuda else 128)
    rows, seq = args.rows, args.seq
    if args.one:
        print(json.dumps(one_scope(*args.one, dev, rows, seq, args.steps, args.backend)))
        return 0
    print(f"bench_compile_scope on {dev}: sizes {' '.join(sizes)}, {rows} x {seq}, backend {args.backend}",
          flush=True)
    results = [in_own_process(size, scope, args) for size in sizes for scope in ("model", "layers")]
    tol = 5e-2 if cuda else 1e-4  # bf16 autocast on a GPU, fp32 on a CPU
    lines = ["# Compiling the whole model against compiling it by layers (`compile_scope`)", "",
             f"Machine: {machine(torch_details=True, load=True)}. Device: {dev}. Command: `{command_line()}`.", "",
             f"FULL-SENTENCES batches of {rows} × {seq}, masked-only head, dropout 0, "
             f"{'bf16 autocast' if cuda else 'fp32'}, backend {args.backend}; 'first step' is the first forward "
             "and backward, compilation included; the step time is the mean of the steps after it (forward and "
             "backward, no optimizer); the differences are against the eager model on the first batch.", "",
             "| size | scope | first step s | ms / step | graphs | loss − eager | max grad − eager |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['size']} | {r['scope']} | {r['first_s']:.1f} | {r['ms']:.1f} | {r['graphs']} | "
                     f"{r['loss_diff']:.1e} | {r['grad_diff']:.1e} |")
    lines.append("")
    ok = True
    for size in sizes:
        whole, layers = (next(r for r in results if r["size"] == size and r["scope"] == s)
                         for s in ("model", "layers"))
        ratio = whole["first_s"] / layers["first_s"] if layers["first_s"] else math.nan
        speed = layers["ms"] / whole["ms"] if whole["ms"] else math.nan
        lines.append(f"- {size}: compiling by layers takes **{1 / ratio:.2f}×** the whole model's first step "
                     f"({ratio:.1f}× faster to start); its steps take {speed:.2f}× the whole model's.")
        print(f"{size}: first step by layers / whole = {1 / ratio:.2f}x; step time {speed:.2f}x", flush=True)
        for r in (whole, layers):
            if not (r["same_keys"] and r["loss_diff"] <= tol and r["grad_diff"] <= tol):
                ok = False
                lines.append(f"- **{size} {r['scope']}: differs from eager beyond {tol:g}**")
    write_results(args.out, lines)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
