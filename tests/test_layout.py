"""The data job's layout (#16.8): drivers import the graph, never each other; the graph imports no driver.

Read statically from the source by tests/importgraph.py (every import, also those inside
functions), so a lazy import cannot hide an edge. Import cycles anywhere are checked in
tests/test_boundaries.py.
"""

from __future__ import annotations

import pytest
from importgraph import all_imports, graph, source_modules

# The command-line drivers: nothing in pipelines/ may import them (they sit on top).
CLI_DRIVERS = {"pipelines.build", "pipelines.serve", "pipelines.repack"}
# The engines the drivers run: one batch as a corpus version, a chain of batches.
ENGINES = {"pipelines.jobs.ingest", "pipelines.jobs.batched"}


@pytest.fixture(scope="module")
def g() -> dict[str, set[str]]:
    """pipelines.* module -> the pipelines.* modules it imports anywhere in it."""
    known = source_modules()
    edges = graph(all_imports(), known, at_import_only=False)
    return {m: {t for t in out if t.startswith("pipelines")} for m, out in edges.items() if m.startswith("pipelines")}


def test_the_scan_sees_imports(g):
    assert "pipelines.graph" in g["pipelines.jobs.ingest"]  # a lazy import inside a function
    assert "pipelines.graph" in g["pipelines.jobs.build"]


def test_nothing_imports_a_cli_driver(g):
    bad = {m: sorted(g[m] & CLI_DRIVERS) for m in g if g[m] & CLI_DRIVERS}
    assert not bad, bad


def test_graph_imports_no_driver_and_engines_only_downward(g):
    assert not g["pipelines.graph"] & (CLI_DRIVERS | ENGINES)
    assert "pipelines.jobs.batched" not in g["pipelines.jobs.ingest"]  # batched runs ingest's batches, never back
    # The build graph is constructed in one place: the drivers that run it take it from there.
    builders = {m for m in g if "pipelines.graph" in g[m]}
    assert builders == {"pipelines.jobs.build", "pipelines.jobs.ingest"}, builders
