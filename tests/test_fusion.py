"""pipelines.localrunner.fusion: a Flatten's inputs written straight into the GroupByKey that reads it.

Real pipelines planned and run by Beam's FnApiRunner with the phase and without it: the copy stage
is gone from the plan where it should be, stays where it must, and every result is the same.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from pipelines.localrunner import fusion, spill


@pytest.fixture
def beam_plan():
    """Beam's own planning for the test body; the phase (as make_pipeline installs it) back after."""
    was = bool(fusion._original)
    fusion.uninstall()
    yield
    if was:
        fusion.install()


def _stage_names(build) -> list[str]:
    p = beam.Pipeline(runner=FnApiRunner())
    build(p)
    _, stages = FnApiRunner().create_stages(p.to_runner_api())
    return [s.name for s in stages]


def _join(p):
    """A three-way CoGroupByKey: two inputs from one stage, one with another element type (a transcode)."""
    nums = p | "Nums" >> beam.Create(range(40))
    a = nums | "A" >> beam.Map(lambda n: (n % 7, n))
    b = nums | "B" >> beam.Map(lambda n: (n % 5, -n))
    c = (p | "Words" >> beam.Create(["x", "yy", "zzz", "yy"])
         | "C" >> beam.Map(lambda w: (len(w), w)).with_output_types(tuple[int, str]))
    return ({"a": a, "b": b, "c": c} | "Join" >> beam.CoGroupByKey()
            | "Sorted" >> beam.MapTuple(lambda k, g: (k, sorted(g["a"]), sorted(g["b"]), sorted(g["c"]))))


def _expected_join():
    keys = set(range(7)) | set(range(5)) | {1, 2, 3}
    return [(k, sorted(n for n in range(40) if n % 7 == k), sorted(-n for n in range(40) if n % 5 == k),
             sorted(w for w in ["x", "yy", "zzz", "yy"] if len(w) == k)) for k in keys]


def _flatten_two_readers(p):
    """A Flatten read by a GroupByKey and by a Map: it must stay materialized."""
    one = p | "One" >> beam.Create([("k", 1), ("j", 2)])
    two = p | "Two" >> beam.Create([("k", 3)])
    flat = (one, two) | "Both" >> beam.Flatten()
    grouped = flat | "Group" >> beam.GroupByKey() | "Values" >> beam.MapTuple(lambda k, vs: (k, sorted(vs)))
    keys = flat | "Keys" >> beam.Map(lambda kv: kv[0])
    return grouped, keys


def test_join_planned_without_the_flatten_copy(beam_plan):
    before = _stage_names(_join)
    assert any("Join/CoGroupByKeyImpl/Flatten/Read" in n for n in before)  # Beam's plan has the copy
    fusion.install()
    n0 = fusion.fused()
    after = _stage_names(_join)
    assert not any("Flatten/Read" in n for n in after)
    assert not any("GroupByKey/Write" == n.rsplit("CoGroupByKeyImpl/", 1)[-1] for n in after)
    assert fusion.fused() == n0 + 1
    assert len(after) < len(before)


def test_flatten_with_another_reader_stays(beam_plan):
    fusion.install()
    names = _stage_names(lambda p: _flatten_two_readers(p))
    assert any("Both/Read" in n for n in names)


@pytest.mark.parametrize("spilled", [False, True], ids=["in-memory", "spilled"])
def test_same_results_with_and_without(beam_plan, tmp_path, spilled):
    if spilled:
        spill.install(spill.SpillSettings(buffer_bytes=0, directory=str(tmp_path)))
    try:
        for installed in (False, True):
            if installed:
                fusion.install()
            with beam.Pipeline(runner=FnApiRunner()) as p:
                assert_that(_join(p), equal_to(_expected_join()), label="JoinResult")
                grouped, keys = _flatten_two_readers(p)
                assert_that(grouped, equal_to([("k", [1, 3]), ("j", [2])]), label="GroupResult")
                assert_that(keys, equal_to(["k", "j", "k"]), label="KeysResult")
    finally:
        if spilled:
            spill.uninstall()


def test_empty_inputs_join(beam_plan):
    fusion.install()
    with beam.Pipeline(runner=FnApiRunner()) as p:
        a = p | "A" >> beam.Create([]).with_output_types(tuple[int, int])
        b = p | "B" >> beam.Create([(1, 2)])
        out = {"a": a, "b": b} | beam.CoGroupByKey() | beam.MapTuple(lambda k, g: (k, list(g["a"]), list(g["b"])))
        assert_that(out, equal_to([(1, [], [2])]))


def test_make_pipeline_installs_it_for_local_runs():
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.options import finalize_options, make_pipeline

    fusion.uninstall()
    make_pipeline(finalize_options(PipelineOptions([])))
    assert fusion._original, "a local build plans with the phase"


def _stage_of(stages, name: str):
    found = [s for s in stages if any(t.unique_name.startswith(name) for t in s.transforms)]
    assert found, name
    return found[0]


def test_build_plan_stores_no_document_copy_before_routing(tmp_path):
    """The build's plan: the clean and index parts are routed in the stage that
    meets the documents with their verdicts (their part counts come from before dedupe; on the local
    runner a side-input lookup, ``Dedupe/Split``, not a join), and a tokenized document is encoded to
    bytes in the stage that tokenizes it."""
    from pipelines.graph import build_pipeline
    from schemas.config import BuildConfig

    raw = tmp_path / "web.jsonl"
    raw.write_text('{"text": "One sentence here. Another one."}\n')
    cfg = BuildConfig.model_validate({"sources": [{"name": "web", "input": str(raw)}]})
    fusion.install()
    p = beam.Pipeline(runner=FnApiRunner())
    build_pipeline(p, cfg, str(tmp_path / "out"), files={"web": [str(raw)]})
    _, stages = FnApiRunner().create_stages(p.to_runner_api())
    verdicts = _stage_of(stages, "Dedupe/Split")
    names = [t.unique_name for t in verdicts.transforms]
    for route in ("WriteIntermediates/Write/Route", "Dedupe/WriteIndex/WriteParts/Route"):
        assert any(n.startswith(route) for n in names), route
    encode = _stage_of(stages, "Tokenize/Encode")
    assert any(t.unique_name.startswith("WriteCorpus/GroupForPacking/ToBytes") for t in encode.transforms)
