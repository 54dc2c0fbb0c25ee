"""Checks a Beam command runs before importing Apache Beam (which alone takes ~1.3 s): runner mistakes in one line.

A runner that cannot run from here is said at once, in one line, before any work, instead of a
traceback after the graph is built or a wait that never ends (``runner_problems``, called by the
entry points ``python -m pipelines.build`` / ``repack`` / ``serve`` and ``shardforge build`` /
``repack`` / ``serve`` through ``exit_if_unrunnable``):

- ``--runner DaskRunner``: refused, with the reason (Beam's Dask runner cannot run the build's graph).
- Prism, Flink, Spark: a local copy named by ``--prism_location`` / ``--flink_job_server_jar`` /
  ``--spark_job_server_jar`` that is not there; a job server Beam would start (a Java program) with no
  ``java``; a ``--job_endpoint`` nothing answers at (Beam would wait 300 s for it). The download Beam
  makes at start when no local copy is named fails offline after the graph is built: that failure is one
  line too, naming the file and the flag (``runner_download_failed``, which the pipeline raises).
- ``--runner DataflowRunner``: every problem at once: the client libraries of apache-beam[gcp] (our
  ``[dataflow]`` extra, which the default install leaves out), local input or output paths (the workers
  cannot read or write this machine's disk; Beam would otherwise wait in its check of the temp bucket,
  printing nothing), and Beam's own checks of the Dataflow options (``dataflow_option_errors``, which
  imports Beam: only for DataflowRunner). ``pipelines.options.check_runner_ready`` repeats the option
  checks for callers of the library.

And what a distributed runner's failed job says (``job_failed``): one line naming the runner and the
remote error, instead of the driver's traceback, which only shows where it waited.

Imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import shutil
import socket
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from schemas.errors import UserError, causes

DATAFLOW_RUNNERS = frozenset({"dataflow", "testdataflow"})
# What DataflowRunner imports to stage and submit a job (apache_beam.runners.dataflow.internal.apiclient and
# the apache_beam.io.gcp.gcsio it imports).
DATAFLOW_MODULES = ("google.cloud.dataflow", "google.cloud.storage", "google.api_core", "google.auth")
# The README's install line for the Dataflow client (tests/test_deploy.py checks that the README says the same).
DATAFLOW_INSTALL = ".venv/bin/pip install -c constraints.txt -e '.[dataflow]'"


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
            f"(missing {', '.join(missing)}): {DATAFLOW_INSTALL} (from the repository root)")


def flag_values(argv: Sequence[str], flag: str) -> list[str]:
    """Every value of ``flag`` in argv (``--flag X`` or ``--flag=X``), in order; a ``--flag`` that ends
    argv has no value and is left out."""
    out = []
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif arg.startswith(flag + "="):
            out.append(arg.split("=", 1)[1])
    return out


def last_flag(argv: Sequence[str], flag: str) -> str | None:
    """The value of the last ``flag`` in argv (``--flag X`` or ``--flag=X``, as Beam's parser reads
    it), or None: the one parser of a flag's value before the command's own parser runs."""
    values = flag_values(argv, flag)
    return values[-1] if values else None


def runner_in_argv(argv: Sequence[str]) -> str | None:
    """The value of the last ``--runner X`` / ``--runner=X`` in argv, or None."""
    return last_flag(argv, "--runner")


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
    """Exit 2 with one line naming every problem ``runner_problems`` finds in argv (none: return)."""
    if any(a in ("-h", "--help", "--help_beam") for a in argv):
        return
    problems = runner_problems(argv)
    if problems:
        print(f"error: {'; '.join(problems)}", file=sys.stderr)
        raise SystemExit(2)


# ---------------------------------------------------------------- runner mistakes

DASK_REFUSED = ("--runner DaskRunner cannot run the build: Beam 2.77's Dask runner merges a step's tagged outputs "
                "into its main output, drops what finish_bundle emits and runs only the last leaf of the graph, "
                "and the build relies on all three; beyond one machine use FlinkRunner (docs/flink.md), "
                "SparkRunner or DataflowRunner")
# What Beam downloads when a runner starts (the Prism binary from Beam's GitHub release, a job-server jar
# from Maven Central) and the flag that names a local copy instead.
RUNNER_DOWNLOADS = {
    "prism": ("--prism_location", "the Prism runner binary"),
    "flink": ("--flink_job_server_jar", "Beam's Flink job-server jar"),
    "spark": ("--spark_job_server_jar", "Beam's Spark job-server jar"),
}
PORTABLE_RUNNERS = frozenset({"portable", "flink", "spark", "prism"})
# Where a command reads its input or writes its output: a distributed runner's workers need object storage.
LOCATION_FLAGS = ("--input", "--output", "--tokenized", "--watch", "--corpus")


def runner_name(runner: str | None) -> str:
    """'apache_beam.runners.portability.flink_runner.FlinkRunner' or 'flink' -> 'flink'; '' for none."""
    return (runner or "").rsplit(".", 1)[-1].lower().removesuffix("runner")


def runner_problems(argv: Sequence[str]) -> list[str]:
    """Every reason the runner argv names cannot run from here, each a short sentence (empty: none found)."""
    runner = runner_in_argv(argv)
    name = runner_name(runner)
    if "dask" in name:
        return [DASK_REFUSED]
    if is_dataflow_runner(runner):
        return dataflow_problems(argv)
    problems = []
    endpoint = last_flag(argv, "--job_endpoint")
    if name in RUNNER_DOWNLOADS:
        flag, what = RUNNER_DOWNLOADS[name]
        copy = last_flag(argv, flag)
        if copy and "://" not in copy and not os.path.exists(copy):
            problems.append(f"{flag} {copy}: no such file (it names a local copy of {what})")
        elif copy and "://" not in copy and name != "prism" and not is_jar(copy):
            problems.append(f"{flag} {copy}: not a jar (a jar is a zip archive; this file does not start as one): "
                            f"it names a local copy of {what}")
        java = last_flag(argv, "--job_server_java_launcher") or "java"
        if name != "prism" and not endpoint and shutil.which(java) is None:
            problems.append(f"--runner {runner} starts {what} here, a Java program, and there is no {java!r} on PATH: "
                            "install a Java runtime (17), pass --job_server_java_launcher PATH, or start a job "
                            "server and pass --job_endpoint HOST:PORT (docs/flink.md)")
    if name == "portable" and not endpoint:
        problems.append(f"--runner {runner} submits the job to a running job server: pass --job_endpoint HOST:PORT "
                        "(Flink's or Spark's job server, or Beam's own: docs/flink.md), or name the runner "
                        "(--runner FlinkRunner starts Flink's job server itself)")
    if name in PORTABLE_RUNNERS and endpoint and endpoint != "embed" and not answers(endpoint):
        problems.append(f"nothing answers at --job_endpoint {endpoint}: start the job server first (docs/flink.md) "
                        "or correct the address")
    return problems


def is_jar(path: str) -> bool:
    """Whether a local file starts as a zip archive does (a jar is one); a folder is not a jar."""
    try:
        with open(path, "rb") as f:
            return f.read(4) in (b"PK\x03\x04", b"PK\x05\x06")
    except OSError:
        return False


def answers(endpoint: str, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to HOST:PORT is accepted within ``timeout`` seconds."""
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def is_local_path(url: str) -> bool:
    """True for a path on this machine's disk (no scheme, or file://)."""
    return "://" not in url or url.split("://", 1)[0].lower() in ("file", "local")


