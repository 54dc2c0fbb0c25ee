"""How the floor benchmark (benchmarks/bench_floor.py) totals its runs.

A floor run reports CPU seconds per floor stage plus its imports (``{"cpu": {stage: s, "imports": s}}``);
a build run its stages' CPU, its process total and its imports (``{"stages": {...}, "total": s,
"imports": s}``). ``floor_total`` and ``build_total`` are the totals the benchmark compares;
``stagewise_fastest`` is its estimate least moved by a shared host's noise over repeated runs
(tests/test_bench_floor.py checks it on made-up runs).
"""

from __future__ import annotations

from typing import Any

FLOOR_STAGES = ("parse", "clean", "exact hash", "minhash+bands", "sentences", "tokenizer train", "encode",
                "packing", "tar encoding")


def floor_total(floor: dict[str, Any]) -> float:
    """A floor run's CPU seconds, imports included (``compare``'s total)."""
    return sum(floor["cpu"].get(f, 0.0) for f in FLOOR_STAGES) + floor["cpu"]["imports"]


def build_total(build: dict[str, Any]) -> float:
    """A build run's CPU seconds, imports included (``compare``'s total)."""
    return build["total"] + build["imports"]


def stagewise_fastest(floors: list[dict[str, Any]], builds: list[dict[str, Any]]) -> tuple[float, float]:
    """(floor, build) CPU seconds as the sum of each part's fastest run: every stage, the imports, and
    on the build's side what runs outside the stages. A slow spell of a shared host hits one stage
    of one run; the fastest of each part over the runs is the estimate least moved by it (on both
    sides alike). Needs no more than one run of each, where it equals the totals."""
    floor = sum(min(f["cpu"].get(s, 0.0) for f in floors) for s in FLOOR_STAGES) + min(f["cpu"]["imports"] for f in floors)
    cats = {c for b in builds for c in b["stages"]}
    build = (sum(min(b["stages"].get(c, 0.0) for b in builds) for c in cats)
             + min(b["total"] - sum(b["stages"].values()) for b in builds) + min(b["imports"] for b in builds))
    return floor, build
