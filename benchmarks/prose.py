"""The command line of the benchmarks' real-prose pool (``tests/prose.py``).

    python benchmarks/prose.py --dump-pool pool.json          # where gensim is installed
    SHARDFORGE_PROSE_POOL=pool.json python benchmarks/bench_floor.py --mb 100

The pool and the corpora made from it (``write_prose_corpus``) live in ``tests/prose.py``, which the
benchmarks and the tests import; this script only runs its ``main``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from tests.prose import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
