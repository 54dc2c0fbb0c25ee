"""Bounded work per hostile input: a gzip "newline bomb" through the source readers.

    python benchmarks/bench_readers.py [--gib 1] [--baseline-source OLD_SOURCES.py --baseline-mib 16]

Generates a gzip of ``--gib`` GiB of newlines (about 1 MB per GiB at level 9) and reads it as
JSONL with ``pipelines.sources.read_file``, timing CPU seconds:

* ours, default limits: the per-file expansion limit (``max_expansion_ratio`` 100 after a
  16 MiB grace) rejects the rest of the file;
* ours, limits off: the whole stream is decompressed and its blank lines skipped in bulk;
* baseline (optional): a reader module given by path, e.g. the pre-fix ``pipelines/sources.py``
  (``git show ea2cc6c:pipelines/sources.py > /tmp/old_sources.py``), which stepped through
  every empty line in Python. It runs on a ``--baseline-mib`` slice of the same bomb (it is
  linear in the line count) and is extrapolated to the full size.

Writes benchmarks/results/readers.md.
"""

from __future__ import annotations

import gzip
import importlib.util
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import bench_parser, command_line, machine, scratch_dir, write_results  # noqa: E402
from pipelines.sources import read_file  # noqa: E402
from schemas.config import SourceConfig  # noqa: E402

MIB = 1 << 20


def write_bomb(path: Path, mib: int) -> int:
    """A gzip (level 9, mtime 0) of `mib` MiB of newlines; returns its size in bytes."""
    block = b"\n" * MIB
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as f:
        for _ in range(mib):
            f.write(block)
    return path.stat().st_size


def cpu_of(fn) -> tuple[float, object]:
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def outcomes(records) -> list[str]:
    return [getattr(r, "reason", "doc") for r in records]


def main() -> None:
    ap = bench_parser(__doc__, "readers")
    ap.add_argument("--gib", type=float, default=1.0, help="Size of the decompressed bomb in GiB.")
    ap.add_argument("--baseline-source", default=None, help="A sources.py to compare with (the old reader).")
    ap.add_argument("--baseline-mib", type=int, default=16, help="Slice of the bomb the baseline reads.")
    args = ap.parse_args()
    mib = int(args.gib * 1024)
    rows = []
    with scratch_dir("bench-readers") as d:
        bomb = d / "bomb.jsonl.gz"
        t0 = time.perf_counter()
        size = write_bomb(bomb, mib)
        print(f"bomb: {mib} MiB of newlines -> {size / 1e6:.2f} MB gzip ({time.perf_counter() - t0:.1f} s to make)")
        src = SourceConfig(name="bench", input=str(bomb))
        cpu, recs = cpu_of(lambda: list(read_file(str(bomb), src)))
        rows.append(("ours, default limits", mib, cpu, cpu, outcomes(recs)))
        off = src.model_copy(update={"max_expansion_ratio": None, "max_decompressed_bytes": None})
        cpu, recs = cpu_of(lambda: list(read_file(str(bomb), off)))
        rows.append(("ours, limits off (bulk blank skipping only)", mib, cpu, cpu, outcomes(recs)))
        if args.baseline_source:
            spec = importlib.util.spec_from_file_location("baseline_sources", args.baseline_source)
            old = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(old)  # type: ignore[union-attr]
            part = d / "slice.jsonl.gz"
            write_bomb(part, args.baseline_mib)
            cpu, recs = cpu_of(lambda: list(old.read_file(str(part), SourceConfig(name="bench", input=str(part)))))
            rows.append((f"baseline `{args.baseline_source}`", args.baseline_mib, cpu, cpu * mib / args.baseline_mib,
                         outcomes(recs)))
    lines = [
        "# Bounded work per hostile input: gzip newline bomb",
        "",
        f"Machine: {machine('apache-beam', load=True)}",
        f"Command: `{command_line()}`",
        "",
        f"Input: gzip (level 9) of {mib} MiB of newlines = {size / 1e6:.2f} MB on disk, read as JSONL.",
        "",
        f"| reader | MiB read | CPU s | CPU s for {mib} MiB | outcome |",
        "|---|---|---|---|---|",
    ]
    for name, m, cpu, full, outs in rows:
        lines.append(f"| {name} | {m} | {cpu:.2f} | {full:.2f}{'' if m == mib else ' (extrapolated, linear)'} "
                     f"| {', '.join(outs)} |")
    if len(rows) == 3:
        lines += ["", f"Default limits: **{rows[2][3] / max(rows[0][2], 1e-3):,.0f}x** less CPU than the baseline; "
                      f"limits off: {rows[2][3] / max(rows[1][2], 1e-3):,.0f}x less."]
    for line in lines:
        print(line)
    write_results(args.out, lines)


if __name__ == "__main__":
    main()
