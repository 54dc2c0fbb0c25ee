"""The GPU benchmark's lever parts (``bench_gpu.py`` runs them): masking reference vs fused, masking's share
of the base step with masking ahead off and on, the micro-batch sweep with gradient accumulation, and the
profiler summary of a step (top kernels, launches, host syncs).

Each part takes the step or the batches it measures from its caller, so the same code runs on a GPU and,
at tiny sizes, on the CPU (``bench_gpu.py --dry-run``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import torch

from benchmarks.common import time_calls


class MaskingRow(NamedTuple):
    scheme: str
    impl: str  # reference | fused
    ms: float  # per batch on the device
    launches: int  # reference: aten ops a call dispatches; fused: kernels in the generated code
    extern: int  # fused: extern / aten calls left in the generated code (reference: 0)
    syncs: int  # reference: ops that would sync the host (trainer.hostsync); fused: -1 (not counted)
    compile_s: float  # fused: the first call (compilation); reference: 0
    identical: bool  # the device's masks equal the CPU reference's, bit for bit
    share_eager: float  # of masking + the eager step
    share_compiled: float  # of masking + the compiled step (nan when none was measured)


def masking_call(masker: object, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The masking part's call of a masker on a batch (its sample ids and epoch fixed)."""
    sids = torch.arange(ids.shape[0], device=ids.device) * 7919
    return masker(ids, sids, epoch=1, seed=0)


def masking_compare(masker_of: Callable[[str], object], ids: torch.Tensor, compile_schemes: tuple[str, ...],
                    step_ms: tuple[float, float], calls: int) -> list[MaskingRow]:
    """Per scheme: the reference Masker and the FusedMasker on one batch (``ids`` on the device).

    ``masker_of(scheme)`` builds a fresh reference Masker on the host; schemes not in compile_schemes run
    the fused functions eagerly (a CPU dry run compiles one scheme only: inductor's C++ takes ~25 s each).
    """
    from torch._inductor.utils import run_and_get_code

    from trainer.fused_masking import FusedMasker, launches
    from trainer.hostsync import HostSyncs

    dev = ids.device
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    out = []
    for scheme in ("token", "whole_word", "span", "ngram"):
        host_ref = masker_of(scheme)
        want = masking_call(host_ref, ids.cpu())
        ref = masker_of(scheme).to(dev)
        ref.check_ids = False
        fused = FusedMasker(masker_of(scheme), compile=scheme in compile_schemes).to(dev)
        fused.check_ids = False
        for impl, m in (("reference", ref), ("fused", fused)):
            t0 = time.perf_counter()
            kernels, extern, syncs = 0, 0, -1
            if impl == "fused" and scheme in compile_schemes:
                got, codes = run_and_get_code(lambda m=m: masking_call(m, ids))
                k, e = launches(codes[0]) if codes else ([], [])
                kernels, extern = len(k), len(e)
            else:
                got = masking_call(m, ids)
            if sync:
                sync()
            compile_s = time.perf_counter() - t0 if impl == "fused" else 0.0
            if impl == "reference" or scheme not in compile_schemes:
                with HostSyncs() as counter:
                    masking_call(m, ids)
                kernels, syncs = counter.ops, counter.syncs
            same = all(torch.equal(want[k], got[k].cpu()) for k in want) and want.keys() == got.keys()
            t = time_calls(lambda m=m: masking_call(m, ids), calls=calls, sync=sync)
            ms = t.wall * 1e3
            eager, compiled = step_ms
            out.append(MaskingRow(scheme, impl, ms, kernels, extern, syncs, compile_s, same, ms / (ms + eager),
                                  ms / (ms + compiled) if compiled == compiled else float("nan")))
            print(f"  masking {scheme} {impl}: {ms:.3f} ms/batch, {out[-1].share_eager:.2%} of the eager step, "
                  f"{kernels} {'aten ops' if impl == 'reference' or scheme not in compile_schemes else 'kernels'}, "
                  f"identical {same}, first call {compile_s:.1f} s", flush=True)
            if getattr(m, "fallback", None):
                print(f"  (fused {scheme} fell back to the reference: {m.fallback})", flush=True)
    return out


class OverlapRow(NamedTuple):
    mode: str  # eager | compile: the base step (the step table's model)
    scheme: str
    overlap: bool  # the next batch masked ahead on a side stream (trainer.batch.MaskAhead)
    bare_ms: float  # per step, with a masker that hands back masks made beforehand (no masking kernels)
    masked_ms: float  # per step, masking as the loop runs it
    share: float  # (masked_ms - bare_ms) / masked_ms: what masking adds to the step


