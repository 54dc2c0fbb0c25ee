"""Benchmark: how the full build's wall time and peak memory scale with input size (local runner).

Generates English-like JSONL corpora of several sizes with
`shardforge.commands.synth.make_article` (deterministic), runs the whole build
(`pipelines.jobs.build.run_build`: clean, exact + near dedupe, sentences, tokenizer
training, tokenize, pack, shards, manifest) on Beam's FnApiRunner, one size per
fresh child process, and records wall time and peak memory.

Memory is measured three ways, because the runner may use several processes:
the child's own ``ru_maxrss`` (the runner's controller, and in the default
in-memory mode also the worker); a sampler thread that sums the RSS of the
child and all of its live descendants every 50 ms (the process-tree peak, the
honest number for ``--mode multi_processing``); and the largest ``VmHWM`` of
any descendant. The sampler also notes which fused stage was running at each
sample (by wrapping FnApiRunner's private ``_execute_bundle``; diagnostics only),
so the results name the stages at which memory peaks.

Every configuration of one size builds the SAME input file, written once by the parent. Each row records the sha256 of its
manifest (which lists every shard's sha256), and the results say whether the configurations
that must give the same bytes did (``MUST_MATCH``: every ``workersN`` and ``procsN`` = ``default``,
``capped-mp`` = ``capped``).

``--text prose`` builds real prose (``tests/prose.py``, bench_floor's input: paragraphs shipped
inside gensim, which cleaning keeps at 99 % with every rule run) instead of the synthetic articles.

Configurations (``--configs``, comma-separated; each runs at every size):

* ``default``: the pipeline's default packing groups and tokenizer sample
  (``PackingConfig.group_tokens`` = 4M tokens, ``TokenizerConfig.sample_docs`` =
  200k, the sample's byte bound 16 MB at 8k pieces), which make a whole-corpus sample up to
  ~16 MB of kept text and a 16 MB one past it.
* ``capped``: the same build with small caps (``--group-tokens``,
  ``--sample-docs``, ``--input-sentence-size``), so that every input size exceeds
  them: if our per-worker state were what grows, memory would flatten here.
* ``capped-mp``: ``capped`` with ``--direct_running_mode multi_processing
  --direct_num_workers 2`` (SDK workers in subprocesses; the controller keeps the data).
* ``runner``: no shardforge code: ReadFromText -> parse -> GroupByKey (1024 keys)
  -> sum of lengths on the same input, to show what the runner itself holds.
* ``runner-fused``: the same without the GroupByKey (one streaming stage).
* ``workers2``: ``default`` with ``--direct_num_workers 2`` (which selects two worker processes);
  ``workersN`` likewise with N worker processes (``workers4``, ``workers16``, ...).
* ``procs2``: ``default`` with ``--doc_processes 2`` (the runner in-process, cleaning and sketching in two
  document processes beside it: ``pipelines.localrunner.docpool``); ``procsN`` likewise with N.
* ``inmemory``: ``default`` with ``--spill_mb -1``: the local runner as Beam ships it, every
  stage-to-stage buffer in memory (``default`` spills past 32 MB per buffer: ``pipelines.localrunner.spill``).
* ``batched``: the default build with ``--batch_mb`` (``--batch-mb``, 20 MB):
  a chain of batch builds, each deduplicated against the index of the ones
  before (``pipelines.jobs.batched``). The input is written as files of
  ``--file-mb`` (2 MB) each, as crawls come, since batches are made of files.

Unless ``--no-bounds``, it also measures, outside Beam, the per-worker cost of
our config-bounded stages: bytes per token of one packing group (documents,
packing + encoding, its tokenized Parquet part) and SentencePiece training's
RSS per MB of training text.

The baseline of the time ratio is the smallest size: the printed ratio is
throughput (MB/s) at the largest size / at the smallest. Exponents are log-log
slopes (1.0 = linear, 0 = flat); "MB RSS per input MB" is the slope of a linear fit.
Writes benchmarks/results/scaling.md.

Run: ``python benchmarks/bench_scaling.py [--sizes 5,10,20] [--configs default,capped,capped-mp,runner,runner-fused]``
(all five at 5, 10, 20 MB take about 6 minutes on 2 shared cores).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import re
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import ROOT, bench_parser, command_line, machine, scratch_dir, write_results  # noqa: E402

CONFIGS = ("default", "capped", "capped-mp", "runner", "runner-fused", "batched", "workers2", "inmemory")
MP_ARGS = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
INMEMORY_ARGS = ["--spill_mb", "-1"]  # pipelines.localrunner.spill off: Beam's runner keeps every buffer in memory
# Pairs of configurations that differ only in how the runner executes: byte-identical corpora.
MUST_MATCH = (("capped", "capped-mp"), ("default", "inmemory"))  # and ("default", every "workersN")


def worker_count(config: str, kind: str = "workers") -> int | None:
    """N of a ``workersN`` configuration (``kind="procs"``: of a ``procsN`` one; N >= 2), else None."""
    m = re.fullmatch(kind + r"(\d+)", config)
    return int(m.group(1)) if m and int(m.group(1)) >= 2 else None


def workers_args(n: int) -> list[str]:
    """The build's options for N SDK worker processes (pipelines.options: N != 1 means N processes)."""
    return ["--direct_num_workers", str(n)]


def procs_args(n: int) -> list[str]:
    """The build's options for N document processes beside the in-process runner (pipelines.localrunner.docpool)."""
    return ["--doc_processes", str(n)]


