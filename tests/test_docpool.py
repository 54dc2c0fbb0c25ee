"""The document processes beside the local runner (``--doc_processes``; pipelines.localrunner.docpool).

The pool's own behaviour (order, failures, lanes, what a worker imports) on real worker
processes; ``PooledBatches`` on Beam's local runner; the option's checks. The build through the
pool, byte-identical to the one without it, is in tests/test_build.py.
"""

from __future__ import annotations

import os
import sys

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline  # pytest collects names Test*
from apache_beam.testing.util import assert_that, equal_to

from pipelines.localrunner import docpool
from pipelines.localrunner.batching import PooledBatches
from pipelines.localrunner.docpool import DocPool, WorkerFailed
from schemas.errors import UserError


@pytest.fixture
def pool():
    p = DocPool(2)
    yield p
    p.close()


def test_tasks_run_in_other_processes_and_come_back_each_to_its_own(pool):
    futs = [pool.submit(pow, i, 2) for i in range(40)]
    assert [f.result(timeout=60) for f in futs] == [i * i for i in range(40)]
    pids = {pool.submit(os.getpid).result(timeout=60) for _ in range(8)}
    assert os.getpid() not in pids and pids <= set(pool.pids()) and len(pool.pids()) == 2
    assert pool.tasks == 48


def test_lanes_keep_tasks_to_the_first_workers(pool):
    pids = {pool.submit(os.getpid, lanes=1).result(timeout=60) for _ in range(6)}
    assert pids == {pool.pids()[0]}


def test_a_task_that_raises_fails_its_future_with_the_worker_traceback(pool):
    fut = pool.submit(int, "not a number")
    with pytest.raises(WorkerFailed, match="invalid literal for int"):
        fut.result(timeout=60)
    assert pool.submit(abs, -3).result(timeout=60) == 3  # the worker goes on


def test_a_task_that_cannot_be_unpickled_there_is_reported(pool):
    # This test module is not importable in a worker (tests/ is not on its path).
    fut = pool.submit(_square, 3)
    with pytest.raises(WorkerFailed, match="ModuleNotFoundError"):
        fut.result(timeout=60)


def _square(x: int) -> int:
    return x * x


def test_a_worker_that_dies_fails_what_it_had_and_later_tasks(pool):
    fut = pool.submit(os._exit, 3, lanes=1)
    with pytest.raises(WorkerFailed, match="exit code 3"):
        fut.result(timeout=60)
    with pytest.raises(WorkerFailed, match="exit code 3"):
        pool.submit(abs, 1, lanes=1).result(timeout=60)


def test_a_stray_print_does_not_corrupt_the_answers(pool):
    assert pool.submit(print, "noise on stdout").result(timeout=60) is None
    assert pool.submit(abs, -5).result(timeout=60) == 5


def test_a_worker_cleans_and_sketches_without_beam(pool):
    from pipelines.clean.rules import clean_batch
    from pipelines.dedupe.minhash import sketch_arrays
    from pipelines.dedupe.sketch import minhasher, sketches_of
    from pipelines.records import Document
    from schemas.config import CleanConfig, DedupeConfig

    text = ("The council met on Tuesday evening to discuss the budget for the coming year, and the "
            "members agreed to meet again. ") * 8
    docs = [Document(f"d{i}", "web", text + str(i)) for i in range(3)]
    cleaned = pool.submit(clean_batch, docs, CleanConfig(), {"web": False}, lanes=1).result(timeout=60)
    assert cleaned == clean_batch(docs, CleanConfig(), {"web": False})
    hasher = minhasher(DedupeConfig())
    there = sketches_of(docs, pool.submit(sketch_arrays, [d.text for d in docs], hasher, lanes=1).result(timeout=60))
    here = sketches_of(docs, sketch_arrays([d.text for d in docs], hasher))
    assert [(s.node, s.exact_hash, s.signature.tolist(), s.band_keys.tolist(), s.shingles.tolist()) for s in there] == \
        [(s.node, s.exact_hash, s.signature.tolist(), s.band_keys.tolist(), s.shingles.tolist()) for s in here]
    mods = pool.submit(eval, "sorted(__import__('sys').modules)", lanes=1).result(timeout=60)
    assert "pipelines.clean.rules" in mods and not any(m.split(".")[0] == "apache_beam" for m in mods)


