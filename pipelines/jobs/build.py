"""The build job: raw text -> clean -> dedupe -> sentences -> tokenizer -> tokenize -> pack -> shards.

    python -m pipelines.build --input 'data/*.jsonl' --output out/corpus
    python -m pipelines.build --input ccnews=gs://raw/cc/*.jsonl.gz --output gs://corpus/v1 \\
        --runner DataflowRunner --project P --region R --temp_location gs://tmp/beam

The driver of a one-shot build: options, the attempt tag, one run of the graph
(``pipelines.graph``), the summary (a few lines, or JSON with ``--json``). ``--batch_mb`` hands the
build to ``pipelines.jobs.batched``. Its --help is ``pipelines.flags.BUILD_DESCRIPTION``.
"""

from __future__ import annotations

import json
import sys
import time

from apache_beam.options.pipeline_options import StandardOptions

from pipelines.corpus.commit import check_output, one_shot_attempt
from pipelines.flags import build_parser, take_json, take_print_config
from pipelines.graph import build_pipeline
from pipelines.jobs.build_config import build_config_from_options
from pipelines.jobs.memory import batching_hint
from pipelines.jobs.summary import batched_report, read_report, read_timings, summarize, summary_text
from pipelines.localrunner import progress
from pipelines.options import (
    LOCAL_RUNNER,
    BuildOptions,
    RunnerPlan,
    check_beam_args,
    describe_runner,
    finalize_options,
    handle_help,
    make_pipeline,
    quiet_beam,
    spill_settings,
)
from pipelines.report.record import build_warnings, decontamination_warnings
from pipelines.report.timings import (
    TIMINGS_JSON,
    BuildTimings,
    measure,
    summary_line,
    write_timings,
)
from pipelines.sources.listing import check_raw_input
from pipelines.sources.naming import fixed_folder
from schemas.config import BuildConfig
from schemas.errors import UserError
from schemas.manifest import MANIFEST_NAME, Manifest
from shardforge.console.run import data_job_interrupted, run_cli
from shardforge.storage import exists, is_glob, is_within, join, redact_url


def check_output_outside_inputs(cfg: BuildConfig, output: str) -> None:
    """UserError when a source's input lists everything under a folder (a folder, or a ``**`` glob) that holds
    ``output``: a rerun would read the corpus's own files (or an interrupted attempt's) as input. A batched
    build leaves them out of its listing instead."""
    for src in cfg.sources:
        recursive = not is_glob(src.input) or "**" in src.input
        if recursive and is_within(output, fixed_folder(src.input)):
            raise UserError(f"--output {redact_url(output)} lies inside source {src.name}'s input "
                            f"{redact_url(src.input)}: a rerun would read the corpus's own files as input; put the "
                            "output elsewhere, or name the input files by a pattern that cannot reach it")


def run_build(cfg: BuildConfig, output: str, beam_args: list[str] | None = None,
              batch_mb: float | None = None, timings: dict[str, float] | None = None) -> Manifest:
    """Run the build on the configured runner and return the committed manifest.

    batch_mb: build in batches of that much input (``pipelines.jobs.batched``).
    timings: filled with the driver's wall time per phase, in seconds: ``tag`` (listing and
    fingerprinting the inputs), ``pipeline`` (the Beam run: every stage, the commit and the
    report), or ``batched`` for a batched build.

    A committed build also gets ``timings.json`` / ``timings.html`` next to its report: those
    phases and the seconds per stage Beam measured (``pipelines.report.timings``; run-dependent, so
    outside report.json).
    """
    from shardforge.storage.contract import load_manifest

    timings = {} if timings is None else timings
    start = time.monotonic()
    for src in cfg.sources:
        check_raw_input(src.name, src.input)
    if batch_mb is not None:
        from pipelines.corpus.commit import check_folder
        from pipelines.jobs.batched import build_in_batches

        check_folder(output)
        m = build_in_batches(cfg, output, batch_mb, beam_args or [])  # writes the sum over its batches
        timings["batched"] = time.monotonic() - start
        return m
    from pipelines.corpus.commit import raise_if_lost

    check_output_outside_inputs(cfg, output)
    opts = finalize_options(BuildOptions(beam_args or []))  # first: a runner that cannot run says so at once
    runner = describe_runner(opts)  # before make_pipeline, which rewrites the running mode
    attempt = one_shot_attempt(cfg)  # the tag, and the fingerprints the reader checks what it reads against
    tag = attempt.tag
    check_output(output, tag)
    timings["tag"] = time.monotonic() - start
    start = time.monotonic()
    try:
        with progress.local_bars(opts), make_pipeline(opts) as p:
            build_pipeline(p, cfg, output, tag=tag, plan=RunnerPlan.of(opts), expect=attempt.fingerprints)
    except Exception:
        raise_if_lost(output, MANIFEST_NAME, tag)  # another build committed meanwhile: that is the reason
        raise
    timings["pipeline"] = time.monotonic() - start
    raise_if_lost(output, MANIFEST_NAME, tag)  # the commit step lost: say so (its objects are gone)
    if not exists(join(output, MANIFEST_NAME)):  # the commit step found objects of this attempt removed
        raise UserError(f"{redact_url(output)}: nothing was committed: objects of this build were removed while "
                        "it wrote them (the warnings above name them). Run one writer per output; a rerun "
                        "starts again.")
    write_timings(output, BuildTimings(dict(timings), [("", measure(p.result, runner, timings["pipeline"]))]))
    manifest, _ = load_manifest(output)
    return manifest


