"""Where a build's time went, per stage: Beam's own per-transform execution times, summed by stage.

Every Beam SDK harness (the in-process one and each ``--direct_num_workers`` worker process) runs
a state sampler that attributes the wall time of its bundle-processing thread to the transform
running at each tick (Beam's default period: 200 ms), and returns it to the runner with each
bundle as the ``pardo_execution_time`` start / process / finish msecs monitoring infos, keyed by
the transform's unique name. The FnApiRunner hands all of them back in its result
(``RunnerResult.monitoring_infos``); here they are summed per build stage (``stage_of``: by the
top-level names of ``pipelines.graph``). ``benchmarks/bench_floor.py`` splits CPU with the same
two functions.

The numbers are run-dependent, so they never enter ``report.json`` (byte-identical run to run)
nor ``report.html`` (identical on every runner mode, which tests check); the driver writes them
after the run to ``timings.json`` and ``timings.html`` next to the report. Runners that do not
return these infos to the driver (Dataflow) get the driver phases only and a line saying so.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipelines.report import charts
from pipelines.report.html import figure_html, page_head, table
from pipelines.report.record import TIMINGS_HTML, TIMINGS_JSON, TIMINGS_SVG
from shardforge.storage import join, write_text_atomic

OTHER = "other"

# The stages in build order, each with what it covers (the table's last column).
STAGES: dict[str, str] = {
    "read": "list, open, decompress and parse the raw files (ReadSources)",
    "clean": "normalization, line and document rules, language ID, PII replacement (Clean)",
    "decontaminate": "evaluation n-grams, their filter and index, the overlapping documents (Decontaminate)",
    "dedupe": "exact and near duplicates: sketches, LSH, verification, components, index (Dedupe)",
    "sentences": "sentence splitting (SplitSentences)",
    "tokenizer training": "the bounded training sample and SentencePiece / BPE training (TrainTokenizer)",
    "encode": "tokenizing the documents (Tokenize, HasTokens)",
    "packing": "packing groups: routing, grouping, packing, cutting the shards, the tokenized Parquet parts (Groups, WriteCorpus/Pack...)",
    "shard writing": "tar encoding and writing each shard, the commit (WriteCorpus/WriteShards...)",
    "intermediates": "the clean Parquet intermediate (WriteIntermediates; the tokenized parts are written by WriteCorpus/Pack)",
    "reject log": "the reject log with reasons and snippets (WriteRejects)",
    "accounting": "every record in one bucket, per source (Account)",
    "report": "report.json, its plots and report.html (Report)",
    OTHER: "transforms of no stage above",
}
# The graph's top-level transform names -> stage ("Read" / "AllDocuments": a ReadSource used alone).
_TOP_LEVEL: dict[str, str] = {
    "ReadSources": "read", "Read": "read", "AllDocuments": "read", "SpreadDocuments": "read",
    "Clean": "clean",
    "Decontaminate": "decontaminate",
    "Dedupe": "dedupe",
    "SplitSentences": "sentences",
    "TrainTokenizer": "tokenizer training", "Tokenizer": "tokenizer training",
    "Tokenize": "encode", "HasTokens": "encode",
    "Groups": "packing",
    "WriteCorpus": "shard writing",
    "WriteIntermediates": "intermediates",
    "AllRejects": "reject log", "RejectLog": "reject log", "WriteRejects": "reject log",
    "Account": "accounting",
    "Report": "report",
}
# WriteCorpus's steps that plan the packing (the rest writes the shards and commits).
_PACKING_STEPS = frozenset({"VocabSize", "EndIds", "GroupForPacking", "Pack", "CollectPlans", "Offsets"})
ABOUT = ("Run-dependent: wall-clock measurements of the run that wrote this file, not part of the corpus "
         "(the manifest and report.json are byte-identical run to run; this file is not). 'stages' is the "
         "time Beam's state sampler saw each stage's transforms run, summed over bundles, worker processes "
         "and (for --batch_mb) batches; 'driver_seconds' is the wall time the driver process saw.")


# The tables' columns, named as the page's text names them (timings.json's keys: stages, driver_seconds).
STAGE_COLUMN = "sampled seconds"
DRIVER_COLUMN = "wall seconds"
PAGE_ABOUT = ("Run-dependent: wall-clock measurements of the run that wrote this page, not part of the corpus "
              "(the manifest and report.json are byte-identical run to run; this page is not). "
              f"<b>{STAGE_COLUMN}</b>: the time Beam's state sampler saw each stage's transforms run, summed "
              f"over bundles, worker processes and (for --batch_mb) batches. <b>{DRIVER_COLUMN}</b>: the time "
              "the build's driver process saw each of its phases take.")


def stage_of(unique_name: str) -> str:
    """The build stage of a transform, from its unique name (``Dedupe/Near/Candidates`` -> ``dedupe``)."""
    parts = unique_name.split("/")
    top = parts[0].split("[")[0]
    stage = _TOP_LEVEL.get(top, OTHER)
    if top == "WriteCorpus" and len(parts) > 1 and parts[1] in _PACKING_STEPS:
        return "packing"
    return stage


def step_of(unique_name: str) -> str:
    """A transform's top-level name and its first part (``Dedupe/Near``): a finer grain than the stage."""
    return "/".join(unique_name.split("/")[:2])


