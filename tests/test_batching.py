"""pipelines.localrunner.batching: batches made inside a DoFn, flushed at the bundle's end, on Beam's local runner."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline  # pytest collects names Test*
from apache_beam.testing.util import assert_that, equal_to

from pipelines.localrunner.batching import BundleBatches


class _Squares(BundleBatches):
    """Squares, in batches; tagged "sizes": each batch's size; the side input is added to each value."""

    def process(self, x: int, offset: int):
        self.offset = offset
        yield from self.add(x)

    def handle_batch(self, batch):
        for x in batch:
            yield x * x + self.offset
        yield beam.pvalue.TaggedOutput("sizes", len(batch))


@pytest.mark.parametrize("batch", [1, 7, 64, 1000])
def test_every_element_once_in_batches_of_at_most_the_size(batch):
    n = 100
    with BeamTestPipeline(runner="FnApiRunner") as p:
        offset = p | "Offset" >> beam.Create([5])
        out = (p | beam.Create(list(range(n)))
               | beam.ParDo(_Squares(batch), beam.pvalue.AsSingleton(offset)).with_outputs("sizes", main="main"))
        assert_that(out.main, equal_to([x * x + 5 for x in range(n)]), label="values")
        # Full batches while a bundle lasts; what is left goes out (windowed) when it ends.
        assert_that(out.sizes | beam.CombineGlobally(sum), equal_to([n]), label="total")
        assert_that(out.sizes | beam.Filter(lambda s: s > batch), equal_to([]), label="bounded")
        if batch == 1000:  # one bundle here: its one batch is flushed at the end
            assert_that(out.sizes, equal_to([n]), label="flushed")


def test_batches_outside_a_pipeline_and_an_empty_bundle():
    fn = _Squares(3)
    fn.offset = 0
    fn.start_bundle()
    assert list(fn.finish_bundle()) == []
    got = [v for x in range(5) for v in fn.add(x)]  # one full batch of 3; 3 and 4 are held
    assert got[:3] == [0, 1, 4] and len(got) == 4
    assert (got[3].tag, got[3].value) == ("sizes", 3)
    rest = list(fn.finish_bundle())
    assert [o.value.value if isinstance(o, beam.pvalue.TaggedOutput) else o.value for o in rest] == [9, 16, 2]
    assert list(fn.finish_bundle()) == []  # nothing held twice
