"""pipelines.localrunner.spill: the local runner's stage data on disk and streamed through bundles.

Real Beam pipelines on the FnApiRunner, with everything spilled (``buffer_bytes=0``) against Beam's
own in-memory buffers: the same results, and bytes really went to disk. The buffer tests drive
Beam's own ``ListBuffer`` / ``GroupingBuffer`` classes, so a Beam upgrade that moves the internals
the patches rely on fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.coders import coders
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.portability.fn_api_runner.execution import GroupingBuffer, ListBuffer
from apache_beam.transforms import window
from apache_beam.transforms.core import Windowing
from apache_beam.utils.windowed_value import WindowedValue

from pipelines.localrunner import spill


@pytest.fixture
def spill_all(tmp_path: Path):
    """Everything spills into tmp_path; Beam's own methods come back afterwards."""
    spill.install(spill.SpillSettings(buffer_bytes=0, directory=str(tmp_path)))
    yield tmp_path
    spill.uninstall()


def _kv_coder() -> coders.Coder:
    return coders.WindowedValueCoder(coders.TupleCoder([coders.StrUtf8Coder(), coders.VarIntCoder()]),
                                     coders.GlobalWindowCoder())


def _encoded(pairs: list[tuple[str, int]]) -> bytes:
    out = create_OutputStream()
    impl = _kv_coder().get_impl()
    for kv in pairs:
        impl.encode_to_stream(WindowedValue(kv, 0, [window.GlobalWindow()]), out, True)
    return out.get()


def _grouping_buffer() -> GroupingBuffer:
    post = coders.WindowedValueCoder(
        coders.TupleCoder([coders.StrUtf8Coder(), coders.IterableCoder(coders.VarIntCoder())]),
        coders.GlobalWindowCoder())
    return GroupingBuffer(_kv_coder(), post, Windowing(window.GlobalWindows()))


def _groups(buf: GroupingBuffer, n: int = 1) -> dict[str, list[int]]:
    """Decode a GroupingBuffer's grouped output (all its parts): key -> values in order."""
    from apache_beam.coders.coder_impl import create_InputStream

    impl = buf._post_grouped_coder.get_impl()
    out: dict[str, list[int]] = {}
    for part in buf.partition(n):
        for item in part:
            stream = create_InputStream(spill.resolve(item))
            while stream.size() > 0:
                key, values = impl.decode_from_stream(stream, True).value
                assert key not in out
                out[key] = list(values)
    return out


def test_every_patched_method_exists_on_this_beam() -> None:
    """The methods the patches replace exist, and real buffers carry the attributes they read."""
    assert len(spill._targets()) == 15
    assert isinstance(ListBuffer(None)._inputs, list)
    assert isinstance(_grouping_buffer()._table, dict)


def test_a_spilled_list_buffer_reads_back_the_same_bytes(spill_all: Path) -> None:
    buf = ListBuffer(None)
    chunks = [bytes([i]) * (100 + i) for i in range(20)]
    before = spill.spilled()["bytes"]
    for c in chunks:
        buf.append(c)
    assert all(type(x) is spill.Chunk for x in buf._inputs)  # on disk, not in memory
    assert spill.spilled()["bytes"] - before == sum(map(len, chunks))
    assert list(buf) == chunks
    copy = buf.copy()
    assert list(copy) == chunks
    parts = buf.partition(3)  # more chunks than parts: slices of the items, read where they are sent
    assert sorted(b for p in parts for b in map(spill.resolve, p)) == sorted(chunks)
    other = ListBuffer(None)
    other.append(b"x")
    other.extend(buf)
    assert list(other) == [b"x", *chunks]
    buf.clear()
    with pytest.raises(RuntimeError):
        list(buf)


def test_a_list_buffer_keeps_its_first_bytes_in_memory(tmp_path: Path) -> None:
    spill.install(spill.SpillSettings(buffer_bytes=250, directory=str(tmp_path)))
    try:
        buf = ListBuffer(None)
        for i in range(5):
            buf.append(bytes([i]) * 100)
        kinds = [type(x).__name__ for x in buf._inputs]
        assert kinds == ["bytes", "bytes", "Chunk", "Chunk", "Chunk"]
        assert list(buf) == [bytes([i]) * 100 for i in range(5)]
    finally:
        spill.uninstall()


