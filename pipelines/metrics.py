"""Beam counters by name, made once per process.

``Metrics.counter(namespace, name)`` builds and validates a metric name and a delegating counter on
every call; the per-document steps (read, clean) called it for every document, some several times.
A delegating counter holds no count itself (each ``inc`` goes to the metrics container of the step
that is running), so one per name serves every bundle and thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import Any

from apache_beam import CombineFn, CombineGlobally, DoFn, Flatten, ParDo, PTransform, pvalue
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from pipelines.records import Reject


@lru_cache(maxsize=4096)
def counter(namespace: str, name: str) -> Any:
    """The counter ``namespace``/``name`` (``Metrics.counter``), cached."""
    return Metrics.counter(namespace, name)


def counted(namespace: str, record: Any, kept: str, rejects_tag: str = "rejects") -> Any:
    """A step's output for ``record``, counted under ``namespace``: a Reject tagged ``rejects_tag`` and
    counted by its bucket and reason, anything else as the main output, counted as ``kept``."""
    if isinstance(record, Reject):
        counter(namespace, f"{record.bucket}_{record.reason}").inc()
        return pvalue.TaggedOutput(rejects_tag, record)
    counter(namespace, kept).inc()
    return record


class SumPerBundle(DoFn):
    """Sums over a bundle's records, emitted once when it ends: one element per key and bundle where
    one per record was an element of Beam's more for every document (pipelines.report.accounting's tallies,
    pipelines.intermediates.BundleTotals).

    ``amount(record)`` gives ``(key, n)``; ``n`` an int or a tuple of ints (summed element-wise). A
    bundle emits ``(key, total)`` per key it saw, or with ``keyed=False`` the bare totals. A bundle
    with no records emits nothing."""

    def __init__(self, amount: Callable[[Any], tuple[Any, Any]], keyed: bool = True) -> None:
        self.amount, self.keyed = amount, keyed

    def start_bundle(self) -> None:
        self._sums: dict[Any, Any] = {}

    def process(self, record: Any) -> None:
        key, n = self.amount(record)
        old = self._sums.get(key)
        if old is None:
            self._sums[key] = n
        elif isinstance(n, tuple):
            self._sums[key] = tuple(a + b for a, b in zip(old, n, strict=True))
        else:
            self._sums[key] = old + n

    def finish_bundle(self) -> Iterator[Any]:
        for key, total in self._sums.items():
            yield GlobalWindows.windowed_value((key, total) if self.keyed else total)


class AccumulatePerBundle(DoFn):
    """A CombineFn's partial combine of each bundle's records, emitted once when the bundle ends as
    ``(tag, accumulator)``: the input of a ``TaggedCombine``. A bundle with no records emits nothing.

    Beam's local runner materializes a Flatten of several inputs (each element encoded into a
    buffer), so the records are folded where they are made and only a few accumulators are flattened.
    """

    def __init__(self, tag: str, fn: CombineFn) -> None:
        self.tag, self.fn = tag, fn

    def setup(self) -> None:
        self.fn.setup()

    def start_bundle(self) -> None:
        self._acc: Any = None

    def process(self, record: Any) -> None:
        if self._acc is None:
            self._acc = self.fn.create_accumulator()
        self._acc = self.fn.add_input(self._acc, record)

    def finish_bundle(self) -> Iterator[Any]:
        if self._acc is not None:
            yield GlobalWindows.windowed_value((self.tag, self.fn.compact(self._acc)))
            self._acc = None

    def teardown(self) -> None:
        self.fn.teardown()


class TaggedCombine(CombineFn):
    """Several global combines in one: ``(tag, accumulator)`` elements (``AccumulatePerBundle``), each
    tag merged by its own CombineFn; the output is ``{tag: that CombineFn's output}``, with every tag
    present (an empty input gives each CombineFn's output of nothing, as a CombineGlobally of it
    alone would).

    Where a build combined several small summaries globally one by one (the report's), each combine
    was a group stage and a default stage of its own; tagged and flattened, they share one.
    """

    def __init__(self, fns: dict[str, CombineFn]) -> None:
        super().__init__()
        self.fns = dict(sorted(fns.items()))

    def setup(self, *args: Any, **kwargs: Any) -> None:
        for fn in self.fns.values():
            fn.setup(*args, **kwargs)

    def create_accumulator(self) -> dict[str, Any]:
        return {tag: fn.create_accumulator() for tag, fn in self.fns.items()}

    def add_input(self, acc: dict[str, Any], element: tuple[str, Any]) -> dict[str, Any]:
        tag, partial = element
        acc[tag] = self.fns[tag].merge_accumulators([acc[tag], partial])
        return acc

    def merge_accumulators(self, accs: Iterable[dict[str, Any]]) -> dict[str, Any]:
        accs = list(accs)
        return {tag: fn.merge_accumulators([a[tag] for a in accs]) for tag, fn in self.fns.items()}

    def compact(self, acc: dict[str, Any]) -> dict[str, Any]:
        return {tag: fn.compact(acc[tag]) for tag, fn in self.fns.items()}

    def extract_output(self, acc: dict[str, Any]) -> dict[str, Any]:
        return {tag: fn.extract_output(acc[tag]) for tag, fn in self.fns.items()}

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        for fn in self.fns.values():
            fn.teardown(*args, **kwargs)


class CombineTagged(PTransform):
    """``{tag: (PCollection, CombineFn)}`` -> a singleton ``{tag: the CombineFn's output over it}``:
    one group stage for all of them (``AccumulatePerBundle`` where each input is made, then a
    ``TaggedCombine``)."""

    def __init__(self, inputs: dict[str, tuple[Any, CombineFn]]) -> None:
        super().__init__()
        self.inputs = dict(sorted(inputs.items()))

    def expand(self, pbegin: Any) -> Any:
        partials = [pcoll | f"Accumulate[{tag}]" >> ParDo(AccumulatePerBundle(tag, fn))
                    for tag, (pcoll, fn) in self.inputs.items()]
        fns = {tag: fn for tag, (_, fn) in self.inputs.items()}
        return partials | "Partials" >> Flatten() | "Merge" >> CombineGlobally(TaggedCombine(fns))
