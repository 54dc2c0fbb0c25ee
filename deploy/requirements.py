"""Print shardforge's requirements for some extras, one per line, read from pyproject.toml.

    python deploy/requirements.py pipelines dataflow > /tmp/requirements.txt
    pip install -c constraints.txt -r /tmp/requirements.txt

The images install their dependencies this way before they copy any source
code, so that a code edit does not invalidate (and re-resolve) the dependency
layer. The list holds the core dependencies, those of each extra named, and
the build backend (so that the package itself then installs with
`--no-deps --no-build-isolation`, resolving nothing). Standard library only.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def requirements(extras: list[str], pyproject: Path = PYPROJECT) -> list[str]:
    """Core + the named extras' requirements + the build backend, in pyproject order, without repeats."""
    with open(pyproject, "rb") as f:
        data = tomllib.load(f)
    project = data["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"requirements.py: no extra {unknown} in {pyproject} (have {sorted(optional)})")
    reqs = [*project["dependencies"], *(r for e in extras for r in optional[e]),
            *data["build-system"]["requires"]]
    return list(dict.fromkeys(reqs))


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1:])))
