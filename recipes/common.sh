# Shared by every recipe's run_*.sh: argument handling, dataset building, and the trainer launch.
# Set before sourcing: ENV_NAME, CONFIG, RECIPE_DIR; DEFAULT_MODEL. Every variable below can be
# overridden from the environment; extra arguments are hydra overrides; --dry-run prints the
# composed config without GPUs and builds no data.
set -euo pipefail
MODEL_PATH=${MODEL_PATH:-$DEFAULT_MODEL}
N_GPUS=${N_GPUS:-8}
NNODES=${NNODES:-1}
SEED=${SEED:-0}
export DATA_DIR=${DATA_DIR:-data/$(basename "$RECIPE_DIR")}
PYTHON=${PYTHON:-python}

DRY_RUN=false
OVERRIDES=()
for arg in "$@"; do
  if [ "$arg" = "--dry-run" ]; then DRY_RUN=true; else OVERRIDES+=("$arg"); fi
done

# build_tasks NAME ENV_KWARGS_JSON [VAL_AGENT_LOOP] -> $DATA_DIR/NAME.parquet (one row per task).
# Rows name no loop (the config's default_agent_loop plays them) unless VAL_AGENT_LOOP is given for a
# validation set played by the config's skl.val_agent_loop.
build_tasks() {
  local out="$DATA_DIR/$1.parquet"
  if [ "$DRY_RUN" = false ] && [ ! -f "$out" ]; then
    "$PYTHON" -m skl_verl.data --env "$ENV_NAME" --env-kwargs "$2" ${3:+--agent-loop "$3"} --out "$out"
  fi
}

train() {
  "$PYTHON" -m skl_verl.main --config-path="$RECIPE_DIR/config" --config-name="$CONFIG" \
    actor_rollout_ref.model.path="$MODEL_PATH" trainer.n_gpus_per_node="$N_GPUS" trainer.nnodes="$NNODES" \
    skl.dry_run="$DRY_RUN" "${OVERRIDES[@]+"${OVERRIDES[@]}"}"
}
