#!/usr/bin/env bash
# Regenerate constraints.txt: the exact version of every package that shardforge and all
# its extras ([pipelines], [trainer], [dev], [dataflow]) install, resolved together in a
# throwaway virtual environment. scripts/setup.sh and both images (deploy/*/Dockerfile)
# install with `pip install -c constraints.txt ...`, so they all get these versions.
#
#   bash scripts/lock.sh             keep today's pins where pyproject.toml still allows them
#   bash scripts/lock.sh --upgrade   resolve afresh: the newest versions pyproject.toml allows
#
# Run it after editing dependencies in pyproject.toml, then run the tests and commit both.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
out=constraints.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

keep=()
if [[ "${1:-}" != --upgrade && -f "$out" ]]; then
  keep=(-c "$out")
fi
"$PY" -m venv "$tmp/venv"
pip=("$tmp/venv/bin/python" -m pip)
echo "resolving into $tmp/venv (log: $tmp/install.log) ..."
# torch first, as scripts/setup.sh does (on CPU machines the pinned version is a CPU build).
torch_pin=$("$PY" deploy/requirements.py trainer | grep -E '^torch==')
if ! { "${pip[@]}" install --upgrade "${keep[@]}" pip setuptools wheel \
       && "${pip[@]}" install "${keep[@]}" "$torch_pin" \
       && "${pip[@]}" install "${keep[@]}" ".[pipelines,trainer,dev,dataflow]" \
       && "${pip[@]}" check; } >"$tmp/install.log" 2>&1; then
  tail -n 30 "$tmp/install.log"
  echo "lock.sh: resolution failed (with pins kept? try: bash scripts/lock.sh --upgrade)" >&2
  exit 1
fi
pyver=$("$tmp/venv/bin/python" -c 'import platform; print(platform.python_version(), platform.system(), platform.machine())')
{
  echo "# Exact versions of everything shardforge and all its extras install ([pipelines],"
  echo "# [trainer], [dev], [dataflow]), resolved together (Python $pyver)."
  echo "# Used by scripts/setup.sh and deploy/*/Dockerfile: pip install -c constraints.txt ..."
  echo "# Regenerate with: bash scripts/lock.sh   (or: bash scripts/lock.sh --upgrade)"
  echo "# torch carries no local label (+cpu, +cu128): CPU and CUDA builds of it both satisfy the pin."
  "${pip[@]}" freeze --all --exclude shardforge | sed -E 's/^(torch==[^+]+)\+.*/\1/' | LC_ALL=C sort -f
} >"$tmp/$out"
mv "$tmp/$out" "$out"
echo "wrote $out ($(grep -vc '^#' "$out") packages)"
