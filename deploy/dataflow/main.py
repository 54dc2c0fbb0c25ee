"""Dataflow entry point of the build job: the flex template's launcher runs this file.

    python deploy/dataflow/main.py --input ccnews=gs://raw/cc/*.jsonl.gz --output gs://corpora/v1 \\
        --runner DataflowRunner --project P --region R --temp_location gs://tmp/beam \\
        --sdk_container_image REGION-docker.pkg.dev/P/shardforge/build:0.1.0 --sdk_location container

It takes exactly the flags of `python -m pipelines.build` (plus every Beam
option) and builds the same pipeline with `pipelines.build.build_pipeline`.
The one difference: it submits the job and returns without waiting. A flex
template's launcher VM must exit once the job is created; `python -m
pipelines.build` waits for the job to finish and then prints the manifest
summary, which is what an interactive user wants.
"""

from __future__ import annotations

import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.build import build_pipeline
from pipelines.options import BuildOptions, build_config_from_options, finalize_options, quiet_beam
from schemas.config import BuildConfig
from schemas.errors import UserError


def make_pipeline(argv: list[str], runner: beam.runners.PipelineRunner | None = None
                  ) -> tuple[beam.Pipeline, BuildConfig, str, PipelineOptions]:
    """Parse build flags + Beam options and construct (not run) the whole build pipeline.

    `runner` overrides the runner named by --runner (the translation check
    passes a DataflowRunner instance it drives itself).
    """
    opts = finalize_options(BuildOptions(argv))
    o = opts.view_as(BuildOptions)
    if not o.output:
        raise UserError("--output URL is required")
    if o.batch_mb is not None:
        raise UserError("--batch_mb runs a chain of jobs from a driver that waits for each: use "
                        "`python -m pipelines.build --batch_mb …` (Dataflow's workers need no batching)")
    cfg = build_config_from_options(opts)
    p = beam.Pipeline(runner=runner or opts.view_as(StandardOptions).runner, options=opts)
    build_pipeline(p, cfg, o.output)
    return p, cfg, o.output, opts


def main(argv: list[str] | None = None) -> int:
    """Construct the build and submit it; do not wait (flex-template launcher semantics)."""
    quiet_beam()
    argv = sys.argv[1:] if argv is None else argv
    try:
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
