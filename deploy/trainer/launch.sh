#!/usr/bin/env bash
# Launch `trainer.train` under torchrun: one node or many (the trainer image's ENTRYPOINT).
#
#   DATA_URL=gs://b/corpora/en-v1 OUTPUT_URL=gs://b/runs/r1 deploy/trainer/launch.sh --steps 125000 --set model.size=base
#
# Environment (torchrun conventions):
#   DATA_URL        corpus URL (its manifest.json is read)                      required
#   OUTPUT_URL      run folder: checkpoints, metrics (resumes from the latest)   required
#   CONFIG_URL      train config YAML/JSON (flags after it override)             optional
#   NNODES          number of nodes                                             default 1
#   NODE_RANK       this node's rank; on a Kubernetes Indexed Job it defaults to JOB_COMPLETION_INDEX
#   NPROC_PER_NODE  processes (GPUs) per node                                   default: GPUs visible, else 1
#   MASTER_ADDR     address of node 0                                           default 127.0.0.1
#   MASTER_PORT     rendezvous port on node 0                                   default 29500
#   LAUNCH_PRINT_ONLY=1  print the command (one argument per line) instead of running it
# Arguments after the script go to `python -m trainer.train` unchanged.
set -euo pipefail

: "${DATA_URL:?set DATA_URL to the corpus URL (e.g. gs://bucket/corpora/en-v1)}"
: "${OUTPUT_URL:?set OUTPUT_URL to the run folder URL (e.g. gs://bucket/runs/r1)}"
NNODES="${NNODES:-1}"
NODE_RANK="${NODE_RANK:-${JOB_COMPLETION_INDEX:-0}}"
MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
MASTER_PORT="${MASTER_PORT:-29500}"
if [[ -z "${NPROC_PER_NODE:-}" ]]; then
  # One process per visible GPU; CPU-only machines run one process.
  NPROC_PER_NODE="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  [[ "$NPROC_PER_NODE" -ge 1 ]] 2>/dev/null || NPROC_PER_NODE=1
fi

cmd=(
  torchrun
  --nnodes "$NNODES"
  --node_rank "$NODE_RANK"
  --nproc_per_node "$NPROC_PER_NODE"
  --master_addr "$MASTER_ADDR"
  --master_port "$MASTER_PORT"
  -m trainer.train
  --data "$DATA_URL"
  --output "$OUTPUT_URL"
)
[[ -n "${CONFIG_URL:-}" ]] && cmd+=(--config "$CONFIG_URL")
cmd+=("$@")

if [[ "${LAUNCH_PRINT_ONLY:-0}" == 1 ]]; then
  printf '%s\n' "${cmd[@]}"
  exit 0
fi
echo "launch: node $NODE_RANK/$NNODES, $NPROC_PER_NODE processes, rendezvous $MASTER_ADDR:$MASTER_PORT" >&2
# SIGTERM (a preemption, the pod's deletion) goes on to torchrun, whose workers checkpoint at the end of
# their step and exit 143. torchrun itself then exits 1, as after a crash; this script exits 143, so a
# preemption stays what it is to the Job. torchrun SIGKILLs its workers 30 s after its SIGTERM: a step
# and a checkpoint write longer than that resume from the checkpoint before.
terminated=0
trap 'terminated=143; kill -TERM "$child" 2>/dev/null || true' TERM
# Ctrl-C (docker run -it): a background child ignores SIGINT, so it gets the same graceful SIGTERM.
trap 'terminated=130; kill -TERM "$child" 2>/dev/null || true' INT
"${cmd[@]}" &
child=$!
set +e
wait "$child"
while kill -0 "$child" 2>/dev/null; do  # a trapped signal ends `wait` early: wait for torchrun's own end
  wait "$child"
done
wait "$child"  # the status bash kept of the ended child
rc=$?
if [[ "$terminated" != 0 ]]; then
  echo "launch: $([[ $terminated == 143 ]] && echo SIGTERM || echo SIGINT): torchrun ended with status $rc;" \
    "exiting $terminated (stopped: run the same command again to resume)" >&2
  exit "$terminated"
fi
exit "$rc"
