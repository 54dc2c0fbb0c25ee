#!/usr/bin/env bash
# Create .venv and install shardforge with every extra. Idempotent: reinstalls
# only when pyproject.toml changed. torch is pinned and installed first:
# on CPU machines `torch==2.13.0` is a local CPU build; an unpinned torch would
# pull gigabytes of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.shardforge-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log=.venv/install.log
  echo "installing shardforge and its dependencies into .venv (log: $log) ..."
  if ! { .venv/bin/python -m pip install --upgrade pip \
         && .venv/bin/python -m pip install "torch==2.13.0" \
         && .venv/bin/python -m pip install -e ".[pipelines,trainer,dev]"; } >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "installation failed; full log in $log" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
