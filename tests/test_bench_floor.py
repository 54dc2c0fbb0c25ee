"""The floor benchmark's noise-robust estimate (``stagewise_fastest`` in tests/floor_totals.py), on made-up runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.floor_totals import FLOOR_STAGES, build_total, floor_total, stagewise_fastest  # noqa: E402


def floor_run(scale: dict[str, float], imports: float = 1.0) -> dict:
    return {"cpu": {**{s: scale.get(s, 1.0) for s in FLOOR_STAGES}, "imports": imports}}


def build_run(stages: dict[str, float], outside: float, imports: float = 1.0) -> dict:
    return {"stages": stages, "total": sum(stages.values()) + outside, "imports": imports}


def test_one_run_of_each_is_its_totals():
    f, b = floor_run({"clean": 3.0}), build_run({"clean": 4.0, "dedupe": 2.0}, outside=0.5)
    assert stagewise_fastest([f], [b]) == pytest.approx((floor_total(f), build_total(b)))


def test_each_part_takes_its_fastest_run():
    # a slow spell hit clean in the first runs and encode in the second ones
    floors = [floor_run({"clean": 5.0}), floor_run({"encode": 4.0}, imports=0.5)]
    builds = [build_run({"clean": 6.0, "encode": 1.0}, outside=0.2),
              build_run({"clean": 2.0, "encode": 3.0, "report": 0.5}, outside=0.4, imports=0.8)]
    f, b = stagewise_fastest(floors, builds)
    assert f == pytest.approx(len(FLOOR_STAGES) * 1.0 + 0.5)
    # clean 2, encode 1, report 0 (a run without the stage spent nothing on it), outside 0.2, imports 0.8
    assert b == pytest.approx(2.0 + 1.0 + 0.0 + 0.2 + 0.8)
    assert f <= min(map(floor_total, floors)) and b <= min(map(build_total, builds))
