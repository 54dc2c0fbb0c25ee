"""Beam's state sampler wakes at most every 20 ms (Beam's default: 200 ms), so a bundle ends sooner.

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
"""

from __future__ import annotations

SAMPLING_PERIOD_MS = 20
_beams: list[tuple[int, ...]] = []


def install(period_ms: int = SAMPLING_PERIOD_MS) -> None:
    """Make ``period_ms`` the default sampling period of every StateSampler made from now on."""
    from apache_beam.runners.worker import statesampler

    defaults = statesampler.StateSampler.__init__.__defaults__
    if not _beams and defaults is not None:
        _beams.append(defaults)
    if defaults is not None and len(defaults) == 1:
        statesampler.StateSampler.__init__.__defaults__ = (period_ms,)


def uninstall() -> None:
    """Beam's default back."""
    from apache_beam.runners.worker import statesampler

    if _beams:
        statesampler.StateSampler.__init__.__defaults__ = _beams.pop()
