#!/usr/bin/env bash
# Build a shardforge corpus on Apache Flink (Kubernetes), with MinIO as the object store.
#
#   deploy/flink/flink.sh image            build + push the worker image (deploy/dataflow/Dockerfile)
#   deploy/flink/flink.sh up               apply deploy/flink/flink.yaml (IMAGE, TASKMANAGERS filled in)
#   deploy/flink/flink.sh forward          port-forward the job server (8099, 8098) and MinIO (9000) here
#   deploy/flink/flink.sh run    [flags]   python -m pipelines.build on the cluster, and wait
#   deploy/flink/flink.sh print  [flags]   print the `run` command's arguments, one per line
#   deploy/flink/flink.sh down             delete what `up` made (MinIO's data goes with it)
#
# Environment (required: IMAGE for image/up; INPUT or CONFIG, and OUTPUT, for run/print):
#   IMAGE          worker image, pushed where the cluster can pull it (e.g. REGISTRY/shardforge/build:0.1.0)
#   INPUT          one raw source, NAME=URL or URL (s3://BUCKET/... glob); CONFIG for several
#   CONFIG         build config (YAML/JSON) whose sources are s3:// URLs; read where `run` runs
#   OUTPUT         corpus folder, s3://BUCKET/...
#   TASKMANAGERS   TaskManager pods, each with 2 slots and its own worker pool (default 2)
#   JOB_ENDPOINT   the job server, as this machine reaches it (default localhost:8099, after `forward`)
#   ARTIFACT_ENDPOINT  its artifact service (default localhost:8098)
#   S3_ENDPOINT    MinIO, as this machine reaches it (default http://localhost:9000, after `forward`)
# Extra flags after the subcommand go to pipelines.jobs.build (e.g. --rule sop --vocab_size 32000).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cmd="${1:-}"
[[ $# -gt 0 ]] && shift

need() { for v in "$@"; do [[ -n "${!v:-}" ]] || { echo "flink.sh: set $v" >&2; exit 2; }; done; }

TASKMANAGERS="${TASKMANAGERS:-2}"
SLOTS=2   # taskmanager.numberOfTaskSlots in flink.yaml
JOB_ENDPOINT="${JOB_ENDPOINT:-localhost:8099}"
ARTIFACT_ENDPOINT="${ARTIFACT_ENDPOINT:-localhost:8098}"
S3_ENDPOINT="${S3_ENDPOINT:-http://localhost:9000}"

# The exact `python -m pipelines.build` arguments for the Flink cluster.
build_args() {
  need OUTPUT
  [[ -n "${INPUT:-}${CONFIG:-}" ]] || { echo "flink.sh: set INPUT or CONFIG" >&2; exit 2; }
  args=(
    --runner FlinkRunner
    --flink_version 1.20
    --job_endpoint "$JOB_ENDPOINT"
    --artifact_endpoint "$ARTIFACT_ENDPOINT"
    --environment_type EXTERNAL
    --environment_config localhost:50000
    --sdk_location container
    --parallelism "$((TASKMANAGERS * SLOTS))"
    --sdk_worker_parallelism "$SLOTS"
    --output "$OUTPUT"
  )
  [[ -n "${INPUT:-}" ]] && args+=(--input "$INPUT")
  [[ -n "${CONFIG:-}" ]] && args+=(--config "$CONFIG")
  args+=("$@")
}

case "$cmd" in
  image)
    need IMAGE
    docker build -f "$repo/deploy/dataflow/Dockerfile" -t "$IMAGE" "$repo"
    docker push "$IMAGE"
    ;;
  up)
    need IMAGE
    sed -e "s|image: IMAGE$|image: $IMAGE|" -e "s|replicas: 2 .*# TASKMANAGERS.*|replicas: $TASKMANAGERS|" \
      "$here/flink.yaml" | kubectl apply -f -
    kubectl rollout status deployment/minio deployment/flink-jobmanager deployment/flink-taskmanager \
      deployment/beam-job-server --timeout 600s
    ;;
  forward)
    kubectl port-forward service/beam-job-server 8099:8099 8098:8098 &
    kubectl port-forward service/minio 9000:9000 &
    trap 'kill $(jobs -p) 2>/dev/null' EXIT INT TERM
    wait
    ;;
  print)
    build_args "$@"
    printf '%s\n' "${args[@]}"
    ;;
  run)
    build_args "$@"
    # The driver lists and fingerprints the inputs and checks the output before it submits: it reads MinIO too.
    cd "$repo" && FSSPEC_S3_ENDPOINT_URL="$S3_ENDPOINT" python -m pipelines.build "${args[@]}"
    ;;
  down)
    kubectl delete -f "$here/flink.yaml" --ignore-not-found
    ;;
  *)
    sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
    [[ -z "$cmd" || "$cmd" == -h || "$cmd" == --help ]] || exit 2
    ;;
esac
