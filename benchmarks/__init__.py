"""Benchmarks: each ``bench_*.py`` measures ours against a named baseline in one process.

Run one from the repository root, either way:

    python benchmarks/bench_clean.py --help
    python -m benchmarks.bench_clean --help

Each script puts the repository root on ``sys.path`` before importing ``benchmarks.common``
(shared helpers) and the project packages, so the first form needs no install. Results go to
``benchmarks/results/<name>.md``.
"""
