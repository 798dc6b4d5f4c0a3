# Shared by run_*.sh: build the datasets (once), then start verl's trainer through skl_verl.main.
# Every variable below can be overridden from the environment; extra arguments are hydra overrides.
set -euo pipefail
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-4B}
N_GPUS=${N_GPUS:-8}
NNODES=${NNODES:-1}
K=${K:-3}
SEED=${SEED:-0}
export DATA_DIR=${DATA_DIR:-data/skillrise}
PYTHON=${PYTHON:-python}

DRY_RUN=false
OVERRIDES=()
for arg in "$@"; do
  if [ "$arg" = "--dry-run" ]; then DRY_RUN=true; else OVERRIDES+=("$arg"); fi
done

# build_sequences NAME ENV_KWARGS_JSON -> $DATA_DIR/NAME.parquet (ordered K-task sequences)
build_sequences() {
  local out="$DATA_DIR/$1.parquet"
  if [ "$DRY_RUN" = false ] && [ ! -f "$out" ]; then
    "$PYTHON" -m skl_verl.skillrise.build_dataset --env "$ENV_NAME" --env-kwargs "$2" --k "$K" --seed "$SEED" --out "$out"
  fi
}

# build_tasks NAME ENV_KWARGS_JSON -> $DATA_DIR/NAME.parquet (one row per task, for the GRPO baseline)
build_tasks() {
  local out="$DATA_DIR/$1.parquet"
  if [ "$DRY_RUN" = false ] && [ ! -f "$out" ]; then
    "$PYTHON" -m skl_verl.data --env "$ENV_NAME" --env-kwargs "$2" --out "$out"
  fi
}

train() {
  "$PYTHON" -m skl_verl.main --config-path="$RECIPE_DIR/config" --config-name="$CONFIG" \
    actor_rollout_ref.model.path="$MODEL_PATH" trainer.n_gpus_per_node="$N_GPUS" trainer.nnodes="$NNODES" \
    skl.dry_run="$DRY_RUN" "${OVERRIDES[@]+"${OVERRIDES[@]}"}"
}
