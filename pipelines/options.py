"""Beam pipeline options for the build jobs.

`BuildOptions` is a `PipelineOptions` subclass, so `--help`, `--runner`,
`--project`, `--region`, `--temp_location`, `--sdk_container_image` … all work
the standard Beam way. With no `--runner`, jobs run on Beam's in-process
`FnApiRunner`: apache-beam 2.77's default DirectRunner first tries to download
the Prism runner from the internet, which fails (slowly) offline.
"""

from __future__ import annotations

import argparse
import functools
import logging
import shlex
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from apache_beam.options import pipeline_options as beam_options
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions, StandardOptions

from pipelines.flags import (
    DEFAULT_SPILL_MB,
    add_build_flags,
    add_local_runner_flags,
    answer_help,
)
from pipelines.localrunner.preflight import (  # noqa: F401 - re-exported: the runner checks live together
    DASK_REFUSED,
    DATAFLOW_INSTALL,
    DATAFLOW_MODULES,
    JobFailed,
    dataflow_client_missing,
    dataflow_option_errors,
    is_dataflow_runner,
    job_failed,
    missing_modules,
    runner_download_failed,
    runner_in_argv,
    runner_name,
)
from schemas.errors import UserError
from shardforge.console.args import option_strings, unknown_args_message

if TYPE_CHECKING:
    from pipelines.report.timings import Runner

LOCAL_RUNNER = "FnApiRunner"


class UserErrorsOnce(logging.Filter):
    """Drops a runner's log of a user error raised inside a stage (with its traceback), or of an error
    the user can fix (a full disk, a refused credential): the command prints that error itself, in one
    line (``shardforge.console.run.one_line_error``). Other errors pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        from shardforge.console.run import one_line_error

        exc = record.exc_info[1] if record.exc_info else None
        return exc is None or one_line_error(exc) is None


# Where the local runner logs an exception raised in a DoFn (each with the traceback).
_STAGE_ERROR_LOGGERS = ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker",
                        "apache_beam.runners.worker.bundle_processor",
                        "apache_beam.runners.portability.fn_api_runner.fn_runner")


def not_a_relayed_job_message(record: logging.LogRecord) -> bool:
    """False for a job server's log line that Beam's portable runner relays to the driver's root logger
    (every worker's traceback of a failed job, again and again): the job's log stays the runner's, and a
    failed job is one line (``job_failed``)."""
    return not (record.module == "portable_runner" and record.funcName == "read_messages")


def quiet_beam() -> None:
    """Keep Beam's own logging to errors (its 'apitools not found' import warning is dropped
    earlier, in ``pipelines/__init__.py``, before Beam is imported), a user error raised in a
    stage out of Beam's log (the command prints it once), and a job server's log out of the driver's."""
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    root = logging.getLogger()
    root.setLevel(logging.WARNING)
    if not_a_relayed_job_message not in root.filters:
        root.addFilter(not_a_relayed_job_message)
    warnings.filterwarnings("ignore", module="apache_beam")
    for name in _STAGE_ERROR_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, UserErrorsOnce) for f in logger.filters):
            logger.addFilter(UserErrorsOnce())


class CachedViews:
    """A mixin for PipelineOptions subclasses: ``view_as`` views are made once per class.

    Beam calls ``options.view_as(...)`` a few times for every transform it applies
    (1,600 calls for the build graph), and each call builds an argparse parser and parses
    the flags again: 40% of the graph's construction time. A view shares its values with
    the options it came from (``_all_options`` is one dict), so reusing it changes nothing.
    A mixin, not a PipelineOptions subclass: Beam finds option classes among the *direct*
    subclasses of PipelineOptions, so ``class X(CachedViews, PipelineOptions)`` stays one.
    """

    def view_as(self, cls):  # type: ignore[override]
        cache = self.__dict__.get("_views")
        if cache is None:
            cache = {}
            object.__setattr__(self, "_views", cache)
        view = cache.get(cls)
        if view is None:
            view = cache[cls] = super().view_as(cls)  # type: ignore[misc]
        return view

    def __getstate__(self):
        state = dict(super().__getstate__())  # type: ignore[misc]
        state.pop("_views", None)  # rebuilt on demand; never shipped with the options
        return state