def test_partition_with_fewer_chunks_than_parts_splits_elements(spill_all: Path) -> None:
    """Beam re-encodes element by element when a buffer has fewer chunks than parts: from the bytes."""
    buf = ListBuffer(_kv_coder().get_impl())
    buf.append(_encoded([("a", 1), ("b", 2), ("c", 3), ("d", 4)]))
    parts = buf.partition(2)
    assert len(parts) == 2 and all(len(p) == 1 for p in parts)
    assert sum(len(spill.resolve(p[0])) for p in parts) == len(_encoded([("a", 1), ("b", 2), ("c", 3), ("d", 4)]))


def test_a_spilled_grouping_buffer_groups_like_beams(spill_all: Path) -> None:
    pairs = [(f"k{i % 37}", i) for i in range(2000)]
    mine = _grouping_buffer()
    for i in range(0, len(pairs), 300):
        mine.append(_encoded(pairs[i:i + 300]))
    assert mine.__dict__.get("_sf_spill") not in (None, spill._NO_SPILL)
    assert not mine._table  # nothing decoded held in memory
    spill.uninstall()
    beams = _grouping_buffer()
    for i in range(0, len(pairs), 300):
        beams.append(_encoded(pairs[i:i + 300]))
    spill.install(spill.SpillSettings(buffer_bytes=0, directory=str(spill_all)))
    got, want = _groups(mine, 3), _groups(beams, 1)
    assert got == want  # every key, and each key's values in arrival order
    assert len(got) == 37 and got["k0"] == list(range(0, 2000, 37))


def test_a_grouping_buffer_spills_what_it_held_when_it_crosses_the_limit(tmp_path: Path) -> None:
    first = _encoded([("a", 1), ("b", 2)])
    spill.install(spill.SpillSettings(buffer_bytes=len(first), directory=str(tmp_path)))
    try:
        buf = _grouping_buffer()
        buf.append(first)
        assert buf._table and buf.__dict__.get("_sf_spill") is None  # under the limit: Beam's table
        buf.append(_encoded([("a", 3), ("c", 4)]))
        assert not buf._table  # the table went into the buckets with the rest
        assert _groups(buf) == {"a": [1, 3], "b": [2], "c": [4]}
    finally:
        spill.uninstall()


def test_extend_merges_spilled_and_unspilled_grouping_buffers(spill_all: Path) -> None:
    a, b = _grouping_buffer(), _grouping_buffer()
    a.append(_encoded([("x", 1), ("y", 2)]))
    spill.uninstall()
    b.append(_encoded([("x", 3)]))  # Beam's own table
    spill.install(spill.SpillSettings(buffer_bytes=0, directory=str(spill_all)))
    a.extend(b)
    assert _groups(a) == {"x": [1, 3], "y": [2]}


def _pipeline_results(out: Path) -> dict[str, list]:
    """A pipeline with every kind of stage boundary: GroupByKey, CoGroupByKey, a lifted combine,
    side inputs (singleton and list), a PCollection read by three stages, Flatten; results sorted."""
    words = [f"w{i % 101}" for i in range(30_000)]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        docs = p | beam.Create(list(enumerate(words)))
        keyed = docs | "Key" >> beam.Map(lambda kv: (kv[1], kv[0]))
        grouped = keyed | beam.GroupByKey() | "Sum" >> beam.MapTuple(lambda k, vs: (k, (sum(vs), len(list(vs)))))
        counts = keyed | beam.combiners.Count.PerKey()
        total = docs | "Total" >> beam.combiners.Count.Globally()
        firsts = keyed | beam.combiners.Top.PerKey(1, key=lambda v: -v)
        joined = ({"g": grouped, "c": counts, "f": firsts}
                  | beam.CoGroupByKey())
        shares = counts | beam.Map(lambda kv, n: (kv[0], kv[1] / n), beam.pvalue.AsSingleton(total))
        seen = keyed | "Seen" >> beam.Filter(lambda kv, keys: kv[0] in keys,
                                             beam.pvalue.AsList(counts | beam.Keys()))
        both = (seen | "S1" >> beam.Map(lambda kv: kv[0]), shares | "S2" >> beam.Map(lambda kv: kv[0])) \
            | beam.Flatten() | "CountAll" >> beam.combiners.Count.Globally()

        def dump(name):
            def write(items):
                (out / name).write_text(json.dumps(sorted(map(repr, items))))
            return write

        _ = joined | "LJ" >> beam.combiners.ToList() | "WJ" >> beam.Map(dump("joined"))
        _ = shares | "LS" >> beam.combiners.ToList() | "WS" >> beam.Map(dump("shares"))
        _ = both | "WB" >> beam.Map(lambda n: dump("both")([n]))
    return {n: json.loads((out / n).read_text()) for n in ("joined", "shares", "both")}


