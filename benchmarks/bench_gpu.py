"""Benchmark: the trainer on whatever GPU is present, in one run (``bash benchmarks/gpu.sh``).

Parts (FULL_PLAN and QUICK_PLAN give their priority order; a part starts only while its estimated time
fits in the mode's limit, at the pace of the parts so far on a device slower than the H200 the estimates
come from; the report is rewritten after every part, so a run cut short keeps what it
measured):

1. The CUDA-only tests (tests/test_fastpath.py, tests/test_masking.py, tests/test_mask_ahead.py, ``-k cuda``;
   the fused masker's CUDA checks, bit-identity and kernel count, run in part 4 instead of compiling its
   schemes twice).
2. Training-step throughput, MFU and peak GPU memory at base and large, seq 512, bf16: eager and
   ``torch.compile`` (also with CUDA graphs, ``reduce-overhead``, and with the compiled AdamW step),
   masked-only and full LM head, FULL-SENTENCES (full-length rows: the no-mask path) and DOC-SENTENCES
   (variable lengths in token-budget batches, bucketed by length as the loader does: the unpadded path;
   compiled rows bucket their shapes as trainer.batch does and count dynamo's graphs); each lever's row is set
   against the row it changes in the report (× tokens/s, MFU, memory). One step = the trainer's step:
   attention path picked from the host mask, forward under autocast with the predicted positions' static
   bound, backward, clip 1.0, fused AdamW.
3. HF ``RobertaForMaskedLM`` (SDPA attention) on the same batches, same step: the baseline ratio.
4. Masking on the device for all four schemes, the reference ops against the fused (compiled) masker:
   time, share of the eager and compiled step, launches per call, bit-identity with the CPU reference;
   and masking's share of the base eager and compiled steps (the rows' own models, kept for it) as the
   trainer's loop runs them, masking ahead on a side stream off and on (``masking_overlap``).
5. The micro-batch sweep: the compiled base step at 32..256 rows × 512 per micro-batch, gradient
   accumulation keeping a global batch of 256 rows per optimizer step.
6. Profiles (torch.profiler) of the eager and compiled base steps: top kernels by GPU time, kernel launches
   per step, host syncs per step (torch.cuda.set_sync_debug_mode), in the report.
7. Data wait with 4 and 8 DataLoader workers: the trainer itself, streaming the demo corpus from a GCS
   emulator on 127.0.0.1 (``benchmarks/bench_datawait.py``'s harness).

The warm pool (``benchmarks/gpu_warm.py``, ``--warm auto|on|off``): the compiled rows and the fused maskers
are compiled first, in subprocesses side by side while the CUDA tests run, into inductor's caches; nothing is
timed until the pool is done, and each row's own compile then loads its graphs from the caches.

Modes: the full run fits in 8 minutes (``gpu.sh``'s limit): on an H200 with a cold compile cache that is the
tests, every base and large eager row with HF's, the base compiled FULL-SENTENCES row with its profile and
sweep, masking, the data wait, base DOC-SENTENCES compiled, large compiled by layers and two levers' eager rows
(cuDNN attention, no attention dropout); ``--rest`` (a second call, 8 minutes too) runs what that leaves out
(the compiled levers: CUDA graphs, compiled AdamW, cuDNN attention, no dropout, no attention dropout; no
dropout eager, large eager with activation checkpointing (its peak memory and tokens/s against large eager's),
the large whole model, full head; ``--rest --sizes large`` the large ones): each whole-model
compile takes 1.5-4 minutes cold. The dropout levers change the recipe (RoBERTa's 0.1): ModernBERT trains
without dropout, MosaicBERT without it on the attention probabilities; their rows are listed beside the MFU
target, never taken as its best row. ``--plan`` lists a mode's parts with their expected seconds and which
fit, running nothing.
``--quick`` fits in 4 (base only: eager and compiled FULL-SENTENCES, masking, two sweep points, profiles; no
tests, no data wait); ``--dry-run`` (alias ``--smoke``) runs every part at tiny sizes on the CPU in about two
minutes (compile with the ``eager`` dynamo backend, fused masking with inductor's C++ for one scheme): run it
before spending GPU time.

MFU counts useful FLOPs only: the masked-only head's FLOPs (vocabulary projection at the 15% predicted
positions) for both heads, and attention at each sequence's real length. Peak FLOP/s comes from
``trainer.metrics.device_peak_flops`` (``SHARDFORGE_PEAK_FLOPS`` overrides it).

Without a CUDA device (and without ``--dry-run``) the script says so and exits 2.

    python benchmarks/bench_gpu.py [--quick | --rest | --dry-run] [--plan] [--sizes base large] [--steps 10]
                                   [--limit-s 465]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import math
import os
import signal
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import NamedTuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import (  # noqa: E402
    ROOT,
    bench_parser,
    gcs_emulator,
    scratch_dir,
    set_gcsfs_env,
    time_calls,
    write_results,
)

set_gcsfs_env()  # before anything imports gcsfs

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.gpu_report import Results, changes_recipe, report  # noqa: E402

MASK_RATE = 0.15
F, D = "FULL-SENTENCES", "DOC-SENTENCES"
# The parts in priority order: a row (size, batches, head, mode) or a named part. A part starts only while its
# expected cost (``part_cost``) fits in the mode's limit, so a part too dear for the time left is passed over
# and the cheaper ones after it still run. First what the targets are judged on (the tests, the base and large
# rows eager and compiled with HF's beside them, masking, the data wait; the large model compiled by layers,
# whose compile is a block's, not 24 layers'), then the levers. The compiled rows are compiled side by side
# beforehand while the tests run (the warm pool); on an H200 the full run's 8 minutes hold everything up to
# the levers' eager rows and the two by-layers rows; the whole-model compiles of the levers and of large are
# ``--rest``'s.
FULL_PLAN = ("tests", ("base", F, "masked-only", "eager"), ("base", F, "HF", "eager"),
             ("base", F, "masked-only", "compile"), "masking", ("base", D, "masked-only", "eager"),
             ("base", D, "HF", "eager"), ("large", F, "masked-only", "eager"), ("large", D, "masked-only", "eager"),
             "datawait", ("base", D, "masked-only", "compile"), ("large", F, "masked-only", "compile by layers"),
             ("base", F, "masked-only", "compile by layers"), ("base", F, "masked-only", "eager+cuDNN attention"),
             ("large", F, "HF", "eager"), ("large", D, "HF", "eager"),
             ("base", F, "masked-only", "eager+no attention dropout"), ("base", F, "masked-only", "eager+no dropout"),
             ("base", F, "full head", "eager"),
             ("base", F, "masked-only", "compile+cudagraphs"), ("base", F, "masked-only", "compile+compiled AdamW"),
             ("base", F, "masked-only", "compile+cuDNN attention"), ("base", F, "masked-only", "compile+no dropout"),
             ("base", F, "masked-only", "compile+no attention dropout"), ("large", F, "masked-only", "compile"),
             ("large", D, "masked-only", "compile"), ("base", F, "full head", "compile"),
             ("large", F, "masked-only", "eager+activation checkpointing"))
QUICK_PLAN = (("base", F, "masked-only", "eager"), ("base", F, "HF", "eager"),
              ("base", F, "masked-only", "compile"), "masking", ("base", D, "masked-only", "eager"))
# Seconds a part took on an H200 (16 vCPUs, inductor's cache cold; first full run, 2026-12-04), a little
# rounded up: compiles dominate (base 82 s of first steps, large 175, base DOC-SENTENCES 108: its shapes).
# masking: masking ahead off and on (~10 s), then the four schemes' fused compiles (1-13 s each).
COST = {"tests": 75, "masking": 60, "datawait": 50, "eager": 10, "compile": 90, "sweep": 40}
SIZE_COST = {"eager": 1.5, "compile": 2.1}  # large over base
DOC_COMPILE = 1.3  # DOC-SENTENCES compiles a graph per dynamic-shape bucket
# compile_scope layers compiles one block, not every layer: a guess until a GPU run measures it (large's
# layer is no dearer to compile than base's).
BY_LAYERS = 0.4
# The warm pool (benchmarks/gpu_warm.py) compiles the run's compiled rows side by side while the tests run.
# Guesses until a GPU run measures them (its report gives each warm process's seconds and each row's first
# steps): a row whose graphs are in inductor's caches takes WARM of its cold cost (dynamo's trace, the
# caches' loads; 0.10 on the CPU with inductor's C++); WARM_SLOTS compiles at a time on the H200's 16-vCPU
# host, each CROWDED times slower than alone; of the masking part, MASKING_COMPILE s are its fused compiles.
WARM, WARM_SLOTS, CROWDED, MASKING_COMPILE = 0.25, 4, 1.25, 30


def sweep_cost(s: Setup) -> float:
    """Expected seconds of the micro-batch sweep (COST's is for four points; one recompile for the sizes)."""
    return COST["sweep"] * len(s.sweep) / 4 * s.scale


def part_cost(item: str | tuple[str, str, str, str], warmed: bool = False) -> float:
    """Expected seconds of a plan item on an H200 (before the mode's scale); ``warmed``: its compiles made by
    the warm pool beforehand."""
    if warmed:
        return part_cost(item) - warm_cost(item) * (1 - WARM)
    if isinstance(item, str):
        return COST[item]
    size, kind, _, mode = item
    if "by layers" in mode:
        return COST["compile"] * BY_LAYERS
    how = "compile" if mode.startswith("compile") else "eager"
    cost = COST[how] * (SIZE_COST[how] if size == "large" else 1.0)
    return cost * DOC_COMPILE if how == "compile" and kind == D else cost


def warmable(item: str | tuple[str, str, str, str]) -> bool:
    """Whether the warm pool can compile a plan item ahead: a compiled row of ours, or the fused masking."""
    return item == "masking" or (isinstance(item, tuple) and item[3].startswith("compile") and item[2] != "HF")


def warm_cost(item: str | tuple[str, str, str, str]) -> float:
    """Expected seconds of an item's compiles alone (before the mode's scale): what the pool takes off it."""
    return MASKING_COMPILE if item == "masking" else part_cost(item)


# Modules every part imports, and those of single parts (a part whose modules are missing is not run).
CORE_MODULES = ("pydantic", "webdataset", "yaml", "safetensors")
PART_MODULES = {"tests": ("pytest", "hypothesis"), "datawait": ("apache_beam", "gcsfs", "gcp_storage_emulator"),
                "HF": ("transformers",)}
NO_PACKAGES_HINT = ("install shardforge's packages (bash scripts/setup.sh); on a GPU machine without a package "
                    "registry, run `bash benchmarks/gpu_wheels.sh` where pip works and send .whl/ along: gpu.sh "
                    "installs the missing ones")


def lacking(modules: tuple[str, ...]) -> list[str]:
    """The modules of ``modules`` this interpreter cannot import (not found on its path)."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


@dataclass(frozen=True)
class Setup:
    """Sizes, counts and the plan of one run mode."""

    mode: str  # full | quick | dry-run
    plan: tuple
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
    sweep: tuple[int, ...]  # rows per micro-batch
    global_batch: int  # rows per optimizer step in the sweep
    limit_s: float  # the whole run (gpu.sh kills it a little later)
    fused_compile: tuple[str, ...] = ("token", "whole_word", "span", "ngram")  # schemes the fused masker compiles
    # The warm pool (compile the compiled rows side by side beforehand): auto, the plan that starts more parts
    # (with nothing to run beside it, the pool is a wait); on; off.
    warm: str = "auto"
    full_batches: int = 4  # distinct batches cycled per configuration
    layers: int | None = None  # every model's layer count (None: its size's); tests compile a one-layer model
    doc_batches: int = 8
    scale: float = 1.0  # COST multiplier
    # The fused masker's CUDA test is left out: the masking part checks the same on the device in-process.
    tests_k: str = "cuda and not fused"
    test_files: str = ("tests/test_fastpath.py tests/test_masking.py tests/test_fused_masking.py "
                       "tests/test_mask_ahead.py")


GPU = Setup(mode="full", plan=FULL_PLAN, sizes=("base", "large"), seq=512, batch=32, tokens=16384, vocab=50265,
            warmup=3, steps=10, compile_backend="inductor", workers=(4, 8), datawait_size="base", datawait_batch=32,
            datawait_steps=20, docs_per_source=120, sweep=(32, 64, 128, 256), global_batch=256, limit_s=465)
QUICK = replace(GPU, mode="quick", plan=QUICK_PLAN, sizes=("base",), steps=6, sweep=(64, 256), limit_s=225)
DRY = Setup(mode="dry-run", plan=tuple(dict.fromkeys(x if isinstance(x, str) else ("tiny", *x[1:]) for x in FULL_PLAN)),
            sizes=("tiny",), seq=64, batch=4, tokens=256, vocab=1000, warmup=1, steps=2, compile_backend="eager",
            workers=(1, 2), datawait_size="tiny", datawait_batch=4, datawait_steps=4, docs_per_source=20,
            sweep=(1, 2, 4), global_batch=4, limit_s=300, fused_compile=("token",), full_batches=2, doc_batches=3,
            scale=0.1, warm="off")


def setup_from_json(data: dict) -> Setup:
    """A Setup from its ``asdict`` as JSON (a warm process gets its run's): JSON's lists back to tuples."""
    def tuples(x):  # noqa: ANN001, ANN202
        return tuple(tuples(y) for y in x) if isinstance(x, list) else x

    return Setup(**{k: tuples(v) for k, v in data.items()})


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
    graphs: int | None = None  # dynamo graphs compiled for the row (compiled rows)


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
    if "compile" in row.mode:
        row.graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    return row


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


def run_cuda_tests(s: Setup, timeout: float) -> str:
    """The CUDA-only tests; their pytest summary line."""
    cmd = [sys.executable, "-m", "pytest", *s.test_files.split(), "-k", s.tests_k, "-q", "-p", "no:cacheprovider",
           "-W", "ignore::UserWarning"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"stopped after {timeout:.0f} s (time limit)"
    lines = [x for x in proc.stdout.strip().splitlines() if x.strip()]
    summary = lines[-1] if lines else proc.stderr.strip()[-300:]
    print(f"CUDA tests: {summary}", flush=True)
    if proc.returncode != 0:
        print(proc.stdout[-4000:], flush=True)
    return summary


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


def error_line(e: BaseException, width: int) -> str:
    """An exception as one short line for a table: its type and the first line of its message."""
    first = str(e).splitlines()[0][:width] if str(e) else ""
    return f"{type(e).__name__}: {first}"


class Bench:
    """One run: its setup, device and clock, what it measured so far (``res``), written after every part."""

    def __init__(self, s: Setup, dev: torch.device, out: str) -> None:
        from trainer.metrics import device_peak_flops

        self.s, self.dev, self.out = s, dev, out
        self.clock = time.monotonic
        self.t0 = self.clock()
        # The timed parts' (expected s, taken s) so far, and the one running (its start, expected s): the pace.
        self.paced: list[tuple[float, float]] = []
        self.running: tuple[float, float] | None = None
        name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else None
        self.peak = device_peak_flops(name)
        self.res = Results(s.mode, name or "none (CPU dry run)")
        self.kinds = {F: full_batches(s, s.full_batches), D: doc_batches(s, s.doc_batches)}
        self.ms: dict[tuple[str, str], float] = {}  # (size, mode) -> the FULL masked-only step
        self.warmed: dict[str, object] = {}  # item name -> gpu_warm.Warmed, those the pool compiled
        # mode -> (what the loop calls, the Encoder) of those steps, kept for the masking part
        self.kept: dict[str, tuple[torch.nn.Module, torch.nn.Module]] = {}

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def fits(self, what: str, cost: float, timed: bool = True) -> bool:
        """Whether a part expected to take ``cost`` s (scaled) still fits in the limit at this device's pace;
        noted when not. A ``timed`` part that starts is timed against its cost, for the pace of those after it
        (a gate over parts timed one by one, like the sweep's, is not)."""
        self.part_done()
        expect = cost * self.s.scale
        pace = self.pace()
        if self.elapsed() + expect * pace <= self.s.limit_s:
            if timed:
                self.running = (self.clock(), expect)
            return True
        at_pace = f" ({expect:.0f} s expected × {pace:.2f}, the pace of the parts so far)" if pace > 1 else ""
        self.res.skipped.append(f"{what}: not started, {expect * pace:.0f} s{at_pace} would pass the "
                                f"{self.s.limit_s:.0f} s limit at {self.elapsed():.0f} s")
        print(f"  {what}: skipped (time limit)", flush=True)
        return False

    def part_done(self) -> None:
        """The running part's time taken, against its expected seconds."""
        if self.running is not None:
            start, expect = self.running
            self.paced.append((expect, self.clock() - start))
            self.running = None

    def pace(self) -> float:
        """How many times their expected seconds the timed parts so far took, at least 1: the costs are an
        H200's, and on a slower device (or with a guess too low) the parts after them are planned at the pace
        measured, so that none starts that would pass the limit (gpu.sh kills it there, and it measures
        nothing). Faster than expected plans nothing bolder: the costs are rounded up on purpose."""
        expect, took, _ = self.pace_totals()
        return max(1.0, took / expect) if expect > 0 else 1.0

    def pace_totals(self) -> tuple[float, float, int]:
        """The timed parts so far: (expected seconds, seconds taken, how many)."""
        return sum(e for e, _ in self.paced), sum(t for _, t in self.paced), len(self.paced)

    def save(self) -> None:
        from trainer.batch import CHOICES

        self.res.pace = self.pace_totals()
        self.res.attention = sorted(str(c) for c in CHOICES)
        write_results(self.out, report(self.s, self.res, self.elapsed()))

    def guarded(self, part: str, fn: Callable[[], object]) -> object:
        """fn()'s result, None if it raised (traceback printed, failure noted): one part failing on a lent
        GPU (an API the device's torch lacks) must not lose the others."""
        try:
            return fn()
        except Exception as e:
            traceback.print_exc()
            self.res.failures.append(f"{part}: {error_line(e, 200)}")
            print(f"  {part} FAILED: {self.res.failures[-1]}", flush=True)
            return None

    def run(self) -> None:
        from benchmarks.gpu_levers import matmul_flops, peak_note

        self.res.matmul = self.guarded("matmul peak", lambda: matmul_flops(self.dev)) or math.nan
        self.res.peak = self.peak
        self.res.peak_note = peak_note(self.peak, self.res.matmul) if self.res.matmul == self.res.matmul else ""
        pool = self.guarded("warm pool", self.start_pool)  # after the matmul's timing: nothing runs beside that
        for item in self.s.plan:
            if pool is not None and item != "tests":
                self.join_pool(pool)
                pool = None
            need = lacking(PART_MODULES.get(item if isinstance(item, str) else item[2], ()))
            if need:
                what = item if isinstance(item, str) else " ".join(item)
                self.res.skipped.append(f"{what}: not run, missing Python packages ({', '.join(need)}): "
                                        f"{NO_PACKAGES_HINT}")
                print(f"  {what}: skipped (missing {', '.join(need)})", flush=True)
                if item == "tests":
                    self.res.tests = f"not run (missing {', '.join(need)})"
                self.save()
                continue
            if item == "tests":
                if self.fits("CUDA tests", COST["tests"], timed=False):
                    left = self.s.limit_s - self.elapsed() - 60
                    # Beside the pool the tests share the CPUs; the timed parts wait for the pool anyway.
                    room = COST["tests"] * 1.4 if pool is None else max(COST["tests"] * 1.4, pool.expected)
                    self.res.tests = run_cuda_tests(self.s, min(room, left))
            elif item == "masking":
                if self.fits("masking", part_cost("masking", warmed="masking" in self.warmed)):
                    self.res.masking = self.guarded("masking", self.masking) or []
                    if "masking" in self.warmed:
                        self.res.masking_note = (f"The fused maskers were compiled beforehand in "
                                                 f"{self.warmed['masking'].seconds:.1f} s; here: {cache_counts()}.")
                self.kept.clear()
            elif item == "datawait":
                if self.fits("data wait", COST["datawait"]):
                    self.res.waits = self.guarded("data wait", lambda: data_wait(self.s, self.dev)) or []
            else:
                self.row(*item)
            self.part_done()  # the next item may wait for the warm pool first: not this part's time
            self.save()
        if pool is not None:
            self.join_pool(pool)

    def start_pool(self) -> object:
        """The warm pool for the items ``expected`` warms (None when there are none): started, the logs in a
        scratch folder."""
        import tempfile

        from benchmarks.gpu_warm import WarmPool, makespan, pool_slots, warm_argv

        plan = expected(self.s)
        warmed, costs = [p.item for p in plan if p.warmed], pool_costs(self.s, plan)
        if not warmed:
            return None
        script = Path(__file__).resolve()
        jobs = [(item_name(item), warm_argv(script, {"setup": asdict(self.s), "item": item}), cost)
                for item, cost in zip(warmed, costs, strict=True)]
        slots = pool_slots(os.cpu_count() or 1, WARM_SLOTS)
        env = dict(os.environ)
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(max(1, (os.cpu_count() or 1) // slots)))
        print(f"warm pool: compiling {len(jobs)} part(s), {slots} at a time, beside the tests", flush=True)
        return WarmPool(jobs, slots, Path(tempfile.mkdtemp(prefix="sf-gpu-warm-")), env,
                        expected=makespan(costs, slots) * CROWDED).start()

    def join_pool(self, pool) -> None:  # noqa: ANN001 - gpu_warm.WarmPool
        """Wait for the pool, then stop what is left a minute before the limit (a part not compiled by then
        would compile in its turn, dearer than the rest of its wait); the compiled items cost their warm price
        from here on."""
        t0 = time.monotonic()
        done = pool.wait(self.s.limit_s - 60 - self.elapsed())
        self.res.warm = done
        self.res.warm_wait = (pool.elapsed(), time.monotonic() - t0, pool.slots, pool.expected)
        self.warmed = {w.item: w for w in done if w.state == "compiled"}
        for w in done:
            print(f"  warm {w.item}: {w.state} in {w.seconds:.1f} s {w.note}", flush=True)
        self.save()

    def build(self, size: str, kind: str, head: str, mode: str) -> tuple:
        """One row's (step, model, raw Encoder, its dims, attention): the model built (seed 0), compiled as
        the mode says, and the trainer's step over the kind's batches; for HF, its model and step (raw
        None)."""
        from benchmarks.gpu_levers import build_step
        from schemas.config import ModelConfig
        from trainer.model import Encoder
        from trainer.precision import maybe_compile

        s, dev = self.s, self.dev
        torch.manual_seed(0)
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()  # graphs are counted per row
        batches = self.kinds[kind]
        # The dropout levers: none at all (ModernBERT's recipe), or none on the attention probabilities
        # (MosaicBERT's); every other row keeps RoBERTa's 0.1.
        cfg = ModelConfig(size=size, layers=s.layers, masked_only_head=head != "full head",
                          dropout=0.0 if "no dropout" in mode else 0.1,
                          attention_dropout=0.0 if "no attention dropout" in mode else None)
        raw = Encoder(cfg, s.vocab).to(dev)
        raw.checkpoint_layers = "activation checkpointing" in mode  # its peak memory against the eager row's
        dims = raw.dims
        if head == "HF":
            from benchmarks.bench_model import hf_roberta

            del raw
            hf = hf_roberta(dims, 0.1).to(dev)
            return hf_step(hf, batches, dev), hf, None, dims, "auto"
        compiled = mode.startswith("compile")
        model = maybe_compile(raw, compiled, dev, backend=s.compile_backend,
                              mode="reduce-overhead" if "cudagraphs" in mode else "default",
                              scope="layers" if "by layers" in mode else "model")
        attention = "cudnn" if "cuDNN" in mode else "auto"
        step = build_step(model, raw, batches, dev, compiled, "compiled" if "AdamW" in mode else "fused",
                          backend=s.compile_backend, attention=attention)
        return step, model, raw, dims, attention

    def row(self, size: str, kind: str, head: str, mode: str) -> None:
        """Measure one configuration (and, for the first size's FULL masked-only rows, profile it; the
        compiled one also runs the micro-batch sweep on the same compiled model)."""
        s, dev = self.s, self.dev
        row = Row(size, kind, head, mode)
        name = item_name((size, kind, head, mode))
        cost = part_cost((size, kind, head, mode), warmed=name in self.warmed)
        if not self.fits(name, cost):
            row.note = "not run: time limit"
            self.res.rows.append(row)
            return
        self.res.rows.append(row)
        batches = self.kinds[kind]
        try:
            step, model, raw, dims, attention = self.build(size, kind, head, mode)
            measure(step, batches, s, dev, dims, self.peak, row)
            if head == "HF":
                del model, step
            else:
                notes = [f"{'attention ' if 'attention' in mode else ''}dropout 0 (every other row: 0.1, HF's "
                         "too)"] if changes_recipe(mode) else []
                if attention != "auto":
                    from trainer.batch import CHOICES

                    used = {c.backend for c in CHOICES if c.path != "unpadded" and c.device == dev.type}
                    notes.append(f"attention: {attention}" if attention in used else
                                 f"attention: {attention} refused the shape ({', '.join(sorted(used))})")
                if name in self.warmed:
                    notes.append(f"warmed: compiled beforehand in {self.warmed[name].seconds:.1f} s; here: "
                                 f"{cache_counts()}")
                row.note = "; ".join(notes)
                if kind == F and head == "masked-only" and size == s.sizes[0] and mode in ("eager", "compile"):
                    self.ms[(size, mode)] = row.ms
                    self.extras(model, raw, step, mode)
                    self.kept[mode] = (model, raw)
                del model, raw, step
        except torch.OutOfMemoryError:
            row.note = "out of GPU memory"
        except Exception as e:  # one configuration failing must not lose the others' numbers
            traceback.print_exc()
            row.note = f"failed: {error_line(e, 160)}"
        finally:
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        mfu = f"{row.mfu:.1%}" if row.mfu is not None else "n/a"
        print(f"  {size} {kind} {head} {mode}: {row.ms:.1f} ms/step, {row.tokens_s:,.0f} tok/s, MFU {mfu}, "
              f"first steps {row.first_s:.1f} s, graphs {row.graphs} {row.note}", flush=True)

    def extras(self, model: torch.nn.Module, raw: torch.nn.Module, step: Callable[[int], None], mode: str) -> None:
        """The profile of this step and, compiled, the micro-batch sweep on the same model."""
        from benchmarks.gpu_levers import profile_step
        from trainer.hostsync import HostSyncs, cuda_syncs

        dev, s = self.dev, self.s
        what = f"{s.sizes[0]} FULL-SENTENCES masked-only {mode} step ({s.batch} × {s.seq})"

        def count() -> float:
            if dev.type == "cuda":
                return float(cuda_syncs(lambda: step(0)))
            if mode != "eager":
                return math.nan
            with HostSyncs() as counter:
                step(0)
            return float(counter.syncs)

        prof = self.guarded(f"profile ({mode})", lambda: profile_step(what, step, 3, dev, count_syncs=count))
        if prof is not None:
            self.res.profiles.append(prof)
        if mode == "compile" and self.fits("micro-batch sweep", sweep_cost(s) / s.scale, timed=False):
            self.guarded("micro-batch sweep", lambda: self.sweep(model, raw))

    def sweep(self, model: torch.nn.Module, raw: torch.nn.Module) -> None:
        """Rows per micro-batch from s.sweep, accumulating to s.global_batch rows per optimizer step."""
        from benchmarks.gpu_levers import SweepRow, build_step, sweep_row

        s, dev = self.s, self.dev
        self.res.sweep_what = (f"The compiled {s.sizes[0]} masked-only step (the row above's compiled model: batch "
                               "sizes are marked dynamic, so no recompile per size) on FULL-SENTENCES rows; "
                               "timed optimizer steps after one warm-up step.")
        for micro in s.sweep:
            accum = max(1, s.global_batch // micro)
            if not self.fits(f"sweep point {micro}", sweep_cost(s) / s.scale / len(s.sweep)):
                self.res.sweep.append(SweepRow(micro, accum, math.nan, math.nan, None, None, math.nan,
                                               "not run: time limit"))
                continue
            batches = full_batches(replace(s, batch=micro), min(accum, 4), seed=micro)
            try:
                step = build_step(model, raw, batches, dev, True, accum=accum, backend=s.compile_backend)
                flops = sum(useful_flops(raw.dims, batches[j % len(batches)]) for j in range(accum))
                r = sweep_row(micro, accum, step, micro * accum * s.seq, flops, max(2, s.steps // 2), 1, dev,
                              self.peak)
            except torch.OutOfMemoryError:
                r = SweepRow(micro, accum, math.nan, math.nan, None, None, math.nan, "out of GPU memory")
            finally:
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
            self.res.sweep.append(r)
            print(f"  sweep {micro} x {accum}: {r.ms:.1f} ms/step, {r.tokens_s:,.0f} tok/s {r.note}", flush=True)

    @functools.cached_property
    def word_starts(self) -> torch.Tensor:
        """The word-start table of the masking part's synthetic vocabulary."""
        from benchmarks.bench_masking import SPECIAL_IDS, make_vocab
        from trainer.masking import word_start_table

        return word_start_table(make_vocab(self.s.vocab, np.random.default_rng(0)), SPECIAL_IDS)

    def masker_of(self, scheme: str) -> object:
        """A fresh host reference Masker of ``scheme`` for the run's vocabulary (the masking part's)."""
        from benchmarks.bench_masking import SPECIAL_IDS
        from schemas import MASK_ID, PAD_ID
        from schemas.config import MaskingConfig
        from trainer.masking import Masker

        return Masker(MaskingConfig(scheme=scheme), self.s.vocab, SPECIAL_IDS, MASK_ID, PAD_ID, self.word_starts)

    def masking_ids(self) -> torch.Tensor:
        """The masking part's batch on the device: a new tensor (on the CPU ``.to`` would hand back the rows'
        own, which a compiled row's step marked dynamic: another graph than the warm process's)."""
        return self.kinds[F][0]["input_ids"].to(self.dev, copy=True)

    def masking(self) -> list:
        """Reference vs fused masking on one FULL-SENTENCES batch of the first size's vocabulary."""
        from benchmarks.gpu_levers import masking_compare, masking_overlap, trainer_masker

        s = self.s
        ids = self.masking_ids()
        size = s.sizes[0]
        steps = (self.ms.get((size, "eager"), math.nan), self.ms.get((size, "compile"), math.nan))
        if self.kept:  # before the reset below: the compiled model is still compiled
            self.res.overlap = self.guarded("masking ahead", lambda: masking_overlap(
                self.kept, self.kinds[F], trainer_masker(self.masker_of("token"), self.dev), "token", self.dev,
                s.steps, s.warmup)) or []
            self.kept.clear()
            if self.dev.type == "cuda":
                torch.cuda.empty_cache()
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()  # the fused compiles' cache counters
        return masking_compare(self.masker_of, ids, s.fused_compile, steps, max(s.steps, 5))

    def compile_masking(self) -> None:
        """The masking part's compiles alone (a warm process): each compiled scheme's fused masker called as
        ``masking_compare`` calls it."""
        from benchmarks.gpu_levers import masking_call
        from trainer.fused_masking import FusedMasker

        ids = self.masking_ids()
        for scheme in self.s.fused_compile:
            fused = FusedMasker(self.masker_of(scheme), compile=True).to(self.dev)
            fused.check_ids = False
            masking_call(fused, ids)


# ------------------------------------------------------------------ the warm pool's processes


def cache_counts() -> str:
    """Inductor's FX graph cache and AOT autograd's cache, hits and misses so far in this process."""
    c = torch._dynamo.utils.counters
    return (f"FX graph cache {c['inductor']['fxgraph_cache_hit']} hit / {c['inductor']['fxgraph_cache_miss']} "
            f"missed, AOT autograd cache {c['aot_autograd']['autograd_cache_hit']} hit / "
            f"{c['aot_autograd']['autograd_cache_miss']} missed")


def warm_one(spec: str) -> int:
    """A warm pool process: compile one plan item of the run whose Setup ``spec`` carries (the row's warm-up
    steps, or the fused masker's schemes on the masking part's batch) so its graphs land in inductor's
    caches; print the ``gpu_warm.WARMED`` line. Inductor's autotuning results are not kept: the row picks
    its kernels' launch configurations itself, on a quiet GPU."""
    import json

    from benchmarks.gpu_warm import WARMED

    data = json.loads(spec)
    s = setup_from_json(data["setup"])
    item = data["item"] if isinstance(data["item"], str) else tuple(data["item"])
    dev = prepare_device(s)
    torch._inductor.config.autotune_local_cache = False
    bench = Bench(s, dev, "")
    t0 = time.perf_counter()
    if item == "masking":
        bench.compile_masking()
    else:
        step = bench.build(*item)[0]
        for i in range(max(s.warmup, len(bench.kinds[item[1]]))):
            step(i)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    print(WARMED + json.dumps({"seconds": time.perf_counter() - t0, "note": cache_counts()}), flush=True)
    return 0


def prepare_device(s: Setup) -> torch.device:
    """The run's device (a dry run: the CPU), with the matmul settings every process of the run shares."""
    dev = torch.device("cpu") if s.mode == "dry-run" else torch.device("cuda", 0)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return dev


# ------------------------------------------------------------------ main


def item_name(item: str | tuple[str, str, str, str]) -> str:
    """A plan item as the listings name it: a part's name, or a row's four words."""
    return item if isinstance(item, str) else " ".join(item)


class Planned(NamedTuple):
    item: str | tuple[str, str, str, str]
    cost: float  # expected seconds of its own (warmed: what is left once the pool compiled it)
    starts: bool
    warmed: bool  # compiled beforehand by the warm pool


def pool_wait(s: Setup, pool: list[float], lead: float) -> float:
    """Seconds before the first timed part: the tests (``lead``) and the warm pool side by side."""
    from benchmarks.gpu_warm import makespan

    return max(lead, makespan(pool, WARM_SLOTS) * CROWDED) if pool else lead


def expected(s: Setup) -> list[Planned]:
    """The mode's plan, each part taking its expected cost, by the run's rule: a part starts only if it ends by
    the limit. ``s.warm`` auto: the plan with the warm pool or the one without, whichever starts the parts
    first in priority order (then the one that ends sooner): with nothing to run beside it (no tests), the
    pool is a wait."""
    cold = planned(s, warm=False)
    if s.warm == "off":
        return cold
    warm = planned(s, warm=True)
    if s.warm == "on":
        return warm
    key = [(tuple(p.starts for p in x), -planned_total(s, x)) for x in (warm, cold)]
    return warm if key[0] >= key[1] else cold


def pool_costs(s: Setup, plan: list[Planned]) -> list[float]:
    """Expected seconds of each part the plan warms, compiled alone (the mode's scale applied)."""
    return [warm_cost(p.item) * s.scale for p in plan if p.warmed]


def planned_total(s: Setup, plan: list[Planned]) -> float:
    """A plan's expected seconds: the tests and the pool side by side, then the timed parts."""
    lead = sum(p.cost for p in plan if p.item == "tests" and p.starts)
    return pool_wait(s, pool_costs(s, plan), lead) + sum(p.cost for p in plan if p.starts and p.item != "tests")


def planned(s: Setup, warm: bool) -> list[Planned]:
    """The plan with (``warm``) or without the warm pool: a compiled row (or the masking) is warmed when the
    pool can take it and the run still ends in time, else it compiles in its turn if that fits. The first
    size's compiled FULL masked-only row counts its micro-batch sweep too, which starts only if it fits
    after the row."""
    lead = COST["tests"] * s.scale if "tests" in s.plan and COST["tests"] * s.scale <= s.limit_s else 0.0
    pool: list[float] = []
    timed, out = 0.0, []
    for item in s.plan:
        if item == "tests":
            out.append(Planned(item, COST["tests"] * s.scale, lead > 0, False))
            continue
        sweep = sweep_cost(s) if item == (s.sizes[0], F, "masked-only", "compile") else 0.0
        ways = [(pool, part_cost(item) * s.scale, False)]
        if warm and warmable(item):
            ways.insert(0, ([*pool, warm_cost(item) * s.scale], part_cost(item, warmed=True) * s.scale, True))
        for p, cost, warmed in ways:
            if pool_wait(s, p, lead) + timed + cost <= s.limit_s:
                pool, timed = p, timed + cost
                if sweep and pool_wait(s, pool, lead) + timed + sweep <= s.limit_s:
                    timed += sweep
                    cost += sweep
                out.append(Planned(item, cost, True, warmed))
                break
        else:
            out.append(Planned(item, part_cost(item) * s.scale, False, False))
    return out


# --rest: what the full run is expected to leave out.
REST_PLAN = tuple(p.item for p in expected(GPU) if not p.starts)
REST = replace(GPU, mode="rest", plan=REST_PLAN)


def plan_lines(s: Setup) -> list[str]:
    """``--plan``'s listing."""
    rows = expected(s)
    pool = pool_costs(s, rows)
    lines = [f"bench_gpu {s.mode}: limit {s.limit_s:.0f} s; expected seconds on an H200 (inductor's cache cold)"]
    if pool:
        lines.append(f"  warm pool: {len(pool)} part(s) compiled {WARM_SLOTS} at a time beside the tests: "
                     f"{pool_wait(s, pool, 0.0):.0f} s before the first timed part")
    lines += [f"  {'runs   ' if p.starts else 'left out'} {p.cost:5.0f} s  {item_name(p.item)}"
              f"{'  (warmed)' if p.warmed else ''}" for p in rows]
    lines.append(f"  expected total {planned_total(s, rows):.0f} s")
    return lines


def setup_of(args) -> Setup:  # noqa: ANN001 - argparse.Namespace
    """The mode's Setup with the command line's changes (sizes, steps, limit, parts left out)."""
    s = DRY if args.dry_run else QUICK if args.quick else REST if args.rest else GPU
    if args.sizes:
        s = replace(s, sizes=tuple(args.sizes))
    if args.steps:
        s = replace(s, steps=args.steps)
    if args.limit_s:
        s = replace(s, limit_s=args.limit_s)
    plan = [x for x in s.plan if isinstance(x, str) or x[0] in s.sizes]
    if args.no_compile:
        plan = [x for x in plan if isinstance(x, str) or not x[3].startswith("compile")]
    if args.no_tests:
        plan = [x for x in plan if x != "tests"]
    if args.warm:
        s = replace(s, warm=args.warm)
    return replace(s, plan=tuple(plan))


def main() -> int:
    ap = bench_parser(__doc__, "gpu")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--quick", action="store_true", help="The base rows, masking, sweep and profiles in 4 minutes.")
    how.add_argument("--rest", action="store_true",
                     help="The compiled rows the full run's 8 minutes leave out (CUDA graphs, compiled AdamW, "
                          "cuDNN attention, the dropout levers, the large whole model, full head): a second call.")
    how.add_argument("--dry-run", "--smoke", dest="dry_run", action="store_true",
                     help="Every part at tiny sizes on the CPU (about two minutes): run before spending GPU time.")
    ap.add_argument("--sizes", nargs="+", help="Model sizes (default: base large; quick: base; dry run: tiny).")
    ap.add_argument("--steps", type=int, help="Timed steps per configuration.")
    ap.add_argument("--limit-s", "--budget-s", dest="limit_s", type=float,
                    help="Start no part that is expected to end after this many seconds (full 465, quick 225).")
    ap.add_argument("--no-compile", action="store_true", help="Leave out the torch.compile rows (and the sweep).")
    ap.add_argument("--no-tests", action="store_true", help="Leave out the CUDA-only tests.")
    ap.add_argument("--plan", action="store_true",
                    help="Print the parts in order with their expected seconds on an H200 and which fit the limit; "
                         "run nothing (no GPU needed).")
    ap.add_argument("--warm", choices=("auto", "on", "off"),
                    help="Compile the compiled rows beforehand, side by side in subprocesses while the tests run "
                         "(the warm pool): auto (default; off in a dry run) when its plan starts more parts; on; "
                         "off: each row compiles in its turn.")
    ap.add_argument("--warm-one", help=argparse.SUPPRESS)  # a warm pool process (benchmarks/gpu_warm.py)
    args = ap.parse_args()
    if args.warm_one:
        warnings.filterwarnings("ignore")
        return warm_one(args.warm_one)
    if args.plan:
        s = setup_of(args)
        print("\n".join(plan_lines(s)))
        return 0
    need = lacking(CORE_MODULES)
    if need:
        print(f"bench_gpu: this Python ({sys.executable}) lacks {', '.join(need)}: {NO_PACKAGES_HINT}.",
              file=sys.stderr)
        return 2
    if not args.dry_run and not torch.cuda.is_available():
        print("bench_gpu: no CUDA device on this machine (torch.cuda.is_available() is False): nothing "
              "measured. Run `bash benchmarks/gpu.sh` on a GPU machine, or `--dry-run` for the CPU check.",
              file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    s = setup_of(args)
    if args.out == str(ROOT / "benchmarks" / "results" / "gpu.md") and s.mode != "full":
        args.out = str(ROOT / "benchmarks" / "results" / f"gpu-{s.mode}.md")
    dev = prepare_device(s)
    # gpu.sh's timeout ends the run with SIGTERM: as SystemExit it still stops the warm pool's processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    bench = Bench(s, dev, args.out)
    if "tests" not in s.plan:
        bench.res.tests = f"not run ({'--no-tests' if args.no_tests else s.mode + ' mode'})"
    print(f"bench_gpu {s.mode} on {bench.res.device}: limit {s.limit_s:.0f} s", flush=True)
    bench.run()
    print("\n".join(report(s, bench.res, bench.elapsed())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