def scaled(config: str) -> bool:
    """A ``workersN`` or ``procsN`` configuration: ``default`` on more processes."""
    return bool(worker_count(config) or worker_count(config, "procs"))


def config_args(config: str) -> list[str]:
    """The build's options of a configuration."""
    if n := worker_count(config):
        return workers_args(n)
    if n := worker_count(config, "procs"):
        return procs_args(n)
    return {"capped-mp": MP_ARGS, "inmemory": INMEMORY_ARGS}.get(config, [])


def must_match(configs: list[str]) -> list[tuple[str, str]]:
    """The pairs of these configurations that must build byte-identical corpora."""
    pairs = list(MUST_MATCH) + [("default", c) for c in configs if scaled(c)]
    return [(a, b) for a, b in pairs if a in configs and b in configs]


def write_corpus(path: Path, megabytes: float, seed: int = 11, file_mb: float | None = None,
                 text: str = "synth") -> tuple[int, int]:
    """JSONL articles until `megabytes` of text; returns (documents, bytes).

    file_mb: write a folder `path` of files of about that size instead of one file.
    text: "synth" (``shardforge.commands.synth`` articles) or "prose" (``tests/prose.py``, one file).
    """
    if text == "prose":
        from tests.prose import write_prose_corpus

        if file_mb:
            raise SystemExit("--text prose writes one file: not for the batched configuration")
        return write_prose_corpus(path, megabytes)
    from shardforge.commands.synth import make_article

    rng = random.Random(seed)
    target = int(megabytes * 1_000_000)
    per_file = int(file_mb * 1_000_000) if file_mb else target + 1
    docs = size = 0
    if file_mb:
        path.mkdir(parents=True, exist_ok=True)
    f = None
    try:
        while size < target:
            if f is None or f.tell() >= per_file:
                if f is not None:
                    f.close()
                f = open(path / f"part-{docs:08d}.jsonl" if file_mb else path, "w", encoding="utf-8")
            text = make_article(rng, rng.randint(12, 40), story=rng.random() < 0.2)
            line = json.dumps({"text": text, "url": f"https://example.org/{docs}"}) + "\n"
            f.write(line)
            docs += 1
            size += len(line.encode())
    finally:
        if f is not None:
            f.close()
    return docs, size


def corpus_stats(path: Path) -> tuple[int, int]:
    """(records, bytes) of a JSONL corpus: one file, or a folder of ``*.jsonl`` files."""
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    docs = size = 0
    for f in files:
        data = f.read_bytes()
        docs += data.count(b"\n")
        size += len(data)
    return docs, size


def input_path(inputs: Path, megabytes: float, batched: bool, text: str = "synth") -> Path:
    """Where the parent writes the input of one size: a file, or for ``batched`` a folder of files.

    One path per size and layout for every configuration: configurations that must agree
    (``MUST_MATCH``) read the same file.
    """
    return inputs / (f"raw-{text}-{megabytes:g}mb" + ("" if batched else ".jsonl"))


def manifest_digest(corpus: Path) -> str:
    """sha256 of a committed corpus's manifest.json (it lists every shard's sha256)."""
    import hashlib

    from schemas.manifest import MANIFEST_NAME

    return hashlib.sha256((corpus / MANIFEST_NAME).read_bytes()).hexdigest()


# ------------------------------------------------------------------ memory sampling