class BuildOptions(CachedViews, PipelineOptions):
    """Options of `python -m pipelines.build` (run with --help to list them): ``pipelines.flags``."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        add_build_flags(parser)


class LocalRunnerOptions(CachedViews, PipelineOptions):
    """Cores and memory of the local runner (``pipelines.localrunner.docpool``, ``pipelines.localrunner.spill``): every command
    that runs a pipeline accepts these (``pipelines.flags``)."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        add_local_runner_flags(parser)


def spill_settings(opts: PipelineOptions):
    """The ``pipelines.localrunner.spill`` settings of a local run (None: keep everything in memory)."""
    from pipelines.localrunner.spill import SpillSettings

    o = opts.view_as(LocalRunnerOptions)
    mb = DEFAULT_SPILL_MB if o.spill_mb is None else o.spill_mb
    if mb < 0:
        return None
    return SpillSettings(buffer_bytes=int(mb * (1 << 20)), directory=o.spill_dir)


def finalize_options(opts: PipelineOptions, *, check_runner: bool = True) -> PipelineOptions:
    """Default to the local FnApiRunner; keep the main session off (our DoFns are module-level).

    check_runner: fail fast if the chosen runner cannot start here (see
    `check_runner_ready`); the offline Dataflow translation check drives the
    runner itself and turns it off.
    """
    std = opts.view_as(StandardOptions)
    if not std.runner:
        std.runner = LOCAL_RUNNER
    use_worker_processes(opts)
    check_doc_processes(opts)
    opts.view_as(SetupOptions).save_main_session = False
    if check_runner:
        check_runner_ready(opts)
    return opts


def use_worker_processes(opts: PipelineOptions) -> None:
    """``--direct_num_workers N`` (N != 1) on the local runner means N worker processes.

    Beam's default ``--direct_running_mode in_memory`` runs every bundle in the driver
    process whatever N says (it only warns), and ``multi_threading`` shares one GIL, so
    asking for N workers would use one core. Unless a running mode is given explicitly,
    N != 1 selects ``multi_processing``: N SDK worker processes, each running its share of
    every stage's bundles. Output does not depend on it (tests/test_build.py).
    """
    from apache_beam.options.pipeline_options import DirectOptions

    if opts.view_as(StandardOptions).runner != LOCAL_RUNNER:
        return
    direct = opts.view_as(DirectOptions)
    flags = opts._flags or []  # what the user typed: Beam's default mode cannot be told from a given one
    given = any(f == "--direct_running_mode" or f.startswith("--direct_running_mode=") for f in flags)
    if direct.direct_num_workers != 1 and not given:
        direct.direct_running_mode = "multi_processing"


def doc_processes(opts: PipelineOptions) -> int:
    """The document processes a run asked for (``pipelines.localrunner.docpool.resolve``: 1 is none)."""
    from pipelines.localrunner import docpool

    return docpool.resolve(opts.view_as(LocalRunnerOptions).doc_processes)


def check_doc_processes(opts: PipelineOptions) -> None:
    """``--doc_processes`` is for the in-process local runner: one clear line otherwise."""
    from apache_beam.options.pipeline_options import DirectOptions

    n = opts.view_as(LocalRunnerOptions).doc_processes
    if doc_processes(opts) <= 1:
        return
    if opts.view_as(StandardOptions).runner != LOCAL_RUNNER:
        raise UserError(f"--doc_processes {n} is for the local runner; a distributed runner spreads the "
                        "documents over its own workers (leave it out)")
    if opts.view_as(DirectOptions).direct_running_mode == "multi_processing":
        raise UserError(f"--doc_processes {n} cannot be used with Beam's worker processes "
                        "(--direct_num_workers / --direct_running_mode multi_processing): choose one")


def spreads_documents(opts: PipelineOptions) -> bool:
    """Whether the build spreads the read documents over the workers (``SpreadDocuments``).

    A file is read by one worker, and reading fuses with the per-document stages after it
    (clean, language ID, sketching), so one big input file would keep those on one worker
    however many there are. With several workers (the local runner with
    ``--direct_num_workers`` != 1, or any distributed runner) a reshuffle after the read lets
    every worker clean and sketch; a single in-process worker skips it (nothing to spread to).
    The output does not depend on it: no step downstream depends on element order.
    """
    from apache_beam.options.pipeline_options import DirectOptions

    if (opts.view_as(StandardOptions).runner or LOCAL_RUNNER) != LOCAL_RUNNER:
        return True
    return opts.view_as(DirectOptions).direct_num_workers != 1


