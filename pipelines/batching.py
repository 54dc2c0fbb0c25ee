"""Batches made inside a DoFn: per-batch work (numpy, a tokenizer call) without a batching step.

``beam.BatchElements`` is a step of its own: each document passes one more DoFn, and each batch
is one more element whose size Beam samples (pickling every document of a sampled batch). In
the build it cost more than the batching (Tokenize/Batch 0.008 CPU-s/MB at 30 MB of prose, more
than its own ``process``; #16, item 2). A ``BundleBatches`` collects the elements of its bundle
into lists of ``batch_size`` and hands each to ``handle_batch``; what is left when the bundle
ends is handed over then. Only for the global window (the build is a batch job): outputs made at
the bundle's end go out in it.

Batches depend on bundles, so the per-batch work must give the same per-element results
whatever the batch (as BatchElements' adaptive sizes required already).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows


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
        for out in self.handle_batch(batch):  # outside process(): each output names its window
            if isinstance(out, beam.pvalue.TaggedOutput):
                yield beam.pvalue.TaggedOutput(out.tag, GlobalWindows.windowed_value(out.value))
            else:
                yield GlobalWindows.windowed_value(out)

    def handle_batch(self, batch: list[Any]) -> Iterator[Any]:
        raise NotImplementedError
