"""Progress bars for local builds.

On the local FnApiRunner every DoFn runs in the launching process, so stages
can tick module-level bars that the user sees on their terminal: files read,
documents tokenized, shards written. `run_build` switches them on (only for
the in-process runner and an interactive terminal, or SHARDFORGE_PROGRESS=1);
on Dataflow the workers never have the switch and `tick` is a no-op (the
Dataflow console shows per-stage progress there).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

ENV = "SHARDFORGE_PROGRESS"
_bars: dict[str, Any] = {}
_lock = threading.Lock()


def enabled() -> bool:
    return os.environ.get(ENV) == "1"


def tick(stage: str, n: int = 1, total: int | None = None, unit: str = "it") -> None:
    """Advance the bar of a stage by n (created on first use)."""
    if not enabled():
        return
    from tqdm import tqdm

    with _lock:
        bar = _bars.get(stage)
        if bar is None:
            bar = _bars[stage] = tqdm(desc=stage, total=total, unit=unit, file=sys.stderr, dynamic_ncols=True,
                                      position=len(_bars), leave=True, mininterval=0.5)
        bar.update(n)


def close_all() -> None:
    with _lock:
        for bar in _bars.values():
            bar.close()
        _bars.clear()


@contextmanager
def local_bars(options: Any) -> Iterator[None]:
    """Show bars while a pipeline runs in this process (FnApiRunner, single process) on a terminal."""
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

    in_process = (options.view_as(StandardOptions).runner in ("FnApiRunner", "DirectRunner")
                  and options.view_as(DirectOptions).direct_running_mode in (None, "in_memory"))
    wanted = os.environ.get(ENV) == "1" or (os.environ.get(ENV) is None and sys.stderr.isatty())
    if not (in_process and wanted):
        yield
        return
    old = os.environ.get(ENV)
    os.environ[ENV] = "1"
    try:
        yield
    finally:
        close_all()
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old
