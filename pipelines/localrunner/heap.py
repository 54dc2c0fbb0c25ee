"""Returning a process's freed memory to the OS before a step that needs a lot of it.

Two allocators keep what a process frees resident: glibc's heap (the pages of freed Python
objects, Beam's buffers, numpy arrays) and pyarrow's memory pool (mimalloc or jemalloc in the
pyarrow wheels: Parquet reads and writes). Without a release the process's RSS stays at the high-
water mark of every step before; with one, the next step starts from what is live. At 6 MB of
input, at the start of tokenizer training: 49 MB released by pyarrow's pool and 38 MB by glibc, of
a 337 MB RSS (BENCHMARKS.md, "Data job vs its floor").

A local build's processes also have pyarrow allocate from glibc's malloc (``use_system_allocator``), in at most
two malloc arenas (``limit_malloc_arenas``), and run Python's cyclic collector rarely (``tune_collector``).
"""

from __future__ import annotations

import functools
import gc
import os
import sys
from typing import Any

ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"  # libarrow's choice of its default memory pool


@functools.cache
def _libc(name: str) -> Any:
    """The C library's function ``name`` from the process's own symbols (no ctypes.util.find_library:
    it forks ldconfig), or None where there is none (not glibc)."""
    try:
        import ctypes

        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


def release_free_memory(collect: bool = True) -> None:
    """Collect unreachable reference cycles (the collector runs rarely in a build: ``tune_collector``),
    then give the OS back the free pages of glibc's heap (``malloc_trim``; elsewhere nothing) and of
    pyarrow's default memory pool, if pyarrow is loaded (``release_unused``). A few milliseconds
    without the collection (``collect=False``); the collection scans every object alive: ~80 ms at
    30 MB of input, ~160 ms at 100 MB, for a few dozen to a few thousand objects freed."""
    if collect:
        gc.collect()
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()
    trim = _libc("malloc_trim")
    if trim is not None:
        trim(0)


def use_system_allocator() -> None:
    """Have pyarrow allocate from the C library's malloc (``ARROW_DEFAULT_MEMORY_POOL=system``) in
    this process and the processes it starts, unless the environment names a pool already.

    libarrow reads the variable once, when pyarrow is first imported, so this must run before that
    (``pyarrow.set_memory_pool`` does not reach the Parquet writer's buffers, which come from
    libarrow's own default). The wheels' default, mimalloc, kept ~60 MB resident after one
    2.7M-token Parquet part was written (its own peak: 14 MB) and took it again after every release;
    glibc's malloc ~19 MB. A local build at 6 MB of input: its packing stage's peak 376 -> ~317 MB,
    no slower (BENCHMARKS.md, "Data job vs its floor")."""
    os.environ.setdefault(ARROW_POOL_ENV, "system")


# glibc's malloc arenas (``limit_malloc_arenas``). Each new thread that allocates gets an arena of its
# own while there are fewer than 8 a core, and what an arena frees only that arena reuses:
# a build's threads (SentencePiece's trainer, Beam's data plane and state sampler, the progress
# bars) left freed pages scattered over several. With two arenas, four pairs of one-shot builds
# alternated (``bench_scaling.py --sizes 6,20 --configs default``): 20 MB 625-631 -> 610-611 MB,
# 6 MB 355-362 -> 350-358 MB, wall within the host's noise either way.
MALLOC_ARENA_ENV = "MALLOC_ARENA_MAX"
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter number (glibc malloc.h)


def limit_malloc_arenas() -> None:
    """At most ``MALLOC_ARENAS`` glibc malloc arenas in this process (``mallopt``, before its threads
    start) and in the processes it starts (``MALLOC_ARENA_MAX``), unless the environment sets a
    number already (glibc read it at start-up then). Elsewhere than glibc: nothing."""
    if MALLOC_ARENA_ENV in os.environ:
        return
    os.environ[MALLOC_ARENA_ENV] = str(MALLOC_ARENAS)
    mallopt = _libc("mallopt")
    if mallopt is not None:
        mallopt(_M_ARENA_MAX, MALLOC_ARENAS)


# Python's cyclic collector, tuned for a build process (``tune_collector``). A build allocates
# millions of container objects (records, tuples, Beam's windowed values), almost all freed by
# reference counting, and holds large live sets (a stage's buffered elements, a packing group).
# At the default thresholds (700, 10, 10) the collector ran ~1,300 times in a one-shot build of
# 40 MB and rescanned those sets: 1.2-1.3 CPU-s of its 44-52 (gen2: 0.96 s in 8-9 runs), more
# than decoding every tokenized document once. With the ~0.12M objects the imports made (modules,
# functions, classes) frozen out of every scan (``gc.freeze``) and the youngest generation run
# every 10,000 allocations: 0.19-0.20 CPU-s (58 runs, no gen2), the same peak RSS (606-609 MB).
GC_YOUNG_THRESHOLD = 10_000


@functools.cache
def _freeze_imports() -> None:
    """``gc.freeze`` once per process (the first ``tune_collector``)."""
    gc.freeze()


def tune_collector() -> None:
    """Freeze the objects alive now (the imports) out of the cyclic collector's scans and raise its
    youngest generation's threshold to ``GC_YOUNG_THRESHOLD`` allocations (the older generations keep
    their defaults: every 10th collection of the one below). Reference cycles are still collected,
    later; frozen objects live as long as the process does, so only the first call in a process
    freezes (a driver that runs pipeline after pipeline, a test session, would otherwise keep each
    run's garbage cycles for good). Called by a local build's processes once their modules are
    imported (``pipelines.options.make_pipeline``, ``pipelines.localrunner.sdkworker``)."""
    _freeze_imports()
    _, mid, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, mid, old)
