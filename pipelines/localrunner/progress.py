"""Progress of local builds: bars on a terminal, a line a minute in a log.

On the local FnApiRunner every DoFn runs in the launching process, so stages
can tick module-level counters that the user sees: files read, documents
tokenized, shards written. `run_build` switches them on (only for the
in-process runner): as tqdm bars where stderr is an interactive terminal, and
as a line every LINE_EVERY_S seconds where it is not (a build under nohup, in
a container's log), so that a long build says it is alive and how far it got
before its summary. SHARDFORGE_PROGRESS chooses: 1 bars, lines, 0 none. On
Dataflow the workers never have the switch and `tick` is a no-op (the
Dataflow console shows per-stage progress there).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

ENV = "SHARDFORGE_PROGRESS"
BARS, LINES = "1", "lines"
LINE_EVERY_S = 60.0  # a log's progress line: often enough to see a build is alive, rare enough to read
_bars: dict[str, Any] = {}
_counts: dict[str, list[Any]] = {}  # lines: stage -> [count, total]
_lock = threading.Lock()


def enabled() -> bool:
    return os.environ.get(ENV) in (BARS, LINES)


def tick(stage: str, n: int = 1, total: int | None = None, unit: str = "it") -> None:
    """Advance the count of a stage by n (its bar, or its figure in the next line; created on first use)."""
    mode = os.environ.get(ENV)
    if mode == LINES:
        with _lock:
            _counts.setdefault(stage, [0, total])[0] += n
        return
    if mode != BARS:
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
        _counts.clear()


def elapsed_text(seconds: float) -> str:
    """65 -> '1m05s'; 3725 -> '1h02m05s'."""
    s = int(seconds)
    h, m = divmod(s // 60, 60)
    return f"{h}h{m:02d}m{s % 60:02d}s" if h else f"{m}m{s % 60:02d}s"


def progress_line(seconds: float) -> str:
    """'progress 2m00s: read news files 3/10, tokenize documents 120,000' (what was counted so far)."""
    with _lock:
        parts = [f"{stage} {count:,}" + (f"/{total:,}" if total else "") for stage, (count, total) in _counts.items()]
    return f"progress {elapsed_text(seconds)}: {', '.join(parts) if parts else 'running (nothing counted yet)'}"


class _Lines:
    """A thread that writes ``progress_line`` to stderr every LINE_EVERY_S seconds until stopped."""

    def __init__(self, every: float) -> None:
        self._every = every
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shardforge-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                print(progress_line(time.monotonic() - self._start), file=sys.stderr, flush=True)
            except (OSError, ValueError):  # stderr closed (a log's pipe gone): the build goes on without lines
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def wanted_mode() -> str | None:
    """BARS, LINES or None: SHARDFORGE_PROGRESS where set, else bars on a terminal and lines elsewhere."""
    chosen = os.environ.get(ENV)
    if chosen is not None:
        return chosen if chosen in (BARS, LINES) else None
    return BARS if sys.stderr.isatty() else LINES


@contextmanager
def local_bars(options: Any) -> Iterator[None]:
    """Show progress while a pipeline runs in this process (FnApiRunner, single process): bars on a
    terminal, a line every LINE_EVERY_S seconds elsewhere."""
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

    in_process = (options.view_as(StandardOptions).runner in ("FnApiRunner", "DirectRunner")
                  and options.view_as(DirectOptions).direct_running_mode in (None, "in_memory"))
    mode = wanted_mode()
    if not (in_process and mode):
        yield
        return
    old = os.environ.get(ENV)
    os.environ[ENV] = mode
    lines = _Lines(LINE_EVERY_S) if mode == LINES else None
    try:
        yield
    finally:
        if lines is not None:
            lines.stop()
        close_all()
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old
