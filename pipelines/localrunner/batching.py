"""Batches made inside a DoFn: per-batch work (numpy, a tokenizer call) without a batching step.

``beam.BatchElements`` is a step of its own: each document passes one more DoFn, and each batch
is one more element whose size Beam samples (pickling every document of a sampled batch). In
the build it cost more than the batching (Tokenize/Batch 0.008 CPU-s/MB at 30 MB of prose, more
than its own ``process``). A ``BundleBatches`` collects the elements of its bundle
into lists of ``batch_size`` and hands each to ``handle_batch``; what is left when the bundle
ends is handed over then. Only for the global window (the build is a batch job): outputs made at
the bundle's end go out in it.

Batches depend on bundles, so the per-batch work must give the same per-element results
whatever the batch (as BatchElements' adaptive sizes required already).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipelines.localrunner import docpool


def _in_global_window(outputs: Iterable[Any]) -> Iterator[Any]:
    """Outputs made outside ``process()`` (a bundle's end), each naming the global window."""
    for out in outputs:
        if isinstance(out, beam.pvalue.TaggedOutput):
            yield beam.pvalue.TaggedOutput(out.tag, GlobalWindows.windowed_value(out.value))
        else:
            yield GlobalWindows.windowed_value(out)


class BundleBatches(beam.DoFn):
    """A DoFn of batches: subclasses implement ``handle_batch(batch)`` and, in ``process``, call
    ``yield from self.add(element)`` (after handling any side inputs). Not ``process_batch``: a DoFn
    defining that is one of Beam's batched DoFns, which take Beam's own batches instead of elements."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = max(1, int(batch_size))
        self._batch: list[Any] = []

    def start_bundle(self) -> None:
        self._batch = []

    def add(self, element: Any) -> Iterator[Any]:
        """Collect ``element``; the outputs of a batch once it is full."""
        self._batch.append(element)
        if len(self._batch) >= self.batch_size:
            batch, self._batch = self._batch, []
            yield from self.handle_batch(batch)

    def finish_bundle(self) -> Iterator[Any]:
        if not self._batch:
            return
        batch, self._batch = self._batch, []
        yield from _in_global_window(self.handle_batch(batch))

    def handle_batch(self, batch: list[Any]) -> Iterator[Any]:
        raise NotImplementedError


class PooledBatches(BundleBatches):
    """Batches whose pure work may run in the document processes (``pipelines.localrunner.docpool``).

    ``process`` takes one element (no side inputs). Subclasses split ``handle_batch`` in two: ``batch_task(batch)`` names the work, a module-level
    function and its arguments (picklable, importable without Beam), and ``batch_outputs(batch,
    result)`` turns its result into the step's outputs (counters and progress included: they
    count in the runner's process). Without a pool the task runs here, at once. With one, a full
    batch is handed over and ``process`` goes on; results are emitted in the order their batches
    were handed over, as they come back, with at most ``pool.in_flight`` batches out at a time;
    the bundle's end waits for the rest. Per-element results must not depend on where they ran.
    """

    lanes: int | None = None  # at most this many of the pool's processes take this step's batches

    def start_bundle(self) -> None:
        super().start_bundle()
        self._pending: deque[tuple[list[Any], Any]] = deque()

    def process(self, element: Any) -> Iterator[Any]:
        yield from self.add(element)

    def batch_task(self, batch: list[Any]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        raise NotImplementedError

    def batch_outputs(self, batch: list[Any], result: Any) -> Iterator[Any]:
        raise NotImplementedError

    def handle_batch(self, batch: list[Any]) -> Iterator[Any]:
        fn, args = self.batch_task(batch)
        pool = docpool.current()
        if pool is None:
            yield from self.batch_outputs(batch, fn(*args))
            return
        self._pending.append((batch, pool.submit(fn, *args, lanes=self.lanes)))
        yield from self._ready(pool.in_flight)

    def _ready(self, limit: int) -> Iterator[Any]:
        """Outputs of the oldest batches that are back, and of as many more as keep ``limit`` out."""
        pending = self._pending
        while pending and (len(pending) > limit or pending[0][1].done()):
            batch, fut = pending.popleft()
            yield from self.batch_outputs(batch, fut.result())

    def finish_bundle(self) -> Iterator[Any]:
        yield from super().finish_bundle()
        yield from _in_global_window(self._ready(0))
