#!/usr/bin/env bash
# The GPU benchmark in one command: the trainer on whatever GPU is present.
#
#   bash benchmarks/gpu.sh [bench_gpu.py options]
#
# Runs the CUDA-only tests, then training-step throughput / MFU / peak memory (base and large, seq 512,
# bf16; eager and torch.compile; masked-only and full head; FULL- and DOC-SENTENCES; HF
# RobertaForMaskedLM as the baseline), masking time per scheme and data wait with 4 and 8 workers
# from a GCS emulator on 127.0.0.1. Prints a table and writes benchmarks/results/gpu.md. Bounded at
# 15 minutes. Without a CUDA device it says so and exits 2 (nothing is measured).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
if [ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ]; then PY=.venv/bin/python; fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec timeout 900 "$PY" benchmarks/bench_gpu.py "$@"
