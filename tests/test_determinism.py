"""Byte-identical builds: one input and config, in-process or with worker processes, spilled to disk
or held in memory.

The stages' own order tests (dedupe, tokenizer sample, packing) feed plain functions and Beam's
local runner shuffled input; these run whole builds in fresh processes, where Beam splits every
stage's input into other bundles and the elements reach each shuffle in another order.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests/ imports as a package from the repository root

from tests.determinism import build, build_config, compare, write_dup_corpus  # noqa: E402

pytestmark = pytest.mark.slow


def test_near_duplicate_heavy_build_is_byte_identical_with_two_worker_processes(tmp_path: Path) -> None:
    """Exact, near (clusters, containment) and repeated-span duplicates spread over four files:
    `pipelines.jobs.build` in-process and with --direct_num_workers 2 write the same bytes, every
    intermediate included (the dedupe index, rejects, clean and tokenized Parquet, tokenizer)."""
    import json

    raw = tmp_path / "raw"
    write_dup_corpus(raw, 0.4, files=4)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(build_config(raw, spans=True)))
    one = build(config, tmp_path / "one", [])
    two = build(config, tmp_path / "two", ["--direct_num_workers", "2"])
    # The input must exercise what the check is about: every kind of duplicate.
    assert one["duplicates"] > 50, one
    assert compare(tmp_path / "one", tmp_path / "two") == []
    counts = ("kept", "duplicates", "filtered", "tokens", "shards", "samples")
    assert [one[k] for k in counts] == [two[k] for k in counts]


def test_near_duplicate_heavy_build_is_byte_identical_with_everything_spilled(tmp_path: Path) -> None:
    """`--spill_mb 0` (every stage-to-stage buffer on disk, GroupByKeys grouped bucket by bucket:
    pipelines.localrunner.spill) writes the same bytes as Beam's runner holding everything in memory
    (`--spill_mb -1`), every intermediate included."""
    import json

    raw = tmp_path / "raw"
    write_dup_corpus(raw, 0.4, files=4)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(build_config(raw, spans=True)))
    spilled = build(config, tmp_path / "spilled", ["--spill_mb", "0", "--spill_dir", str(tmp_path)])
    build(config, tmp_path / "memory", ["--spill_mb", "-1"])
    assert spilled["duplicates"] > 50, spilled
    assert compare(tmp_path / "spilled", tmp_path / "memory") == []


def test_scaling_benchmark_compares_builds_of_one_input_path(tmp_path: Path) -> None:
    """bench_scaling's `default`, `workers2` and `procs2` rows build the same input file and report
    byte-identical manifests."""
    out = tmp_path / "scaling.md"
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_scaling.py"), "--sizes", "0.3",
                          "--configs", "default,workers2,procs2", "--no-bounds", "--out", str(out)],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    text = out.read_text()
    tokens = re.findall(r"^\| 0\.3 \| \d+ \| ([\d,]+) \|", text, flags=re.M)
    assert len(tokens) == 3 and len(set(tokens)) == 1, tokens
    assert "`workers2` vs `default` (same input file): **byte-identical**" in text
    assert "`procs2` vs `default` (same input file): **byte-identical**" in text
    # the workers table: one worker (all CPU in the process), then two (most of it in the worker processes)
    one = re.search(r"^  \| 0\.3 \| 1 \| [\d.]+ \| [\d.]+x \| ([\d.]+) \| ([\d.]+) \|", text, flags=re.M)
    two = re.search(r"^  \| 0\.3 \| 2 \| [\d.]+ \| [\d.]+x \| ([\d.]+) \| ([\d.]+) \|", text, flags=re.M)
    assert one and two, text
    assert float(one.group(1)) > 0 and float(one.group(2)) == 0 and float(two.group(2)) > 0
    # the document processes' table: their CPU is the build's children's
    procs = text[text.index("Document processes against none"):]
    two = re.search(r"^  \| 0\.3 \| 2 \| [\d.]+ \| [\d.]+x \| ([\d.]+) \| ([\d.]+) \|", procs, flags=re.M)
    assert two and float(two.group(1)) > 0 and float(two.group(2)) > 0, procs
    assert "DIFFERENT" not in text
