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
import sys
from collections.abc import Sequence
from typing import Any

DATAFLOW_RUNNERS = frozenset({"dataflow", "testdataflow"})
# What DataflowRunner imports to stage and submit a job (apache_beam.runners.dataflow.internal.apiclient).
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


def exit_if_unrunnable(argv: Sequence[str]) -> None:
    """Exit 2 with one line if argv asks for DataflowRunner and its client libraries are missing."""
    if any(a in ("-h", "--help", "--help_beam") for a in argv):
        return
    if is_dataflow_runner(runner_in_argv(argv)):
        problem = dataflow_client_missing()
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            raise SystemExit(2)
