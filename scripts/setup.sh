#!/usr/bin/env bash
# Create .venv and install shardforge with the extras the demo and the tests need, at the
# exact versions of constraints.txt (the same file the images install from; regenerate it
# with scripts/lock.sh). Idempotent: reinstalls only when pyproject.toml or constraints.txt
# changed. torch is installed first, at its pinned version: on CPU machines that is a local
# CPU build; an unpinned torch would pull gigabytes of CUDA packages.
# Dataflow submission needs one more extra: .venv/bin/pip install -c constraints.txt -e '.[dataflow]'
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.shardforge-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log=.venv/install.log
  torch_pin=$(grep -m1 -E '^torch==' constraints.txt)
  echo "installing shardforge and its dependencies into .venv (log: $log) ..."
  if ! { .venv/bin/python -m pip install -c constraints.txt --upgrade pip \
         && .venv/bin/python -m pip install -c constraints.txt "$torch_pin" \
         && .venv/bin/python -m pip install -c constraints.txt -e ".[pipelines,trainer,dev]"; } >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "installation failed; full log in $log" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
