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
    the parent through ``conn``."""
    from pipelines.localrunner.preflight import local_build_process

    local_build_process()
    from pipelines.jobs.ingest import ingest_sources, recover
    from shardforge.console.run import find_user_error

    try:
        res = ingest_sources(recover(output, clean_orphans=False), batch_files, cfg, beam_args)
        conn.send(("ok", res.version, res.new_shards, res.timings.to_json() if res.timings else None))
    except BaseException as e:  # reported to the parent, which raises it there
        user = find_user_error(e)
        conn.send(("user", str(user)) if user is not None else ("error", traceback.format_exc()))
    finally:
        conn.close()
