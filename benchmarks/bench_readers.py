"""Bounded work per hostile input: a gzip "newline bomb" through the source readers.

    python benchmarks/bench_readers.py [--gib 1] [--baseline-tree OLD_CHECKOUT --baseline-mib 16]

Generates a gzip of ``--gib`` GiB of newlines (about 1 MB per GiB at level 9) and reads it as
JSONL with ``pipelines.sources.read_file``, timing CPU seconds:

* ours, default limits: the per-file expansion limit (``max_expansion_ratio`` 100 after a
  16 MiB grace) rejects the rest of the file;
* ours, limits off: the whole stream is decompressed and its blank lines skipped in bulk;
* baseline (optional): the readers of an older checkout, e.g. before the fix
  (``git worktree add /tmp/old ea2cc6c``, then ``--baseline-tree /tmp/old``), which stepped
  through every empty line in Python. Its ``pipelines.sources.read_file`` runs in a child
  process that imports that tree (its own modules, not today's), on a ``--baseline-mib`` slice
  of the same bomb (it is linear in the line count), and is extrapolated to the full size.

Writes benchmarks/results/readers.md.
"""

from __future__ import annotations

import gzip
import json
import subprocess
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


# Run in a child process whose sys.path starts at the older checkout: (CPU seconds, outcomes) as JSON.
_BASELINE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from pipelines.sources import read_file
from schemas.config import SourceConfig
t0 = time.process_time()
recs = list(read_file(sys.argv[2], SourceConfig(name="bench", input=sys.argv[2])))
print(json.dumps([time.process_time() - t0, [getattr(r, "reason", "doc") for r in recs]]))
"""


def baseline_read(tree: str, path: Path) -> tuple[float, list[str]]:
    """CPU seconds and outcomes of reading ``path`` with the readers of the checkout at ``tree``."""
    res = subprocess.run([sys.executable, "-c", _BASELINE, str(Path(tree).resolve()), str(path)],
                         capture_output=True, text=True, cwd=tree)
    if res.returncode != 0:
        raise SystemExit(f"--baseline-tree {tree}: its reader failed:\n{res.stderr[-2000:]}")
    cpu, outs = json.loads(res.stdout.strip().splitlines()[-1])
    return cpu, outs


def main() -> None:
    ap = bench_parser(__doc__, "readers")
    ap.add_argument("--gib", type=float, default=1.0, help="Size of the decompressed bomb in GiB.")
    ap.add_argument("--baseline-tree", default=None,
                    help="A checkout of an older commit whose pipelines.sources.read_file is the baseline.")
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
        if args.baseline_tree:
            part = d / "slice.jsonl.gz"
            write_bomb(part, args.baseline_mib)
            cpu, outs = baseline_read(args.baseline_tree, part)
            rows.append((f"baseline: the readers of `{args.baseline_tree}`", args.baseline_mib, cpu,
                         cpu * mib / args.baseline_mib, outs))
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
