"""pipelines.metrics: cached counters, sums made once per bundle (the accounting's tallies, the
part counts and the packing groups' token total), and several global combines in one (the report's)."""

from __future__ import annotations

from collections import Counter

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline  # pytest collects names Test*
from apache_beam.testing.util import assert_that, equal_to

from pipelines.intermediates import BundleTotals, sum_pairs
from pipelines.metrics import AccumulatePerBundle, CombineTagged, SumPerBundle, TaggedCombine


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
    with BeamTestPipeline() as p:
        pc = p | beam.Create(words, reshuffle=False)
        tallies = pc | "Tally" >> beam.ParDo(SumPerBundle(lambda w: (w, 1))) | beam.CombinePerKey(sum)
        totals = pc | "Totals" >> beam.ParDo(BundleTotals(len)) | beam.CombineGlobally(sum_pairs)
        assert_that(tallies, equal_to(sorted(Counter(words).items())), label="tallies")
        assert_that(totals, equal_to([(1000, sum(map(len, words)))]), label="totals")


class _Longest(beam.CombineFn):
    """The longest string (ties: the smallest); an accumulator that is not a number, and a compact step."""

    def create_accumulator(self):
        return ""

    def add_input(self, acc, s):
        return min(acc, s, key=lambda x: (-len(x), x))

    def merge_accumulators(self, accs):
        return min(accs, key=lambda x: (-len(x), x))

    def compact(self, acc):
        return acc.strip() if acc.strip() else acc

    def extract_output(self, acc):
        return acc or None


def _tagged_fns() -> dict:
    return {"sum": beam.combiners.CountCombineFn(), "longest": _Longest(), "top": beam.combiners.TopCombineFn(3)}


def test_tagged_combine_gives_what_each_combine_gives_alone_and_every_tag_when_empty() -> None:
    fns = _tagged_fns()
    numbers, words = list(range(50)), ["kiwi", "apple", "fig", "banana", "cherry"]
    values = {"sum": numbers, "longest": words, "top": numbers}
    expected = {tag: fns[tag].apply(v) for tag, v in values.items()}
    assert expected == {"sum": 50, "longest": "banana", "top": [49, 48, 47]}
    # Each input's bundles fold their records (one accumulator per bundle, none for an empty bundle).
    partials = []
    for tag, v in values.items():
        acc = AccumulatePerBundle(tag, fns[tag])
        acc.setup()
        for chunk in (v[:3], [], v[3:]):
            acc.start_bundle()
            for x in chunk:
                assert acc.process(x) is None  # nothing per record
            partials += [wv.value for wv in acc.finish_bundle()]
    assert len(partials) == 6 and {t for t, _ in partials} == set(values)
    fn = TaggedCombine(fns)
    assert fn.apply(partials) == fn.apply(reversed(partials)) == expected
    halves = [fn.create_accumulator(), fn.create_accumulator()]
    for i, e in enumerate(partials):
        halves[i % 2] = fn.add_input(halves[i % 2], e)
    assert fn.extract_output(fn.merge_accumulators([fn.compact(h) for h in reversed(halves)])) == expected
    # Nothing at all: each combine's output of nothing, as a CombineGlobally of it alone would give.
    assert fn.apply([]) == {"sum": 0, "longest": None, "top": []}
    assert fn.apply([p for p in partials if p[0] == "sum"]) == {"sum": 50, "longest": None, "top": []}


def test_combine_tagged_on_beams_runner_equals_the_separate_global_combines() -> None:
    numbers = [(i * 7919) % 1000 for i in range(3000)]
    words = [f"w{'x' * (i % 13)}{i % 5}" for i in range(500)]
    expected = [{"sum": 3000, "longest": "wxxxxxxxxxxxx0", "top": []}]
    with BeamTestPipeline() as p:
        nums, ws = p | "Numbers" >> beam.Create(numbers), p | "Words" >> beam.Create(words)
        empty = p | "Empty" >> beam.Create([]) | beam.Map(lambda x: x)
        fns = _tagged_fns()
        together = p | CombineTagged({"sum": (nums, fns["sum"]), "longest": (ws, fns["longest"]),
                                      "top": (empty, fns["top"])})
        alone = {"sum": nums | "Sum" >> beam.CombineGlobally(beam.combiners.CountCombineFn()),
                 "longest": ws | "Longest" >> beam.CombineGlobally(_Longest()),
                 "top": empty | "Top" >> beam.CombineGlobally(beam.combiners.TopCombineFn(3))}
        joined = p | "One" >> beam.Create([None]) | beam.Map(
            lambda _, s, lo, t: {"sum": s, "longest": lo, "top": t},
            *(beam.pvalue.AsSingleton(alone[k]) for k in ("sum", "longest", "top")))
        assert_that(together, equal_to(expected), label="together")
        assert_that(joined, equal_to(expected), label="alone")