def runs_on_one_machine(opts: PipelineOptions) -> bool:
    """Whether the build runs on the local runner, on one machine (in one process or in several): then the
    dedupe step joins a few verdicts to every document through side inputs rather than by a
    CoGroupByKey, and runs the near step's connected components in one step rather than as unrolled
    rounds of GroupByKeys (a distributed runner keeps both shuffles).

    Beam's local runner groups in memory, and its grouping buffer decodes every element it is handed
    and encodes it again to hand it on (``GroupingBuffer``): a document joined with its verdicts (a
    few of them, most documents having none) crossed four coder passes and a dict and lists of its
    own. With the verdicts as a side input, each document is stored once on its way, and looked up
    in a set. A distributed runner keeps the CoGroupByKey: its side inputs go to every worker, and
    the verdicts of a crawl can be many millions; and its rounds keep any one worker to one node's
    neighborhood. The output does not depend on it (tests/test_dedupe.py).
    """
    return (opts.view_as(StandardOptions).runner or LOCAL_RUNNER) == LOCAL_RUNNER


@dataclass(frozen=True)
class RunnerPlan:
    """Every choice of the build graph that depends on the runner, made here once from the options
    (``RunnerPlan.of``) and handed to ``pipelines.graph.build_pipeline``: the graph and its stages ask
    nothing of the options themselves. The output never depends on the plan, only the cost does.

    ``spread_documents``: reshuffle the read documents (``spreads_documents``); ``one_machine``: the
    dedupe step's local wiring (``runs_on_one_machine``); ``make_room``: what the tokenizer's training
    step calls before it trains, to free memory for SentencePiece (on the local runner with spilling,
    the runner's buffered stage data goes to disk: ``pipelines.localrunner.spill.to_disk``).
    """

    spread_documents: bool = False
    one_machine: bool = True
    make_room: Callable[[], object] | None = None

    @classmethod
    def of(cls, opts: PipelineOptions) -> RunnerPlan:
        from pipelines.localrunner import spill

        one_machine = runs_on_one_machine(opts)
        return cls(spread_documents=spreads_documents(opts), one_machine=one_machine,
                   make_room=spill.to_disk if one_machine else None)

    @classmethod
    def in_process(cls) -> RunnerPlan:
        """The plan of the default local run (one in-process worker): what a graph built without options gets."""
        from pipelines.localrunner import spill

        return cls(make_room=spill.to_disk)


def describe_runner(opts: PipelineOptions) -> Runner:
    """What runs the pipeline, for its timings (``pipelines.report.timings``): call on finalized options,
    before ``make_pipeline``, which rewrites the running mode."""
    import os

    from apache_beam.options.pipeline_options import DirectOptions

    from pipelines.report.timings import Runner

    runner = opts.view_as(StandardOptions).runner or LOCAL_RUNNER
    if runner != LOCAL_RUNNER:
        return Runner(str(runner), 1)
    direct = opts.view_as(DirectOptions)
    if direct.direct_running_mode == "multi_processing":
        n = direct.direct_num_workers or os.cpu_count() or 1  # 0: one per core (Beam's rule)
        return Runner(f"{runner}, {n} worker processes", n)
    return Runner(f"{runner}, in-process", 1)


# Beam runs it with /bin/sh. The terminal's Ctrl-C reaches the whole process group; the worker processes
# ignore it from their first instruction (an ignored signal stays ignored across exec, and Python then
# installs no KeyboardInterrupt handler): the driver's run stops on it and closes each worker's control
# stream, and the workers end as after a finished run. Interrupted themselves, each printed its
# KeyboardInterrupt's traceback and the driver's threads theirs (~200 lines before "interrupted").
WORKER_COMMAND = "trap '' INT; exec {python} -m pipelines.localrunner.sdkworker"