def test_ctrl_c_is_left_to_the_build_process(pool):
    """Ctrl-C reaches the process group; a document process ignores it (no traceback from each)."""
    import signal
    import time

    pool.submit(abs, 1).result(timeout=60)  # started
    for pid in pool.pids():
        os.kill(pid, signal.SIGINT)
    time.sleep(0.2)
    assert [pool.submit(abs, -i).result(timeout=60) for i in range(4)] == [0, 1, 2, 3]


def test_close_ends_the_workers():
    p = DocPool(2)
    p.submit(abs, 1).result(timeout=60)
    procs = [w.proc for w in p._workers]
    p.close()
    assert all(proc.poll() is not None for proc in procs)


def test_resolve_and_configure():
    assert docpool.resolve(None) == 1 and docpool.resolve(1) == 1 and docpool.resolve(3) == 3
    assert docpool.resolve(0) == (os.cpu_count() or 1)
    with pytest.raises(UserError, match="--doc_processes"):
        docpool.resolve(-1)
    try:
        docpool.configure(1)
        assert docpool.current() is None  # one: the work stays in the runner's thread
        docpool.configure(2)
        first = docpool.current()
        assert first is not None and first.size == 2 and docpool.current() is first
    finally:
        docpool.shutdown()
    assert docpool.current() is None


class _Tens(PooledBatches):
    """Made-up work: each element times ten, the batch's size tagged."""

    def process(self, x):
        yield from self.add(x)

    def batch_task(self, batch):
        return _times_ten, (batch,)

    def batch_outputs(self, batch, result):
        yield from result
        yield beam.pvalue.TaggedOutput("sizes", len(batch))


def _times_ten(batch: list[int]) -> list[int]:
    return [10 * x for x in batch]


# _times_ten must be importable in a worker: run the Beam test with this module's directory on
# the workers' path (they inherit PYTHONPATH).
@pytest.mark.parametrize("processes", [1, 2])
def test_pooled_batches_give_the_same_outputs_with_and_without_a_pool(processes, monkeypatch):
    here = os.path.dirname(os.path.abspath(__file__))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setitem(sys.modules, "test_docpool", sys.modules[__name__])
    submitted = []
    real = DocPool.submit
    monkeypatch.setattr(DocPool, "submit", lambda self, fn, *a, **k: submitted.append(fn) or real(self, fn, *a, **k))
    docpool.configure(processes)
    try:
        with BeamTestPipeline() as p:
            out = p | beam.Create(list(range(50))) | beam.ParDo(_Tens(7)).with_outputs("sizes", main="main")
            assert_that(out.main, equal_to([10 * x for x in range(50)]))
            assert_that(out.sizes | beam.CombineGlobally(sum), equal_to([50]), label="every element once")
    finally:
        docpool.shutdown()
    assert (len(submitted) >= 8) == (processes > 1), submitted  # 50 elements in batches of 7: 8 tasks


def test_doc_processes_is_for_the_in_process_local_runner():
    from pipelines.options import BuildOptions, doc_processes, finalize_options

    assert doc_processes(finalize_options(BuildOptions([]))) == 1
    assert doc_processes(finalize_options(BuildOptions(["--doc_processes", "2"]))) == 2
    with pytest.raises(UserError, match="choose one"):
        finalize_options(BuildOptions(["--doc_processes", "2", "--direct_num_workers", "2"]))
    with pytest.raises(UserError, match="local runner"):
        finalize_options(BuildOptions(["--doc_processes", "2", "--runner", "DataflowRunner"]), check_runner=False)
    with pytest.raises(UserError, match="0 \\(one per core\\) or more"):
        finalize_options(BuildOptions(["--doc_processes=-2"]))
