"""The GPU benchmark's report (``bench_gpu.py``): markdown tables from what was measured, the targets judged.

Written after every part of a run, so a run stopped by its time limit still leaves what it measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from benchmarks.common import command_line, machine


@dataclass
class Results:
    """Everything a run measured so far."""

    mode: str  # full | quick | dry-run
    device: str  # the GPU's name, or "none (CPU dry run)"
    tests: str = "not run"
    rows: list = field(default_factory=list)  # bench_gpu.Row
    masking: list = field(default_factory=list)  # gpu_levers.MaskingRow
    overlap: list = field(default_factory=list)  # gpu_levers.OverlapRow
    sweep: list = field(default_factory=list)  # gpu_levers.SweepRow
    sweep_what: str = ""
    profiles: list = field(default_factory=list)  # gpu_levers.Profile
    waits: list = field(default_factory=list)  # (workers, bench_datawait.run's dict)
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # parts left out (time budget, flags)
    attention: list[str] = field(default_factory=list)  # attention kernels chosen (trainer.batch.CHOICES)
    peak_note: str = ""  # the peak MFU divides by, and the measured matmul rate
    peak: float | None = None  # FLOP/s MFU divides by (the spec sheet's; None: unknown)
    matmul: float = math.nan  # FLOP/s measured on dense matmuls in this run
    warm: list = field(default_factory=list)  # gpu_warm.Warmed, the warm pool's parts
    warm_wait: tuple = ()  # (the pool's seconds, of them waited after the tests, slots, expected seconds)
    masking_note: str = ""  # the fused compiles' caches, when the pool compiled them
    pace: tuple = ()  # the timed parts so far: (expected seconds, seconds taken, how many)


def fmt(x: float | None, spec: str, missing: str = "n/a") -> str:
    return missing if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def report(s, res: Results, wall: float) -> list[str]:  # noqa: ANN001 - s: bench_gpu.Setup
    dry = res.mode == "dry-run"
    lines = ["# The trainer on a GPU", "",
             f"Machine: {machine(torch_details=True)}. Device: **{res.device}**. Mode: **{res.mode}**.", "",
             f"Command: `{command_line()}` ({wall / 60:.1f} min so far).", ""]
    if res.pace and res.pace[2]:
        expect, took, n = res.pace
        lines += [f"Pace: the {n} timed part(s) so far took {took:.0f} s against {expect:.0f} s expected "
                  f"(**{took / max(expect, 1e-9):.2f}×**; the costs are an H200's with inductor's cache cold); "
                  "each later part started only if it fit at max(1, this pace).", ""]
    if dry:
        lines += ["**dry run**: tiny sizes on the CPU, compile with the `eager` dynamo backend (fused masking: "
                  "inductor's C++ for the token scheme); these numbers only show that every part of the script "
                  "runs. Nothing here is a GPU figure.", ""]
    lines += ["## CUDA-only tests", "", f"`pytest {s.test_files} -k '{s.tests_k}'`: {res.tests}", ""]
    lines += warm_section(res)
    lines += step_table(s, res)
    lines += lever_table(res)
    lines += masking_table(s, res)
    lines += sweep_table(s, res)
    for p in res.profiles:
        lines += profile_section(p)
    lines += ["", "## Data wait (the trainer streaming shards from the GCS emulator on 127.0.0.1)", "",
              f"`trainer.train` at size {s.datawait_size}, batch {s.datawait_batch} × up to {s.seq}, "
              f"{s.datawait_steps} steps (eager; the first 2 steps, worker start-up, left out).", "",
              "| DataLoader workers | mean data wait / step | max | median step s | tokens / s |",
              "|---:|---:|---:|---:|---:|"]
    lines += [f"| {w} | {r['wait_share']:.2%} | {r['max_wait_share']:.2%} | {r['step_s']:.3f} | "
              f"{r['tokens_per_s']:,.0f} |" for w, r in res.waits]
    if res.attention:
        lines += ["", "## Attention kernels chosen (trainer.attention, per path and shape)", ""]
        lines += [f"- {c}" for c in res.attention]
    if res.skipped:
        lines += ["", "## Parts not run", ""] + [f"- {x}" for x in res.skipped]
    if res.failures:
        lines += ["", "## Parts that failed (traceback in the run's output)", ""] + [f"- {f}" for f in res.failures]
    lines += ["", "## Against the targets", ""]
    lines += ["Not judged: a dry run measures nothing."] if dry else targets(s, res)
    return lines


def warm_section(res: Results) -> list[str]:
    """The warm pool: each part's compile beside the tests (the cold figure its row's 'first steps' lacks)."""
    if not res.warm:
        return []
    pool_s, waited, slots, expect = res.warm_wait
    lines = ["## Compiles beforehand (the warm pool)", "",
             f"The compiled rows and the fused masking, compiled in {slots} process(es) at a time while the tests "
             f"ran, into inductor's caches: {pool_s:.0f} s in all (expected {expect:.0f} s), {waited:.0f} s of it "
             "waited for after the tests. Nothing was timed meanwhile. A warmed row's 'first steps' are its "
             "compile from the caches; the cold compile is the seconds here (crowded by the others).", "",
             "| part | compile | seconds | note |", "|---|---|---:|---|"]
    lines += [f"| {w.item} | {w.state} | {w.seconds:.1f} | {w.note} |" for w in res.warm]
    return lines + [""]


def step_table(s, res: Results) -> list[str]:  # noqa: ANN001
    gpu = res.device != "none (CPU dry run)"
    lines = [f"## Training step: seq {s.seq}, {'bf16' if gpu else 'fp32'}, AdamW "
             f"({'fused' if gpu else 'for-loop on CPU'} unless the mode says compiled), clip 1.0", "",
             f"FULL-SENTENCES: {s.batch} × {s.seq} full rows (no-mask path). DOC-SENTENCES: ~{s.tokens} real "
             "tokens per batch, synthetic lengths (40% full rows, the rest uniform in "
             f"[{s.seq // 8}, {s.seq})), bucketed by length like the loader (unpadded path; compiled: rows padded "
             "to 64 columns, packed tokens to a multiple of 64, sizes marked dynamic, as trainer.batch does). "
             f"Warm-up: every batch once (at least {s.warmup} steps; compilation included: 'first steps'), then "
             f"{s.steps} timed steps. tokens/s counts real tokens; MFU counts useful FLOPs only (LM head at the 15% "
             "predicted positions for both heads, attention at real lengths) over the peak named below; peak "
             "memory is `torch.cuda.max_memory_allocated`; graphs: dynamo's compiled graphs for the row "
             "(recompiles included). × HF: tokens/s over HF's on the same batches.", "",
             "| size | batches | head | mode | ms / step | tokens / s | MFU | peak memory GiB | first steps s | "
             "graphs | × HF | note |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    hf = {(r.size, r.kind): r.tokens_s for r in res.rows if r.head == "HF"}
    for r in res.rows:
        base = hf.get((r.size, r.kind), math.nan)
        ratio = r.tokens_s / base if r.head != "HF" and base == base and base else math.nan
        head = "HF RobertaForMaskedLM (sdpa)" if r.head == "HF" else r.head
        lines.append(f"| {r.size} | {r.kind} | {head} | {r.mode} | {fmt(r.ms, '.1f', '—')} | "
                     f"{fmt(r.tokens_s, ',.0f', '—')} | {fmt(r.mfu, '.1%')} | {fmt(r.peak_gib, '.1f')} | "
                     f"{fmt(r.first_s, '.1f', '—')} | {r.graphs if r.graphs is not None else '—'} | "
                     f"{fmt(ratio, '.2f', '—')} | {r.note} |")
    if res.peak_note:
        lines += ["", res.peak_note]
    return lines


def masking_table(s, res: Results) -> list[str]:  # noqa: ANN001
    lines = ["", "## Masking on the device: the reference ops against the fused (compiled) ones", "",
             f"One FULL-SENTENCES batch ({s.batch} × {s.seq}); share = masking / (masking + the "
             f"{s.sizes[0]} FULL-SENTENCES masked-only step), eager and compiled. Reference: aten ops a call "
             "dispatches (each a kernel launch on a GPU) and, of those, host syncs (trainer.hostsync). Fused: "
             "kernels in inductor's generated code for the call (extern calls after the +). 'same': the "
             "device's masks equal the CPU reference's bit for bit.", "",
             "| scheme | masking | ms / batch | share of eager step | share of compiled step | launches / call | "
             "host syncs | first call s | same |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for m in res.masking:
        launches = f"{m.launches}+{m.extern}" if m.extern else str(m.launches)
        lines.append(f"| {m.scheme} | {m.impl} | {m.ms:.3f} | {m.share_eager:.2%} | {fmt(m.share_compiled, '.2%')} | "
                     f"{launches} | {m.syncs if m.syncs >= 0 else '—'} | {m.compile_s:.1f} | "
                     f"{'yes' if m.identical else '**no**'} |")
    if res.masking_note:
        lines += ["", res.masking_note]
    return lines + overlap_table(s, res)


def overlap_table(s, res: Results) -> list[str]:  # noqa: ANN001
    """Masking's share of the base step as the trainer's loop runs it, masking ahead off and on."""
    if not res.overlap:
        return []
    scheme = res.overlap[0].scheme
    lines = ["", f"Masking ahead (`masking_overlap`, trainer.batch.MaskAhead): the {s.sizes[0]} FULL-SENTENCES "
             "masked-only steps above (the same eager and compiled models) as trainer.train runs them: the pinned "
             f"host batch copied and masked by the trainer's masker ({scheme}; fused on CUDA), forward, backward, "
             "clip, fused AdamW, a device sync per step. 'ahead': the next batch copied and masked on a side "
             "stream while the step computes; 'in place': before the step, on its stream. bare: the same step "
             "with the masks made beforehand handed back (the same inputs, no masking kernels); share = "
             "(masked − bare) / masked.", "",
             "| step | masking | bare ms / step | masked ms / step | masking's share of the step |",
             "|---|---|---:|---:|---:|"]
    lines += [f"| {r.mode} | {'ahead' if r.overlap else 'in place'} | {r.bare_ms:.2f} | {r.masked_ms:.2f} | "
              f"{r.share:.2%} |" for r in res.overlap]
    return lines


def sweep_table(s, res: Results) -> list[str]:  # noqa: ANN001
    lines = ["", f"## Micro-batch sweep (gradient accumulation to {s.global_batch} rows × {s.seq} per optimizer step)",
             "", res.sweep_what or "not run", "",
             "| rows per micro-batch | micro-batches per step | ms / optimizer step | tokens / s | MFU | "
             "peak memory GiB | warm-up s | note |",
             "|---:|---:|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r.micro} | {r.accum} | {fmt(r.ms, '.1f', '—')} | {fmt(r.tokens_s, ',.0f', '—')} | "
              f"{fmt(r.mfu, '.1%')} | {fmt(r.peak_gib, '.1f')} | {fmt(r.first_s, '.1f', '—')} | {r.note} |"
              for r in res.sweep]
    return lines


def profile_section(p) -> list[str]:  # noqa: ANN001 - gpu_levers.Profile
    lines = ["", f"## Profile: {p.what} ({p.steps} steps under torch.profiler)", "",
             f"- kernel launches per step: **{p.launches_per_step:.0f}** (CUDA runtime launch calls; on CPU: aten ops)",
             f"- host syncs per step: **{fmt(p.syncs_per_step, '.1f')}** (CUDA: torch.cuda.set_sync_debug_mode "
             f"warnings over one step; CPU: trainer.hostsync's count); blocking CUDA calls seen by the profiler: "
             f"{fmt(p.sync_calls_per_step, '.1f')} per step",
             f"- dynamo graphs compiled for this model so far: {p.graphs}", "",
             "| kernel (or op) | ms / step | calls / step |", "|---|---:|---:|"]
    lines += [f"| `{name.replace('|', '/')}` | {ms:.3f} | {calls} |" for name, ms, calls in p.top]
    return lines


def changes_recipe(mode: str) -> bool:
    """Whether a row's mode changes the training recipe (the dropout levers: RoBERTa's 0.1 off), so that its
    figures are the lever's, never the MFU target's."""
    return "dropout" in mode


# The proposed MFU targets against the measured matmul rate instead of the spec sheet's (BENCHMARKS.md, "GPU").
PROPOSED_REACHABLE_MFU = {"base": 0.50, "large": 0.55}


def lever_table(res: Results) -> list[str]:
    """Each lever's row (a mode ``BASE+LEVER`` or ``BASE by layers``) against the row it changes: the same size,
    batches, head and base mode, measured in the same run."""
    plain = {(r.size, r.kind, r.head, r.mode): r for r in res.rows if r.tokens_s == r.tokens_s}
    pairs = []
    for r in plain.values():
        base = r.mode.split("+")[0].removesuffix(" by layers")
        if base != r.mode and (r.size, r.kind, r.head, base) in plain:
            pairs.append((r, plain[(r.size, r.kind, r.head, base)]))
    if not pairs:
        return []
    lines = ["", "## Levers against the rows they change", "",
             "Tokens/s of each lever's row over its base row's (same size, batches, head; the same run). The "
             "dropout levers change the recipe (RoBERTa's 0.1): ModernBERT trains without dropout, MosaicBERT "
             "without it on the attention probabilities.", "",
             "| size | batches | head | lever | over | ms / step | × tokens / s | MFU | peak GiB |",
             "|---|---|---|---|---|---:|---:|---:|---:|"]
    for r, b in pairs:
        lever = r.mode.removeprefix(b.mode).lstrip("+ ")
        lines.append(f"| {r.size} | {r.kind} | {r.head} | {lever} | {b.mode} | {fmt(r.ms, '.1f')} vs "
                     f"{fmt(b.ms, '.1f')} | **{r.tokens_s / b.tokens_s:.2f}** | {fmt(r.mfu, '.1%')} vs "
                     f"{fmt(b.mfu, '.1%')} | {fmt(r.peak_gib, '.1f')} vs {fmt(b.peak_gib, '.1f')} |")
    return lines


def targets(s, res: Results) -> list[str]:  # noqa: ANN001
    """The targets (MFU, DOC-SENTENCES speed, masking share, data wait), each met / missed / not measured."""
    out = []
    for size in [x for x in ("base", "large") if x in s.sizes]:
        ours = [r for r in res.rows if r.size == size and r.head == "masked-only" and r.tokens_s == r.tokens_s]
        full = [r for r in ours if r.kind == "FULL-SENTENCES" and not changes_recipe(r.mode)]
        best = max((r.mfu for r in full if r.mfu is not None), default=None)
        sweep = [r.mfu for r in res.sweep if r.mfu is not None] if size == s.sizes[0] else []
        best = max([x for x in [best, *sweep] if x is not None], default=None)
        out.append(f"- MFU ≥ 50% at {size}/{s.seq}/bf16 (best row or sweep point): " +
                   (f"{best:.1%}: **{'met' if best >= 0.5 else 'missed'}**" if best is not None
                    else "not measured"))
        if best is not None and res.peak and res.matmul == res.matmul:
            # The proposed target (BENCHMARKS.md): MFU against the rate this device reaches on dense matmuls.
            reach, want = best * res.peak / res.matmul, PROPOSED_REACHABLE_MFU[size]
            out.append(f"- proposed: MFU against the measured matmul rate ({res.matmul / 1e12:.0f} TFLOP/s) "
                       f"≥ {want:.0%} at {size}: {reach:.1%}: **{'met' if reach >= want else 'missed'}**")
        for r in ours:
            if changes_recipe(r.mode) and r.mfu is not None:
                out.append(f"- {size} {r.kind} {r.mode} (a recipe change; not the target's row): MFU {r.mfu:.1%}")
        for mode in ("eager", "compile"):
            f = [r.tokens_s for r in full if r.mode == mode]
            d = [r.tokens_s for r in ours if r.kind == "DOC-SENTENCES" and r.mode == mode]
            if f and d:
                out.append(f"- {size} {mode} DOC-SENTENCES ≥ 0.9× FULL-SENTENCES tokens/s: {max(d) / max(f):.2f}×: "
                           f"**{'met' if max(d) >= 0.9 * max(f) else 'missed'}**")
    fused = [m for m in res.masking if m.impl == "fused"]
    if fused:
        worst = max((m.share_compiled if m.share_compiled == m.share_compiled else m.share_eager) for m in fused)
        out.append(f"- fused masking < 2% of the compiled step (worst scheme): {worst:.2%}: "
                   f"**{'met' if worst < 0.02 else 'missed'}**; ≤ 10 kernels a call: "
                   f"**{'met' if all(0 < m.launches <= 10 and not m.extern for m in fused) else 'missed'}**; "
                   f"bit-identical: **{'met' if all(m.identical for m in res.masking) else 'MISSED'}**")
    ahead = [r for r in res.overlap if r.overlap and r.mode == "compile"]
    if ahead:
        out.append(f"- masking ahead < 2% of the compiled step ({ahead[0].scheme}, as the loop runs it): "
                   f"{ahead[0].share:.2%}: **{'met' if ahead[0].share < 0.02 else 'missed'}**")
    w4 = [r for w, r in res.waits if w == 4]
    if w4:
        out.append(f"- data wait < 1% with 4 workers: {w4[0]['wait_share']:.2%}: "
                   f"**{'met' if w4[0]['wait_share'] < 0.01 else 'missed'}**")
    return out or ["- nothing measured"]