def local_locations(argv: Sequence[str]) -> list[str]:
    """``--flag value`` of every input or output in argv (a local ``--config``'s sources included) that
    is a path on this machine."""
    found = []
    for flag in LOCATION_FLAGS:
        for value in flag_values(argv, flag):
            url = value.split("=", 1)[1] if flag == "--input" and "=" in value.split("://")[0] else value
            if is_local_path(url):
                found.append(f"{flag} {value}")
    config = last_flag(argv, "--config")
    if config and is_local_path(config) and os.path.isfile(config):
        from schemas.config import BuildConfig
        from shardforge.storage.contract import load_config

        try:
            sources = load_config(BuildConfig, config).sources
        except UserError:
            sources = []  # the command says what is wrong with the config itself
        found += [f"source {s.name} {s.input} (--config)" for s in sources if is_local_path(s.input)]
    return found


def dataflow_problems(argv: Sequence[str]) -> list[str]:
    """Every problem of a DataflowRunner command at once: the client, local paths, Beam's option checks."""
    problems = []
    client = dataflow_client_missing()
    if client:
        problems.append(client)
    local = local_locations(argv)
    if local:
        problems.append(f"--runner DataflowRunner reads and writes object storage (gs://), and these are paths on "
                        f"this machine, which Dataflow's workers cannot reach: {', '.join(local)}")
    errors = dataflow_option_errors(argv)
    if errors:
        problems.append("invalid Dataflow options: " + "; ".join(" ".join(str(e).split()) for e in errors))
    return problems


