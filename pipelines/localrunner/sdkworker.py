"""Entry point of a local SDK worker process (``--direct_num_workers N``): Beam's own worker, quiet.

``python -m apache_beam.runners.worker.sdk_worker_main``, which Beam's multi-process mode
starts, imports Beam before anything of ours (so its ``apitools not found`` warning is printed
once per worker) and logs its start-up at INFO on stderr. This module installs the apitools
filter first (``import pipelines``), keeps Beam's own records below ERROR off stderr, asks the
harness for WARNING where it is started without pipeline options (Beam 2.77's
``local_job_service.SubprocessSdkWorker`` always passes ``PIPELINE_OPTIONS``: there the harness
keeps its INFO level and only the stderr filter applies), leaves out the optional Beam integrations
a worker never uses and has pyarrow allocate from glibc's malloc
(``pipelines.localrunner.preflight.local_build_process``), drops each finished bundle's output
streams (``pipelines.localrunner.spill.release_finished_streams``), memoizes Beam's DoFn
introspection (``pipelines.localrunner.signatures``), shortens the state sampler's period
(``pipelines.localrunner.statesampler``), tunes the cyclic collector as the runner's process does
(``pipelines.localrunner.heap.tune_collector``), then runs the same ``sdk_worker_main.main``.
``pipelines.options.make_pipeline`` points the local runner's worker processes here
(a ``SubprocessSDKEnvironment`` of ``pipelines.options.WORKER_COMMAND``).
"""

from __future__ import annotations

import json
import logging
import os
import sys

import pipelines  # noqa: F401 - installs the apitools filter before Beam is imported
from pipelines.localrunner.preflight import local_build_process
from shardforge.console.run import stacks_on_sigusr1


def _quiet(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR or not record.name.startswith(("apache_beam", "__main__"))


def main() -> None:
    """Run Beam's SDK harness with start-up noise filtered."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_quiet)
    logging.getLogger().addHandler(handler)
    os.environ.setdefault("PIPELINE_OPTIONS", json.dumps({"options": {"default_sdk_harness_log_level": "WARNING"}}))
    local_build_process()  # before Beam (and pyarrow) is imported
    stacks_on_sigusr1()  # kill -USR1 PID: this worker's stacks on stderr, as the build's own
    from apache_beam.runners.worker import sdk_worker_main

    from pipelines.localrunner import signatures, spill, workers
    from pipelines.localrunner import statesampler as sampler

    spill.release_finished_streams()  # a finished bundle's output buffers are not kept with its processor
    signatures.install()  # each bundle introspects its DoFns again
    sampler.install()  # each bundle joins its state sampler's thread
    workers.install()  # a bundle cut short by the end of the control stream prints nothing
    from pipelines.localrunner.heap import tune_collector

    tune_collector()  # as the runner's process does (pipelines.options.make_pipeline)
    sdk_worker_main.main(sys.argv)
    if workers.still_running():  # the control stream ended under a bundle: a run cut short
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # its finalization around the running bundle could abort in gRPC's C++ code


if __name__ == "__main__":
    main()
