"""Dataflow entry point of the build job: the flex template's launcher runs this file.

    python deploy/dataflow/main.py --input ccnews=gs://raw/cc/*.jsonl.gz --output gs://corpora/v1 \\
        --runner DataflowRunner --project P --region R --temp_location gs://tmp/beam \\
        --sdk_container_image REGION-docker.pkg.dev/P/shardforge/build:0.1.0 --sdk_location container

It takes exactly the flags of `python -m pipelines.build` (plus every Beam
option) and builds the same pipeline with `pipelines.graph.build_pipeline`.
The one difference: it submits the job and returns without waiting. A flex
template's launcher VM must exit once the job is created; `python -m
pipelines.build` waits for the job to finish and then prints the manifest
summary, which is what an interactive user wants.
"""

from __future__ import annotations

import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.corpus.commit import check_output, one_shot_attempt, tag_for
from pipelines.graph import build_pipeline
from pipelines.jobs.build_config import build_config_from_options
from pipelines.options import (
    BuildOptions,
    RunnerPlan,
    check_beam_args,
    finalize_options,
    quiet_beam,
    remove_temp_folder,
)
from schemas.config import BuildConfig
from schemas.errors import UserError
from shardforge.storage import redact_url


def make_pipeline(argv: list[str], runner: beam.runners.PipelineRunner | None = None, *, offline: bool = False
                  ) -> tuple[beam.Pipeline, BuildConfig, str, PipelineOptions]:
    """Parse build flags + Beam options and construct (not run) the whole build pipeline.

    `runner` overrides the runner named by --runner (the translation check
    passes a DataflowRunner instance it drives itself, so the check that the
    runner's client libraries are installed is skipped then).
    offline: construct without reading anything remote (the translation
    check): input globs are not listed (each source's pattern stands for its
    files in the graph), and a remote config, tokenizer or dedupe index,
    which construction would read, is refused with one line.
    """
    opts = finalize_options(BuildOptions(argv), check_runner=runner is None)
    o = opts.view_as(BuildOptions)
    if not o.output:
        raise UserError("--output URL is required")
    if o.batch_mb is not None:
        raise UserError("--batch_mb runs a chain of jobs from a driver that waits for each: use "
                        "`python -m pipelines.build --batch_mb …` (Dataflow's workers need no batching)")
    if offline:
        refuse_remote_reads(o)
    cfg = build_config_from_options(opts)
    if offline:
        refuse_remote_reads(cfg)
    p = beam.Pipeline(runner=runner or opts.view_as(StandardOptions).runner, options=opts)
    if offline:  # nothing listed: each source's pattern stands for its files, and the tag for the attempt
        files, expect = {src.name: [src.input] for src in cfg.sources}, None
        tag = tag_for(1, cfg.model_dump(mode="json"), [], None, {"offline_translation_check": True})
    else:  # the commit protocol's attempt tag (docs/storage.md); a committed corpus is never overwritten
        files = None
        attempt = one_shot_attempt(cfg)  # the workers check the bytes they read against its fingerprints
        tag, expect = attempt.tag, attempt.fingerprints
        check_output(o.output, tag)
    try:
        build_pipeline(p, cfg, o.output, files=files, tag=tag, plan=RunnerPlan.of(opts), expect=expect)
    except BaseException:
        remove_temp_folder(p)  # p never runs
        raise
    return p, cfg, o.output, opts


def is_remote(url: str | None) -> bool:
    """True for a URL with a scheme other than the local file system (gs://, s3://, http://, ...)."""
    if not url or "://" not in url:
        return False
    return url.split("://", 1)[0].lower() not in ("file", "local")


def refuse_remote_reads(what: BuildOptions | BuildConfig) -> None:
    """Refuse, in one line, the remote files that constructing the build reads (offline checks only)."""
    if isinstance(what, BuildConfig):
        urls = {"tokenizer.model_url": what.tokenizer.model_url, "dedupe.index": what.dedupe.index}
    else:
        urls = {"--config": what.config}
    for name, url in urls.items():
        if is_remote(url):
            raise UserError(f"the offline check reads nothing remote, but constructing the build reads {name} "
                            f"{redact_url(url)}: check with a local copy, or without it")


def main(argv: list[str] | None = None) -> int:
    """Construct the build and submit it; do not wait (flex-template launcher semantics)."""
    quiet_beam()
    argv = sys.argv[1:] if argv is None else argv
    try:
        check_beam_args(argv)  # Beam would silently drop a flag no option knows
        p, _, output, _ = make_pipeline(argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = p.run()
    job_id = getattr(result, "job_id", lambda: None)()
    print(f"submitted build of {output}" + (f" as Dataflow job {job_id}" if job_id else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
