"""Benchmark: the trainer on whatever GPU is present, in one run (``bash benchmarks/gpu.sh``).

1. The CUDA-only tests (tests/test_fastpath.py and tests/test_masking.py, ``-k cuda``).
2. Training-step throughput, MFU and peak GPU memory at base and large, seq 512, bf16, for eager and
   ``torch.compile``, masked-only and full LM head, FULL-SENTENCES (full-length rows: the no-mask path)
   and DOC-SENTENCES (variable lengths in token-budget batches, bucketed by length as the loader does:
   the unpadded path). One step = the trainer's step: attention path picked from the host mask,
   forward under autocast, backward, clip 1.0, fused AdamW.
3. HF ``RobertaForMaskedLM`` (SDPA attention) on the same batches, same step: the baseline ratio.
4. Masking time on the device as a share of the step, for all four schemes.
5. Data wait with 4 and 8 DataLoader workers: the trainer itself, streaming the demo corpus from a GCS
   emulator on 127.0.0.1 (``benchmarks/bench_datawait.py``'s harness).

MFU counts useful FLOPs only: the masked-only head's FLOPs (vocabulary projection at the 15% predicted
positions) for both heads, and attention at each sequence's real length. Peak FLOP/s comes from
``trainer.metrics.device_peak_flops`` (``SHARDFORGE_PEAK_FLOPS`` overrides it).

Without a CUDA device the script says so and exits 2. ``--smoke`` runs every part at tiny sizes on the
CPU in about a minute (compile with the ``eager`` dynamo backend, 1 and 2 workers): tests/test_fastpath.py
runs it so that this script cannot rot.

    python benchmarks/bench_gpu.py [--sizes base large] [--steps 10] [--budget-s 840] [--smoke]
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import (  # noqa: E402
    ROOT,
    bench_parser,
    command_line,
    gcs_emulator,
    machine,
    scratch_dir,
    set_gcsfs_env,
    time_calls,
    write_results,
)

set_gcsfs_env()  # before anything imports gcsfs

import numpy as np  # noqa: E402
import torch  # noqa: E402

MASK_RATE = 0.15


@dataclass(frozen=True)
class Setup:
    """Sizes and counts of one run mode."""

    sizes: tuple[str, ...]
    seq: int
    batch: int  # FULL-SENTENCES rows per batch
    tokens: int  # DOC-SENTENCES real-token budget per batch
    vocab: int
    warmup: int
    steps: int
    compile_backend: str
    workers: tuple[int, ...]
    datawait_size: str
    datawait_batch: int
    datawait_steps: int
    docs_per_source: int
    full_batches: int = 4  # distinct batches cycled per configuration
    doc_batches: int = 8


GPU = Setup(sizes=("base", "large"), seq=512, batch=32, tokens=16384, vocab=50265, warmup=3, steps=10,
            compile_backend="inductor", workers=(4, 8), datawait_size="base", datawait_batch=32,
            datawait_steps=20, docs_per_source=120)
SMOKE = Setup(sizes=("tiny",), seq=64, batch=4, tokens=256, vocab=1000, warmup=1, steps=2,
              compile_backend="eager", workers=(1, 2), datawait_size="tiny", datawait_batch=4,
              datawait_steps=4, docs_per_source=20, full_batches=2, doc_batches=3)


# ------------------------------------------------------------------ batches


def _labels(ids: torch.Tensor, mask: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """15% of the real positions (not <s> / </s>) as targets; those inputs become <mask> (id 4)."""
    picked = (torch.rand(ids.shape, generator=g) < MASK_RATE) & mask.bool()
    picked[:, 0] = False
    lengths = mask.sum(1)
    picked[torch.arange(ids.shape[0]), lengths - 1] = False
    labels = torch.where(picked, ids, torch.full_like(ids, -100))
    return torch.where(picked, torch.full_like(ids, 4), ids), labels


def make_batch(lengths: list[int], vocab: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """Right-padded rows `<s> ... </s>` of the given lengths (host tensors)."""
    from schemas import PAD_ID

    B, L = len(lengths), max(lengths)
    ids = torch.randint(5, vocab, (B, L), generator=g)
    mask = (torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]).long()
    ids[:, 0] = 0
    ids[torch.arange(B), torch.tensor(lengths) - 1] = 2
    ids[mask == 0] = PAD_ID
    inputs, labels = _labels(ids, mask, g)
    return {"input_ids": inputs, "attention_mask": mask, "labels": labels}


def full_batches(s: Setup, n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """FULL-SENTENCES: every row is seq tokens."""
    g = torch.Generator().manual_seed(seed)
    return [make_batch([s.seq] * s.batch, s.vocab, g) for _ in range(n)]


def doc_lengths(s: Setup, count: int, rng: np.random.Generator) -> list[int]:
    """DOC-SENTENCES lengths (synthetic): documents longer than seq fill a row (40%); the rest end short."""
    short = rng.integers(s.seq // 8, s.seq, size=count)
    return [s.seq if rng.random() < 0.4 else int(x) for x in short]


def doc_batches(s: Setup, n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """DOC-SENTENCES: a group of samples sorted by length and cut into batches of ~tokens real tokens
    (the loader's length bucketing), each padded to its longest row."""
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    mean = 0.4 * s.seq + 0.6 * (s.seq // 8 + s.seq) / 2
    lengths = sorted(doc_lengths(s, int(n * s.tokens / mean) + n, rng))
    out, cur = [], []
    for length in lengths:
        cur.append(length)
        if sum(cur) >= s.tokens:
            out.append(cur)
            cur = []
    order = rng.permutation(len(out))[:n]  # the loader emits a group's batches in a seeded order
    return [make_batch(out[i], s.vocab, g) for i in order]


# ------------------------------------------------------------------ one measured configuration


@dataclass
class Row:
    size: str
    kind: str  # FULL-SENTENCES | DOC-SENTENCES
    head: str  # masked-only | full head | HF
    mode: str  # eager | compile
    ms: float = math.nan
    tokens_s: float = math.nan
    mfu: float | None = None
    peak_gib: float | None = None
    first_s: float = math.nan  # the warm-up steps, compilation included
    note: str = ""


def useful_flops(dims, batch: dict[str, torch.Tensor]) -> float:
    """Useful training FLOPs of a batch: each row at its real length, LM head at the mask rate."""
    from trainer.model import flops_per_token

    return sum(n * flops_per_token(dims, n, lm_head_fraction=MASK_RATE)
               for n in batch["attention_mask"].sum(1).tolist())


def measure(step: Callable[[int], None], batches: list[dict[str, torch.Tensor]], s: Setup, dev: torch.device,
            dims, peak: float | None, row: Row) -> Row:
    """Warm up (compile) on every batch once, then time s.steps steps cycling over the batches; fill the row.

    Every distinct batch shape is seen before the clock starts, so recompilation for new shapes
    (DOC-SENTENCES: torch marks the changing sizes dynamic) stays out of the timed steps.
    """
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else None
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    for i in range(max(s.warmup, len(batches))):
        step(i % len(batches))
    if sync:
        sync()
    row.first_s = time.perf_counter() - t0
    counter = iter(range(s.steps))
    timed = time_calls(lambda: step(next(counter) % len(batches)), calls=s.steps, sync=sync)
    used = [batches[i % len(batches)] for i in range(s.steps)]
    tokens = sum(int(b["attention_mask"].sum()) for b in used)
    row.ms = timed.wall * 1e3
    row.tokens_s = tokens / (timed.wall * s.steps)
    if peak:
        row.mfu = sum(useful_flops(dims, b) for b in used) / (timed.wall * s.steps) / peak
    if cuda:
        row.peak_gib = torch.cuda.max_memory_allocated(dev) / 2**30
    return row


def ours_step(model: torch.nn.Module, raw: torch.nn.Module, batches: list[dict[str, torch.Tensor]],
              dev: torch.device) -> Callable[[int], None]:
    """The trainer's step on pre-copied batches (the attention path picked from the host mask every step)."""
    from schemas.config import OptimConfig
    from trainer.model import attention_inputs
    from trainer.optim import build_optimizer
    from trainer.precision import Precision

    opt = build_optimizer(raw, OptimConfig())
    prec = Precision("bf16" if dev.type == "cuda" else "fp32", dev)
    on_dev = [{k: v.to(dev) for k, v in b.items()} for b in batches]
    params = list(raw.parameters())

    def step(i: int) -> None:
        kw = attention_inputs(on_dev[i], batches[i]["attention_mask"], dev)
        with prec.autocast():
            out = model(**kw)
        prec.backward(out["loss"])
        prec.step(opt, params, 1.0)
        opt.zero_grad(set_to_none=True)

    return step


def hf_step(model: torch.nn.Module, batches: list[dict[str, torch.Tensor]], dev: torch.device) -> Callable[[int], None]:
    """The same step for transformers' RobertaForMaskedLM (its own loss, full head, padded batches)."""
    from trainer.precision import Precision

    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01,
                            fused=True if dev.type == "cuda" else None)
    prec = Precision("bf16" if dev.type == "cuda" else "fp32", dev)
    on_dev = [{k: v.to(dev) for k, v in b.items()} for b in batches]
    params = list(model.parameters())

    def step(i: int) -> None:
        with prec.autocast():
            loss = model(**on_dev[i]).loss
        prec.backward(loss)
        prec.step(opt, params, 1.0)
        opt.zero_grad(set_to_none=True)

    return step


# ------------------------------------------------------------------ parts


def run_cuda_tests() -> str:
    """The CUDA-only tests; their pytest summary line."""
    cmd = [sys.executable, "-m", "pytest", "tests/test_fastpath.py", "tests/test_masking.py", "-k", "cuda", "-q",
           "-p", "no:cacheprovider", "-W", "ignore::UserWarning"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=420)
    lines = [x for x in proc.stdout.strip().splitlines() if x.strip()]
    summary = lines[-1] if lines else proc.stderr.strip()[-300:]
    print(f"CUDA tests: {summary}", flush=True)
    if proc.returncode != 0:
        print(proc.stdout[-4000:], flush=True)
    return summary


def throughput(s: Setup, dev: torch.device, deadline: float, mode: str, enabled: bool = True) -> list[Row]:
    """Every (size, batch kind, head) row of one mode (eager: with the HF baseline; compile: ours only)."""
    from schemas.config import ModelConfig
    from trainer.metrics import device_peak_flops
    from trainer.model import Encoder
    from trainer.precision import maybe_compile

    peak = device_peak_flops(torch.cuda.get_device_name(dev) if dev.type == "cuda" else None)
    kinds = {"FULL-SENTENCES": full_batches(s, s.full_batches), "DOC-SENTENCES": doc_batches(s, s.doc_batches)}
    heads = ("masked-only", "full head", "HF") if mode == "eager" else ("masked-only", "full head")
    rows: list[Row] = []
    for size, kind, head in [(size, kind, head) for size in s.sizes for kind in kinds for head in heads]:
        row = Row(size, kind, head, mode)
        rows.append(row)
        if not enabled:
            row.note = f"not run: --no-{mode}"
            continue
        if time.monotonic() > deadline:
            row.note = "not run: time budget (--budget-s)"
            print(f"  {size} {kind} {head} {mode}: skipped (time budget)", flush=True)
            continue
        torch.manual_seed(0)
        cfg = ModelConfig(size=size, masked_only_head=head != "full head")
        raw = Encoder(cfg, s.vocab).to(dev)
        dims = raw.dims
        try:
            if head == "HF":
                from benchmarks.bench_model import hf_roberta

                del raw
                hf = hf_roberta(dims, 0.1).to(dev)
                measure(hf_step(hf, kinds[kind], dev), kinds[kind], s, dev, dims, peak, row)
                del hf
            else:
                model = maybe_compile(raw, mode == "compile", dev, backend=s.compile_backend)
                measure(ours_step(model, raw, kinds[kind], dev), kinds[kind], s, dev, dims, peak, row)
                del model, raw
        except torch.OutOfMemoryError:
            row.note = "out of GPU memory"
        except Exception as e:  # one configuration failing must not lose the others' numbers
            traceback.print_exc()
            row.note = f"failed: {error_line(e, 160)}"
        finally:
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            torch._dynamo.reset()
        mfu = f"{row.mfu:.1%}" if row.mfu is not None else "n/a"
        print(f"  {size} {kind} {head} {mode}: {row.ms:.1f} ms/step, {row.tokens_s:,.0f} tok/s, MFU {mfu}, "
              f"first steps {row.first_s:.1f} s {row.note}", flush=True)
    return rows


# aten ops that copy a value to the host (a CUDA sync) or size their output by the data
HOST_SYNC_OPS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique2",
                           "unique_consecutive", "repeat_interleave"})


