"""Install the carried wheels whose package this interpreter lacks (``benchmarks/gpu.sh`` on a GPU machine
without a package registry; ``benchmarks/gpu_wheels.sh`` downloads them where pip reaches one).

    python benchmarks/carried_wheels.py WHEEL_FOLDER TARGET

Only wheels whose distribution is not installed are installed, with ``pip --no-index --no-deps --target
TARGET``: the machine's own packages (its CUDA torch, triton, numpy) are never replaced, and nothing
outside TARGET is written. Put TARGET on PYTHONPATH afterwards. Running it again installs nothing new.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path


def dist_name(wheel: Path) -> str:
    """A wheel file's distribution name, normalized (PEP 503): ``pydantic_core-2.5-...whl`` -> pydantic-core."""
    return re.sub(r"[-_.]+", "-", wheel.name.split("-", 1)[0]).lower()


def installed(name: str, path: list[str] | None = None) -> bool:
    """Whether a distribution of this name is installed on ``path`` (default sys.path)."""
    return any(True for _ in metadata.distributions(name=name, path=path if path is not None else sys.path))


def missing(folder: Path, path: list[str] | None = None) -> list[Path]:
    """The folder's wheels whose distribution is not installed, sorted by file name."""
    return [w for w in sorted(folder.glob("*.whl")) if not installed(dist_name(w), path)]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python benchmarks/carried_wheels.py WHEEL_FOLDER TARGET", file=sys.stderr)
        return 2
    folder, target = Path(argv[0]), Path(argv[1])
    wheels = sorted(folder.glob("*.whl"))
    todo = missing(folder, [str(target), *sys.path])
    if not todo:
        print(f"carried wheels: all {len(wheels)} packages in {folder} are installed already", flush=True)
        return 0
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
           "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(target), *map(str, todo)]
    proc = subprocess.run(cmd)
    if proc.returncode != 0:
        print(f"carried wheels: pip could not install them into {target} (exit {proc.returncode})", file=sys.stderr)
        return proc.returncode
    names = ", ".join(dist_name(w) for w in todo)
    print(f"carried wheels: installed {len(todo)} of {len(wheels)} into {target} ({names}); "
          f"the other {len(wheels) - len(todo)} were installed already", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