class Replayed:
    """A masker handing back, in order, the masks ``masker`` made for the batches beforehand: the step gets
    the same inputs without the masking's kernels (the bare step)."""

    def __init__(self, masker: object, outputs: list[dict[str, torch.Tensor]]) -> None:
        self.masker, self.outputs, self.calls = masker, outputs, 0
        self.pad_id = masker.pad_id

    def prediction_bound(self, input_ids: torch.Tensor) -> int:
        return self.masker.prediction_bound(input_ids)

    def __call__(self, input_ids: torch.Tensor, sample_ids: torch.Tensor, epoch: int, seed: int) -> dict:
        out = self.outputs[self.calls % len(self.outputs)]
        self.calls += 1
        return dict(out)


def loop_step(model: torch.nn.Module, raw: torch.nn.Module, hosts: list[dict[str, torch.Tensor]], masker: object,
              dev: torch.device, overlap: bool, opt: torch.optim.Optimizer, prec: object) -> Callable[[int], None]:
    """trainer.train's step on host batches: the batch handed over (masked ahead on a side stream while the
    step before ran, with ``overlap``; else copied and masked now), forward, backward, clip, optimizer step,
    then (overlap) the next batch taken ahead, and the loop's device sync."""
    from trainer.batch import MaskAhead, forward

    pipe = MaskAhead(dev, overlap)
    params = list(raw.parameters())
    pending: list = []
    sync = torch.cuda.synchronize if dev.type == "cuda" else None

    def take(i: int) -> object:
        return pipe.prepare(model, masker, hosts[i % len(hosts)], epoch=0, seed=0)

    def step(i: int) -> None:
        batch = pipe.hand_over(pending.pop() if pending else take(i))
        out = forward(model, batch, dev, prec.autocast)
        prec.backward(out["loss"])
        prec.step(opt, params, 1.0)
        opt.zero_grad(set_to_none=True)
        if pipe.overlap:
            pending.append(take(i + 1))
        if sync:
            sync()

    return step


def loader_batches(batches: list[dict[str, torch.Tensor]], dev: torch.device) -> list[dict[str, torch.Tensor]]:
    """The benchmark's batches as the loader hands them: unmasked ids, sample ids, epoch; pinned on CUDA."""
    out = []
    for i, b in enumerate(batches):
        rows = b["input_ids"].shape[0]
        host = {"input_ids": torch.where(b["labels"] != -100, b["labels"], b["input_ids"]),
                "attention_mask": b["attention_mask"], "sample_ids": torch.arange(rows) + i * rows,
                "epoch": torch.zeros(rows, dtype=torch.long)}
        out.append({k: v.pin_memory() for k, v in host.items()} if dev.type == "cuda" else host)
    return out


def trainer_masker(reference: object, dev: torch.device) -> object:
    """The masker the trainer builds from a host reference Masker (``masking_impl: auto``): fused on CUDA,
    the reference ops on the CPU; ids not range-checked (as on CUDA)."""
    from trainer.fused_masking import FusedMasker

    ref = reference.to(dev)
    ref.check_ids = False
    return FusedMasker(ref).to(dev) if dev.type == "cuda" else ref


def masking_overlap(models: dict[str, tuple[torch.nn.Module, torch.nn.Module]], batches: list[dict[str, torch.Tensor]],
                    masker: object, scheme: str, dev: torch.device, steps: int, warmup: int) -> list[OverlapRow]:
    """Masking's share of each base step (``models``: mode -> (what the loop calls, the Encoder)) as the
    trainer's loop runs it, with masking ahead off and on: the step with the masker against the same step
    with its masks replayed (trainer.batch's prepare / forward / MaskAhead, the trainer's masker)."""
    from schemas.config import OptimConfig
    from trainer.optim import build_optimizer
    from trainer.precision import Precision

    cuda = dev.type == "cuda"
    hosts = loader_batches(batches, dev)
    outputs = [masker(h["input_ids"].to(dev), h["sample_ids"].to(dev), epoch=0, seed=0) for h in hosts]
    prec = Precision("bf16" if cuda else "fp32", dev)
    sync = torch.cuda.synchronize if cuda else None
    rows = []
    for mode, (model, raw) in models.items():
        opt = build_optimizer(raw, OptimConfig(impl="fused"))
        for overlap in (False, True):
            ms = {}
            for what, m in (("bare", Replayed(masker, outputs)), ("masked", masker)):
                step = loop_step(model, raw, hosts, m, dev, overlap, opt, prec)
                first = max(warmup, len(hosts))  # every batch before the clock: no recompile inside it
                for i in range(first):
                    step(i)
                counter = iter(range(first, first + steps))
                ms[what] = time_calls(lambda step=step, counter=counter: step(next(counter)), calls=steps,
                                      sync=sync).wall * 1e3
            rows.append(OverlapRow(mode, scheme, overlap, ms["bare"], ms["masked"],
                                   (ms["masked"] - ms["bare"]) / ms["masked"]))
            print(f"  masking {scheme} {'ahead' if overlap else 'in place'}, {mode} step: {ms['bare']:.2f} ms bare, "
                  f"{ms['masked']:.2f} ms masked: {rows[-1].share:.2%} of the step", flush=True)
        del opt
    return rows