def count_ops(fn: Callable[[], object]) -> tuple[int, int]:
    """(aten ops dispatched, of which host syncs) by one call of fn: on a GPU each op is at least one
    kernel launch, so a call of many small ops is bound by launches, not arithmetic."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        ops = syncs = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.ops += 1
            Count.syncs += func.overloadpacket.__name__ in HOST_SYNC_OPS
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return Count.ops, Count.syncs


class MaskingRow(NamedTuple):
    scheme: str
    ms: float  # per FULL batch on the device
    share: float  # of masking + step
    ops: int  # aten ops per call (count_ops)
    syncs: int  # of which host syncs


def masking_shares(s: Setup, dev: torch.device, step_ms: float) -> list[MaskingRow]:
    """One row per masking scheme (all four)."""
    from benchmarks.bench_masking import SPECIAL_IDS, make_vocab
    from schemas import MASK_ID, PAD_ID
    from schemas.config import MaskingConfig
    from trainer.masking import Masker, word_start_table

    pieces = make_vocab(s.vocab, np.random.default_rng(0))
    ws = word_start_table(pieces, SPECIAL_IDS)
    host = full_batches(s, 1)[0]["input_ids"]
    ids, sids = host.to(dev), torch.arange(host.shape[0], device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    out = []
    for scheme in ("token", "whole_word", "span", "ngram"):
        m = Masker(MaskingConfig(scheme=scheme), s.vocab, SPECIAL_IDS, MASK_ID, PAD_ID, ws).to(dev)
        for _ in range(2):
            m(ids, sids, epoch=0, seed=0)
        t = time_calls(lambda m=m: m(ids, sids, epoch=0, seed=0), calls=max(s.steps, 5), sync=sync)
        ms = t.wall * 1e3
        ops, syncs = count_ops(lambda m=m: m(ids, sids, epoch=0, seed=0))
        out.append(MaskingRow(scheme, ms, ms / (ms + step_ms), ops, syncs))
        print(f"  masking {scheme}: {ms:.2f} ms/batch, {ms / (ms + step_ms):.2%} of the step, {ops} aten ops "
              f"({syncs} host syncs)", flush=True)
    return out


def data_wait(s: Setup, dev: torch.device) -> list[tuple[int, dict[str, float]]]:
    """The trainer streaming from the GCS emulator with each worker count: data-wait share of the step."""
    from benchmarks.bench_datawait import corpus_on_emulator, run

    rows = []
    with scratch_dir("sf-gpu-datawait-") as work, gcs_emulator():
        _, remote = corpus_on_emulator(str(work), docs_per_source=s.docs_per_source, max_seq_len=s.seq)
        for workers in s.workers:
            r = run(remote, str(work / f"run-{workers}"), s.datawait_size, s.datawait_steps, workers,
                    s.datawait_batch, device=dev.type, compile=False)
            rows.append((workers, r))
            print(f"  data wait, {workers} workers: {r['wait_share']:.2%} (max {r['max_wait_share']:.2%}), "
                  f"{r['tokens_per_s']:,.0f} tok/s", flush=True)
    return rows


# ------------------------------------------------------------------ report


def error_line(e: BaseException, width: int) -> str:
    """An exception as one short line for a table: its type and the first line of its message."""
    first = str(e).splitlines()[0][:width] if str(e) else ""
    return f"{type(e).__name__}: {first}"


def guarded(part: str, fn: Callable[[], list], failures: list[str]) -> list:
    """fn()'s result; [] if it raised (its traceback printed, the failure noted for the report): a part
    failing on a lent GPU (an API the device's torch or transformers lacks) must not lose the other parts."""
    try:
        return fn()
    except Exception as e:
        traceback.print_exc()
        failures.append(f"{part}: {error_line(e, 200)}")
        print(f"  {part} FAILED: {failures[-1]}", flush=True)
        return []


def fmt(x: float | None, spec: str, missing: str = "n/a") -> str:
    return missing if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def report(s: Setup, smoke: bool, dev: torch.device, tests: str, rows: list[Row],
           masking: list[MaskingRow], waits: list[tuple[int, dict[str, float]]], wall: float,
           failures: list[str] = ()) -> list[str]:
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "none (CPU smoke run)"
    lines = ["# The trainer on a GPU", "",
             f"Machine: {machine(torch_details=True)}. Device: **{gpu}**.", "",
             f"Command: `{command_line()}` ({wall / 60:.1f} min).", ""]
    if smoke:
        lines += ["**smoke mode**: tiny sizes on the CPU, compile with the `eager` dynamo backend; these "
                  "numbers only show that every part of the script runs.", ""]
    lines += ["## CUDA-only tests", "", f"`pytest tests/test_fastpath.py tests/test_masking.py -k cuda`: {tests}", ""]
    lines += [f"## Training step: seq {s.seq}, {'bf16' if dev.type == 'cuda' else 'fp32'}, AdamW "
              f"({'fused' if dev.type == 'cuda' else 'for-loop on CPU'}), clip 1.0",
              "",
              f"FULL-SENTENCES: {s.batch} × {s.seq} full rows (no-mask path). DOC-SENTENCES: ~{s.tokens} real "
              "tokens per batch, synthetic lengths (40% full rows, the rest uniform in "
              f"[{s.seq // 8}, {s.seq})), bucketed by length like the loader (unpadded path). "
              "Warm-up: every batch once (at least "
              f"{s.warmup} steps; compilation included: 'first steps'), then {s.steps} timed steps. "
              "tokens/s counts real tokens; MFU counts useful FLOPs only (LM head at the 15% predicted "
              "positions for both heads, attention at real lengths); peak memory is "
              "`torch.cuda.max_memory_allocated`. × HF: tokens/s over HF's on the same batches.", "",
              "| size | batches | head | mode | ms / step | tokens / s | MFU | peak memory GiB | first steps s | "
              "× HF | note |",
              "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    hf = {(r.size, r.kind): r.tokens_s for r in rows if r.head == "HF"}
    for r in rows:
        base = hf.get((r.size, r.kind), math.nan)
        ratio = r.tokens_s / base if r.head != "HF" and base == base and base else math.nan
        head = "HF RobertaForMaskedLM (sdpa)" if r.head == "HF" else r.head
        lines.append(f"| {r.size} | {r.kind} | {head} | {r.mode} | {fmt(r.ms, '.1f', '—')} | "
                     f"{fmt(r.tokens_s, ',.0f', '—')} | {fmt(r.mfu, '.1%')} | {fmt(r.peak_gib, '.1f')} | "
                     f"{fmt(r.first_s, '.1f', '—')} | {fmt(ratio, '.2f', '—')} | {r.note} |")
    lines += ["", "## Masking on the device, as a share of the step", "",
              f"One FULL-SENTENCES batch ({s.batch} × {s.seq}); share = masking / (masking + the fastest "
              f"{s.sizes[0]} FULL-SENTENCES masked-only step).", "",
              "| scheme | ms / batch | share of step | aten ops / call | of which host syncs |",
              "|---|---:|---:|---:|---:|"]
    lines += [f"| {m.scheme} | {m.ms:.2f} | {m.share:.2%} | {m.ops} | {m.syncs} |" for m in masking]
    lines += ["", "## Data wait (the trainer streaming shards from the GCS emulator on 127.0.0.1)", "",
              f"`trainer.train` at size {s.datawait_size}, batch {s.datawait_batch} × up to {s.seq}, "
              f"{s.datawait_steps} steps (eager; the first 2 steps, worker start-up, left out).", "",
              "| DataLoader workers | mean data wait / step | max | median step s | tokens / s |",
              "|---:|---:|---:|---:|---:|"]
    lines += [f"| {w} | {r['wait_share']:.2%} | {r['max_wait_share']:.2%} | {r['step_s']:.3f} | "
              f"{r['tokens_per_s']:,.0f} |" for w, r in waits]
    if failures:
        lines += ["", "## Parts that failed (traceback in the run's output)", ""] + [f"- {f}" for f in failures]
    lines += ["", "## Against the targets", ""]
    lines += ["Not judged: a smoke run measures nothing."] if smoke else targets(s, rows, masking, waits)
    return lines


def targets(s: Setup, rows: list[Row], masking: list[MaskingRow],
            waits: list[tuple[int, dict[str, float]]]) -> list[str]:
    """The four targets (MFU, DOC-SENTENCES speed, masking share, data wait), each met / missed / not measured."""
    size = "base" if "base" in s.sizes else s.sizes[0]
    ours = [r for r in rows if r.size == size and r.head == "masked-only" and r.tokens_s == r.tokens_s]
    full = [r for r in ours if r.kind == "FULL-SENTENCES"]
    doc = [r for r in ours if r.kind == "DOC-SENTENCES"]
    out = []
    best_mfu = max((r.mfu for r in full if r.mfu is not None), default=None)
    out.append(f"- MFU ≥ 50% at {size}/{s.seq}/bf16: " + (f"{best_mfu:.1%}: **{'met' if best_mfu >= 0.5 else 'missed'}**"
                                                          if best_mfu is not None else "not measured (peak unknown)"))
    if full and doc:
        f, d = max(r.tokens_s for r in full), max(r.tokens_s for r in doc)
        out.append(f"- DOC-SENTENCES within 10% of FULL-SENTENCES tokens/s: {d / f:.2f}×: "
                   f"**{'met' if d >= 0.9 * f else 'missed'}**")
    if masking:
        worst = max(m.share for m in masking)
        out.append(f"- masking < 2% of a step (worst scheme): {worst:.2%}: **{'met' if worst < 0.02 else 'missed'}**")
    w4 = [r for w, r in waits if w == 4]
    if w4:
        out.append(f"- data wait < 1% with 4 workers: {w4[0]['wait_share']:.2%}: "
                   f"**{'met' if w4[0]['wait_share'] < 0.01 else 'missed'}**")
    return out


def main() -> int:
    ap = bench_parser(__doc__, "gpu")
    ap.add_argument("--smoke", action="store_true", help="Tiny sizes on the CPU: check that every part runs.")
    ap.add_argument("--sizes", nargs="+", help="Model sizes (default: base large; smoke: tiny).")
    ap.add_argument("--steps", type=int, help="Timed steps per configuration.")
    ap.add_argument("--budget-s", type=float, default=720.0,
                    help="Start no new configuration after this many seconds (the compiled rows come last; "
                         "one started before the budget ends still finishes: the whole run stays under 15 min).")
    ap.add_argument("--no-compile", action="store_true", help="Leave out the torch.compile rows.")
    ap.add_argument("--no-tests", action="store_true", help="Leave out the CUDA-only tests.")
    args = ap.parse_args()
    if not args.smoke and not torch.cuda.is_available():
        print("bench_gpu: no CUDA device on this machine (torch.cuda.is_available() is False): nothing "
              "measured. Run `bash benchmarks/gpu.sh` on a GPU machine, or `--smoke` for the CPU check.",
              file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    s = SMOKE if args.smoke else GPU
    if args.sizes:
        s = replace(s, sizes=tuple(args.sizes))
    if args.steps:
        s = replace(s, steps=args.steps)
    dev = torch.device("cpu") if args.smoke else torch.device("cuda", 0)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    t0 = time.monotonic()
    deadline = t0 + args.budget_s
    tests = "not run (smoke mode: no GPU)" if args.smoke else "not run (--no-tests)" if args.no_tests \
        else run_cuda_tests()
    print(f"training steps on {dev} (eager):", flush=True)
    rows = throughput(s, dev, deadline, "eager")
    ref = [r.ms for r in rows if r.size == s.sizes[0] and r.kind == "FULL-SENTENCES" and r.head == "masked-only"
           and r.ms == r.ms]
    failures: list[str] = []
    masking = guarded("masking", lambda: masking_shares(s, dev, min(ref)), failures) if ref else []
    waits = guarded("data wait", lambda: data_wait(s, dev), failures)
    print(f"training steps on {dev} (torch.compile, backend {s.compile_backend}):", flush=True)
    rows += throughput(s, dev, deadline, "compile", enabled=not args.no_compile)
    lines = report(s, args.smoke, dev, tests, rows, masking, waits, time.monotonic() - t0, failures)
    print("\n".join(lines))
    write_results(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
