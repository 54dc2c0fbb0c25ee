"""Benchmark: the build against its floor (the same per-document work without Beam, in one process).

Both run on the same input, real prose (``tests/prose.py``: Wikipedia and ABC news
paragraphs from installed packages, distinct documents that the cleaning rules mostly keep), each
in a fresh child process so that imports count the same way:

* **floor**: one plain Python loop over the same functions the stages call: parse (the readers),
  clean (``clean_document``), exact hash, MinHash signatures + LSH band keys, sentence split,
  tokenizer training on the same bounded sample (the build's: bottom-k documents by content
  hash within ``sample_docs``, ``input_sentence_size`` and the sample's byte bound), batched
  SentencePiece encode, packing (``pack_group`` per split and group, as ``WriteCorpus`` groups
  them) and tar encoding (the samples and shards, into memory). It does no dedupe resolution
  (grouping, LSH buckets, components), writes no intermediates, rejects, index or report, and
  checks no accounting: that is the pipeline's extra.
* **build**: ``pipelines.jobs.build.run_build`` on the local FnApiRunner (in-process). The process CPU
  of every bundle the runner executes is split among the build stages whose transforms that
  fused stage holds, in proportion to the time Beam's own state sampler (every 5 ms) saw each
  transform run (a private FnApiRunner method is wrapped: diagnostics only; the transforms' times
  and their stages come from ``pipelines.report.timings``, as in the build's own timings.json). Each build stage is
  compared with the floor stages that do its work (``Dedupe`` with exact hash + MinHash, its
  resolution and index included; ``WriteCorpus`` with packing + tar encoding, its two passes
  included); what the floor does not do at all is one "pipeline only" row.

CPU seconds are process CPU (every thread: the encoder's threads count), per MB of input file.
Prints one table and writes ``benchmarks/results/floor-<MB>mb.md``.

On a shared machine the host's speed drifts between the two children (the same clean function
measured 0.98x-1.24x of itself from one run to the next): ``--repeat N`` runs floor and build
alternately N times each and compares the fastest run of each (extra time is all noise can add),
listing every run, the median of the pairs' ratios, and the ratio of each part's fastest run
summed (``stagewise_fastest``: a slow spell that hit one stage of an otherwise fast run moves it less).

Run: ``python benchmarks/bench_floor.py`` (2 MB, ~1 minute) | ``--mb 10`` | ``--mb 100 --repeat 5`` (manual).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import ROOT, command_line, machine, scratch_dir, write_results  # noqa: E402
from tests.floor_totals import FLOOR_STAGES, build_total, floor_total, stagewise_fastest  # noqa: E402

# The build's stages (``pipelines.report.timings.stage_of``, the same split the build's timings.json
# shows) -> the floor stage whose work they do. Stages not listed (accounting, intermediates,
# reject log, report) do work the floor does not: they are reported as "pipeline only".
BUILD_STAGE_OF = {
    "read": "parse",
    "clean": "clean",
    "dedupe": "exact hash+minhash+bands (and resolution)",
    "sentences": "sentences",
    "tokenizer training": "tokenizer train",
    "encode": "encode",
    "packing": "packing+tar encoding", "shard writing": "packing+tar encoding",
}
FLOOR_OF_BUILD = {"exact hash+minhash+bands (and resolution)": ("exact hash", "minhash+bands"),
                  "packing+tar encoding": ("packing", "tar encoding")}
PIPELINE_ONLY = "pipeline only (accounting, intermediates, rejects, index, report)"


def bench_config(raw: str, vocab_size: int):
    """The build config both sides use: the defaults, one source, a small vocabulary."""
    from schemas.config import BuildConfig

    return BuildConfig.model_validate({"sources": [{"name": "web", "input": raw}],
                                       "tokenizer": {"vocab_size": vocab_size}})


def _cpu() -> float:
    return time.process_time()


# ------------------------------------------------------------------ floor (child process)


def run_floor(raw: str, vocab_size: int) -> dict[str, Any]:
    """The per-document work in one plain loop; CPU seconds per stage."""
    t0 = _cpu()
    from pipelines.localrunner.preflight import local_build_process

    local_build_process()  # as in the build's process: the same imports left out, the same allocator
    from pipelines.clean.lines import line_rules_for
    from pipelines.clean.rules import clean_document
    from pipelines.clean.sentences import split_sentences
    from pipelines.corpus.shards import encoded_samples
    from pipelines.dedupe.sketch import minhasher, sketch_documents
    from pipelines.intermediates import size_runs
    from pipelines.localrunner.heap import tune_collector
    from pipelines.pack.rules import group_of, split_of
    from pipelines.pack.step import count_groups, pack_sorted
    from pipelines.records import Document, SentencedDocument
    from pipelines.sources import read_file
    from pipelines.tokenizer.encode import encode_documents, resolve_threads
    from pipelines.tokenizer.model import tokenizer_info
    from pipelines.tokenizer.sample import SampleBounds, sample_entry, training_sentences
    from pipelines.tokenizer.train import train_tokenizer
    from schemas.sample import sample_tar_size, write_tar

    tune_collector()  # as the build's process does once its modules are imported (make_pipeline)
    cpu: dict[str, float] = {"imports": _cpu() - t0}
    cfg = bench_config(raw, vocab_size)
    src = cfg.sources[0]

    def stage(name: str, fn):
        start = _cpu()
        out = fn()
        cpu[name] = cpu.get(name, 0.0) + _cpu() - start
        return out

    docs = stage("parse", lambda: [r for r in read_file(raw, src) if isinstance(r, Document)])
    on = line_rules_for(src.name, cfg.sources, cfg.clean)
    kept = stage("clean", lambda: [d for d in (clean_document(x, cfg.clean, on) for x in docs)
                                   if isinstance(d, Document)])
    hasher = minhasher(cfg.dedupe)

    def sketch() -> list[str]:
        # The Sketch step's own per-document work, in its batches: normalized text, exact hash,
        # shingles, signature, band and anchor keys, and the shingles the line rules took.
        return [s.exact_hash for i in range(0, len(kept), 512) for s in sketch_documents(kept[i:i + 512], hasher)]

    hashes = stage("minhash+bands", sketch)  # the exact hash is in it (the "exact hash" stage stays 0)
    sentenced = stage("sentences", lambda: [SentencedDocument(d.doc_id, d.source, tuple(split_sentences(d.text)))
                                            for d in kept])
    tok = cfg.tokenizer

    def train() -> bytes:
        bounds = SampleBounds.of(tok)
        entries = bounds.needed([sample_entry(cfg.seed, d) for d in sentenced])
        sentences, _ = training_sentences(entries, bounds)
        return train_tokenizer(sentences, tok)

    model = stage("tokenizer train", train)
    tokenized = stage("encode", lambda: encode_documents(sentenced, model, resolve_threads(tok.encode_threads),
                                                         tok.encode_batch))
    tokenized = [t for t in tokenized if t.num_tokens > 0]
    vocab = tokenizer_info(model, tok, "spm.model").vocab_size
    groups = count_groups(sum(t.num_tokens for t in tokenized), cfg)

    def pack() -> list[Any]:
        by_key: dict[tuple[str, int], list[Any]] = defaultdict(list)
        for t in tokenized:
            by_key[(split_of(t.doc_id, cfg.seed, cfg.packing.valid_fraction), group_of(t.doc_id, cfg.seed, groups))
                   ].append(t)
        return [(k, pack_sorted(v, cfg, k[1], groups)[1]) for k, v in sorted(by_key.items())]

    packed = stage("packing", pack)

    def encode_tars() -> int:
        nbytes = 0
        for (split, group), seqs in packed:
            enc = list(encoded_samples(split, group, seqs, vocab))
            for a, b in size_runs((sample_tar_size(m) for _, m, _ in enc), cfg.shards.target_bytes,
                                  cfg.shards.target_samples):
                buf = io.BytesIO()
                write_tar(buf, ((k, m) for k, m, _ in enc[a:b]))
                nbytes += buf.tell()
        return nbytes

    tar_bytes = stage("tar encoding", encode_tars)
    return {"cpu": cpu, "documents": len(docs), "kept": len(kept), "distinct_hashes": len(set(hashes)),
            "tokens": sum(t.num_tokens for t in tokenized), "tar_bytes": tar_bytes,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


# ------------------------------------------------------------------ build (child process)


def _category(unique_name: str) -> str:
    from pipelines.report.timings import stage_of

    return BUILD_STAGE_OF.get(stage_of(unique_name), PIPELINE_ONLY)


def watch_stage_cpu(totals: dict[str, float], steps: dict[str, float], sampling_ms: int = 5, depth: int = 2) -> None:
    """Accumulate process CPU per build stage.

    Around each bundle the runner executes, the process CPU it took is split among the stages
    whose transforms the fused stage holds, in proportion to the time Beam's state sampler saw
    each transform run (its per-transform ``process_bundle_msecs``, sampled every
    ``sampling_ms``). Wraps a private FnApiRunner method: diagnostics only.
    """
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.worker import statesampler

    from pipelines.report.timings import transform_msecs

    statesampler.StateSampler.__init__.__defaults__ = (sampling_ms,)
    orig = fn_runner.FnApiRunner._execute_bundle

    def wrapped(self, ctx, bundle_manager, bundle_input):
        start = _cpu()
        result = orig(self, ctx, bundle_manager, bundle_input)
        cpu = _cpu() - start
        names = {tid: t.unique_name for tid, t in bundle_manager.process_bundle_descriptor.transforms.items()}
        share: dict[str, float] = defaultdict(float)
        by_step: dict[str, float] = defaultdict(float)
        for name, ms in transform_msecs(result.process_bundle.monitoring_infos, names).items():
            share[_category(name)] += ms
            by_step["/".join(name.split("/")[:depth])] += ms
        seen = sum(share.values())
        for step, ms in by_step.items():
            if seen > 0:
                steps[step] = steps.get(step, 0.0) + cpu * ms / seen
        if seen <= 0:  # too short to be sampled: its first real transform's stage takes it
            real = [n for n in names.values() if n and not n.startswith("ref_")]
            share = {_category(real[0]) if real else PIPELINE_ONLY: 1.0}
            seen = 1.0
        for cat, ms in share.items():
            totals[cat] = totals.get(cat, 0.0) + cpu * ms / seen
        return result

    fn_runner.FnApiRunner._execute_bundle = wrapped


def watch_fixed_costs(out: dict[str, float]) -> None:
    """CPU of graph construction (``build_pipeline``) and of the runner's planning (``create_stages``),
    plus the plan's size (fused stages; GroupByKeys in the graph)."""
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    import pipelines.jobs.build as build_module

    construct = build_module.build_pipeline
    plan = fn_runner.FnApiRunner.create_stages

    def timed_construct(*a, **kw):
        start = _cpu()
        try:
            return construct(*a, **kw)
        finally:
            out["construct"] = out.get("construct", 0.0) + _cpu() - start

    def timed_plan(self, proto):
        start = _cpu()
        ctx, stages = plan(self, proto)
        out["plan"] = out.get("plan", 0.0) + _cpu() - start
        out["fused_stages"] = len(stages)
        out["group_by_keys"] = sum(t.spec.urn == "beam:transform:group_by_key:v1"
                                   for t in proto.components.transforms.values())
        return ctx, stages

    build_module.build_pipeline = timed_construct
    fn_runner.FnApiRunner.create_stages = timed_plan