def make_pipeline(opts: PipelineOptions):
    """``beam.Pipeline`` for finalized options; a local build's worker processes run ``pipelines.localrunner.sdkworker``,
    and its runner spills stage data past ``--spill_mb`` per buffer to disk (``pipelines.localrunner.spill``).

    Beam's multi-process mode starts its stock worker command, which prints Beam's import and
    start-up logs once per worker; the same FnApiRunner with a subprocess environment of our
    entry point runs the same harness quietly (the running mode is then ``in_memory`` with that
    environment, which is exactly what ``multi_processing`` sets up).
    """

    from apache_beam.options.pipeline_options import DirectOptions

    from pipelines.localrunner import fusion, signatures, spill, workers
    from pipelines.localrunner import statesampler as sampler

    signatures.install()  # graph construction and in-process bundles introspect every DoFn
    sampler.install()  # every bundle waits for its state sampler's thread to wake
    workers.install()  # a run's end tells every worker process to end before it waits for one
    direct = opts.view_as(DirectOptions)
    local = opts.view_as(StandardOptions).runner == LOCAL_RUNNER
    if local:
        from pipelines.localrunner import docpool
        from pipelines.localrunner.heap import tune_collector

        docpool.configure(doc_processes(opts))  # the pool starts with the first batch handed over

        tune_collector()  # the imports out of the cyclic collector's scans, fewer collections
        fusion.install()  # a Flatten's inputs write straight into the GroupByKey that reads it
        settings = spill_settings(opts)
        if settings is None:
            spill.uninstall()
        else:
            spill.install(settings)  # stage data on disk past --spill_mb per buffer, streamed through bundles
    if not local or direct.direct_running_mode != "multi_processing":
        return _pipeline_class()(options=opts)
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.transforms.environments import SubprocessSDKEnvironment

    direct.direct_running_mode = "in_memory"  # else the runner replaces the environment with Beam's command
    env = SubprocessSDKEnvironment.from_command_string(WORKER_COMMAND.format(python=shlex.quote(sys.executable)))
    return _pipeline_class()(runner=FnApiRunner(default_environment=env), options=opts)


def remove_temp_folder(p: Any) -> None:
    """Remove the local temp folder every ``beam.Pipeline`` makes, which only its ``run()`` removes:
    for a pipeline that is never run (an offline check) or whose construction failed."""
    import shutil

    shutil.rmtree(p.local_tempdir, ignore_errors=True)


@functools.cache
def _pipeline_class() -> type:
    """``beam.Pipeline`` that removes its local temp folder however its ``with`` block ends: a block
    that raised before the run (a user's error found while the graph is built: a missing tokenizer,
    a bad index) left it behind, one per failed command. On a distributed runner a failed job is one
    line (``job_failed``) unless a user error is behind it, which the command prints itself. A run that
    raised (a Ctrl-C) finishes the state samplers this process started (``statesampler.finish_all``)."""
    import apache_beam as beam

    from pipelines.localrunner import docpool
    from pipelines.localrunner import statesampler as sampler
    from shardforge.console.run import find_user_error, was_interrupted

    class Pipeline(beam.Pipeline):
        def __exit__(self, exc_type, exc_val, exc_tb):
            failed = True
            try:
                super().__exit__(exc_type, exc_val, exc_tb)
                failed = exc_type is not None
            except Exception as e:
                runner = type(self.runner).__name__  # Beam clears the runner option once the job runs
                local = runner in (LOCAL_RUNNER, "SwitchingDirectRunner", "BundleBasedDirectRunner", "DirectRunner")
                if exc_type is not None or local or find_user_error(e) or was_interrupted(e):
                    raise
                raise (runner_download_failed(runner, e) or job_failed(runner, e)) from e
            finally:
                if failed:  # a run cut short (Ctrl-C) leaves no sampler thread that keeps the process alive
                    sampler.finish_all()
                docpool.shutdown()  # the document processes of this run, if any
                remove_temp_folder(self)

    return Pipeline


# ---------------------------------------------------------------- runner readiness
# The checks that need no Beam run first, in pipelines/localrunner/preflight.py; these are the ones
# a library caller (run_build, run_repack, ingest) gets when finalize_options makes its options.