def transform_msecs(infos: Iterable[Any], names: Mapping[str, str] | None = None) -> dict[str, float]:
    """Milliseconds per transform from Beam monitoring infos (start + process + finish bundle).

    names: transform id -> unique name, where the infos' PTRANSFORM labels are ids (a process
    bundle descriptor's); without it the labels are taken as the names (a runner result's).
    """
    from apache_beam.metrics import monitoring_infos as mi

    urns = {mi.START_BUNDLE_MSECS_URN, mi.PROCESS_BUNDLE_MSECS_URN, mi.FINISH_BUNDLE_MSECS_URN}
    out: dict[str, float] = {}
    for info in infos:
        if info.urn in urns:
            label = info.labels.get("PTRANSFORM", "")
            name = names.get(label, "") if names is not None else label
            out[name] = out.get(name, 0.0) + float(mi.extract_counter_value(info))
    return out


def seconds_by_stage(msecs: Mapping[str, float]) -> dict[str, float]:
    """Transform milliseconds -> seconds per stage, every stage listed (in build order)."""
    out = dict.fromkeys(STAGES, 0.0)
    for name, ms in msecs.items():
        out[stage_of(name)] += ms / 1000
    return out


@dataclass(frozen=True)
class Runner:
    """What ran the pipeline: a name for people and the number of processes that ran bundles."""

    name: str
    workers: int  # processes running bundles at once (1: in-process)


@dataclass
class RunTimings:
    """One pipeline run: its wall time in the driver and its seconds per stage (None: unavailable)."""

    runner: Runner
    wall: float
    stages: dict[str, float] | None
    unavailable: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"runner": self.runner.name, "worker_processes": self.runner.workers,
                "pipeline_seconds": round(self.wall, 3),
                "stages": None if self.stages is None else {k: round(v, 3) for k, v in self.stages.items()},
                "unavailable": self.unavailable}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunTimings:
        return cls(Runner(d["runner"], d["worker_processes"]), d["pipeline_seconds"], d["stages"], d["unavailable"])


def unavailable_line(runner: str) -> str:
    return (f"per-stage timings unavailable on this runner ({runner}): it returns no per-transform execution "
            "times to the driver (on Dataflow, the job page shows the time per step)")


def measure(result: Any, runner: Runner, wall: float) -> RunTimings:
    """Seconds per stage of a finished pipeline's result (``Pipeline.result`` after its ``with`` block)."""
    infos = getattr(result, "monitoring_infos", None)
    if not callable(infos):
        return RunTimings(runner, wall, None, unavailable_line(runner.name))
    try:
        msecs = transform_msecs(infos())
    except Exception as e:  # noqa: BLE001 - a diagnostic never fails a committed build
        return RunTimings(runner, wall, None, f"per-stage timings unavailable: reading them failed ({e})")
    if not msecs:
        return RunTimings(runner, wall, None, unavailable_line(runner.name))
    return RunTimings(runner, wall, seconds_by_stage(msecs))


@dataclass
class BuildTimings:
    """Everything ``timings.json`` holds: the driver's phases and one or more pipeline runs (batches)."""

    driver: dict[str, float] = field(default_factory=dict)  # wall seconds per driver phase
    runs: list[tuple[str, RunTimings]] = field(default_factory=list)  # (label, run): one, or one per batch

    def stages(self) -> dict[str, float] | None:
        """Seconds per stage summed over the runs; None when no run measured them."""
        measured = [r.stages for _, r in self.runs if r.stages is not None]
        if not measured:
            return None
        return {k: sum(s.get(k, 0.0) for s in measured) for k in STAGES}

    def unavailable(self) -> str | None:
        if not self.runs:
            return "no pipeline ran in this run (every batch was committed before)"
        missing = [(label, r) for label, r in self.runs if r.stages is None]
        if not missing:
            return None
        if len(missing) == len(self.runs):
            return missing[0][1].unavailable
        return f"{len(missing)} of {len(self.runs)} runs unmeasured ({missing[0][1].unavailable})"

    def to_json(self) -> dict[str, Any]:
        stages = self.stages()
        wall = sum(r.wall for _, r in self.runs)
        workers = max((r.runner.workers for _, r in self.runs), default=1)
        total = sum(stages.values()) if stages is not None else None
        doc: dict[str, Any] = {
            "about": ABOUT,
            "runner": self.runs[0][1].runner.name if self.runs else None,
            "worker_processes": workers,
            "driver_seconds": {k: round(v, 3) for k, v in self.driver.items()},
            "pipeline_seconds": round(wall, 3),
            "stages": None if stages is None else {k: round(v, 3) for k, v in stages.items()},
            "stages_total_seconds": None if total is None else round(total, 3),
            # In-process, bundles run one at a time: the rest of the pipeline's wall time is the
            # runner's own (graph construction, planning, moving data between stages). With worker
            # processes the stages overlap, so there is no such difference.
            "outside_stages_seconds": (round(wall - total, 3) if total is not None and workers == 1
                                       and self.unavailable() is None else None),
            "unavailable": self.unavailable(),
            "stage_help": STAGES,
        }
        if len(self.runs) > 1 or (self.runs and self.runs[0][0]):
            doc["runs"] = [{"label": label, **r.to_json()} for label, r in self.runs]
        return doc