def run_build_child(raw: str, out: str, vocab_size: int, beam_args: list[str], depth: int = 2) -> dict[str, Any]:
    """One real build; CPU per fused stage, imports, and the rest of the driver."""
    t0 = _cpu()
    from pipelines.localrunner.preflight import local_build_process

    local_build_process()  # as `python -m pipelines.build` does for a local build
    from pipelines.jobs.build import run_build
    from pipelines.jobs.summary import summarize
    from pipelines.options import quiet_beam

    imports = _cpu() - t0
    quiet_beam()
    stages: dict[str, float] = {}
    fixed: dict[str, float] = {}
    steps: dict[str, float] = {}
    watch_stage_cpu(stages, steps, depth=depth)
    watch_fixed_costs(fixed)
    cfg = bench_config(raw, vocab_size)
    timings: dict[str, float] = {}
    w0, c0 = time.perf_counter(), _cpu()
    manifest = run_build(cfg, out, beam_args, timings=timings)
    total = _cpu() - c0
    s = summarize(manifest)
    return {"imports": imports, "total": total, "fixed": fixed, "steps": steps, "wall": time.perf_counter() - w0, "timings": timings,
            "stages": stages,
            "documents": s["documents_in"], "kept": s["kept"], "duplicates": s["duplicates"],
            "filtered": s["filtered"], "tokens": s["tokens"],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


# ------------------------------------------------------------------ comparison (parent)


def compare(floor: dict[str, Any], build: dict[str, Any], mb: float) -> tuple[list[str], dict[str, float]]:
    """Markdown table rows and the headline numbers."""
    fcpu, bcpu = floor["cpu"], build["stages"]
    lines = ["| stage | floor CPU-s/MB | build CPU-s/MB | build / floor |", "|---|---:|---:|---:|"]
    rows = [c for c in dict.fromkeys(BUILD_STAGE_OF.values())] + [PIPELINE_ONLY]
    for cat in rows:
        fl = sum(fcpu.get(f, 0.0) for f in FLOOR_OF_BUILD.get(cat, (cat,)))
        b = bcpu.get(cat, 0.0)
        ratio = f"{b / fl:.2f}x" if fl > 0 else "-"
        lines.append(f"| {cat} | {fl / mb:.3f} | {b / mb:.3f} | {ratio} |")
    in_stages = sum(bcpu.values())
    floor_work = sum(fcpu.get(f, 0.0) for f in FLOOR_STAGES)
    outside = build["total"] - in_stages
    fixed = build["fixed"]
    lines.append(f"| runner outside bundles (listing, tag, scheduling, side inputs, commit) | - | "
                 f"{(outside - fixed['construct'] - fixed['plan']) / mb:.3f} | - |")
    lines.append(f"| graph construction ({fixed['construct']:.2f} s) + planning ({fixed['plan']:.2f} s: "
                 f"{fixed['group_by_keys']:.0f} GroupByKeys, {fixed['fused_stages']:.0f} fused stages) | - | "
                 f"{(fixed['construct'] + fixed['plan']) / mb:.3f} | - |")
    lines.append(f"| imports (once per process) | {fcpu['imports'] / mb:.3f} | {build['imports'] / mb:.3f} | - |")
    total_b, total_f = build_total(build), floor_total(floor)
    lines.append(f"| **total** | **{total_f / mb:.3f}** | **{total_b / mb:.3f}** | **{total_b / total_f:.2f}x** |")
    same_work = in_stages - bcpu.get(PIPELINE_ONLY, 0.0)
    head = {"floor_cpu": total_f, "build_cpu": total_b, "ratio": total_b / total_f,
            "stage_ratio": same_work / floor_work,
            "floor_mb_s_core": mb / total_f, "build_mb_s_core": mb / total_b,
            "build_wall": build["wall"], "build_wall_mb_s": mb / build["wall"]}
    return lines, head


def child(flag: str, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run([sys.executable, __file__, flag, *args], capture_output=True, text=True, env=env, cwd=ROOT)
    if res.returncode != 0:
        raise SystemExit(f"{flag} child failed:\n{res.stderr[-4000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=2.0, help="Input size in MB (10 and 100 are the recorded runs).")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=7, help="Corpus seed.")
    parser.add_argument("--beam_args", default="", help="Extra Beam flags for the build, space-separated.")
    parser.add_argument("--top", type=int, default=15, help="How many of the costliest steps to list.")
    parser.add_argument("--step_depth", type=int, default=2,
                        help="Name parts of a step in the costliest-steps list (2: Dedupe/Near; 3: one level finer).")
    parser.add_argument("--label", default="", help="A note for the results file (what changed).")
    parser.add_argument("--out", "--output", dest="out", default=None,
                        help="Markdown results file (default: benchmarks/results/floor-<MB>mb.md).")
    parser.add_argument("--repeat", type=int, default=1,
                        help="Run floor and build alternately this many times each; the fastest run of each "
                             "is compared (a shared machine's speed drifts between runs).")
    parser.add_argument("--floor-child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--build-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_child:
        print(json.dumps(run_floor(args.floor_child[0], int(args.floor_child[1]))))
        return 0
    if args.build_child:
        raw, out, vocab = args.build_child
        print(json.dumps(run_build_child(raw, out, int(vocab), args.beam_args.split(), args.step_depth)))
        return 0

    from tests.prose import write_prose_corpus

    with scratch_dir("sf-floor-") as work:
        raw = work / "raw.jsonl"
        docs, nbytes = write_prose_corpus(raw, args.mb, args.seed)
        mb = nbytes / 1e6
        floors, builds = [], []
        for i in range(max(1, args.repeat)):  # alternated: a slow spell of the host hits both sides
            floors.append(child("--floor-child", str(raw), str(args.vocab_size)))
            builds.append(child("--build-child", str(raw), str(work / f"corpus-{i}"), str(args.vocab_size),
                                *(["--beam_args", args.beam_args] if args.beam_args else []),
                                "--step_depth", str(args.step_depth)))
    floor = min(floors, key=floor_total)
    build = min(builds, key=build_total)
    lines, head = compare(floor, build, mb)
    kept_share = build["kept"] / max(1, build["documents"])
    summary = [
        f"Input: {mb:.1f} MB, {docs:,} documents of real prose (tests/prose.py, seed {args.seed}); "
        f"kept {build['kept']:,} ({100 * kept_share:.0f}%), duplicates {build['duplicates']:,}, "
        f"filtered {build['filtered']:,}; {build['tokens']:,} tokens (floor: {floor['kept']:,} kept, "
        f"{floor['tokens']:,} tokens).",
        f"End to end: floor {head['floor_mb_s_core']:.2f} MB/s per core, build {head['build_mb_s_core']:.2f} MB/s "
        f"per core ({head['ratio']:.2f}x the floor's CPU; the floor's stages alone {head['stage_ratio']:.2f}x); build wall "
        f"{head['build_wall']:.1f} s ({head['build_wall_mb_s']:.2f} MB/s); peak RSS floor "
        f"{floor['peak_rss_mb']:.0f} MB, build {build['peak_rss_mb']:.0f} MB.",
    ]
    top = sorted(build["steps"].items(), key=lambda kv: -kv[1])[:args.top]
    steps = ["", f"The build's {args.top} costliest steps (CPU-s/MB; a step is a transform's first {args.step_depth} name parts):",
             ""] + [f"- `{name}`: {cpu / mb:.3f}" for name, cpu in top]
    if len(floors) > 1:
        summary.append("Runs (alternated, floor then build; the table compares the fastest of each): floor "
                       + ", ".join(f"{floor_total(f) / mb:.3f}" for f in floors) + " CPU-s/MB; build "
                       + ", ".join(f"{build_total(b) / mb:.3f}" for b in builds) + " CPU-s/MB; ratio of each pair "
                       + ", ".join(f"{build_total(b) / floor_total(f):.2f}x" for f, b in zip(floors, builds, strict=True)) + ".")
        pairs = sorted(build_total(b) / floor_total(f) for f, b in zip(floors, builds, strict=True))
        sf, sb = stagewise_fastest(floors, builds)
        summary.append(f"Less moved by the host's noise: the median pair {statistics.median(pairs):.2f}x; each part's "
                       f"fastest run summed (every stage, imports, the build's runner outside the stages): floor "
                       f"{sf / mb:.3f}, build {sb / mb:.3f} CPU-s/MB, {sb / sf:.2f}x.")
    text = "\n".join(summary + [""] + lines + steps)
    print(text)
    header = [f"# Build vs its floor ({mb:.0f} MB)", "", f"`{command_line()}`", "", machine("apache-beam", load=True),
              ""] + ([f"Change measured: {args.label}", ""] if args.label else [])
    write_results(args.out or ROOT / "benchmarks" / "results" / f"floor-{mb:.0f}mb.md", header + [text, ""])
    return 0


if __name__ == "__main__":
    sys.exit(main())
