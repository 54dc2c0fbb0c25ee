#!/usr/bin/env bash
# Install, then run the whole path end to end on a generated corpus (local Beam runner, CPU training).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/shardforge demo "$@"