def _beams_then_ours(run, tmp_path: Path, buffer_bytes: int) -> tuple[dict, dict, int]:
    """``run(folder)`` on Beam's own buffers, then with ``pipelines.localrunner.spill`` installed: both results
    and the bytes that went to spill files in the second run."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    spill.uninstall()
    beams = run(tmp_path / "a")
    spill.install(spill.SpillSettings(buffer_bytes=buffer_bytes, directory=str(tmp_path)))
    try:
        before = spill.spilled()["bytes"]
        ours = run(tmp_path / "b")
        return beams, ours, spill.spilled()["bytes"] - before
    finally:
        spill.uninstall()


def test_a_pipeline_gives_the_same_results_spilled_and_in_memory(tmp_path: Path) -> None:
    beams, spilled, written = _beams_then_ours(_pipeline_results, tmp_path, buffer_bytes=0)
    assert written > 100_000  # the stage data really went to disk
    assert spilled == beams
    assert beams["both"] == ["30101"]


def test_spill_files_are_unlinked(spill_all: Path) -> None:
    """Spill files never show in their folder (unlinked at creation): nothing to clean up after a crash."""
    buf = ListBuffer(None)
    buf.append(b"x" * 1000)
    assert list(buf) == [b"x" * 1000]
    assert list(spill_all.iterdir()) == []


def test_spill_options_of_the_commands() -> None:
    """--spill_mb / --spill_dir are Beam options every command accepts; -1 turns spilling off."""
    from pipelines.options import DEFAULT_SPILL_MB, BuildOptions, check_beam_args, spill_settings

    check_beam_args(["--spill_mb", "0", "--spill_dir", "/tmp"])
    assert spill_settings(BuildOptions([])) == spill.SpillSettings(DEFAULT_SPILL_MB << 20, None)
    assert spill_settings(BuildOptions(["--spill_mb", "0.5", "--spill_dir", "/x"])) == \
        spill.SpillSettings(1 << 19, "/x")
    assert spill_settings(BuildOptions(["--spill_mb", "-1"])) is None


def _held_after_a_big_stage(p: beam.Pipeline, seen: Path, in_process: bool) -> dict[str, list]:
    """Run p with a stage that writes 300 kB, then a stage that notes, in its process, the bytes held
    by the output streams of every data output operation (live or cached with their processor) and
    which of Beam's unused optional integrations are loaded. in_process: the stage runs in this
    process, whose operations from other tests' pipelines (alive before p ran) are left out."""

    def operations() -> list:  # nested (as is held): pickled by value, so a worker process runs them
        import gc

        from apache_beam.runners.worker.bundle_processor import DataOutputOperation

        gc.collect()  # the processors of pipelines that ended, waiting for the cycle collector
        return [op for op in gc.get_objects() if isinstance(op, DataOutputOperation)]

    from pipelines.localrunner.preflight import UNUSED_INTEGRATIONS

    # The earlier pipelines' operations, held so that no new one can take a freed one's id().
    earlier_ops = operations() if in_process else []
    earlier = frozenset(id(op) for op in earlier_ops)

    def held(_: object) -> None:
        import sys

        sizes = [op.output_stream.size() if getattr(op, "output_stream", None) is not None else 0
                 for op in operations() if id(op) not in earlier]
        loaded = sorted(m for m in UNUSED_INTEGRATIONS if m in sys.modules)
        seen.write_text(json.dumps({"held": sizes, "loaded": loaded}))

    with p:
        big = p | beam.Create(range(300)) | "Big" >> beam.Map(lambda i: (i % 3, "x" * 1000))
        _ = big | beam.GroupByKey() | "Keys" >> beam.combiners.Count.Globally() | "Look" >> beam.Map(held)
    return json.loads(seen.read_text())


def test_a_finished_bundle_keeps_no_output_bytes(tmp_path: Path) -> None:
    """The runner caches each stage's bundle processor; the stream a finished bundle wrote through
    must not stay with it (its C buffer held up to 16 MB per output of every stage, for the run)."""
    spill.install(spill.SpillSettings(directory=str(tmp_path)))
    try:
        held = _held_after_a_big_stage(beam.Pipeline(runner=FnApiRunner()), tmp_path / "seen.json", in_process=True)
    finally:
        spill.uninstall()
    assert held["held"]  # the stage that wrote 300 kB through its output stream ran in this process,
    assert sum(held["held"]) == 0, held  # and its processor is cached: its stream is gone


