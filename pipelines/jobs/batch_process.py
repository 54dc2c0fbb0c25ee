"""A ``--batch_mb`` batch's own process: what ``pipelines.jobs.batched`` spawns for each batch.

Light at import (nothing of Beam): spawning ``run_batch`` imports only this module and the batch's
arguments, so the process leaves out the Beam integrations a local build never uses
and has pyarrow allocate from glibc's malloc (``pipelines.localrunner.preflight.local_build_process``) before
the batch's code imports Beam.
"""

from __future__ import annotations

import traceback
from typing import Any


def run_batch(output: str, batch_files: list[tuple[Any, tuple[Any, ...]]], cfg: Any, beam_args: list[str],
              conn: Any) -> None:
    """One batch in a fresh process: everything it allocated goes back to the OS when it exits.
    ``batch_files``: (SourceConfig, RawFiles) pairs; ``cfg``: the BuildConfig; the outcome goes to
    the parent through ``conn``. A Ctrl-C (a terminal's SIGINT reaches both processes) is told to the
    parent without a trace, wherever it lands; the parent says "interrupted" once."""
    try:
        conn.send(_outcome(output, batch_files, cfg, beam_args))
    except KeyboardInterrupt:
        conn.send(("interrupted",))
    finally:
        conn.close()


def _outcome(output: str, batch_files: list[tuple[Any, tuple[Any, ...]]], cfg: Any, beam_args: list[str]) -> tuple:
    from pipelines.localrunner.preflight import local_build_process

    local_build_process()
    from pipelines.jobs.ingest import ingest_sources, recover
    from pipelines.options import quiet_beam
    from schemas.manifest import accounting_totals
    from shardforge.console.redact import install_log_redaction
    from shardforge.console.run import find_user_error, quiet_library_logs, was_interrupted

    # The parent's log rules: no credential, no trace of a Ctrl-C inside a step, and a user error raised in
    # a step kept out of Beam's log (the parent prints it once, in one line).
    install_log_redaction()
    quiet_library_logs()
    quiet_beam()
    try:
        res = ingest_sources(recover(output, clean_orphans=False), batch_files, cfg, beam_args)
        return ("ok", res.version, res.new_shards, res.timings.to_json() if res.timings else None,
                accounting_totals(res.batch))
    except Exception as e:  # reported to the parent, which raises it there
        if was_interrupted(e):  # a KeyboardInterrupt a runner wrapped
            return ("interrupted",)
        user = find_user_error(e)
        return ("user", str(user)) if user is not None else ("error", traceback.format_exc())