class SweepRow(NamedTuple):
    micro: int  # rows per micro-batch
    accum: int  # micro-batches per optimizer step
    ms: float  # per optimizer step
    tokens_s: float
    mfu: float | None
    peak_gib: float | None
    first_s: float  # warm-up (recompilation for the new batch size included)
    note: str


def accumulated_step(model: torch.nn.Module, raw: torch.nn.Module, batches: list[dict[str, torch.Tensor]],
                     dev: torch.device, accum: int, make_inputs: Callable, opt: torch.optim.Optimizer,
                     prec: object) -> Callable[[int], None]:
    """An optimizer step of ``accum`` micro-batches, each loss over the step's target counts (trainer/step.py)."""
    from trainer.model import target_counts

    params = list(raw.parameters())

    def step(i: int) -> None:
        inputs = [make_inputs((i * accum + j) % len(batches)) for j in range(accum)]
        denominators = torch.stack([target_counts(**kw) for kw in inputs]).sum(0).clamp(min=1)
        for kw in inputs:
            with prec.autocast():
                out = model(**kw, loss_denominators=denominators)
            prec.backward(out["loss"])
        prec.step(opt, params, 1.0)
        opt.zero_grad(set_to_none=True)

    return step


def sweep_row(micro: int, accum: int, step: Callable[[int], None], tokens_per_step: int, flops_per_step: float,
              steps: int, warmup: int, dev: torch.device, peak: float | None) -> SweepRow:
    """Time one micro-batch size: warm-up steps, then ``steps`` timed optimizer steps."""
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else None
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    for i in range(warmup):
        step(i)
    if sync:
        sync()
    first = time.perf_counter() - t0
    counter = iter(range(steps))
    t = time_calls(lambda: step(next(counter)), calls=steps, sync=sync)
    mfu = flops_per_step / t.wall / peak if peak else None
    peak_gib = torch.cuda.max_memory_allocated(dev) / 2**30 if cuda else None
    return SweepRow(micro, accum, t.wall * 1e3, tokens_per_step / t.wall, mfu, peak_gib, first, "")