def dataflow_option_errors(opts: Any) -> list[str]:
    """Beam's own Dataflow option checks (project, region, job name, gs:// locations, worker options), offline.

    opts: PipelineOptions, or argv. Runs Beam's validator on a copy in dry-run mode (which skips its
    GCS soft-delete probe); when neither temp nor staging location is a valid gs:// path, reports that
    (and a missing project or region) instead of letting Beam try to create a default bucket over the
    network. Imports Beam.
    """
    from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, TestOptions
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
    from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

    with beam_quiet_about_our_flags():
        if not isinstance(opts, PipelineOptions):
            opts = PipelineOptions(list(opts))
        copy = PipelineOptions.from_dictionary(opts.get_all_options(drop_default=True))
        copy.view_as(TestOptions).dry_run = True
        gco = copy.view_as(GoogleCloudOptions)
        validator = PipelineOptionsValidator(copy, DataflowRunner())
        locations = [k for k in ("temp_location", "staging_location") if getattr(gco, k)]
        missing = [f"Missing required option: {k}." for k in ("project", "region") if not getattr(gco, k)]
        if not locations:
            return [*missing, "--temp_location gs://BUCKET/PATH is required (Beam's temp and staging files)"]
        errors = [e for k in locations for e in validator.validate_gcs_path(gco, k)]
        if len(errors) == len(locations):
            return [*missing, *errors]
        return validator.validate()


@contextlib.contextmanager
def beam_quiet_about_our_flags() -> Iterator[None]:
    """Beam's option parsing warns, each time, that it drops the flags it does not know (ours, in argv)."""
    log = logging.getLogger("apache_beam.options.pipeline_options")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


# ---------------------------------------------------------------- a distributed runner's failure, in one line

class JobFailed(UserError):
    """A job on a distributed runner failed (a worker lost, a step that raised): one line, not the driver's
    traceback, which only shows where it waited; the job's own log is the runner's (its UI or job server)."""


# The last "SomeError: what" line of a remote traceback that a runner hands back as text.
_REMOTE_ERROR = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit|Failure)\w*): (.+?)\s*$", re.M)


def job_failed(runner: str, exc: BaseException) -> JobFailed:
    """The one line for a distributed runner's failed job: the runner, the remote error, what is committed."""
    from shardforge.console.run import DATA_JOB_INTERRUPTED  # the console: only once a job failed

    text = str(exc)
    found = _REMOTE_ERROR.findall(text)
    reason = f"{found[-1][0]}: {found[-1][1]}" if found else (text.strip().splitlines() or [type(exc).__name__])[0]
    if len(reason) > 300:
        reason = reason[:297] + "..."
    return JobFailed(f"the {runner} job failed ({reason}); {DATA_JOB_INTERRUPTED} (the job's log, with the "
                     "workers' tracebacks, is the runner's: its web UI or job server)")


# "Unable to fetch remote prism binary at URL: ..." / "Unable to fetch remote job server jar at URL: ...".
_FAILED_DOWNLOAD = re.compile(r"Unable to fetch remote (?:prism binary|job server jar) at (\S+?):? (<[^>]*>|[^.]*)")


def runner_download_failed(runner: str, exc: BaseException) -> UserError | None:
    """One line when a runner failed to start because Beam could not download what it runs (the Prism
    binary, a Flink or Spark job-server jar): what, from where, and the flag naming a local copy."""
    name = runner_name(runner)
    if name not in RUNNER_DOWNLOADS:
        return None
    for e in causes(exc):
        m = _FAILED_DOWNLOAD.search(str(e))
        if m:
            flag, what = RUNNER_DOWNLOADS[name]
            url, why = m.group(1), m.group(2).strip("<>")
            other = "" if name == "prism" else " (or start a job server and pass --job_endpoint HOST:PORT: docs/flink.md)"
            return UserError(f"--runner {runner} needs {what}, which Beam downloads when the job starts, and the "
                             f"download of {url} failed ({why}): fetch it once where the network allows and pass "
                             f"{flag} PATH{other}")
    return None



@contextlib.contextmanager
def interruptible_import(quiet: bool = False) -> Iterator[None]:
    """Around a data command's import of its ``main`` (Beam with it, a second or two): Ctrl-C meanwhile ends
    the command with one line and exit 130, as Ctrl-C does once it runs (``shardforge.console.run``).
    ``quiet``: a process a batched build spawned (its module is ``__mp_main__``), which imports the
    command's module again: its parent, which the terminal's Ctrl-C reached too, says it."""
    try:
        yield
    except KeyboardInterrupt:
        if not quiet:
            print("interrupted: nothing was started", file=sys.stderr)
        raise SystemExit(130) from None
