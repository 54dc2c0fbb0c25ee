#!/usr/bin/env bash
# Install, then run the whole test suite (slow end-to-end tests included) on 2 processes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -n 2 --dist loadfile -q -ra "$@"
