"""The fixed cost of a build: what a tiny build costs besides its data.

A demo-sized corpus (120 documents, ~0.2 MB) does almost no data work, so its CPU is the cost every
build (and every ``--batch_mb`` batch) pays: imports, graph construction, the runner's planning,
~100 bundles each rebuilt from its DoFns, and the report. Measured here:

* imports of ``pipelines.jobs.build`` in a fresh process, as a library and as the command does (CPU seconds
  and peak RSS, three runs each, alternated);
* in one process, builds alternating between Beam's own DoFn introspection and ours memoized
  (``pipelines.localrunner.signatures``: ``get_signature`` and ``get_dofn_specs``), split into graph
  construction, planning, bundles (``report`` step apart) and the rest; the ratio of the totals.

The report's charts were matplotlib PNGs until this benchmark's first run (~3 CPU-s per build);
they are SVG text now (``pipelines.report.charts``), and the matplotlib code is gone, so that comparison is
recorded in BENCHMARKS.md from two commits rather than re-run here.

Run: ``python benchmarks/bench_fixed.py [--runs 3]`` (~1 minute).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import ROOT, bench_parser, command_line, machine, scratch_dir, write_results  # noqa: E402


def _cpu() -> float:
    return time.process_time()


def import_cost(command: bool) -> tuple[float, float]:
    """CPU seconds and peak RSS (MB) of importing the build driver in a fresh interpreter: as a
    library does, or as the command does (``pipelines.localrunner.preflight.before_beam`` first, which leaves
    out the integrations a local build never uses)."""
    first = "from pipelines.localrunner.preflight import before_beam; before_beam([]); " if command else ""
    code = (f"import resource, time; t = time.process_time(); {first}import pipelines.jobs.build; "
            "print(time.process_time() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    cpu, rss = out.stdout.strip().splitlines()[-1].split()
    return float(cpu), float(rss)


def one_build(raw: dict[str, str], out: Path, memoized: bool) -> dict[str, float]:
    """One build with or without the memoized introspection; its CPU split."""
    from benchmarks.bench_floor import watch_fixed_costs, watch_stage_cpu
    from pipelines.jobs.build import run_build
    from pipelines.localrunner import signatures
    from shardforge.commands.demo import demo_build_config

    if not memoized:
        signatures.uninstall()
    install = signatures.install
    signatures.install = install if memoized else (lambda: None)  # make_pipeline calls it
    stages: dict[str, float] = {}
    steps: dict[str, float] = {}
    fixed: dict[str, float] = {}
    watch_stage_cpu(stages, steps)
    watch_fixed_costs(fixed)
    try:
        c0 = _cpu()
        run_build(demo_build_config(raw), str(out))
        total = _cpu() - c0
    finally:
        signatures.install = install
        _unwatch()
    bundles = sum(stages.values())
    report = sum(v for k, v in steps.items() if k.startswith("Report"))
    return {"total": total, "construct": fixed.get("construct", 0.0), "plan": fixed.get("plan", 0.0),
            "bundles": bundles - report, "report": report,
            "other": total - bundles - fixed.get("construct", 0.0) - fixed.get("plan", 0.0),
            "stages": fixed.get("fused_stages", 0)}


_saved: dict[str, Any] = {}


def _remember() -> None:
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    import pipelines.jobs.build as build_module

    _saved.update(execute=fn_runner.FnApiRunner._execute_bundle, plan=fn_runner.FnApiRunner.create_stages,
                  construct=build_module.build_pipeline)


def _unwatch() -> None:
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    import pipelines.jobs.build as build_module

    fn_runner.FnApiRunner._execute_bundle = _saved["execute"]
    fn_runner.FnApiRunner.create_stages = _saved["plan"]
    build_module.build_pipeline = _saved["construct"]


def main() -> int:
    ap = bench_parser(__doc__, "fixed")
    ap.add_argument("--runs", type=int, default=3, help="Builds per mode, alternated (default 3).")
    args = ap.parse_args()
    imports: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(3):
        for command in (False, True):
            imports[command].append(import_cost(command))
    from pipelines.options import quiet_beam
    from shardforge.commands.synth import write_demo_corpus

    quiet_beam()
    _remember()
    results: dict[str, list[dict[str, float]]] = {"beam": [], "memoized": []}
    with scratch_dir("sf-fixed-") as work:
        raw = write_demo_corpus(str(work / "raw"), docs_per_source=40, seed=7)
        one_build(raw, work / "warm", True)  # first build of the process: lazy imports, caches
        for i in range(args.runs):
            for mode in ("beam", "memoized"):
                results[mode].append(one_build(raw, work / f"{mode}-{i}", mode == "memoized"))

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in results[mode])

    keys = ("construct", "plan", "bundles", "report", "other", "total")
    lines = [f"Imports of `pipelines.jobs.build` (fresh process), {how}: CPU s {statistics.median(c for c, _ in runs):.2f} "
             f"(runs: {', '.join(f'{c:.2f}' for c, _ in runs)}), peak RSS {statistics.median(r for _, r in runs):.0f} MB"
             for how, runs in (("as a library", imports[False]),
                               ("as `python -m pipelines.build` (a local build: unused integrations left out)",
                                imports[True]))]
    lines += [
        "", f"A demo build ({results['memoized'][0]['stages']:.0f} fused stages), CPU seconds, median of "
        f"{args.runs} alternated runs per mode:", "",
        "| part | Beam's introspection | memoized (pipelines.localrunner.signatures) |", "|---|---:|---:|"]
    lines += [f"| {k} | {med('beam', k):.2f} | {med('memoized', k):.2f} |" for k in keys]
    ratio = med("beam", "total") / max(1e-9, med("memoized", "total"))
    totals = {mode: ", ".join(f"{r['total']:.2f}" for r in rs) for mode, rs in results.items()}
    lines += ["", f"Build CPU, Beam's / memoized: **{ratio:.2f}x** (totals: {totals['beam']} vs {totals['memoized']})"]
    text = "\n".join(lines)
    print(text)
    write_results(args.out,
                  ["# Fixed cost of a build", "", f"`{command_line()}`", "", machine("apache-beam", load=True), "",
                   text, ""])
    return 0


if __name__ == "__main__":
    sys.exit(main())