def summary_line(doc: dict[str, Any]) -> str:
    """One line for the build's stderr: seconds per stage, or why there are none."""
    stages = doc["stages"]
    if stages is None:
        return f"stage timings: {doc['unavailable']}; pipeline {doc['pipeline_seconds']:.1f} s"
    parts = ", ".join(f"{k} {v:.2f}" for k, v in stages.items() if v > 0 or k != OTHER)
    if doc["worker_processes"] > 1:
        parts += f"; summed over {doc['worker_processes']} worker processes"
    elif doc["outside_stages_seconds"] is not None:
        parts += f"; outside the stages {doc['outside_stages_seconds']:.1f}"
    if doc["unavailable"]:
        parts += f"; {doc['unavailable']}"
    batches = f" over {len(doc['runs'])} batches" if len(doc.get("runs", [])) > 1 else ""
    return (f"stage timings (s{batches}): {parts}; pipeline {doc['pipeline_seconds']:.1f} s "
            f"(run-dependent: {TIMINGS_JSON})")


def plot_stages(doc: dict[str, Any]) -> str:
    """Horizontal bars (SVG): seconds per stage, in build order from the top."""
    stages = doc["stages"] or {}
    if not stages:
        return charts.message_chart("Stage timings", doc["unavailable"] or "no stage timings")
    names = list(stages)
    xlabel = STAGE_COLUMN + (f" (summed over {doc['worker_processes']} worker processes)"
                          if doc["worker_processes"] > 1 else "")
    return charts.hbar_chart("Stage timings", names, [stages[n] for n in names], ["#e69f00"] * len(names),
                             [f"{stages[n]:.2f}" for n in names], xlabel)


def timings_table(doc: dict[str, Any]) -> str:
    """The "Stage timings" section: the stage table (or why there is none) and the driver phases."""
    head = (f"<h2>Stage timings</h2><p>Runner: {html.escape(str(doc['runner']))}. Run-dependent (not part of the "
            f'corpus): <a href="{TIMINGS_JSON}">{TIMINGS_JSON}</a>.</p>')
    driver = table(["driver phase", DRIVER_COLUMN], [[k, f"{v:.2f}"] for k, v in doc["driver_seconds"].items()])
    if doc["stages"] is None:
        return head + f"<p>{html.escape(doc['unavailable'])}.</p>" + driver
    total = doc["stages_total_seconds"] or 0.0
    rows = [[k, f"{v:.2f}", f"{100 * v / total:.1f}%" if total else "-", doc["stage_help"][k]]
            for k, v in doc["stages"].items()]
    rows.append(["all stages", f"{total:.2f}", "100%" if total else "-", ""])
    if doc["outside_stages_seconds"] is not None:
        rows.append(["outside the stages", f"{doc['outside_stages_seconds']:.2f}", "",
                     "graph construction, planning, moving data between stages"])
    note = (f"<p>The {STAGE_COLUMN} are summed over {doc['worker_processes']} worker processes that ran "
            "at once: the stages can add up to more than the wall time.</p>" if doc["worker_processes"] > 1 else "")
    if doc["unavailable"]:
        note += f"<p>{html.escape(doc['unavailable'])}.</p>"
    return head + note + table(["stage", STAGE_COLUMN, "share", "what it covers"], rows) + driver


def render_timings_html(doc: dict[str, Any], svg: str) -> str:
    """timings.html: the table and the bar chart (inline, linking its file)."""
    return f"""{page_head("shardforge build timings")}
<p>{PAGE_ABOUT} The build report: <a href="report.html">report.html</a>.</p>
{timings_table(doc)}
{figure_html(TIMINGS_SVG, "seconds per stage", svg)}
</body></html>
"""


def write_timings(output: str, timings: BuildTimings) -> dict[str, Any]:
    """Write timings.json, timings.svg and timings.html under ``output``; returns the document."""
    doc = timings.to_json()
    write_text_atomic(join(output, TIMINGS_JSON), json.dumps(doc, indent=1) + "\n")
    svg = plot_stages(doc)
    write_text_atomic(join(output, TIMINGS_SVG), svg)
    write_text_atomic(join(output, TIMINGS_HTML), render_timings_html(doc, svg))
    return doc
