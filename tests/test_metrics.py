"""pipelines.metrics: cached counters, and sums made once per bundle (the accounting's tallies, the
part counts and the packing groups' token total)."""

from __future__ import annotations

from collections import Counter

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.files import BundleTotals, sum_pairs
from pipelines.metrics import SumPerBundle


def _bundle(fn: beam.DoFn, records) -> list:
    fn.start_bundle()
    for r in records:
        assert fn.process(r) is None  # nothing per record
    return [wv.value for wv in fn.finish_bundle()]


def test_sums_per_key_and_bundle_then_starts_again() -> None:
    fn = SumPerBundle(lambda word: (word[0], len(word)))
    assert sorted(_bundle(fn, ["apple", "avocado", "banana", "a"])) == [("a", 13), ("b", 6)]
    assert _bundle(fn, ["cherry"]) == [("c", 6)]  # the bundle before is not carried over
    assert _bundle(fn, []) == []  # an empty bundle emits nothing


def test_tuples_add_element_wise_and_unkeyed_totals_come_bare() -> None:
    totals = BundleTotals(len)
    assert _bundle(totals, ["ab", "cde", ""]) == [(3, 5)]
    assert _bundle(totals, []) == []
    fn = SumPerBundle(lambda x: (x % 2, (1, x, x * x)))
    assert sorted(_bundle(fn, [1, 2, 3, 4])) == [(0, (2, 6, 20)), (1, (2, 4, 10))]


def test_bundle_sums_add_up_to_the_per_record_counts_on_beams_runner() -> None:
    words = [f"w{i % 7}" for i in range(1000)]
    with TestPipeline() as p:
        pc = p | beam.Create(words, reshuffle=False)
        tallies = pc | "Tally" >> beam.ParDo(SumPerBundle(lambda w: (w, 1))) | beam.CombinePerKey(sum)
        totals = pc | "Totals" >> beam.ParDo(BundleTotals(len)) | beam.CombineGlobally(sum_pairs)
        assert_that(tallies, equal_to(sorted(Counter(words).items())), label="tallies")
        assert_that(totals, equal_to([(1000, sum(map(len, words)))]), label="totals")
