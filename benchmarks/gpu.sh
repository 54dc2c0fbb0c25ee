#!/usr/bin/env bash
# The GPU benchmark in one command: the trainer on whatever GPU is present.
#
#   bash benchmarks/gpu.sh              # the full run: at most 8 minutes
#   bash benchmarks/gpu.sh --rest       # the compiled rows the full run leaves out: a second 8 minutes
#   bash benchmarks/gpu.sh --warm off   # each compiled row compiles in its turn (no warm pool beside the tests)
#   bash benchmarks/gpu.sh --plan       # what a mode runs, with expected seconds on an H200; runs nothing
#   bash benchmarks/gpu.sh --quick      # base only, no tests, no data wait: at most 4 minutes
#   bash benchmarks/gpu.sh --dry-run    # every part at tiny sizes on the CPU (~2 minutes): run it first
#   bash benchmarks/gpu.sh [--quick | --rest] [bench_gpu.py options]
#
# Runs the CUDA-only tests, then training-step throughput / MFU / peak memory (base and large, seq 512,
# bf16; eager, torch.compile, CUDA graphs, compiled AdamW; masked-only and full head; FULL- and
# DOC-SENTENCES; HF RobertaForMaskedLM as the baseline), masking per scheme (reference vs fused) and its
# share of the base steps with masking ahead off and on (masking_overlap), the
# micro-batch sweep (32..256 rows, accumulating to 256), profiles (top kernels, launches and host syncs
# per step) and data wait with 4 and 8 workers from a GCS emulator on 127.0.0.1. The compiled rows are
# compiled first, side by side while the tests run (the warm pool). Parts run in priority order, each only
# if its expected time (an H200's, times how much slower than expected the parts so far ran) still fits.
# Writes benchmarks/results/gpu.md (gpu-rest.md, gpu-quick.md, gpu-dry-run.md) after every part, so a run
# stopped by the limit keeps what it measured. Without a CUDA device (and without --dry-run) it says so and
# exits 2.
#
# On a GPU machine without a package registry: run `bash benchmarks/gpu_wheels.sh` where pip works and
# send .whl/ along (or point SHARDFORGE_WHEELS at another folder); this script first installs those
# carried wheels whose package is missing here (~3 s, into /tmp/shardforge-site; the machine's own torch,
# triton and numpy untouched). PYTHON picks the interpreter (default: .venv's, else python3, else python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python
  elif command -v python3 >/dev/null; then PY=python3
  else PY=python; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
WHEELS="${SHARDFORGE_WHEELS:-.whl}"
if [ -d "$WHEELS" ]; then
  SITE=/tmp/shardforge-site
  "$PY" benchmarks/carried_wheels.py "$WHEELS" "$SITE"
  export PYTHONPATH="$PWD:$SITE${PYTHONPATH#"$PWD"}"
fi
LIMIT=480
for arg in "$@"; do
  case "$arg" in
    --quick) LIMIT=240 ;;
    --plan) LIMIT=60 ;;
    --dry-run|--smoke) LIMIT=300 ;;
  esac
done
# The script plans to end 15 s before this; the hard limit only catches a part that overran.
exec timeout --kill-after=10 "$LIMIT" "$PY" benchmarks/bench_gpu.py "$@"
