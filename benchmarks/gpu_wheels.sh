#!/usr/bin/env bash
# Wheels for a GPU machine that has PyTorch but no package registry: run here (where pip reaches one),
# then send .whl/ along with the working tree; benchmarks/gpu.sh installs on that machine those of them
# whose package is missing there (into /tmp/shardforge-site, nothing else touched) before it starts.
#
#   bash benchmarks/gpu_wheels.sh                        # CPython 3.12, manylinux x86-64, into .whl/
#   bash benchmarks/gpu_wheels.sh --python-version 3.11 --dest /tmp/w   # another interpreter, folder
#   bash benchmarks/gpu_wheels.sh --list                 # the pins it would download; nothing fetched
#
# The list: what shardforge's GPU run imports (the trainer, the CUDA tests, and the data-wait part's
# build and GCS emulator) and a CUDA PyTorch image commonly lacks, with everything those need that
# such an image lacks. Checked against one image's package list (torch, triton, numpy, transformers,
# pytest, pyarrow, tensorboard, sentencepiece, tokenizers, matplotlib, grpcio, protobuf, requests,
# aiohttp present; read 2026-11-17). Versions come from constraints.txt, one of each. About 50 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
PYV=3.12
DEST=.whl
LIST=0
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version) PYV="$2"; shift 2 ;;
    --dest) DEST="$2"; shift 2 ;;
    --list) LIST=1; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_wheels.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
PY=python3
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
NAMES=(
  pydantic pydantic_core annotated-types typing-inspection  # schemas/
  webdataset braceexpand  # the shard reader
  gcsfs google-auth google-auth-oauthlib requests-oauthlib oauthlib google-cloud-storage
  google-cloud-storage-control google-cloud-core google-api-core google-crc32c google-resumable-media
  googleapis-common-protos grpc-google-iam-v1 grpcio-status proto-plus opentelemetry-api pyasn1 pyasn1_modules
  decorator cryptography cffi pycparser truststore  # gs:// through gcsfs
  gcp-storage-emulator  # the data-wait part's storage on 127.0.0.1
  apache-beam beartype fastavro fasteners httplib2 jsonpickle objsize pymongo dnspython pytz zstandard
  pycld2  # the data-wait part builds its corpus with the data job
)
pins=()
for name in "${NAMES[@]}"; do
  pin=$(grep -i -m1 -E "^${name//[-_]/[-_]}==" constraints.txt) || {
    echo "gpu_wheels.sh: $name has no version in constraints.txt" >&2; exit 1; }
  pins+=("$pin")
done
if [ "$LIST" = 1 ]; then printf '%s\n' "${pins[@]}"; exit 0; fi
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
rm -rf "$DEST"
mkdir -p "$DEST"
echo "downloading ${#pins[@]} wheels for CPython $PYV into $DEST ..."
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version "$PYV" --implementation cp "${platforms[@]}" -d "$DEST" "${pins[@]}"
echo "$(find "$DEST" -name '*.whl' | wc -l) wheels, $(du -sh "$DEST" | cut -f1) in $DEST: send it with the working tree;"
echo "benchmarks/gpu.sh installs the missing ones (PYTHON=... for another interpreter than python3)."
