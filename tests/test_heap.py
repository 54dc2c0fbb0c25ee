"""pipelines.localrunner.heap: freed memory goes back to the OS before tokenizer training."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

RELEASE = """
import pyarrow as pa
from pipelines.localrunner.heap import release_free_memory

def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 1e6

start = rss_mb()
buf = pa.allocate_buffer(128 << 20)  # from pyarrow's default pool, as Parquet reads and writes allocate
view = memoryview(buf).cast("B")
view[::4096] = b"\\x01" * len(view[::4096])  # touch every page
del view, buf
freed = rss_mb()
release_free_memory()
print(start, freed, rss_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_release_returns_what_pyarrows_pool_kept():
    """128 MB from pyarrow's pool, freed: after ``release_free_memory`` the process's RSS is back near
    where it started (pyarrow's mimalloc / jemalloc pool keeps freed pages resident until asked)."""
    out = subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True, check=True)
    start, freed, released = map(float, out.stdout.split())
    assert released < start + 32, (start, freed, released)


def test_tokenizer_training_starts_after_a_release(monkeypatch, tmp_path):
    """The Train step releases freed memory right before the trainer runs (the peak of a build below
    the sample caps). The step runs on a copy of the patched functions (Beam pickles it), so they
    note what happened in a file."""
    import apache_beam as beam
    from realtext import news_documents

    import pipelines.tokenizer.train as tk
    from pipelines.clean.sentences import split_sentences
    from pipelines.records import SentencedDocument
    from schemas.config import TokenizerConfig

    log = str(tmp_path / "events")

    def note(event: str) -> None:
        with open(log, "a") as f:
            f.write(event + "\n")

    train = tk.train_tokenizer
    monkeypatch.setattr(tk, "release_free_memory", lambda: note("release"))
    monkeypatch.setattr(tk, "train_tokenizer", lambda sents, cfg: (note("train"), train(sents, cfg))[1])
    docs = [SentencedDocument(f"d{i}", "web", tuple(split_sentences(t))) for i, t in enumerate(news_documents(60))]
    with beam.Pipeline("FnApiRunner") as p:
        _ = p | beam.Create(docs) | tk.TrainTokenizer(TokenizerConfig(vocab_size=600), 7, str(tmp_path / "out"))
    with open(log) as f:
        assert f.read().split() == ["release", "train"]


COLLECTOR = """
import gc
from pipelines.options import BuildOptions, finalize_options, make_pipeline

before = gc.get_threshold(), gc.get_freeze_count()
make_pipeline(finalize_options(BuildOptions([])))
print(before[0][0], before[1], gc.get_threshold()[0], gc.get_freeze_count())
"""


def test_a_local_pipeline_tunes_the_cyclic_collector():
    """A local build's process freezes what its imports made out of the collector's scans and raises the
    youngest generation's threshold (``heap.tune_collector``, measured in its comment)."""
    from pipelines.localrunner.heap import GC_YOUNG_THRESHOLD

    out = subprocess.run([sys.executable, "-c", COLLECTOR], capture_output=True, text=True, check=True)
    young_before, frozen_before, young, frozen = map(int, out.stdout.split())
    assert (young_before, frozen_before) == (700, 0)
    assert young == GC_YOUNG_THRESHOLD and frozen > 50_000, out.stdout


def test_only_the_first_pipeline_of_a_process_freezes():
    """A second local pipeline in the same process (a serving driver, a test session) freezes nothing
    more: what the first run left behind stays collectable."""
    code = COLLECTOR + """
import gc
gc.collect()
junk = [[] for _ in range(5000)]
make_pipeline(finalize_options(BuildOptions([])))
print(gc.get_freeze_count())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second = out.stdout.split()[3], out.stdout.split()[4]
    assert int(second) <= int(first), out.stdout  # frozen objects can still be freed by reference counting


ARENAS = """
import ctypes, os, threading
from pipelines.localrunner.heap import limit_malloc_arenas

limit_malloc_arenas()
together = threading.Barrier(8)
def work():
    keep = [bytearray(4096) for _ in range(256)]  # past pymalloc's 512 bytes: glibc's malloc
    together.wait()  # all eight alive at once: none hands its arena on to the next

threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(os.environ["MALLOC_ARENA_MAX"], flush=True)
ctypes.CDLL(None).malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_stats")
@pytest.mark.parametrize("preset", [None, "8"])
def test_a_build_process_allocates_from_two_malloc_arenas(preset):
    """Eight allocating threads: two arenas with the limit (``limit_malloc_arenas``, measured in its
    comment), where glibc otherwise gives each thread its own; a number the user set stays."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    if preset:
        env["MALLOC_ARENA_MAX"] = preset
    out = subprocess.run([sys.executable, "-c", ARENAS], capture_output=True, text=True, check=True, env=env)
    arenas = out.stderr.count("Arena ")
    if preset is None:
        assert out.stdout.strip() == "2" and arenas == 2, out.stderr
    else:
        assert out.stdout.strip() == "8" and arenas > 2, out.stderr