def prediction_bound(labels: torch.Tensor) -> int:
    """The predicted positions of a host batch rounded up to 64 (what Masker.prediction_bound guarantees):
    the masked-only head gathers a static number of rows, with no host sync."""
    return max(64, -(-int((labels != -100).sum()) // 64) * 64)


def padded_columns(batch: dict[str, torch.Tensor], multiple: int) -> dict[str, torch.Tensor]:
    """A host batch with its rows padded to a multiple of ``multiple`` columns (trainer.batch's bucketing)."""
    from schemas import PAD_ID

    extra = -batch["input_ids"].shape[1] % multiple
    if not extra:
        return batch
    fill = {"input_ids": PAD_ID, "attention_mask": 0, "labels": -100}
    return {k: torch.nn.functional.pad(v, (0, extra), value=fill[k]) for k, v in batch.items()}


def step_inputs(batches: list[dict[str, torch.Tensor]], dev: torch.device, compiled: bool,
                dims, attention: str = "auto") -> Callable[[int], dict]:  # noqa: ANN001 - dims: trainer.model.ModelDims
    """The model's keyword arguments for batch i, built as trainer.batch.masked_forward builds them: the
    attention path and layout from the host mask, the static prediction bound, and for a compiled model
    the bucketed columns and packed tokens with the varying sizes marked dynamic."""
    from trainer.attention import ROW_BUCKET, TOKEN_BUCKET, plan
    from trainer.batch import CHOICES, mark_dynamic
    from trainer.model import attention_inputs

    host = [padded_columns(b, ROW_BUCKET) if compiled and not bool(b["attention_mask"].all()) else b for b in batches]
    on_dev = [{k: v.to(dev) for k, v in b.items()} for b in host]
    bounds = [prediction_bound(b["labels"]) for b in host]
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32

    def inputs(i: int) -> dict:
        kw = attention_inputs(dict(on_dev[i]), host[i]["attention_mask"], dev, bucket=TOKEN_BUCKET if compiled else 0)
        kw, choice = plan(kw, dims.heads, dims.head_dim, dims.attention_dropout, dev, dtype, attention)
        CHOICES.add(choice)
        kw["predictions"] = bounds[i]
        if compiled:
            mark_dynamic(kw)
        return kw

    return inputs


def build_step(model: torch.nn.Module, raw: torch.nn.Module, batches: list[dict[str, torch.Tensor]],
               dev: torch.device, compiled: bool, optim_impl: str = "fused", accum: int = 1,
               backend: str = "inductor", attention: str = "auto") -> Callable[[int], None]:
    """The trainer's step on pre-copied batches (``accum`` micro-batches per optimizer step; AdamW fused as on
    CUDA by default, on the CPU of a dry run too; ``attention``: the kernel to prefer, as the trainer's
    ``attention`` setting)."""
    from schemas.config import OptimConfig
    from trainer.optim import build_optimizer
    from trainer.precision import Precision

    opt = build_optimizer(raw, OptimConfig(impl=optim_impl), compile_backend=backend)
    prec = Precision("bf16" if dev.type == "cuda" else "fp32", dev)
    return accumulated_step(model, raw, batches, dev, accum, step_inputs(batches, dev, compiled, raw.dims, attention),
                            opt, prec)


class Profile(NamedTuple):
    what: str  # the step profiled
    steps: int
    top: list[tuple[str, float, int]]  # (kernel or op, ms per step, calls per step), by device (else CPU) time
    launches_per_step: float  # CUDA: kernel launches (runtime API calls); CPU: aten ops
    syncs_per_step: float  # CUDA: sync debug mode warnings; CPU: trainer.hostsync's count
    sync_calls_per_step: float  # CUDA: cuda*Synchronize / blocking copies seen by the profiler; CPU: nan
    graphs: int  # compiled graphs (dynamo) of the model so far


LAUNCH_APIS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaGraphLaunch",
               "cudaLaunchCooperativeKernel")
SYNC_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


def profile_step(what: str, step: Callable[[int], None], steps: int, dev: torch.device, top_n: int = 20,
                 count_syncs: Callable[[], float] | None = None) -> Profile:
    """torch.profiler over ``steps`` steps: the top kernels by device time, launches and syncs per step."""
    from torch.profiler import ProfilerActivity, profile

    cuda = dev.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        for i in range(steps):
            step(i)
        if cuda:
            torch.cuda.synchronize()
    events = prof.key_averages()
    if cuda:
        kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        key = "self_device_time_total"
    else:
        kernels = [e for e in events if e.key.startswith("aten::")]
        key = "self_cpu_time_total"
    kernels.sort(key=lambda e: getattr(e, key), reverse=True)
    top = [(e.key[:120], getattr(e, key) / 1e3 / steps, round(e.count / steps)) for e in kernels[:top_n]]
    if cuda:
        launches = sum(e.count for e in events if e.key in LAUNCH_APIS) / steps
        blocking = sum(e.count for e in events if e.key in SYNC_APIS) - 1  # less the closing synchronize
        sync_calls = max(0, blocking) / steps
    else:
        launches = sum(e.count for e in events if e.key.startswith("aten::")) / steps
        sync_calls = float("nan")
    syncs = count_syncs() if count_syncs else float("nan")
    graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    return Profile(what, steps, top, launches, syncs, sync_calls, graphs)


def matmul_flops(dev: torch.device, n: int = 8192, calls: int = 10) -> float:
    """Measured dense matmul FLOP/s on the device (bf16 n³ products on CUDA; a small fp32 one on CPU):
    the reachable peak to set beside the spec sheet's."""
    cuda = dev.type == "cuda"
    n = n if cuda else 256
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16 if cuda else torch.float32)
    b = torch.randn_like(a)
    for _ in range(3):
        a @ b
    t = time_calls(lambda: a @ b, calls=calls, sync=torch.cuda.synchronize if cuda else None)
    return 2 * n**3 / t.wall


def peak_note(spec: float | None, measured: float) -> str:
    """The line naming the peak MFU divides by, with the measured matmul rate beside it."""
    spec_s = f"{spec / 1e12:,.0f} TFLOP/s (trainer.metrics.device_peak_flops: the spec sheet's dense bf16, " \
             f"or SHARDFORGE_PEAK_FLOPS)" if spec else "unknown (no MFU)"
    scale = f"; MFU against the measured rate = MFU × {spec / measured:.2f}" if spec else ""
    return (f"MFU divides by the peak {spec_s}. Measured here: {measured / 1e12:.3g} TFLOP/s on dense matmuls "
            f"(bf16 8192³ on a GPU){scale}.")
