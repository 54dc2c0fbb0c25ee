#!/usr/bin/env bash
# Build a shardforge corpus on Google Cloud Dataflow.
#
#   deploy/dataflow/dataflow.sh image            build + push the worker/launcher image
#   deploy/dataflow/dataflow.sh check  [flags]   translate the job for Dataflow offline (no submit)
#   deploy/dataflow/dataflow.sh run    [flags]   submit with `python -m pipelines.build` and wait
#   deploy/dataflow/dataflow.sh template         build the flex template spec on GCS
#   deploy/dataflow/dataflow.sh launch [k=v...]  run the flex template (no local Python needed)
#   deploy/dataflow/dataflow.sh print  [flags]   print the `run` command's arguments, one per line
#
# Environment (required: PROJECT REGION BUCKET; INPUT or CONFIG; OUTPUT):
#   PROJECT, REGION       GCP project and Dataflow region (e.g. us-central1)
#   BUCKET                bucket for Beam temp/staging files and the template spec
#   IMAGE                 worker image (default REGION-docker.pkg.dev/PROJECT/shardforge/build:VERSION)
#   INPUT                 one raw source, NAME=URL or URL (gs:// glob); CONFIG for several
#   CONFIG                build config (YAML/JSON): gs:// for launch; run reads it where it runs;
#                         check reads nothing remote: give it a local copy
#   OUTPUT                corpus folder, gs://…
#   MACHINE_TYPE          worker machine type (default n2-standard-4)
#   MAX_WORKERS           autoscaling ceiling (default 32)
# Extra flags after the subcommand go to pipelines.jobs.build (e.g. --rule sop --vocab_size 32000).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cmd="${1:-}"
[[ $# -gt 0 ]] && shift

need() { for v in "$@"; do [[ -n "${!v:-}" ]] || { echo "dataflow.sh: set $v" >&2; exit 2; }; done; }

VERSION="${VERSION:-0.1.0}"
MACHINE_TYPE="${MACHINE_TYPE:-n2-standard-4}"
MAX_WORKERS="${MAX_WORKERS:-32}"
JOB_NAME="${JOB_NAME:-shardforge-build-$(date -u +%Y%m%d-%H%M%S)}"
TEMPLATE="${TEMPLATE:-gs://${BUCKET:-BUCKET}/templates/shardforge-build-${VERSION}.json}"
IMAGE="${IMAGE:-${REGION:-REGION}-docker.pkg.dev/${PROJECT:-PROJECT}/shardforge/build:${VERSION}}"

# The exact `python -m pipelines.build` arguments for DataflowRunner.
build_args() {
  need PROJECT REGION BUCKET OUTPUT
  [[ -n "${INPUT:-}${CONFIG:-}" ]] || { echo "dataflow.sh: set INPUT or CONFIG" >&2; exit 2; }
  args=(
    --runner DataflowRunner
    --project "$PROJECT"
    --region "$REGION"
    --temp_location "gs://$BUCKET/beam/tmp"
    --staging_location "gs://$BUCKET/beam/staging"
    --sdk_container_image "$IMAGE"
    --sdk_location container
    --job_name "$JOB_NAME"
    --machine_type "$MACHINE_TYPE"
    --max_num_workers "$MAX_WORKERS"
    --output "$OUTPUT"
  )
  [[ -n "${INPUT:-}" ]] && args+=(--input "$INPUT")
  [[ -n "${CONFIG:-}" ]] && args+=(--config "$CONFIG")
  args+=("$@")
}

case "$cmd" in
  image)
    need PROJECT REGION
    docker build -f "$here/Dockerfile" -t "$IMAGE" "$repo"
    docker push "$IMAGE"
    ;;
  print)
    build_args "$@"
    printf '%s\n' "${args[@]}"
    ;;
  check)
    build_args "$@"
    cd "$repo" && python -m deploy.dataflow.dryrun "${args[@]}"
    ;;
  run)
    build_args "$@"
    cd "$repo" && python -m pipelines.build "${args[@]}"
    ;;
  template)
    need PROJECT REGION BUCKET
    gcloud dataflow flex-template build "$TEMPLATE" \
      --project "$PROJECT" \
      --image "$IMAGE" \
      --sdk-language PYTHON \
      --metadata-file "$here/metadata.json"
    ;;
  launch)
    need PROJECT REGION BUCKET OUTPUT
    # '^~^' makes '~' the separator, so globs and configs may contain commas.
    params="^~^output=$OUTPUT~sdk_container_image=$IMAGE~sdk_location=container"
    [[ -n "${INPUT:-}" ]] && params+="~input=$INPUT"
    [[ -n "${CONFIG:-}" ]] && params+="~config=$CONFIG"
    for kv in "$@"; do params+="~$kv"; done
    gcloud dataflow flex-template run "$JOB_NAME" \
      --project "$PROJECT" \
      --region "$REGION" \
      --template-file-gcs-location "$TEMPLATE" \
      --temp-location "gs://$BUCKET/beam/tmp" \
      --staging-location "gs://$BUCKET/beam/staging" \
      --worker-machine-type "$MACHINE_TYPE" \
      --max-workers "$MAX_WORKERS" \
      --parameters "$params"
    ;;
  *)
    sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
    [[ -z "$cmd" || "$cmd" == -h || "$cmd" == --help ]] || exit 2
    ;;
esac
