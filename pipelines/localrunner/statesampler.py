"""Beam's state sampler wakes at most every 20 ms (Beam's default: 200 ms), so a bundle ends sooner;
and a Ctrl-C while a bundle starts its sampler no longer leaves the sampler's thread running.

Every bundle starts a sampler thread that sleeps between samples, its sleep growing from 2 ms
by 1.2x up to the sampling period, and ends by joining it: the bundle waits for the rest of the
thread's current sleep, up to 200 ms with Beam's default. A 20 MB build runs ~90 bundles and
waited ~0.9 s of wall time that way (cProfile: ``statesampler.stop`` -> ``Thread.join``); a
test-sized build ~0.4 s. At 20 ms the thread wakes 50 times a second (a few microseconds each),
and the per-transform times the build's timings.json is made of (``pipelines.report.timings``) are
sampled ten times as finely.

Sets the default ``sampling_period_ms`` of ``StateSampler.__init__`` in
``apache_beam.runners.worker.statesampler`` (apache-beam 2.77.0: its ``__defaults__`` are ``(200,)``).
On a Beam whose ``__init__`` has other defaults ``install`` does nothing, and
``tests/test_signatures.py::test_make_pipeline_shortens_the_state_samplers_period`` fails. Installed
by ``pipelines.options.make_pipeline`` and ``pipelines.localrunner.sdkworker``; ``uninstall``: Beam's.

The sampler's thread is not a daemon thread, and Beam's ``StateSampler.start`` starts it and only then
marks the sampler ``started``; a bundle's end stops the sampler only if it is marked. A KeyboardInterrupt
that lands in between (``Thread.start`` waits for the new thread to run, longer on a busy machine) left
the thread sampling forever: the command printed "interrupted" and then never exited, the interpreter
waiting at exit for that thread (a build that hung so was seen once in the test suite, 3 test processes
on 2 cores; this path was then reproduced by interrupting ``start``). ``install``
wraps ``start``: if it raises, the sampler is marked finished, which ends a thread it started at its
next wake-up (the thread reads the flag under the sampler's lock; ``finished`` is a public field of
Beam's compiled sampler). A Ctrl-C in a bundle's end, before ``stop`` marks the sampler finished,
leaves its thread running the same way: a pipeline whose run raised marks every sampler this process
started finished (``finish_all``).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

SAMPLING_PERIOD_MS = 20
_beams: list[tuple[int, ...]] = []
_starts: list[Callable[[Any], None]] = []
_samplers: weakref.WeakSet = weakref.WeakSet()  # the samplers started in this process (finish_all)


def _start_or_finish(start: Callable[[Any], None]) -> Callable[[Any], None]:
    """Beam's ``start``, marking the sampler finished if it raises (its thread, if started, then ends)."""

    @functools.wraps(start)
    def start_or_finish(self: Any) -> None:
        _samplers.add(self)  # before its thread exists: finish_all reaches every thread started
        try:
            start(self)
        except BaseException:
            self.finished = True
            raise

    start_or_finish.wrapped_by_shardforge = True  # type: ignore[attr-defined]
    return start_or_finish


def install(period_ms: int = SAMPLING_PERIOD_MS) -> None:
    """Make ``period_ms`` the default sampling period of every StateSampler made from now on, and
    an interrupted ``start`` finish the sampler."""
    from apache_beam.runners.worker import statesampler

    sampler = statesampler.StateSampler
    if not getattr(sampler.start, "wrapped_by_shardforge", False):
        _starts.append(sampler.start)
        sampler.start = _start_or_finish(sampler.start)

    defaults = sampler.__init__.__defaults__
    if not _beams and defaults is not None:
        _beams.append(defaults)
    if defaults is not None and len(defaults) == 1:
        sampler.__init__.__defaults__ = (period_ms,)


def finish_all() -> None:
    """Mark every sampler started in this process finished, so that each thread still sampling ends at
    its next wake-up. For a pipeline whose run was cut short: a Ctrl-C can also land in a bundle's end,
    before ``stop`` marks its sampler finished (``pipelines.options``' Pipeline calls this when its run
    raised). A sampler of a pipeline that goes on running must not be finished."""
    for sampler in list(_samplers):
        sampler.finished = True
    _samplers.clear()


def uninstall() -> None:
    """Beam's default and Beam's ``start`` back."""
    from apache_beam.runners.worker import statesampler

    if _starts:
        statesampler.StateSampler.start = _starts.pop()

    if _beams:
        statesampler.StateSampler.__init__.__defaults__ = _beams.pop()
