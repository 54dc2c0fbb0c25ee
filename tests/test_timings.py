"""Stage timings: timings.json / timings.html next to the report, through the real CLI.

Real builds of the demo corpus: in-process, with two worker processes, on a runner that returns
no per-transform times (Beam's BundleBasedDirectRunner), and batched (``--batch_mb``).
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from forkserver import run_python

from pipelines.report.record import REPORT_HTML, REPORT_JSON, TIMINGS_HTML, TIMINGS_JSON, TIMINGS_SVG
from pipelines.report.timings import OTHER, STAGES, stage_of
from schemas.config import BuildConfig, DecontaminateConfig
from shardforge.commands.demo import demo_build_config

ROOT = Path(__file__).resolve().parents[1]
ROUNDING = 0.001 * len(STAGES)  # each stage is rounded to 1 ms in timings.json


def small_config(demo_corpus: dict[str, str]) -> dict[str, Any]:
    cfg = demo_build_config(demo_corpus).model_dump(mode="json")
    cfg["tokenizer"]["vocab_size"] = 400
    cfg["packing"].update({"max_seq_len": 96, "valid_fraction": 0.1})
    cfg["shards"] = {"target_samples": 40, "target_bytes": 1 << 30}
    return cfg


def cli_build(config: dict[str, Any], out: Path, *flags: str) -> tuple[dict[str, Any], str]:
    """`python -m pipelines.build --config ... --output out FLAGS` in a second process: (summary, stderr)."""
    cfg_path = out.parent / f"{out.name}.json"
    cfg_path.write_text(json.dumps(config))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = run_python(["-m", "pipelines.build", "--config", str(cfg_path), "--output", str(out),
                       "--json", *flags], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), proc.stderr


def read_timings(folder: Path) -> dict[str, Any]:
    return json.loads((folder / TIMINGS_JSON).read_text())


def check_measured(doc: dict[str, Any], workers: int) -> None:
    """Every named stage, non-negative, summing to no more than the pipeline's wall x worker processes."""
    assert list(doc["stages"]) == list(STAGES) and doc["unavailable"] is None
    assert all(v >= 0 for v in doc["stages"].values())
    total = sum(doc["stages"].values())
    assert doc["stages_total_seconds"] == pytest.approx(total, abs=ROUNDING)
    assert doc["worker_processes"] == workers
    assert 0 < total <= doc["pipeline_seconds"] * workers + ROUNDING
    # The stages that do work on every build were measured (not zeros printed for "unknown").
    for stage in ("dedupe", "shard writing", "report"):
        assert doc["stages"][stage] > 0, stage
    assert doc["stages"][OTHER] == 0  # every transform of the graph belongs to a named stage