def check_runner_ready(opts: PipelineOptions) -> None:
    """Raise a one-line UserError if the chosen runner cannot run from here (no network touched).

    For DataflowRunner: every problem at once, Beam's validation of the Dataflow options and the
    client libraries of apache-beam[gcp]. DaskRunner is refused (``preflight.DASK_REFUSED``).
    """
    runner = opts.view_as(StandardOptions).runner
    if runner_name(runner if isinstance(runner, str) else type(runner).__name__) == "dask":
        raise UserError(DASK_REFUSED)
    if not is_dataflow_runner(runner):
        return
    problems = []
    errors = dataflow_option_errors(opts)
    if errors:
        problems.append("invalid Dataflow options: " + "; ".join(" ".join(str(e).split()) for e in errors))
    client = dataflow_client_missing()
    if client:
        problems.append(client)
    if problems:
        raise UserError("; ".join(problems))


class _BeamFlagParser(beam_options._BeamArgumentParser):  # Beam's own parser class: the flags it knows
    """Beam's parser (it knows ValueProvider options), raising a UserError instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UserError(message)


def beam_parser() -> argparse.ArgumentParser:
    """A parser that knows every flag Beam itself would parse (ours included).

    Beam parses argv with every registered ``PipelineOptions`` subclass (its
    direct subclasses: StandardOptions, GoogleCloudOptions, WorkerOptions,
    DebugOptions, … and ours) and drops what none of them knows, with a
    warning nobody sees. This parser knows exactly the same flags, so what it
    cannot parse Beam would have dropped.
    """
    parser = _BeamFlagParser(allow_abbrev=False, add_help=False)
    classes: dict[str, type[PipelineOptions]] = {}
    for cls in PipelineOptions.__subclasses__():  # what PipelineOptions.get_all_options walks
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        try:
            cls._add_argparse_args(parser)
        except argparse.ArgumentError:
            pass  # a class registered twice (re-imported module): its flags are already there
    return parser


def runner_options_known(runner: str | None) -> None:
    """Make the options of the runner ``--runner`` names known to ``beam_parser`` (a runner's module may
    define its own PipelineOptions class, registered when it is imported: Beam's ``create_runner`` imports
    it); a UserError for a runner Beam does not know, or one the build cannot run on (DaskRunner, refused
    with the reason)."""
    from apache_beam.runners.runner import create_runner

    if not runner:
        return
    if runner_name(runner) == "dask":
        raise UserError(DASK_REFUSED)
    known = {path.rsplit(".", 1)[-1].lower() for path in StandardOptions.ALL_KNOWN_RUNNERS}
    if runner.lower() in known or runner.lower() + "runner" in known:
        return  # Beam's own runners: their options are Beam's registered classes (made without side effects)
    try:
        create_runner(runner)  # a dotted path: imports the runner's module (and makes one, as the run will)
    except ValueError as e:
        if "Unexpected pipeline runner" not in str(e):
            return  # the runner's own complaint comes when it runs
        names = ", ".join(StandardOptions.KNOWN_RUNNER_NAMES)
        raise UserError(f"--runner {runner}: Beam knows no such runner (one of {names}, or the dotted path of a "
                        "PipelineRunner class)") from None
    except Exception:  # noqa: BLE001 - an extra not installed, a runner that fails to construct: said when it runs
        pass


def check_beam_args(argv: Sequence[str], also_known: Iterable[str] = ()) -> None:
    """UserError naming every flag in argv that no Beam option (ours included) knows.

    also_known: the command's other flags, only to suggest from (they were parsed already).
    The runner named by ``--runner`` is checked first (``runner_options_known``), so its own options count.
    """
    runner_options_known(runner_in_argv(argv))
    parser = beam_parser()
    _, extra = parser.parse_known_args(list(argv))
    if extra:
        raise UserError(unknown_args_message(extra, [*option_strings(parser), *also_known]))


def beam_options_help() -> str:
    """The help text of every Beam pipeline option (``--help_beam``)."""
    parser = beam_parser()
    parser.usage = argparse.SUPPRESS
    parser.description = "Apache Beam pipeline options (every registered PipelineOptions class), accepted by " \
                         "shardforge build, repack and serve:"
    return parser.format_help()


def handle_help(parser: argparse.ArgumentParser, argv: Sequence[str]) -> bool:
    """Print --help (with the Beam note) or --help_beam if asked; True when the command should exit."""
    if "--help_beam" in argv:
        print(beam_options_help())
        return True
    return answer_help(lambda: parser, argv)
