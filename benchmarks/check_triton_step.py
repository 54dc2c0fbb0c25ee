"""The compiled training step's GPU code, checked on the CPU: inductor's Triton kernels under Triton's interpreter.

On a GPU, ``torch.compile`` turns the model's forward and backward, and the compiled AdamW step
(``optim.impl: compiled``), into Triton kernels. Inductor writes the same kind of Triton code for CPU
tensors when its ``cpu_backend`` is "triton", and ``TRITON_INTERPRET=1`` runs those kernels in numpy. So
the code a GPU would compile goes through Triton's frontend (its type rules: the fused masker once failed
there on a 64-bit constant, a defect no C++ compile showed) and runs here, against the eager step:

* the model (tiny, masked-only head, dropout 0) on a FULL-SENTENCES and a DOC-SENTENCES batch built as the
  GPU benchmark builds them: the loss and every gradient of the compiled step against eager;
* compiled AdamW against the fused (eager) AdamW, two steps on the same gradients.

    python benchmarks/check_triton_step.py                    # both; ~80 s on 2 cores
    python benchmarks/check_triton_step.py --optimizer-only   # compiled AdamW alone; seconds

Run it before spending GPU time on a change to the model or the optimizer. It prints one line per check
and exits 1 on the first mismatch. Needs the ``triton`` package (the dev extra), no GPU.

Two gaps of Triton's interpreter (3.7) are bridged here, for this check only: the libdevice functions
inductor's kernels call (rsqrt, erf, pow, ...) are not interpreted, so they run as ``tl.math``'s; and an
atomic add whose mask is broadcast from one row updates only the first column (``atomic_rmw`` is handed
the broadcast views, not contiguous copies), which shows as wrong embedding gradients. And two of its costs
are avoided: it patches triton.language again at every device-function call inside a kernel (the patch
the kernel's launch made is kept instead); and it applies a reduction's combine function one element at a
time in Python unless the function is one of Triton's own (inductor's max and min reductions run as
numpy's max and min instead: the same values).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
import warnings
import weakref
from dataclasses import replace
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # read when the generated kernels are defined: before any is
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # interpreted kernels need no compile workers
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch._inductor.config as inductor_config  # noqa: E402
import torch.utils._triton as torch_triton  # noqa: E402

LIBDEVICE = ("rsqrt", "sqrt", "erf", "exp", "exp2", "log", "floor", "abs")


def interpret_on_cpu() -> None:
    """Inductor writes Triton for CPU tensors, and the interpreter runs what its kernels call."""
    import triton.language as tl
    from torch._inductor.runtime.triton_helpers import libdevice
    from triton.runtime import interpreter

    inductor_config.cpu_backend = "triton"
    warnings.filterwarnings("ignore", message="Could not find an active CPU backend")  # none is needed: interpreted
    # Inductor keys its cache on the active Triton backend's hash, which needs a GPU driver; any fixed key will do.
    torch_triton.triton_hash_with_backend = lambda: "interpreted-on-cpu"
    for name in LIBDEVICE:  # looked up at call time: the interpreter patches tl.math while a kernel runs
        setattr(libdevice, name, (lambda n: lambda x, *args, **kwargs: getattr(tl.math, n)(x))(name))
    libdevice.pow = lambda x, y: tl.math.exp(y * tl.math.log(x))
    builder = interpreter.InterpreterBuilder
    rmw = builder.create_atomic_rmw

    def create_atomic_rmw(self, op, ptr, val, mask, sem, scope):  # noqa: ANN001, ANN202 - the builder's signature
        for handle in (ptr, val, mask):
            handle.data = np.ascontiguousarray(handle.data)
        return rmw(self, op, ptr, val, mask, sem, scope)

    builder.create_atomic_rmw = create_atomic_rmw

    # A kernel's launch patches triton.language for the interpreter, and so does every call of a device
    # function inside it (inductor's helpers: maximum, promote_to_tensor, ...): walking the modules with
    # inspect.getmembers each time, most of an interpreted check's time. A call whose modules the running
    # kernel has patched already keeps that patch, which the kernel's end restores.
    patch_lang, scope_class = interpreter._patch_lang, interpreter._LangPatchScope
    patched: set[int] = set()
    modules: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # per function: the language modules it sees

    def patch_once(fn):  # noqa: ANN001, ANN202 - the interpreter's signature
        langs = modules.get(fn)
        if langs is None:
            langs = modules[fn] = {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}
        if langs and langs <= patched:
            return scope_class()
        patched.update(langs)
        return patch_lang(fn)

    class Scope(scope_class):
        def restore(self) -> None:
            patched.clear()
            super().restore()

    interpreter._patch_lang, interpreter._LangPatchScope = patch_once, Scope
    reduce_extremes_in_numpy(interpreter.ReduceOps)


def reduce_extremes_in_numpy(ops: type) -> None:
    """Inductor's max and min reductions (``max2`` / ``min2``: ``tl.reduce`` with its own ``maximum`` /
    ``minimum``) as numpy's max and min over the axis. The interpreter knows only Triton's own combine
    functions; any other it applies one element at a time in Python (most of the masking check's kernel
    time). Inductor's two propagate NaN, as numpy's do; integers and booleans compare as they are."""
    from torch._inductor.runtime import triton_helpers

    apply_impl = ops.apply_impl

    def reduce(self, input):  # noqa: ANN001, ANN202 - the interpreter's signature
        if len(input) == 1 and self.combine_fn is triton_helpers.maximum:
            return self.min_max(input[0], val_reduce_op=np.max)
        if len(input) == 1 and self.combine_fn is triton_helpers.minimum:
            return self.min_max(input[0], val_reduce_op=np.min)
        return apply_impl(self, input)

    ops.apply_impl = reduce


def worst(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest difference relative to b's largest magnitude."""
    return float((a - b).detach().abs().max() / b.detach().abs().max().clamp(min=1e-12))