def test_every_transform_of_the_graph_belongs_to_a_named_stage(demo_corpus, tmp_path):
    """A transform added to pipelines.graph without a stage would land in "other": name it in
    pipelines.report.timings (both the one-shot graph and the batch graph of --batch_mb / serve)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.graph import AppendTo, build_pipeline
    from pipelines.options import RunnerPlan

    cfg = BuildConfig.model_validate(small_config(demo_corpus))
    (tmp_path / "evals.jsonl").write_text('{"q": "a question"}\n')
    decon = cfg.model_copy(update={"decontaminate": DecontaminateConfig(paths=[str(tmp_path / "evals.jsonl")])})
    two_workers = PipelineOptions(["--direct_num_workers", "2"])  # adds SpreadDocuments
    for append, opts, c in ((None, None, cfg), (AppendTo(corpus=str(tmp_path / "corpus"), tag="v1-0"), None, cfg),
                            (None, two_workers, cfg), (None, None, decon)):
        p = beam.Pipeline(runner="FnApiRunner", options=opts)
        build_pipeline(p, c, str(tmp_path / "out"), append=append, tag="v1-0",
                       plan=RunnerPlan.of(opts) if opts is not None else None)
        # the leaves: the transforms that run (and that Beam's sampler times)
        names = [t.unique_name for t in p.to_runner_api().components.transforms.values() if not t.subtransforms]
        assert len(names) > 100
        assert any(n.startswith("SpreadDocuments/") for n in names) == (opts is two_workers)
        unplaced = sorted({n.split("/")[0] for n in names if stage_of(n) == OTHER})
        assert unplaced == [], unplaced
        optional = set() if c is decon else {"decontaminate"}  # a stage only where its step is configured
        assert {stage_of(n) for n in names} == set(STAGES) - {OTHER} - optional


def test_stage_of_splits_write_corpus_into_packing_and_shard_writing():
    assert stage_of("WriteCorpus/Pack") == "packing" == stage_of("WriteCorpus/GroupForPacking/Write")
    assert stage_of("WriteCorpus/WriteShards") == "shard writing" == stage_of("WriteCorpus/CommitManifest")
    assert stage_of("ReadSources/Read[ccnews]/ReadFiles") == "read"
    assert stage_of("Clean/Clean/ParDo(_Clean)") == "clean"
    assert stage_of("SomethingNew/Map") == OTHER


@pytest.fixture(scope="module")
def in_process(demo_corpus, tmp_path_factory) -> tuple[Path, dict[str, Any], str]:
    out = tmp_path_factory.mktemp("timings") / "one"
    summary, stderr = cli_build(small_config(demo_corpus), out)
    return out, summary, stderr


@pytest.mark.slow
def test_in_process_build_writes_stage_timings_beside_the_report(in_process):
    out, summary, stderr = in_process
    doc = read_timings(out)
    check_measured(doc, workers=1)
    assert doc["runner"] == "FnApiRunner, in-process"
    # In-process the bundles run one at a time: stages + the runner's own time = the pipeline's wall.
    assert doc["outside_stages_seconds"] == pytest.approx(doc["pipeline_seconds"] - doc["stages_total_seconds"],
                                                          abs=0.002)
    assert set(doc["driver_seconds"]) == {"tag", "pipeline"}
    assert doc["pipeline_seconds"] == doc["driver_seconds"]["pipeline"]
    assert "Run-dependent" in doc["about"] and "runs" not in doc
    # The summary: stage seconds on stdout, one line on stderr.
    assert summary["stage_seconds"] == {k: round(v, 2) for k, v in doc["stages"].items()}
    assert summary["timings"] == str(out / TIMINGS_JSON)
    assert set(summary["wall_seconds"]) == {"tag", "pipeline"}
    line = next(x for x in stderr.splitlines() if x.startswith("stage timings"))
    assert "dedupe " in line and "report " in line and "outside the stages" in line and TIMINGS_JSON in line
    # report.html links the timings; timings.html holds the table and the plot.
    report_page = (out / REPORT_HTML).read_text()
    assert "<h2>Stage timings" in report_page and f'href="{TIMINGS_HTML}"' in report_page
    assert f'href="{TIMINGS_JSON}"' in report_page
    page = (out / TIMINGS_HTML).read_text()
    assert "<h2>Stage timings" in page and f'<a href="{TIMINGS_SVG}" aria-label=' in page
    for stage, secs in doc["stages"].items():
        assert f"<tr><td>{stage}</td><td>{secs:.2f}</td>" in page
    chart = (out / TIMINGS_SVG).read_text()
    assert chart.startswith("<svg ") and chart.rstrip("\n") in page
    for stage, secs in doc["stages"].items():  # one labelled bar per stage, its seconds at the end
        assert f">{stage}</text>" in chart and f">{secs:.2f}</text>" in chart
    # Nothing run-dependent in report.json.
    assert "seconds" not in (out / REPORT_JSON).read_text()


@pytest.mark.slow
def test_worker_processes_report_stage_timings_and_the_report_stays_byte_identical(demo_corpus, in_process,
                                                                                    tmp_path):
    """With --direct_num_workers 2 the stages ran in the worker processes, whose Beam harnesses return
    their times to the driver: they are summed (and may exceed the wall); the report is the same bytes."""
    one, _, _ = in_process
    two = tmp_path / "two"
    summary, stderr = cli_build(small_config(demo_corpus), two, "--direct_num_workers", "2")
    doc = read_timings(two)
    check_measured(doc, workers=2)
    assert doc["runner"] == "FnApiRunner, 2 worker processes" and doc["outside_stages_seconds"] is None
    assert "summed over 2 worker processes" in next(x for x in stderr.splitlines() if x.startswith("stage timings"))
    assert "summed over 2 worker processes" in (two / TIMINGS_HTML).read_text()
    for name in (REPORT_JSON, REPORT_HTML):  # the timings change neither (two runs, two runner modes)
        assert (two / name).read_bytes() == (one / name).read_bytes(), name
    assert read_timings(one) != doc


@pytest.mark.slow
def test_a_runner_without_per_transform_times_says_so(demo_corpus, tmp_path):
    """Beam's BundleBasedDirectRunner returns no monitoring infos (like Dataflow to a driver): the
    driver phases are still there, and the stage table says why it is empty instead of zeros."""
    out = tmp_path / "bundle"
    summary, stderr = cli_build(small_config(demo_corpus), out, "--runner", "BundleBasedDirectRunner")
    doc = read_timings(out)
    assert doc["stages"] is None and doc["stages_total_seconds"] is None
    assert doc["unavailable"].startswith("per-stage timings unavailable on this runner (BundleBasedDirectRunner)")
    assert set(doc["driver_seconds"]) == {"tag", "pipeline"} and doc["pipeline_seconds"] > 0
    assert summary["stage_seconds"] is None
    assert "per-stage timings unavailable on this runner" in stderr
    page = (out / TIMINGS_HTML).read_text()
    assert "per-stage timings unavailable on this runner" in page and "<th>driver phase</th>" in page
    assert "<th>stage</th>" not in page


@pytest.mark.slow
def test_batched_build_sums_the_stage_timings_of_its_batches(demo_corpus, tmp_path):
    out = tmp_path / "batched"
    total = sum(os.path.getsize(p) for g in demo_corpus.values() for p in glob.glob(g))
    summary, stderr = cli_build(small_config(demo_corpus), out, "--batch_mb", str(total / 1.6 / 1e6))  # 2 batches
    doc = read_timings(out)
    batches = sorted(out.glob(f"versions/*/{TIMINGS_JSON}"))
    versions = json.loads((out / "manifest.json").read_text())["version"]
    assert versions >= 2 and len(batches) == versions == len(doc["runs"])
    assert set(doc["driver_seconds"]) == {"batched"}
    check_measured(doc, workers=1)
    own = [read_timings(b.parent) for b in batches]
    for stage in STAGES:  # the root sums the batches; each batch folder holds its own
        assert doc["stages"][stage] == pytest.approx(sum(b["stages"][stage] for b in own), abs=ROUNDING)
    assert doc["pipeline_seconds"] == pytest.approx(sum(b["pipeline_seconds"] for b in own), abs=ROUNDING)
    assert doc["pipeline_seconds"] <= doc["driver_seconds"]["batched"]
    assert "over " + str(versions) + " batches" in next(x for x in stderr.splitlines()
                                                        if x.startswith("stage timings"))
    assert summary["stage_seconds"] == {k: round(v, 2) for k, v in doc["stages"].items()}
    index = (out / REPORT_HTML).read_text()  # the batched root page (run-dependent itself) shows the sum
    assert "<h2>Stage timings" in index and "<tr><td>dedupe</td>" in index


def test_batches_some_unmeasured_sum_what_was_measured_and_say_what_was_not():
    """A batched build whose batches ran on runners with and without per-transform times (a rerun
    with other Beam flags): the measured batches are summed, the rest named, nothing made up."""
    from pipelines.report.timings import BuildTimings, Runner, RunTimings, summary_line, timings_table

    measured = RunTimings(Runner("FnApiRunner, in-process", 1), 2.0, dict.fromkeys(STAGES, 0.1))
    blind = RunTimings(Runner("BundleBasedDirectRunner", 1), 3.0, None, "per-stage timings unavailable on this runner")
    doc = BuildTimings({"batched": 6.0}, [("v1", measured), ("v2", blind)]).to_json()
    assert doc["stages"] == dict.fromkeys(STAGES, 0.1) and doc["pipeline_seconds"] == 5.0
    assert doc["unavailable"].startswith("1 of 2 runs unmeasured (per-stage timings unavailable")
    assert doc["outside_stages_seconds"] is None  # the wall of an unmeasured batch is no runner overhead
    assert [r["label"] for r in doc["runs"]] == ["v1", "v2"] and doc["runs"][1]["stages"] is None
    line = summary_line(doc)
    assert "over 2 batches" in line and "1 of 2 runs unmeasured" in line and "outside the stages" not in line
    assert "1 of 2 runs unmeasured" in timings_table(doc)
    none = BuildTimings({"batched": 0.1}, []).to_json()  # a rerun of a finished batched build
    assert none["stages"] is None and "no pipeline ran" in summary_line(none) and "no pipeline ran" in \
        timings_table(none)


def test_timings_page_names_its_columns_the_way_its_text_does():
    """Each table's seconds column is named as the page's text defines it (not timings.json's keys)."""
    import re

    from pipelines.report.timings import DRIVER_COLUMN, BuildTimings, Runner, RunTimings, render_timings_html

    run = RunTimings(Runner("FnApiRunner, in-process", 1), 2.0, dict.fromkeys(STAGES, 0.1))
    doc = BuildTimings({"tag": 0.2, "pipeline": 2.0}, [("", run)]).to_json()
    page = render_timings_html(doc, "<svg></svg>")
    headers = re.findall(r"<th>([^<]+)</th>", page)
    assert headers == ["stage", "sampled seconds", "share", "what it covers", "driver phase", DRIVER_COLUMN]
    text = re.sub(r"<[^>]+>", "", page.split("<table>")[0])  # the page's text above its tables
    for column in ("sampled seconds", "wall seconds"):
        assert f"{column}:" in text, column
    assert "'stages'" not in text and "'driver_seconds'" not in text