def build_config_yaml(cfg: BuildConfig, sources: bool = True) -> str:
    """The resolved build config as YAML (what --print-config prints; --config loads it again); without
    sources, its sources are left out (none were given: --input adds them)."""
    import yaml

    data = cfg.model_dump(mode="json")
    head = "# resolved build config\n"
    if not sources:
        del data["sources"]
        head += "# no sources: --input URL gives them (or a sources: list here)\n"
    return head + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def main(argv: list[str] | None = None) -> int:
    """CLI entry (`python -m pipelines.build`, `shardforge build`); 2 with one line on user errors."""
    quiet_beam()
    argv = sys.argv[1:] if argv is None else argv
    if handle_help(build_parser(), argv):
        return 0

    committed: list[str] = []  # the output, once its version is committed (a Ctrl-C after that says so)

    def body() -> int:
        as_json, args = take_json(argv)  # the driver's own flag: Beam knows no --json
        print_config, args = take_print_config(args)
        check_beam_args(args)  # Beam would silently drop a flag no option knows (a typo, --vocab-size)
        opts = BuildOptions(args)
        o = opts.view_as(BuildOptions)
        if not o.output and not print_config:
            raise UserError("--output URL is required")
        cfg = build_config_from_options(opts, need_sources=not print_config)
        if print_config:
            from shardforge.storage.contract import load_config_data

            given = bool(o.input) or bool(o.config and load_config_data(BuildConfig, o.config).get("sources"))
            print(build_config_yaml(cfg, sources=given), end="")
            return 0
        _, beam_args = build_parser(runner_flags=False).parse_known_args(args)
        if o.batch_mb is None and opts.view_as(StandardOptions).runner in (None, LOCAL_RUNNER):
            hint = batching_hint(cfg, spilled=spill_settings(opts) is not None)
            if hint:
                print(hint, file=sys.stderr)
        timings: dict[str, float] = {}
        manifest = run_build(cfg, o.output, beam_args, batch_mb=o.batch_mb, timings=timings)
        committed.append(o.output)
        report = read_report(o.output) if o.batch_mb is None else batched_report(o.output)
        summary = summarize(manifest, report)
        # Wall time this driver process saw per phase, in seconds (the pipeline's includes writing
        # the report); where the time went inside the pipeline is stage_seconds, below.
        summary["wall_seconds"] = {k: round(v, 2) for k, v in timings.items()}
        # Seconds per stage as Beam measured them (None where the runner returns none): timings.json.
        stage_doc = read_timings(o.output)
        if stage_doc is not None:
            summary["stage_seconds"] = stage_doc["stages"] and {k: round(v, 2) for k, v in stage_doc["stages"].items()}
            summary["timings"] = redact_url(join(o.output, TIMINGS_JSON))
            print(summary_line(stage_doc), file=sys.stderr)
        for w in build_warnings(manifest.model_dump(mode="json"), redact_url(o.output)) + decontamination_warnings(
                (report or {}).get("decontamination")):
            print(w, file=sys.stderr)
        summary["manifest"] = redact_url(join(o.output, "manifest.json"))
        summary["report"] = redact_url(join(o.output, "report.html"))
        print(json.dumps(summary, indent=1) if as_json else summary_text(summary, manifest))
        return 0

    return run_cli(body, argv, interrupted=data_job_interrupted(committed))
