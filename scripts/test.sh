#!/usr/bin/env bash
# Install, then run the whole test suite (slow end-to-end tests included) on 2 processes.
# Where the machine allows it, the tests run in a fresh network namespace with only
# loopback (unshare -n): proof that nothing in the suite reaches the internet.
# Set SHARDFORGE_NETNS=0 to run them in the normal network namespace.
# The tests run the commands as a user does (`python -m trainer.train ...`); most of those runs are forked
# from a server that has imported torch or Beam once (tests/forkserver.py says where it is and is not used).
# Set SHARDFORGE_TEST_FORKSERVER=0 to start a fresh interpreter for every run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Byte-compile the repository's modules once. The suite starts ~550 Python processes, and where
# PYTHONDONTWRITEBYTECODE is set (as on this project's machines) none leaves a .pyc behind, so each one
# compiled every module it imported from source again (tests/test_cli_errors.py: 84 -> 70 s).
.venv/bin/python -m compileall -q -j 0 pipelines trainer shardforge schemas tests benchmarks deploy >/dev/null
# --no-loadscope-reorder: xdist hands the files out in collection order (tests/conftest.py puts the files
# that hold slow tests first), not sorted by their number of tests, which put a one-test file of ~90 s last.
cmd=(.venv/bin/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -q -ra "$@")
if [ "${SHARDFORGE_NETNS:-1}" = 1 ] && command -v unshare >/dev/null && command -v ip >/dev/null \
   && unshare -rn true 2>/dev/null; then
  echo "running the tests with loopback-only networking (unshare -rn)"
  exec unshare -rn sh -c 'ip link set lo up && exec "$@"' sh "${cmd[@]}"
fi
exec "${cmd[@]}"