def check_model(kind: str, tol: float) -> list[str]:
    """Loss and gradients of the compiled model's Triton step against the eager step, on one batch."""
    from benchmarks.bench_gpu import DRY, doc_batches, full_batches
    from benchmarks.gpu_levers import step_inputs
    from schemas.config import ModelConfig
    from trainer.model import Encoder, target_counts
    from trainer.precision import maybe_compile

    s = replace(DRY, batch=2, seq=32, tokens=64)
    batches = full_batches(s, 1) if kind == "FULL-SENTENCES" else doc_batches(s, 1)
    torch.manual_seed(0)
    raw = Encoder(ModelConfig(size="tiny", masked_only_head=True, dropout=0.0), s.vocab)
    ref = copy.deepcopy(raw)
    dev = torch.device("cpu")
    torch._dynamo.reset()
    losses = []
    for model, weights, compiled in ((maybe_compile(raw, True, dev), raw, True), (ref, ref, False)):
        kw = step_inputs(batches, dev, compiled, weights.dims)(0)
        out = model(**kw, loss_denominators=target_counts(**kw).clamp(min=1))
        out["loss"].backward()
        losses.append(float(out["loss"].detach()))
    bad = [f"loss {losses[0]} against {losses[1]}"] if abs(losses[0] - losses[1]) > tol * abs(losses[1]) else []
    grads = 0
    for (name, a), b in zip(raw.named_parameters(), ref.parameters(), strict=True):
        if b.grad is None:
            continue
        grads += 1
        if a.grad is None or worst(a.grad, b.grad) > tol:
            bad.append(f"{name}: {'no gradient' if a.grad is None else f'differs by {worst(a.grad, b.grad):.2e}'}")
    print(f"{kind}: loss {losses[0]:.6f} (eager {losses[1]:.6f}), {grads} gradients compared", flush=True)
    return bad


def check_optimizer(tol: float) -> list[str]:
    """Compiled AdamW against the fused eager AdamW: two steps on the same gradients."""
    from schemas.config import ModelConfig, OptimConfig
    from trainer.model import Encoder
    from trainer.optim import build_optimizer

    torch.manual_seed(0)
    model = Encoder(ModelConfig(size="tiny", masked_only_head=True), 1000)
    ref = copy.deepcopy(model)
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        b.grad = torch.randn_like(b)
        a.grad = b.grad.clone()
    torch._dynamo.reset()
    compiled = build_optimizer(model, OptimConfig(impl="compiled"), compile_backend="inductor")
    fused = build_optimizer(ref, OptimConfig(impl="fused"))
    for _ in range(2):
        compiled.step()
        fused.step()
    diff = max(float((a - b).detach().abs().max()) for a, b in zip(model.parameters(), ref.parameters(), strict=True))
    print(f"compiled AdamW: parameters within {diff:.2e} of the fused step's after 2 steps", flush=True)
    return [f"compiled AdamW differs by {diff:.2e}"] if diff > tol else []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--optimizer-only", action="store_true", help="Check compiled AdamW alone (seconds).")
    args = ap.parse_args()
    interpret_on_cpu()
    t0 = time.monotonic()
    bad = check_optimizer(1e-6)
    if not args.optimizer_only:
        for kind in ("FULL-SENTENCES", "DOC-SENTENCES"):
            bad += check_model(kind, 1e-4)
    for line in bad:
        print(f"MISMATCH {line}", file=sys.stderr)
    print(f"{'FAILED' if bad else 'passed'} in {time.monotonic() - t0:.0f} s", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