def test_a_worker_process_keeps_no_output_bytes(tmp_path: Path) -> None:
    """The same in the worker processes of ``--direct_num_workers 2`` (``pipelines.localrunner.sdkworker``), which
    also leave out the optional integrations Beam imports and a worker never uses."""
    from pipelines.options import BuildOptions, finalize_options, make_pipeline

    p = make_pipeline(finalize_options(BuildOptions(["--direct_num_workers", "2"])))
    try:
        held = _held_after_a_big_stage(p, tmp_path / "seen.json", in_process=False)
    finally:
        spill.uninstall()
    assert held["held"]
    assert sum(held["held"]) == 0, held
    assert held["loaded"] == [], held  # pipelines.localrunner.sdkworker leaves out what Beam would load and never use


def test_to_disk_moves_what_buffers_hold_in_memory(tmp_path: Path) -> None:
    """``to_disk`` puts the bytes a ListBuffer and a GroupingBuffer keep in memory into spill files:
    the same elements in the same order, and nothing of a buffer whose reading has started."""
    spill.install(spill.SpillSettings(buffer_bytes=1 << 30, directory=str(tmp_path)))
    try:
        items = [bytes([i]) * (50 + i) for i in range(10)]
        listed = ListBuffer(None)
        for c in items:
            listed.append(c)
        grouped = _grouping_buffer()
        grouped.append(_encoded([("a", 1), ("b", 2), ("a", 3)]))
        read = _grouping_buffer()
        read.append(_encoded([("c", 5)]))
        read.partition(1)  # its stage has started reading it
        assert all(type(x) is bytes for x in listed._inputs) and grouped._table  # all in memory
        before = spill.spilled()["bytes"]
        moved = spill.to_disk()
        assert moved >= sum(map(len, items)) and spill.spilled()["bytes"] - before >= sum(map(len, items))
        assert all(type(x) is spill.Chunk for x in listed._inputs)
        assert list(listed) == items
        assert not grouped._table and _groups(grouped) == {"a": [1, 3], "b": [2]}
        assert read.__dict__.get("_sf_spill") is None and _groups(read) == {"c": [5]}
        assert spill.to_disk() == 0  # nothing left in memory
        listed.append(b"z")  # later appends: as before
        assert list(listed) == [*items, b"z"]
    finally:
        spill.uninstall()
    assert spill.to_disk() == 0  # not installed: nothing to do


def _evicting_pipeline(out: Path) -> dict[str, object]:
    """A stage that calls ``to_disk`` while a GroupByKey's input and a PCollection read later wait."""
    with beam.Pipeline(runner=FnApiRunner()) as p:
        nums = p | beam.Create(list(range(20_000)))
        keyed = nums | "Key" >> beam.Map(lambda i: (i % 101, f"{i:08d}" * 4))
        waiting = nums | "Later" >> beam.Map(lambda i: i * 3)
        moved = (nums | "Total" >> beam.combiners.Count.Globally()
                 | "Evict" >> beam.Map(lambda n: spill.to_disk()))
        groups = (keyed | beam.GroupByKey()
                  | "Sorted" >> beam.Map(lambda kv, _: (kv[0], sorted(kv[1])), beam.pvalue.AsSingleton(moved)))
        later = waiting | "Sum" >> beam.CombineGlobally(sum)

        def write(name):
            return lambda v: (out / name).write_text(json.dumps(v))

        _ = groups | "L" >> beam.combiners.ToList() | "WG" >> beam.Map(lambda g: write("groups")(sorted(g)))
        _ = later | "WL" >> beam.Map(write("later"))
        _ = moved | "WM" >> beam.Map(write("moved"))
    return {n: json.loads((out / n).read_text()) for n in ("groups", "later", "moved")}


def test_a_pipeline_that_moves_its_buffers_to_disk_mid_run_gives_the_same_results(tmp_path: Path) -> None:
    beams, evicted, written = _beams_then_ours(_evicting_pipeline, tmp_path, buffer_bytes=1 << 30)
    assert beams["moved"] == 0 and written > 500_000  # (a spilled GroupByKey writes its records re-encoded)
    assert evicted["moved"] > 500_000  # the grouped input and the waiting PCollection went to disk
    assert evicted["groups"] == beams["groups"] and evicted["later"] == beams["later"]
    assert len(beams["groups"]) == 101 and beams["later"] == 3 * sum(range(20_000))