def _status_kb(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM of a process in kB (empty if it is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line[:5]] = int(line.split()[1])
    except OSError:
        pass
    return out


def _children(pid: int) -> list[int]:
    """Direct children of pid, from /proc/<pid>/task/*/children."""
    kids: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                kids.extend(int(x) for x in f.read().split())
    except OSError:
        pass
    return kids


def descendants(pid: int) -> list[int]:
    """Every live descendant of pid (children, grandchildren, ...)."""
    out, todo = [], _children(pid)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


class TreeSampler(threading.Thread):
    """Samples the RSS of this process + its descendants; remembers peaks, per stage too."""

    def __init__(self, interval: float = 0.05):
        super().__init__(daemon=True)
        self.interval = interval
        self._halt = threading.Event()
        self.stage = ""  # none yet: the first sample only sets the starting RSS
        self.tree_peak_kb = 0
        self.child_hwm_kb: dict[int, int] = {}
        self.stage_peak_kb: dict[str, int] = {}
        self.stage_rise_kb: dict[str, int] = {}
        self._last_kb = 0
        self._stage_start_kb = 0

    def enter(self, stage: str) -> None:
        self.stage = stage
        self._stage_start_kb = self._last_kb

    def sample(self) -> None:
        total = _status_kb(os.getpid()).get("VmRSS", 0)
        for pid in descendants(os.getpid()):
            st = _status_kb(pid)
            total += st.get("VmRSS", 0)
            self.child_hwm_kb[pid] = max(self.child_hwm_kb.get(pid, 0), st.get("VmHWM", 0))
        self.tree_peak_kb = max(self.tree_peak_kb, total)
        self._last_kb = total
        stage = self.stage
        if not stage:
            return
        self.stage_peak_kb[stage] = max(self.stage_peak_kb.get(stage, 0), total)
        rise = total - self._stage_start_kb
        self.stage_rise_kb[stage] = max(self.stage_rise_kb.get(stage, 0), rise)

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._halt.set()
        self.join()
        self.sample()


def short_stage(transforms: list[str]) -> str:
    """A readable fused-stage name from its transforms' unique names: distinct 'Top/Next' prefixes."""
    parts: list[str] = []
    for name in transforms:
        if not name or name.startswith("ref_"):
            continue  # runner-made data-channel reads/writes
        p = "/".join(name.split("/")[:2])
        if p not in parts:
            parts.append(p)
    text = " + ".join(parts) or "(runner internal)"
    return text if len(text) <= 100 else text[:97] + "..."


def watch_stages(sampler: TreeSampler) -> None:
    """Tell the sampler which fused stage runs (wraps a private FnApiRunner method: diagnostics only)."""
    try:
        from apache_beam.runners.portability.fn_api_runner import fn_runner
    except ImportError:
        return
    orig = getattr(fn_runner.FnApiRunner, "_execute_bundle", None)
    if orig is None:
        return

    def wrapped(self, ctx, bundle_manager, bundle_input):
        stage = bundle_manager.stage
        sampler.enter(short_stage([t.unique_name for t in stage.transforms]) or stage.name)
        try:
            return orig(self, ctx, bundle_manager, bundle_input)
        finally:
            sampler.enter("(between stages)")

    fn_runner.FnApiRunner._execute_bundle = wrapped


# ------------------------------------------------------------------ one run (child process)


def build_config(raw: Path, near: bool, caps: dict[str, int] | None, text: str = "synth"):
    """The benchmark's BuildConfig; caps: group_tokens / sample_docs / input_sentence_size overrides.
    Prose is cleaned by every rule; the synthetic text without Gopher's duplicated-n-gram rule."""
    from schemas.config import BuildConfig

    tokenizer: dict[str, Any] = {"vocab_size": 8000}
    packing: dict[str, Any] = {"max_seq_len": 512}
    if caps:
        tokenizer.update(sample_docs=caps["sample_docs"], input_sentence_size=caps["input_sentence_size"])
        packing["group_tokens"] = caps["group_tokens"]
    return BuildConfig.model_validate({
        "sources": [{"name": "web", "input": str(raw)}],
        # Template text repeats its 5-10-grams across sentences far more than prose,
        # so Gopher's duplicated-n-gram rule would drop every document: switch it off.
        "clean": {"disabled_rules": ["dup_ngrams"]} if text == "synth" else {},
        "dedupe": {"near": near},
        "tokenizer": tokenizer,
        "packing": packing,
    })


def run_runner_baseline(raw: Path, beam_args: list[str], group: bool, out: Path) -> dict[str, Any]:
    """No shardforge stage: read, parse, [group by 1024 keys,] sum the text lengths.

    With ``group`` the texts cross a GroupByKey (a stage boundary with data); without it
    everything fuses into one streaming stage (CombineGlobally pre-combines per bundle).
    The total goes to the file ``out``.
    """
    import apache_beam as beam

    from pipelines.options import BuildOptions, finalize_options

    opts = finalize_options(BuildOptions(beam_args))
    with beam.Pipeline(options=opts) as p:
        texts = p | "Read" >> beam.io.ReadFromText(str(raw)) | "Parse" >> beam.Map(lambda ln: json.loads(ln)["text"])
        if group:
            sizes = (
                texts
                | "Key" >> beam.Map(lambda t: (len(t) % 1024, t))
                | "Group" >> beam.GroupByKey()
                | "Sizes" >> beam.Map(lambda kv: sum(len(t) for t in kv[1]))
            )
        else:
            sizes = texts | "Sizes" >> beam.Map(len)
        _ = sizes | "Total" >> beam.CombineGlobally(sum) | "Write" >> beam.Map(lambda n: out.write_text(str(n)))
    return {"kept": 0, "duplicates": 0, "tokens": 0, "shards": 0}


def child(megabytes: float, near: bool, config: str, caps: dict[str, int], batch_mb: float = 20.0,
          file_mb: float = 2.0, raw: Path | None = None, text: str = "synth") -> dict[str, Any]:
    """Run one build (in this process) and report time, memory, output counts and the manifest's sha256.

    raw: the input (a JSONL file, or for ``batched`` a folder of them), as the parent wrote it
    with ``input_path``; None: write it into this run's scratch folder.
    """
    from pipelines.localrunner.preflight import local_build_process

    local_build_process()  # as `python -m pipelines.build` does for a local build
    from pipelines.jobs.build import run_build
    from pipelines.jobs.summary import summarize
    from pipelines.options import quiet_beam

    quiet_beam()
    sampler = TreeSampler()
    watch_stages(sampler)
    beam_args = config_args(config)
    with scratch_dir("sf-scaling-") as work:
        batched = config == "batched"
        if raw is None:
            raw = work / ("raw" if batched else "raw.jsonl")
            write_corpus(raw, megabytes, file_mb=file_mb if batched else None, text=text)
        docs, nbytes = corpus_stats(raw)
        base_kb = _status_kb(os.getpid()).get("VmRSS", 0)
        sampler.sample()  # the starting RSS, from which the first stage's rise counts
        sampler.enter("(pipeline setup)")
        sampler.start()
        cpu0 = _cpu_s(resource.RUSAGE_SELF), _cpu_s(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        if config.startswith("runner"):
            counts = run_runner_baseline(raw, beam_args, group=config == "runner", out=work / "count.txt")
            counts["manifest_sha256"] = None
        else:
            source = raw / "*.jsonl" if batched else raw
            default_caps = config in ("default", "batched", "inmemory") or scaled(config)
            cfg = build_config(source, near, None if default_caps else caps, text)
            manifest = run_build(cfg, str(work / "corpus"), beam_args, batch_mb=batch_mb if batched else None)
            s = summarize(manifest)
            counts = {"kept": s["kept"], "duplicates": s["duplicates"], "tokens": s["tokens"],
                      "shards": s["shards"], "manifest_sha256": manifest_digest(work / "corpus")}
        wall = time.perf_counter() - t0
        # this process (the runner's controller, and the in-process worker) / the worker processes it waited for
        cpu = _cpu_s(resource.RUSAGE_SELF) - cpu0[0], _cpu_s(resource.RUSAGE_CHILDREN) - cpu0[1]
        sampler.stop()
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    exited_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # largest waited-for child
    worker_kb = max([exited_kb, *sampler.child_hwm_kb.values()])
    # Stages ranked by how much the tree's RSS rose while they ran (from its RSS when they started).
    rises = sorted(sampler.stage_rise_kb.items(), key=lambda kv: -kv[1])[:6]
    stages = [(name, rise / 1024, sampler.stage_peak_kb[name] / 1024) for name, rise in rises]
    return {"megabytes": nbytes / 1e6, "docs": docs, "wall_s": wall, "cpu_self_s": cpu[0], "cpu_children_s": cpu[1],
            "base_rss_mb": base_kb / 1024, "self_peak_mb": self_kb / 1024,
            "tree_peak_mb": max(sampler.tree_peak_kb, self_kb) / 1024,
            "worker_peak_mb": worker_kb / 1024, "workers_seen": len(sampler.child_hwm_kb),
            "stages": stages, **counts}


def _cpu_s(who: int) -> float:
    """User + system CPU seconds of this process (RUSAGE_SELF) or of its waited-for children."""
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


# ------------------------------------------------------------------ per-worker bounds of our stages


def synthetic_tokenized(tokens: int, seed: int = 0) -> list[Any]:
    """TokenizedDocuments shaped like the build's (12-40 sentences of 10-40 ids below 8000), >= tokens."""
    from pipelines.records import TokenizedDocument

    rng = random.Random(seed)
    docs, n = [], 0
    while n < tokens:
        sents = tuple(tuple(rng.randrange(5, 8000) for _ in range(rng.randint(10, 40)))
                      for _ in range(rng.randint(12, 40)))
        k = sum(map(len, sents))
        docs.append(TokenizedDocument(f"web-000000000000-{len(docs):08d}", "web", sents, k))
        n += k
    return docs


def measure_pack_group(tokens: int) -> dict[str, float]:
    """Bytes per token one packing group costs its worker: the documents as Python objects, then
    the extra peak of packing + encoding (what _PlanGroup / _WriteGroup hold) and of writing its
    tokenized Parquet part (Python via tracemalloc, Arrow via its memory pool)."""
    import tracemalloc

    import pyarrow as pa

    from pipelines.corpus.shards import encoded_samples
    from pipelines.intermediates import size_runs, write_tokenized_parquet
    from pipelines.pack.step import pack_sorted
    from schemas.config import BuildConfig
    from schemas.sample import sample_tar_size

    cfg = BuildConfig.model_validate({"sources": [{"name": "web", "input": "unused"}]})
    tracemalloc.start()
    docs = synthetic_tokenized(tokens)
    n = sum(d.num_tokens for d in docs)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    _, seqs, _ = pack_sorted(docs, cfg, 0, 1)
    enc = list(encoded_samples("train", 0, seqs, 8000))
    size_runs((sample_tar_size(m) for _, m, _ in enc), cfg.shards.target_bytes, None)
    _, pack_peak = tracemalloc.get_traced_memory()
    del seqs, enc
    base, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    arrow0 = pa.default_memory_pool().bytes_allocated()
    write_tokenized_parquet(sorted(docs, key=lambda d: d.doc_id), io.BytesIO())
    _, parquet_peak = tracemalloc.get_traced_memory()
    arrow = max(0, (pa.default_memory_pool().max_memory() or 0) - arrow0)
    tracemalloc.stop()
    return {"tokens": n, "docs_b": held / n, "pack_b": (pack_peak - held) / n,
            "parquet_b": (parquet_peak - base + arrow) / n}


def measure_spm(megabytes: float) -> dict[str, float]:
    """RSS rise of SentencePiece unigram-8k training on `megabytes` of sentences (ru_maxrss)."""
    from pipelines.clean.sentences import split_sentences
    from pipelines.tokenizer.train import train_sentencepiece
    from schemas.config import TokenizerConfig
    from shardforge.commands.synth import make_article

    rng = random.Random(11)
    sentences: list[str] = []
    chars = 0
    while chars < megabytes * 1e6:
        for s in split_sentences(make_article(rng, rng.randint(12, 40), story=rng.random() < 0.2)):
            sentences.append(s)
            chars += len(s)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    train_sentencepiece(sentences, TokenizerConfig(vocab_size=8000))
    rise = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    return {"text_mb": chars / 1e6, "sentences": len(sentences), "rise_mb": rise,
            "wall_s": time.perf_counter() - t0}


def run_child(flag: str, value: str) -> dict[str, Any]:
    """Run this script with `flag value` in a fresh process; its last stdout line is JSON."""
    res = subprocess.run([sys.executable, __file__, flag, value], capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def measure_bounds() -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Per-worker costs of our config-bounded stages, each at two sizes (fresh processes)."""
    pack = [run_child("--pack-child", str(t)) for t in (250_000, 1_000_000)]
    spm = [run_child("--spm-child", str(mb)) for mb in (2.0, 8.0)]
    return pack, spm


# ------------------------------------------------------------------ fitting and reporting


def loglog_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) on log(x)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line y = a + b x."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def summarize_config(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Fitted exponents and slopes of one configuration's rows (needs >= 2 sizes)."""
    xs = [r["megabytes"] for r in rows]
    ts = [r["wall_s"] for r in rows]
    mem = [r["tree_peak_mb"] for r in rows]
    a_t, b_t = linear_fit(xs, ts)
    a_m, b_m = linear_fit(xs, mem)
    return {"time_exp": loglog_slope(xs, ts), "mem_exp": loglog_slope(xs, mem),
            "throughput_ratio": (xs[-1] / ts[-1]) / (xs[0] / ts[0]),
            "t0": a_t, "s_per_mb": b_t, "mem0": a_m, "mem_per_mb": b_m}


def config_label(config: str, caps: dict[str, int]) -> str:
    caps_txt = (f"group_tokens={caps['group_tokens']:,}, sample_docs={caps['sample_docs']:,}, "
                f"input_sentence_size={caps['input_sentence_size']:,}")
    from schemas.config import PackingConfig, TokenizerConfig

    pack, tok = PackingConfig(), TokenizerConfig()
    if n := worker_count(config):
        return f"pipeline defaults, `{' '.join(workers_args(n))}` ({n} SDK worker processes)"
    if n := worker_count(config, "procs"):
        return f"pipeline defaults, `{' '.join(procs_args(n))}` (the runner in-process, {n} document processes)"
    return {
        "default": f"pipeline defaults (group_tokens={pack.group_tokens:,}, sample_docs={tok.sample_docs:,}, "
                   f"sample bytes {tok.effective_sample_bytes:,}): whole-corpus tokenizer sample up to that; "
                   "stage data past 32 MB per buffer spilled to disk (`pipelines.localrunner.spill`)",
        "capped": f"small caps ({caps_txt}): several packing groups, capped sample",
        "capped-mp": f"small caps, `{' '.join(MP_ARGS)}`",
        "inmemory": f"pipeline defaults, `{' '.join(INMEMORY_ARGS)}` (Beam's runner holding every buffer in memory)",
        "runner": "runner only: ReadFromText -> parse -> GroupByKey (1024 keys) -> sum of lengths; "
                  "no shardforge stage",
        "batched": f"pipeline defaults, `--batch_mb {caps['batch_mb']:g}`, input as files of {caps['file_mb']:g} MB "
                   "(`pipelines.jobs.batched`)",
        "runner-fused": "runner only, no GroupByKey: ReadFromText -> parse -> len -> CombineGlobally(sum) "
                        "(one streaming stage)",
    }[config]


def conclusion(results: dict[str, list[dict[str, Any]]], pack: list[dict[str, float]],
               spm: list[dict[str, float]]) -> list[str]:
    """The results' reading, numbers filled in from this run (only for the configs that ran)."""
    from schemas.config import TokenizerConfig

    fit = {c: summarize_config(rows) for c, rows in results.items() if len(rows) > 1}
    out = ["## Conclusion", ""]
    if "batched" in fit:
        b, rows = fit["batched"], results["batched"]
        peaks = ", ".join(f"{r['tree_peak_mb']:.0f} MB at {r['megabytes']:.0f} MB" for r in rows)
        growth = rows[-1]["tree_peak_mb"] / rows[0]["tree_peak_mb"]
        verdict = ("bounded by the batch" if growth < 1.25 else "NOT bounded") + (
            f" ({growth:.2f}x from the smallest to the largest input, {rows[-1]['megabytes'] / rows[0]['megabytes']:.0f}x "
            "the data)")
        line = (f"- **Batched build (`--batch_mb`): peak memory {verdict}.** Peak RSS {peaks}: "
                f"size^{b['mem_exp']:.2f} ({b['mem_per_mb']:.2f} MB RSS per input MB). Time ~ size^"
                f"{b['time_exp']:.2f} (t = {b['t0']:.1f} s + {b['s_per_mb']:.2f} s/MB).")
        if "default" in results:
            d = results["default"]
            line += (" The one-shot build on the same runner: " + ", ".join(
                f"{r['tree_peak_mb']:.0f} MB at {r['megabytes']:.0f} MB" for r in d) + ".")
        out.append(line)
    if "runner" in fit and "runner-fused" in fit:
        out.append(
            f"- **The local runner holds every GroupByKey's input.** With no shardforge code, one GroupByKey of the "
            f"text costs {fit['runner']['mem_per_mb']:.1f} MB of RSS per input MB; the same read without it (one "
            f"fused, streaming stage) stays flat ({fit['runner-fused']['mem_per_mb']:+.1f} MB per MB). FnApiRunner "
            "(apache_beam/runners/portability/fn_api_runner/execution.py) keeps each stage's whole output in the "
            "controller process (`ListBuffer`: encoded elements; `GroupingBuffer`: every grouped value decoded to a "
            "Python object) until the consuming stage has run, and gives a stage its whole input as one bundle "
            "per worker. So no pipeline with shuffles has bounded memory on it.")
    if "default" in fit and "capped" in fit:
        d, c = fit["default"], fit["capped"]
        out.append(
            f"- **With every cap below the input the build's memory is flat:** {c['mem_per_mb']:.1f} MB RSS per "
            f"input MB (size^{c['mem_exp']:.2f}): the runner's stage data past `--spill_mb` per buffer is on disk "
            "and streams through the bundles (`pipelines.localrunner.spill`), and what a stage holds of ours is bounded by "
            f"config. **At the defaults it grows {d['mem_per_mb']:.1f} MB per MB** (size^{d['mem_exp']:.2f}): "
            f"below the tokenizer's sample caps (`sample_bytes` {TokenizerConfig().effective_sample_bytes / 1e6:.0f} MB "
            "at the default vocabulary, `sample_docs` 200k, `input_sentence_size` 2M) the sample is the whole "
            "corpus, held once as strings and once by SentencePiece's trainer (~20 bytes per sample byte); past "
            "the caps it stops growing.")
    if "inmemory" in fit:
        m = fit["inmemory"]
        out.append(
            f"- **Beam's runner as it ships** (`--spill_mb -1`, every stage-to-stage buffer in memory, "
            f"GroupByKey inputs decoded to Python objects): {m['mem_per_mb']:.1f} MB per input MB "
            f"(size^{m['mem_exp']:.2f}).")
    if "capped-mp" in fit and "capped" in results:
        mp, one = results["capped-mp"][-1], results["capped"][-1]
        out.append(
            f"- **Multi-processing does not help:** at {mp['megabytes']:.0f} MB the controller still peaks at "
            f"{mp['self_peak_mb']:.0f} MB (in-memory run: {one['self_peak_mb']:.0f} MB), each SDK worker at up to "
            f"{mp['worker_peak_mb']:.0f} MB (it gets its whole partition as one bundle, and pays its own imports), "
            f"and the process tree at {mp['tree_peak_mb']:.0f} MB vs {one['tree_peak_mb']:.0f} MB "
            f"({fit['capped-mp']['mem_per_mb']:.1f} MB per input MB).")
    out += workers_lines(results) + workers_lines(results, "procs")
    if "capped" in fit:
        c = fit["capped"]
        reading = ("below 1 while the start-up is still being amortized" if c["time_exp"] < 0.97 else
                   "linear" if c["time_exp"] <= 1.03 else "above 1: the cost per MB grows with the input")
        out.append(
            f"- **Time against input size, with caps:** t = {c['t0']:.1f} s + {c['s_per_mb']:.2f} s/MB "
            f"(log-log exponent {c['time_exp']:.2f}: {reading}).")
    if pack:
        r = pack[-1]
        from schemas.config import PackingConfig

        group = PackingConfig().group_tokens
        per_group = (r["docs_b"] + max(r["pack_b"], r["parquet_b"])) * group / 1e9
        out.append(
            f"- **What a distributed runner's worker holds of ours** is bounded by config: a packing group costs "
            f"{r['docs_b']:.0f} B/token as documents plus {r['pack_b']:.0f} B/token to pack it, or "
            f"{r['parquet_b']:.0f} B/token to write its tokenized Parquet part: ~{per_group:.1f} GB at the default "
            f"{group / 1e6:g}M `group_tokens`.")
    if spm:
        r = spm[-1]
        rate = r["rise_mb"] / r["text_mb"]
        text_mb = r["text_mb"] / r["sentences"] * 2e6  # the default input_sentence_size, at this text's length
        out.append(
            f"- **SentencePiece training** costs ~{rate:.0f} MB of RSS per MB of training text, on one worker: "
            f"with the default `input_sentence_size` (2M sentences, {text_mb:.0f} MB of this text; more for longer "
            f"real sentences) that is ~{rate * text_mb / 1000:.1f} GB or more, the largest single-worker need of "
            "the build (extrapolated from the small sizes above).")
    out.append("")
    return out


SCALED_TABLES = {
    "workers": ("SDK worker processes against one", "--direct_num_workers N", "workers", "controller CPU s",
                "workers' CPU s", "largest worker MB"),
    "procs": ("Document processes against none", "--doc_processes N", "processes", "runner's process CPU s",
              "document processes' CPU s", "largest document process MB"),
}


def workers_lines(results: dict[str, list[dict[str, Any]]], kind: str = "workers") -> list[str]:
    """N SDK worker processes (``kind="procs"``: N document processes) against one (``default``): wall,
    speed-up, CPU in the build's process and in its children, process-tree and largest-child peaks."""
    title, flag, count, self_cpu, child_cpu, child_peak = SCALED_TABLES[kind]
    counts = sorted((n, c) for c in results if (n := worker_count(c, kind)))
    one = {r["megabytes"]: r for r in results.get("default", [])}
    rows = [(mb, 1, r) for mb, r in one.items()]
    rows += [(r["megabytes"], n, r) for n, c in counts for r in results[c] if r["megabytes"] in one]
    if not counts or not one:
        return []
    out = [f"- **{title}** (`{flag}`; one run each: alternate the order "
           "and repeat before reading a small difference):", "",
           f"  | input MB | {count} | wall s | speed-up over 1 | {self_cpu} | {child_cpu} | "
           f"process-tree peak MB | {child_peak} |",
           "  |---:|---:|---:|---:|---:|---:|---:|---:|"]
    for mb, n, r in sorted(rows, key=lambda t: (t[0], t[1])):
        worker = f"{r['worker_peak_mb']:.0f}" if n > 1 else "(in-process)"
        out.append(f"  | {mb:.1f} | {n} | {r['wall_s']:.1f} | {one[mb]['wall_s'] / r['wall_s']:.2f}x | "
                   f"{r['cpu_self_s']:.1f} | {r['cpu_children_s']:.1f} | "
                   f"{r['tree_peak_mb']:.0f} | {worker} |")
    return out + [""]


def run_size(config: str, mb: float, args: argparse.Namespace, near: bool, inputs: Path) -> dict[str, Any] | None:
    """One configuration at one size in a fresh child process, on the size's shared input
    (written here the first time); its result row, or None (its stderr printed) if it failed."""
    batched = config == "batched"
    raw = input_path(inputs, mb, batched, args.text)
    if not raw.exists():
        write_corpus(raw, mb, file_mb=args.file_mb if batched else None, text=args.text)
    cmd = [sys.executable, __file__, "--child", str(mb), "--child-config", config, "--child-input", str(raw),
           "--text", args.text,
           "--group-tokens", str(args.group_tokens), "--sample-docs", str(args.sample_docs),
           "--input-sentence-size", str(args.input_sentence_size), "--batch-mb", str(args.batch_mb),
           "--file-mb", str(args.file_mb)]
    cmd += ["--no-near-dedupe"] if not near else []
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0:
        print(res.stderr[-3000:], file=sys.stderr)
        return None
    return json.loads(res.stdout.strip().splitlines()[-1])


def identity_lines(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """A "Determinism" section: for each ``MUST_MATCH`` pair that ran at a size, whether the two
    manifests (and so every shard) are byte-identical."""
    out = ["## Determinism", ""]
    for a, b in must_match(list(results)):
        by_size = {round(r["megabytes"], 3): r for r in results.get(b, [])}
        for ra in results.get(a, []):
            rb = by_size.get(round(ra["megabytes"], 3))
            if rb is None:
                continue
            same = ra["manifest_sha256"] == rb["manifest_sha256"]
            out.append(f"- {ra['megabytes']:.1f} MB, `{b}` vs `{a}` (same input file): "
                       + ("**byte-identical** manifest and shards" if same else
                          f"**DIFFERENT** manifests ({ra['tokens']:,} vs {rb['tokens']:,} tokens): a determinism "
                          "defect, localize it with benchmarks/check_determinism.py")
                       + f" (manifest sha256 {ra['manifest_sha256'][:12]}...)")
    return out + [""] if len(out) > 2 else []


def main() -> int:
    ap = bench_parser(__doc__, "scaling")
    ap.add_argument("--sizes", default="5,10,20", help="Input sizes in MB, comma-separated.")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"Configurations to run at every size, from {','.join(CONFIGS)}, workersN "
                         "(N >= 2 SDK worker processes) and procsN (N >= 2 document processes).")
    ap.add_argument("--text", choices=("synth", "prose"), default="synth",
                    help="Input text: synthetic articles (shardforge.commands.synth) or real prose (tests/prose.py).")
    ap.add_argument("--group-tokens", type=int, default=500_000, help="Cap: PackingConfig.group_tokens.")
    ap.add_argument("--sample-docs", type=int, default=1_000, help="Cap: TokenizerConfig.sample_docs.")
    ap.add_argument("--input-sentence-size", type=int, default=20_000,
                    help="Cap: TokenizerConfig.input_sentence_size.")
    ap.add_argument("--no-near-dedupe", action="store_true", help="Exact dedupe only.")
    ap.add_argument("--batch-mb", type=float, default=20.0, help="batched: input MB per batch (--batch_mb).")
    ap.add_argument("--file-mb", type=float, default=2.0, help="batched: size of each input file in MB.")
    ap.add_argument("--one-shot-max", type=float, default=None,
                    help="Run configs other than batched only at sizes up to this many MB (a one-shot local "
                         "build needs ~35 MB of RAM per input MB).")
    ap.add_argument("--no-bounds", action="store_true",
                    help="Skip measuring the per-worker bounds of our stages (packing group, tokenizer training).")
    ap.add_argument("--child", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--pack-child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--spm-child", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--child-config", default="default", help=argparse.SUPPRESS)
    ap.add_argument("--child-input", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    near = not args.no_near_dedupe
    caps = {"group_tokens": args.group_tokens, "sample_docs": args.sample_docs,
            "input_sentence_size": args.input_sentence_size, "batch_mb": args.batch_mb, "file_mb": args.file_mb}
    if args.child is not None:
        raw = Path(args.child_input) if args.child_input else None
        print(json.dumps(child(args.child, near, args.child_config, caps, args.batch_mb, args.file_mb, raw,
                               args.text)))
        return 0
    if args.pack_child is not None:
        print(json.dumps(measure_pack_group(args.pack_child)))
        return 0
    if args.spm_child is not None:
        print(json.dumps(measure_spm(args.spm_child)))
        return 0

    sizes = [float(s) for s in args.sizes.split(",")]
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS and not scaled(c)]
    if unknown:
        ap.error(f"unknown configs {unknown}; known: {CONFIGS}, workersN and procsN (N >= 2)")
    if args.text == "prose" and "batched" in configs:
        ap.error("--text prose writes one input file: not for the batched configuration (it needs many files)")
    results: dict[str, list[dict[str, Any]]] = {}
    with scratch_dir("sf-scaling-inputs-") as inputs:  # one input per size, shared by every config
        for config in configs:
            rows = results[config] = []
            for mb in sizes:
                if config != "batched" and args.one_shot_max is not None and mb > args.one_shot_max:
                    continue
                row = run_size(config, mb, args, near, inputs)
                if row is None:
                    return 1
                rows.append(row)
                print(f"[{config}] {row['megabytes']:.1f} MB ({row['docs']} docs): {row['wall_s']:.1f} s, "
                      f"peak tree RSS {row['tree_peak_mb']:.0f} MB (self {row['self_peak_mb']:.0f}, "
                      f"largest worker {row['worker_peak_mb']:.0f}, start {row['base_rss_mb']:.0f}); CPU "
                      f"{row['cpu_self_s']:.1f} s in the process, {row['cpu_children_s']:.1f} s in its children",
                      flush=True)
                for name, rise, peak in row["stages"][:3]:
                    print(f"    +{rise:5.0f} MB (to {peak:.0f}) during {name}", flush=True)
            if len(rows) > 1:
                f = summarize_config(rows)
                print(f"[{config}] time ~ size^{f['time_exp']:.2f}, peak RSS ~ size^{f['mem_exp']:.2f} "
                      f"({f['mem_per_mb']:.1f} MB RSS per input MB)", flush=True)
    identity = identity_lines(results)
    for line in identity[2:]:
        print(line, flush=True)

    pack, spm = ([], []) if args.no_bounds else measure_bounds()
    for r in pack:
        print(f"packing group of {r['tokens']:,} tokens: documents {r['docs_b']:.1f} B/token, packing + encoding "
              f"+{r['pack_b']:.1f} B/token, tokenized Parquet part +{r['parquet_b']:.1f} B/token", flush=True)
    for r in spm:
        print(f"SentencePiece training on {r['text_mb']:.1f} MB ({r['sentences']:,} sentences): "
              f"RSS +{r['rise_mb']:.0f} MB ({r['rise_mb'] / r['text_mb']:.1f} MB per MB of text)", flush=True)

    lines = [
        "# Build scaling: wall time and peak memory (local runner)",
        "",
        f"Machine: {machine('apache-beam', load=True)}.",
        "",
        f"Command: `{command_line()}` (caps: --group-tokens {args.group_tokens} "
        f"--sample-docs {args.sample_docs} --input-sentence-size {args.input_sentence_size})",
        "",
        "Full build (`run_build`: clean, exact"
        f"{' + near (MinHash/LSH)' if near else ''} dedupe, sentences, SentencePiece unigram 8k training, "
        "tokenize, FULL-SENTENCES 512 packing, Parquet intermediates, shards, manifest, report) on "
        "FnApiRunner, one fresh child process per size. Input: "
        + ("real prose (`tests/prose.py`: Wikipedia and ABC news paragraphs shipped inside gensim, "
           "recombined into distinct documents; every clean rule on). " if args.text == "prose" else
           "synthetic English-like JSONL from `shardforge.commands.synth.make_article` (Gopher's `dup_ngrams` rule "
           "disabled: template text repeats n-grams far more than prose). ")
        + "**Peak RSS** is the peak of the sum of RSS over the child and its "
        "live descendants (sampled every 50 ms, and never below the child's ru_maxrss); \"start\" is the "
        "child's RSS before the pipeline (interpreter, imports, input counted). Every configuration of a size "
        "builds the same input file (written once).",
        "",
    ]
    lines += conclusion(results, pack, spm)
    lines += identity
    for config, rows in results.items():
        lines += [f"## {config}: {config_label(config, caps)}", "",
                  "| input MB | documents | tokens | shards | wall s | MB/s | start MB | peak RSS MB "
                  "| controller peak MB | largest worker MB |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            worker = f"{r['worker_peak_mb']:.0f}" if r["workers_seen"] else "(in-process)"
            lines.append(f"| {r['megabytes']:.1f} | {r['docs']} | {r['tokens']:,} | {r['shards']} | "
                         f"{r['wall_s']:.1f} | {r['megabytes'] / r['wall_s']:.3f} | {r['base_rss_mb']:.0f} | "
                         f"{r['tree_peak_mb']:.0f} | {r['self_peak_mb']:.0f} | {worker} |")
        if len(rows) > 1:
            f = summarize_config(rows)
            lines += ["", f"Time ~ size^**{f['time_exp']:.2f}** (t = {f['t0']:.1f} s + {f['s_per_mb']:.2f} s/MB; "
                      f"throughput largest/smallest {f['throughput_ratio']:.2f}x). Peak RSS ~ size^**"
                      f"{f['mem_exp']:.2f}** (RSS = {f['mem0']:.0f} MB + **{f['mem_per_mb']:.1f} MB per input MB**)."]
        big = rows[-1]
        if config == "batched":
            lines += ["", "Stages run in the spawned batch processes, which this process's stage watcher does "
                      "not see: no per-stage attribution.", ""]
            continue
        lines += ["", f"Fused stages during which the process-tree RSS rose most, at {big['megabytes']:.0f} MB "
                  "(rise from the RSS at the stage's start, and the peak reached):", ""]
        lines += [f"- +{rise:.0f} MB (to {peak:.0f} MB): `{name}`" for name, rise, peak in big["stages"][:4]]
        lines.append("")
    if pack or spm:
        lines += ["## Per-worker cost of our config-bounded stages", "",
                  "Measured outside Beam, each in a fresh process (`--pack-child`, `--spm-child`): a packing "
                  "group's documents as the worker holds them (Python objects; tracemalloc), the extra peak of "
                  "packing + encoding its samples, and of writing its tokenized Parquet part (tracemalloc + "
                  "Arrow's pool); SentencePiece unigram-8k training's RSS rise (ru_maxrss).", "",
                  "| what | size | documents B/token | + packing B/token | + Parquet part B/token |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| packing group | {r['tokens']:,} tokens | {r['docs_b']:.1f} | {r['pack_b']:.1f} | "
                  f"{r['parquet_b']:.1f} |" for r in pack]
        lines += ["", "| SentencePiece training text | sentences | RSS rise MB | MB per MB of text | wall s |",
                  "|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['text_mb']:.1f} MB | {r['sentences']:,} | {r['rise_mb']:.0f} | "
                  f"{r['rise_mb'] / r['text_mb']:.1f} | {r['wall_s']:.1f} |" for r in spm]
        lines.append("")
    write_results(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
