"""Checks a Beam command runs before importing Apache Beam (which alone takes ~1.3 s).

`--runner DataflowRunner` needs apache-beam[gcp] (our ``[dataflow]`` extra), which
the default install leaves out. Without it Beam constructs the pipeline anyway,
probes GCS for minutes and fails at submission with a long traceback. Whether the
client libraries are installed can be told from argv and the import system alone,
so the entry points (``python -m pipelines.build`` / ``repack`` / ``serve``,
``shardforge build`` / ``repack``) ask before Beam is imported and a user without
the extra gets one line at once. Beam's own checks of the Dataflow options follow
later (``pipelines.options.check_runner_ready``). Imports nothing heavy.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Sequence
from typing import Any

DATAFLOW_RUNNERS = frozenset({"dataflow", "testdataflow"})
# What DataflowRunner imports to stage and submit a job (apache_beam.runners.dataflow.internal.apiclient and
# the apache_beam.io.gcp.gcsio it imports).
DATAFLOW_MODULES = ("google.cloud.dataflow", "google.cloud.storage", "google.api_core", "google.auth")
DATAFLOW_INSTALL = "pip install -c constraints.txt 'shardforge[dataflow]'"


def is_dataflow_runner(runner: Any) -> bool:
    """True for DataflowRunner by any of the names Beam accepts (DataflowRunner, dataflow, a dotted path)."""
    if runner is None:
        return False
    name = runner if isinstance(runner, str) else type(runner).__name__
    name = name.rsplit(".", 1)[-1].lower()
    return name.removesuffix("runner") in DATAFLOW_RUNNERS


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    """The modules of `modules` that cannot be imported here (found without importing them)."""
    missing = []
    for m in modules:
        try:
            found = importlib.util.find_spec(m) is not None
        except ImportError:  # a parent package is missing
            found = False
        if not found:
            missing.append(m)
    return missing


def dataflow_client_missing() -> str | None:
    """The one-line problem when DataflowRunner's client libraries are not installed, else None."""
    missing = missing_modules(DATAFLOW_MODULES)
    if not missing:
        return None
    return (f"--runner DataflowRunner needs apache-beam[gcp], which is not installed here "
            f"(missing {', '.join(missing)}): {DATAFLOW_INSTALL}")


def runner_in_argv(argv: Sequence[str]) -> str | None:
    """The value of the last ``--runner X`` / ``--runner=X`` in argv (as Beam's parser reads it), or None."""
    runner = None
    for i, arg in enumerate(argv):
        if arg == "--runner" and i + 1 < len(argv):
            runner = argv[i + 1]
        elif arg.startswith("--runner="):
            runner = arg.split("=", 1)[1]
    return runner


# Optional integrations that Beam imports whenever they are installed and that a local build never
# uses (its DoFns read and write through fsspec and pyarrow, not Beam's IO): pandas (Beam's DataFrame
# type hints, pyarrow's pandas shim), pymongo / bson (Beam's MongoDB IO) and boto3 (Beam's own S3
# filesystem; s3fs uses botocore). Each import is optional where it is made: Beam and pyarrow catch
# the ImportError and leave the feature out. Not loading them saves a process ~54 MB of RSS and
# ~0.5 s of start-up.
UNUSED_INTEGRATIONS = ("pandas", "pymongo", "bson", "boto3")
LOCAL_RUNNERS = frozenset({"fnapi", "direct"})


class _SkipUnused:
    """A ``sys.meta_path`` finder that answers UNUSED_INTEGRATIONS with ``ModuleNotFoundError``."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name in UNUSED_INTEGRATIONS:
            raise ModuleNotFoundError(f"{name} is not loaded in a shardforge data job process", name=name)
        return None


def skip_unused_integrations() -> None:
    """Make UNUSED_INTEGRATIONS unimportable in this process, from now on (idempotent).

    Only for a process shardforge owns: a command-line driver of a local build, a local worker
    process, a benchmark's child. A program that imports shardforge as a library keeps its imports.
    Not for a process that may import torch later: torch probes optional modules with
    ``importlib.util.find_spec``, which the skip answers with an error.
    """
    if not any(isinstance(f, _SkipUnused) for f in sys.meta_path):
        sys.meta_path.insert(0, _SkipUnused())
    # Beam's MongoDB IO warns at import that it found no bson: the warning is about this skip.
    logging.getLogger("apache_beam.io.mongodbio").setLevel(logging.ERROR)


def local_build_process() -> None:
    """What a process of a local build does before it imports Beam (and so pyarrow): leave out the
    integrations it never uses (``skip_unused_integrations``: the same limits on where) and have
    pyarrow allocate from glibc's malloc (``pipelines.localrunner.heap.use_system_allocator``) in at most two malloc
    arenas (``limit_malloc_arenas``); the processes it starts inherit both through the environment)."""
    from pipelines.localrunner.heap import limit_malloc_arenas, use_system_allocator

    skip_unused_integrations()
    use_system_allocator()
    limit_malloc_arenas()


def is_local_runner(runner: str | None) -> bool:
    """True for no --runner (the local FnApiRunner) and for FnApiRunner / DirectRunner by any name."""
    return runner is None or runner.rsplit(".", 1)[-1].lower().removesuffix("runner") in LOCAL_RUNNERS


def before_beam(argv: Sequence[str]) -> None:
    """What a command-line driver does before it imports Beam: ``exit_if_unrunnable``, then, for a
    local build, ``local_build_process`` (a remote runner's launcher keeps Beam's imports)."""
    exit_if_unrunnable(argv)
    if is_local_runner(runner_in_argv(argv)):
        local_build_process()


def exit_if_unrunnable(argv: Sequence[str]) -> None:
    """Exit 2 with one line if argv asks for DataflowRunner and its client libraries are missing."""
    if any(a in ("-h", "--help", "--help_beam") for a in argv):
        return
    if is_dataflow_runner(runner_in_argv(argv)):
        problem = dataflow_client_missing()
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            raise SystemExit(2)
